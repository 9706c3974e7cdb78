"""Serving predictions against DeepSeek's published inference system, and search speed.

1. DeepSeek-V3 on H800 with DeepSeek's published layout ("DeepSeek-V3/R1 Inference System
   Overview", deepseek-ai/open-infra-index, 2025-03-01): prefill EP32 / attention-DP32 over 4
   nodes, decode EP144 / attention-DP144 over 18 nodes with 32 redundant experts; 56.3% of
   input tokens hit the on-disk KV cache; the average KV length per output token is 4,989;
   users see 20-22 tokens/s; MTP accepts the second token 85-90% of the time (DeepSeek-V3
   report sec. 5.4.3). Published: 73.7k input tokens/s per prefill node (cache hits included)
   and 14.8k output tokens/s per decode node. We take their layout and their per-user speed
   (TPOT 1/21 s) as given, pick the largest decode batch whose TPOT meets it, and compare the
   per-node throughput. Two-batch overlap is reported both off (our default) and on.
2. The chosen plans through the request-level simulator (Poisson arrivals at the plan's rate,
   ``planner.serving.simulate``): simulated TTFT mean/p90, TPOT and tokens/s/GPU next to the
   closed form.
3. Search time of ``planner serve`` over both modes on 256 GPUs, and of the default
   ``planner serve --model M`` (subprocess, wall clock, includes Python start-up).

    python benchmarks/serving.py      # writes benchmarks/results/serving.json
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cost_models.serving.config import PoolLayout, ServingWorkload  # noqa: E402
from cost_models.serving.latency import decode_step  # noqa: E402
from planner.inputs.models import load_model  # noqa: E402
from planner.serving.estimate import (  # noqa: E402
    Calibration, PoolSpec, costing, prefill_per_request_s)
from planner.serving.search import search  # noqa: E402
from topologies.catalog import get_gpu  # noqa: E402
from topologies.standard import homogeneous_cluster  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "serving.json"
GPU = "H800-SXM5-80GB"
PUBLISHED = {"prefill_input_tokens_per_s_per_node": 73_700,
             "decode_output_tokens_per_s_per_node": 14_800}
KV_LEN, HIT, USER_TOKENS_PER_S = 4989, 0.563, 21.0


def deepseek(overlap: bool) -> dict:
    m, g = load_model("deepseek-v3"), get_gpu(GPU)
    cal = Calibration.defaults((g.name,))
    # prefill: 4 nodes, EP32 x DP32; prompt of the published mean context, 56.3% cached
    wl = ServingWorkload(isl=KV_LEN, osl=2, precision="fp8", prefix_hit=HIT)
    c = costing(m, PoolSpec("prefill", g.name, PoolLayout(tp=1, dp=32, ep=32, redundant=32)),
                wl, homogeneous_cluster(g.name, 4), cal, g, overlap_comm=overlap)
    _, per_request = prefill_per_request_s(c, wl)
    prefill_node = KV_LEN / per_request / 4
    # decode: 18 nodes, EP144 x DP144, MTP depth 1 at 85% acceptance
    wl = ServingWorkload(isl=KV_LEN, osl=1000, precision="fp8", mtp_depth=1,
                         mtp_acceptance=0.85)
    c = costing(m, PoolSpec("decode", g.name, PoolLayout(tp=1, dp=144, ep=144, redundant=32)),
                wl, homogeneous_cluster(g.name, 18), cal, g, overlap_comm=overlap)
    target = 1.0 / USER_TOKENS_PER_S
    best = None
    for b in range(1, 513):
        step = decode_step(c, float(b), KV_LEN, 2.0).total_s
        if step / wl.tokens_per_step > target:
            break
        best = (b, step)
    b, step = best
    decode_node = b * 8 * wl.tokens_per_step / step
    return {"two_batch_overlap": overlap,
            "prefill_input_tokens_per_s_per_node": prefill_node,
            "prefill_error": prefill_node / PUBLISHED["prefill_input_tokens_per_s_per_node"] - 1,
            "decode_batch_per_gpu": b, "decode_step_ms": step * 1e3,
            "decode_output_tokens_per_s_per_node": decode_node,
            "decode_error": decode_node / PUBLISHED["decode_output_tokens_per_s_per_node"] - 1}


SIM_CASES = (("llama-3.1-70b", "H100-SXM5-80GB", 1, None), ("llama-3.1-70b", "H100-SXM5-80GB",
                                                          2, "disagg"),
             ("llama-3.1-8b", "H100-SXM5-80GB", 2, None),
             ("qwen3-30b-a3b", "H100-SXM5-80GB", 2, "colocated"),
             ("qwen3-30b-a3b", "H100-SXM5-80GB", 2, "disagg"),
             ("qwen3-235b-a22b", "H200-SXM-141GB", 4, None))


def simulated_vs_closed() -> list[dict]:
    from planner.serving.build import build_serving_plan
    from planner.serving.simulate import simulate_plan
    rows = []
    for model, gpu, nodes, mode in SIM_CASES:
        m, g = load_model(model), get_gpu(gpu)
        cl, cal = homogeneous_cluster(g.name, nodes), Calibration.defaults((g.name,))
        wl = ServingWorkload(isl=4096, osl=512, ttft_ms=2000, tpot_ms=50)
        r = search(m, wl, cl, cal, modes=(mode,) if mode else ("colocated", "disagg"))
        best = r.best()
        plan = build_serving_plan(m, cl, best.deployment, wl, best.estimate, cal)
        d = simulate_plan(plan, requests=4000, seed=0)
        sim, pred = d["simulated"], d["predicted"]
        rows.append({"model": model, "gpu": gpu, "gpus": cl.num_gpus, "mode": d["mode"],
                     "ttft_mean_s": [sim["ttft_s"]["mean"], pred["ttft_s"]],
                     "ttft_p90_s": [sim["ttft_s"]["p90"], pred["ttft_p90_s"]],
                     "tpot_s": [sim["tpot_s"]["mean"], pred["tpot_s"]],
                     "tokens_per_s_per_gpu": [sim["output_tokens_per_s_per_gpu"],
                                              pred["output_tokens_per_s_per_gpu"]],
                     "slo_attainment": sim["slo_attainment"]})
    return rows


def search_speed() -> list[dict]:
    rows = []
    for model, gpu, nodes, precision in (("deepseek-v3", "H200-SXM-141GB", 32, "fp8"),
                                         ("llama-3.1-70b", "H100-SXM5-80GB", 32, "bf16"),
                                         ("qwen3-235b-a22b", "H200-SXM-141GB", 32, "bf16")):
        m, g = load_model(model), get_gpu(gpu)
        cl, cal = homogeneous_cluster(g.name, nodes), Calibration.defaults((g.name,))
        wl = ServingWorkload(isl=4096, osl=512, ttft_ms=2000, tpot_ms=50, precision=precision)
        t0 = time.perf_counter()
        r = search(m, wl, cl, cal)
        rows.append({"model": model, "gpu": gpu, "gpus": cl.num_gpus,
                     "search_s": time.perf_counter() - t0, "layouts": r.layouts_evaluated,
                     "best": r.best().deployment.mode})
    for model in ("llama-3.1-70b", "deepseek-v3"):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "planner", "serve", "--model", model],
                       check=True, capture_output=True)
        rows.append({"command": f"planner serve --model {model}",
                     "wall_s": time.perf_counter() - t0})
    return rows


def main() -> None:
    result = {"deepseek_v3_h800": [deepseek(False), deepseek(True)],
              "published": PUBLISHED, "simulated_vs_closed_form": simulated_vs_closed(),
              "search": search_speed()}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    for r in result["deepseek_v3_h800"]:
        print(f"overlap={r['two_batch_overlap']}: prefill {r['prefill_input_tokens_per_s_per_node']:.0f}"
              f" tok/s/node ({r['prefill_error']:+.1%}), decode batch {r['decode_batch_per_gpu']}"
              f" {r['decode_output_tokens_per_s_per_node']:.0f} tok/s/node ({r['decode_error']:+.1%})")
    print("| model | GPUs | mode | TTFT mean sim / closed s | TTFT p90 sim / closed s | "
          "TPOT sim / closed ms | tok/s/GPU sim / closed | SLO met (sim) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in result["simulated_vs_closed_form"]:
        print(f"| {r['model']} | {r['gpus']} | {r['mode']} | {r['ttft_mean_s'][0]:.2f} / "
              f"{r['ttft_mean_s'][1]:.2f} | {r['ttft_p90_s'][0]:.2f} / {r['ttft_p90_s'][1]:.2f} | "
              f"{r['tpot_s'][0] * 1e3:.1f} / {r['tpot_s'][1] * 1e3:.1f} | "
              f"{r['tokens_per_s_per_gpu'][0]:.0f} / {r['tokens_per_s_per_gpu'][1]:.0f} | "
              f"{r['slo_attainment']:.0%} |")
    for r in result["search"]:
        print(r)


if __name__ == "__main__":
    main()
