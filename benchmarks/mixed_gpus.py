"""Mixed GPU types in one training job (issue 20: Metis, HexiScale, Sailor, Cephalo).

    python benchmarks/mixed_gpus.py

Clusters of 16 nodes of 8 GPUs under one leaf, 8 x 400G InfiniBand per node: (a) 8 A100-80GB +
8 H100 nodes, (b) 8 H100 + 8 H200 nodes. Models: Llama-3.1-70B and Qwen3-30B-A3B; global batch
1,024 x 4,096 tokens, bf16. For each case the planner's best plan (``planner solve``: degree
search, placement, the layer split by each stage's speed and memory, DP batch shares by each
replica's speed), against

* the same degrees and placement with the even layer split and equal batch shares;
* the same with the planner's layer split but equal shares (what the split alone gives);
* the fastest even-split, equal-share plan (listing order) among the degree search's ten best
  degree tuples (searched without shares; each tuple's options with the even split);
* the planner's best plan on 16 nodes of the slower and of the faster GPU alone (bounds).

Each case runs twice: degrees searched freely, and with pp fixed to 4 and the schedules of one
model chunk per stage (1F1B, ZB-H1), whose layers the split can move: there the layer split,
by speed and by each stage's memory, carries the difference between the GPU types.

All numbers are predictions of the planner's step model (per stage and per replica at its own
GPU's rates and GEMM efficiency). A job has one calibration profile: the mixed cluster's is
its slower GPU's default (what ``planner solve`` loads), in which each other GPU type keeps
its own GEMM efficiency relative to it (``cost_models.profile.gemm_efficiency_ratio``); the
single-GPU bounds use the same profile with that type's GEMM efficiency, so that each type
runs alone as it runs in the mixed cluster. Writes
``benchmarks/results/mixed_gpus.json`` and the ``mixed_gpus`` section of docs/benchmarks.md.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.doc_tables import update_section  # noqa: E402
from cost_models.profile import default_profile, gemm_efficiency_ratio  # noqa: E402
from cost_models.training.step import Estimate, estimate  # noqa: E402
from planner.inputs.models import load_model  # noqa: E402
from planner.training.estimation import make_workload  # noqa: E402
from planner.training.search import SearchSpace, search  # noqa: E402
from planner.training.solve import solve  # noqa: E402
from topologies.spec import cluster_from_dict  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "mixed_gpus.json"
CLUSTERS = {"8 A100 + 8 H100": ("A100-SXM4-80GB", "H100-SXM5-80GB"),
            "8 H100 + 8 H200": ("H100-SXM5-80GB", "H200-SXM-141GB")}
MODELS = ("llama-3.1-70b", "qwen3-30b-a3b")
NODES_EACH = 8


def cluster(gpus: tuple[str, ...], nodes_each: int = NODES_EACH):
    nics = [{"count": 8, "gbps": 400, "transport": "ib"}]
    groups = [{"name": f"g{i}", "count": nodes_each * 2 // len(gpus), "gpu": gpu,
               "gpus_per_node": 8, "fabric": "nvswitch", "nics": nics}
              for i, gpu in enumerate(gpus)]
    return cluster_from_dict({"name": "+".join(gpus), "node_groups": groups,
                              "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 16}]}})


def describe(est: Estimate) -> dict:
    d, cfg = est.config.degrees, est.config
    return {"step_time_s": est.step_time_s, "fits": est.memory.fits,
            "degrees": {"tp": d.tp, "pp": d.pp, "dp": d.dp, "cp": d.cp, "ep": d.ep},
            "schedule": cfg.schedule, "vpp": cfg.vpp, "micro_batch": cfg.micro_batch,
            "stage_layer_counts": cfg.stage_layer_counts, "dp_shares":
            None if cfg.dp_shares is None else sorted(set(cfg.dp_shares)),
            "node_order": est.node_order}


ONE_CHUNK = ("1f1b", "zb-h1")  # schedules whose stages the layer split can reshape


def case(model_name: str, gpus: tuple[str, str], pp: int | None = None) -> dict:
    model, wl = load_model(model_name), make_workload(4096, 1024, "bf16")
    mixed = cluster(gpus)
    prof = default_profile(mixed.slowest_gpu.name)
    space = SearchSpace(pp=pp) if pp is None else SearchSpace(pp=pp, schedules=ONE_CHUNK)
    t0 = time.perf_counter()
    best = solve(model, mixed, wl, prof, space).estimates[0]
    seconds = time.perf_counter() - t0
    even = estimate(model, mixed, wl, replace(best.config, stage_layer_counts=None,
                                              dp_shares=None), prof, best.node_order)
    split_only = estimate(model, mixed, wl, replace(best.config, dp_shares=None), prof,
                          best.node_order)
    evens = [estimate(model, mixed, wl, replace(e.config, stage_layer_counts=None), prof)
             for e in search(model, mixed, wl, prof, space, batch_shares=False).ranked]
    searched = min((e for e in evens if e.memory.fits), key=lambda e: e.step_time_s)
    alone = {}
    for gpu in gpus:
        one = cluster((gpu,))
        own = replace(prof, gemm_efficiency=prof.gemm_efficiency
                      * gemm_efficiency_ratio(gpu, mixed.slowest_gpu.name))
        alone[gpu] = solve(model, one, wl, own, space, top_k=3).estimates[0].step_time_s
    return {"model": model_name, "cluster": " + ".join(gpus), "pp_fixed": pp,
            "plan": describe(best), "replica_micro_batch_s": sorted(set(
                best.replica_micro_batch_s)),
            "even": describe(even), "split_only": describe(split_only),
            "search_best_even": describe(searched), "alone_step_time_s": alone,
            "solve_seconds": seconds}


def _degrees(r: dict) -> str:
    d = r["degrees"]
    text = f"tp{d['tp']} pp{d['pp']} dp{d['dp']}" + (f" ep{d['ep']}" if d["ep"] > 1 else "")
    return text + (f" v{r['vpp']}" if r["vpp"] > 1 else "") + f" {r['schedule']}"


def table(results: list[dict]) -> list[str]:
    lines = ["| cluster | model | plan | layers / shares | plan s/step | even split + batch "
             "(x) | split only (x) | best even plan of the search (x) | slower / faster GPU alone |",
             "|---|---|---|---|---:|---:|---:|---:|---|"]
    for r in results:
        p = r["plan"]
        how = []
        if p["stage_layer_counts"]:
            how.append("layers " + "/".join(map(str, p["stage_layer_counts"])))
        if p["dp_shares"]:
            how.append("shares " + "/".join(map(str, p["dp_shares"])))
        step = p["step_time_s"]

        def versus(x: dict) -> str:
            flag = "" if x["fits"] else ", does not fit"
            return f"{x['step_time_s']:.2f} ({x['step_time_s'] / step:.2f}x{flag})"

        slow, fast = r["alone_step_time_s"].values()
        fixed = f" (pp {r['pp_fixed']} fixed)" if r["pp_fixed"] else ""
        lines.append(f"| {r['cluster']} | {r['model']} | {_degrees(p)}{fixed} | "
                     f"{', '.join(how) or 'even'} | {step:.2f} | {versus(r['even'])} | "
                     f"{versus(r['split_only'])} | {versus(r['search_best_even'])} "
                     f"({_degrees(r['search_best_even'])}) | {slow:.2f} / {fast:.2f} |")
    return lines


def verdict(results: list[dict]) -> list[str]:
    """What the table shows, in words computed from it."""
    lines = []
    for name in CLUSTERS:
        rows = [r for r in results if r["cluster"] == " + ".join(CLUSTERS[name])]
        gains = sorted(r["even"]["step_time_s"] / r["plan"]["step_time_s"] for r in rows)
        ratio = max((max(r["replica_micro_batch_s"]) / min(r["replica_micro_batch_s"])
                     for r in rows if r["replica_micro_batch_s"]), default=1.0)
        # the two GPU types' combined rate, each at its single-type plan's pace
        off = [r["plan"]["step_time_s"] * sum(1 / t for t in r["alone_step_time_s"].values())
               / 2 - 1 for r in rows]
        span = f"{gains[0]:.2f}x" if gains[0] == gains[-1] else f"{gains[0]:.2f}-{gains[-1]:.2f}x"
        lines.append(f"* {name}: the even split and equal batch of the plan's own degrees and "
                     f"placement take {span} the plan's step; in the best plans a micro-batch "
                     f"takes up to {ratio:.2f}x as long on the slower type's replicas; the plan "
                     f"is {min(off):+.0%} to {max(off):+.0%} off the harmonic mean of the two "
                     f"single-type bounds.")
    return lines + [
        "* A100 + H100 (bf16 peak 312 vs 989 TFLOPS): with pp free the planner takes pp = 1 "
        "with shares; with pp = 4 the layer split gives the A100 stages fewer layers.",
        "* H100 + H200 (same bf16 peak; H200: 1.4x the HBM bandwidth, 141 vs 80 GB): with 8 "
        "micro-batches per replica a share moves in steps of 1/8, more than the replicas' "
        "difference, so shares do not pay at this batch; with pp = 4 the layer split gains "
        "what the H200 stages' few percent of speed and the LM head's place allow. The search "
        "also tries options that fit only with more layers on the H200 stages (less "
        "recompute; tests/test_mixed_gpus.py), but in these cases none is faster than the "
        "options that fit evenly on the H100s."]


def main() -> int:
    t0 = time.perf_counter()
    results = []
    for gpus in CLUSTERS.values():
        for model in MODELS:
            for pp in (None, 4):
                results.append(case(model, gpus, pp))
                print(f"{gpus} {model} pp {pp}: {results[-1]['plan']['step_time_s']:.2f} s",
                      file=sys.stderr)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"cases": results}, indent=1, sort_keys=True) + "\n")
    lines = table(results)
    print("\n".join(lines))
    update_section("mixed_gpus", [
        "## Mixed GPU types (issue 20): `benchmarks/mixed_gpus.py`", "",
        "16 nodes of 8 GPUs under one leaf (8 x 400G IB each), global batch 1,024 x 4,096 "
        "tokens, bf16. \"plan\": `planner solve`'s best (layer split by each stage's speed and "
        "memory, DP batch shares by each replica's speed, each kept only when predicted "
        "faster); the other columns are the same degrees and placement with the even split "
        "and equal shares, with the planner's split but equal shares, and the fastest "
        "even-split, equal-share plan (listing order) of the search's ten best degree tuples; "
        "(x) is that step over the plan's; "
        "\"pp 4 fixed\" rows restrict every column to pp = 4 with 1F1B or ZB-H1 (one model "
        "chunk per stage, so the split can move layers). "
        "\"shares\" lists the distinct micro-batch counts per replica. Predictions only; one "
        "calibration profile for every case of a cluster (the slower GPU's default, each GPU "
        "type at its own GEMM efficiency relative to it, in the mixed cluster and in the "
        "single-GPU bounds).", "", *lines, "",
        *verdict(results), "",
        f"Run time {time.perf_counter() - t0:.0f} s on the project's 2-core box."])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
