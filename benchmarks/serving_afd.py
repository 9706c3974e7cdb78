"""Attention/FFN disaggregation (AFD) against colocated and prefill/decode serving, per case.

    python benchmarks/serving_afd.py [--aic] [--reuse-aic] [--aic-venv PATH]

For each case planner searches the three modes on one cluster (``planner.serving.search``)
and reports, under the same TPOT target:

* decode output tokens/s per decode GPU of the best AFD unit (attention + FFN GPUs) and of
  the best decode side without AFD: the decode pool of the best prefill/decode plan, whose
  instances run attention and experts on the same GPUs (the colocated-decode baseline of
  MegaScale-Infer, Zhu et al. 2025, sec. 6), and the best colocated plan per GPU (its GPUs
  also prefill);
* end-to-end output tokens/s per GPU of the best plan of each mode (prefill pool included);
* the AFD verdict (which term decides) and the time of the AFD search alone and of the
  whole three-mode search, in process on this machine.

Cases: DeepSeek-V3 and Qwen3-235B-A22B (fp8) on 4 H200 nodes at two input lengths, with a
100 ms TPOT target; MegaScale-Infer's settings (sec. 6; input 571 / output 159 tokens, median
of their trace, 150 ms between tokens): Mixtral-8x22B on A100-80GB nodes (per GPU), and H20
attention nodes with L40S expert nodes (4 x 400G and 2 x 400G NICs) against H20 alone, per GPU
and per dollar. MegaScale-Infer's Table 3 prices are not available here: the per-dollar gain
is given for L40S/H20 price ratios of 0.5, 0.75 and 1.0 (a stated assumption, not a fit).

``--aic`` also runs aiconfigurator's ``afd`` mode (peer tool in its own venv, created by
``benchmarks/serving_vs_aiconfigurator.py``'s helper; never a dependency) on the H200 cases at
ISL 4096: its sweep (``cli exp``, ``serving_mode: afd``, micro-batches 3, attention TP 1 or 8,
no P/D combination, as its default sweep does not finish on 2 cores in 12 minutes) and its
estimate of planner's chosen unit (``cli estimate --estimate-mode afd``). ``--reuse-aic`` keeps
aiconfigurator's numbers from the existing result file.

Writes ``benchmarks/results/serving_afd.json`` and prints a markdown table.
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cost_models.serving.config import ServingWorkload  # noqa: E402
from planner.inputs.clusters import load_cluster  # noqa: E402
from planner.inputs.models import load_model  # noqa: E402
from planner.serving import afd  # noqa: E402
from planner.serving.estimate import Calibration  # noqa: E402
from planner.serving.search import search  # noqa: E402
from planner.serving.sites import sites  # noqa: E402
from planner.serving.why import afd_verdict, decode_tokens_per_s_per_gpu  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "serving_afd.json"
PRICE_RATIOS = (0.5, 0.75, 1.0)  # L40S / H20 price per GPU-hour (assumed, see docstring)
MEGASCALE = {"per_gpu": 1.90, "per_dollar": 1.86}  # their abstract and Fig. 9a


def _node_group(name: str, gpu: str, count: int, fabric: str, nics: int, gbps: int,
                transport: str, price: float | None = None) -> dict:
    g = {"name": name, "count": count, "gpu": gpu, "gpus_per_node": 8, "fabric": fabric,
         "nics": [{"count": nics, "gbps": gbps, "transport": transport}]}
    if price is not None:
        g["price_per_gpu_hour"] = price
    return g


def cluster_file(tmp: Path, name: str, groups: list[dict]) -> Path:
    import yaml
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "node_groups": groups,
                                    "network": {"tiers": [{"name": "leaf",
                                                           "nodes_per_switch": 16}]}}))
    return path


def cases(tmp: Path) -> list[dict]:
    h200 = cluster_file(tmp, "h200x4", [_node_group("h200", "H200", 4, "nvswitch", 8, 400,
                                                    "ib")])
    a100 = cluster_file(tmp, "a100x8", [_node_group("a100", "A100-SXM4-80GB", 8, "nvswitch",
                                                    4, 200, "ib")])
    mixed = cluster_file(tmp, "h20-l40s", [
        _node_group("h20", "H20", 4, "nvswitch", 4, 400, "roce", 1.0),
        _node_group("l40s", "L40S", 4, "pcie", 2, 400, "roce", 1.0)])
    h20 = cluster_file(tmp, "h20x8", [_node_group("h20", "H20", 8, "nvswitch", 4, 400, "roce",
                                                  1.0)])
    out = []
    for model, hf in (("deepseek-v3", "deepseek-ai/DeepSeek-V3"),
                      ("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B")):
        for isl in (1024, 4096):
            out.append({"id": f"{model}-h200x32-isl{isl}", "model": model, "hf": hf,
                        "cluster": h200, "isl": isl, "osl": 1024, "tpot_ms": 100.0,
                        "precision": "fp8", "kv_dtype": "fp8", "aic": True})
    ms = {"isl": 571, "osl": 159, "tpot_ms": 150.0, "precision": "bf16", "kv_dtype": "bf16"}
    out.append({"id": "mixtral-8x22b-a100x64-megascale", "model": "mixtral-8x22b",
                "cluster": a100, "tp_baseline": True, **ms})
    out.append({"id": "mixtral-8x22b-h20+l40s-megascale", "model": "mixtral-8x22b",
                "cluster": mixed, "baseline_cluster": h20, **ms})
    return out


def _summary(c, wl) -> dict | None:
    if c is None:
        return None
    e = c.estimate
    return {"mode": c.deployment.mode, "gpus": e.gpus, "meets_slo": c.meets_slo,
            "output_tokens_per_s_per_gpu": e.output_tokens_per_s_per_gpu,
            "decode_tokens_per_s_per_gpu": decode_tokens_per_s_per_gpu(c, wl),
            "tpot_ms": e.tpot_s * 1e3,
            "pools": [{"role": p.role, "gpu": p.gpu, "gpus": p.layout.gpus,
                       **p.layout.as_dict()} for p in e.pools],
            "micro_batches": c.deployment.micro_batches if c.deployment.mode == "afd" else None}


def _unit(u) -> dict | None:
    if u is None:
        return None
    d = u.as_dict()
    d["stages_us"] = {k: v * 1e6 for k, v in d.pop("stages").items()}
    d.pop("memory")
    return d


def run_planner(case: dict) -> dict:
    model = load_model(case["model"])
    cluster = load_cluster(str(case["cluster"]))
    types = tuple(dict.fromkeys(g.gpu.name for g in cluster.node_groups))
    cal = Calibration.defaults(types)
    wl = ServingWorkload(isl=case["isl"], osl=case["osl"], tpot_ms=case["tpot_ms"],
                         ttft_ms=None, precision=case["precision"], kv_dtype=case["kv_dtype"])
    t0 = time.perf_counter()
    unit_only = afd.search(model, wl, cluster, cal, top_k=1)
    afd_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = search(model, wl, cluster, cal, "sglang", 3, ("colocated", "disagg", "afd"))
    search_s = time.perf_counter() - t0
    co = res.colocated[0] if res.colocated else None
    dis = res.disagg[0] if res.disagg else None
    af = res.afd[0] if res.afd else None
    best_unit = unit_only.best[0] if unit_only.best else None
    out = {"afd_search_s": afd_s, "three_mode_search_s": search_s,
           "afd_units_priced": unit_only.evaluated, "afd_grid": unit_only.grid,
           "afd_pruned": unit_only.pruned,
           "best_colocated": _summary(co, wl), "best_disagg": _summary(dis, wl),
           "best_afd": _summary(af, wl), "best_afd_unit": _unit(best_unit),
           "afd_plan_unit": _unit(res.afd_units[0] if res.afd_units else None),
           "verdict": afd_verdict(af, co, dis, res.afd_units, wl)}
    base = max((s["decode_tokens_per_s_per_gpu"] for s in (out["best_disagg"],)
                if s and s["meets_slo"]), default=None)
    out["decode_gain_per_gpu"] = (best_unit.output_tokens_per_s_per_gpu / base
                                  if best_unit and base else None)
    if case.get("tp_baseline"):  # the TP-sharded decode instance engines run by default
        tp = tp_decode_baseline(model, cluster, cal, wl)
        out["tp_decode_baseline"] = tp
        if tp and best_unit:
            out["decode_gain_over_tp"] = (best_unit.output_tokens_per_s_per_gpu
                                          / tp["decode_tokens_per_s_per_gpu"])
    if "baseline_cluster" in case:  # AFD across GPU types against one type alone
        out["baseline"] = run_baseline(case, model, wl)
        out["per_dollar"] = per_dollar(best_unit, out["baseline"])
    return out


def tp_decode_baseline(model, cluster, cal, wl) -> dict | None:
    """A decode instance that shards attention and experts over one node by TP (what vLLM and
    TensorRT-LLM run by default, MegaScale-Infer's baselines), at the largest batch meeting the
    TPOT target within KV memory: its decode tokens/s per GPU."""
    from cost_models.serving.config import PoolLayout
    from planner.serving.estimate import Deployment, PoolSpec, estimate
    gpu = cluster.node_groups[0].gpu
    tp = cluster.node_groups[0].gpus_per_node

    def at(batch: int):
        dep = Deployment("disagg", (PoolSpec("prefill", gpu.name, PoolLayout(tp=tp)),
                                    PoolSpec("decode", gpu.name, PoolLayout(tp=tp, batch=batch),
                                             tp)))
        e = estimate(model, dep, wl, cluster, {gpu.name: gpu}, cal)
        dec = e.pools[1]
        ok = dec.memory.fits and e.tpot_s * 1e3 <= wl.tpot_ms
        return ok, dec.capacity_per_s * wl.osl / tp, e.tpot_s
    lo, hi = 0, 1
    while at(hi)[0] and hi < 1 << 16:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if at(mid)[0] else (lo, mid)
    if lo == 0:
        return None
    _, per_gpu, tpot = at(lo)
    return {"tp": tp, "batch": lo, "tpot_ms": tpot * 1e3, "decode_tokens_per_s_per_gpu": per_gpu}


def run_baseline(case: dict, model, wl) -> dict:
    cluster = load_cluster(str(case["baseline_cluster"]))
    types = tuple(dict.fromkeys(g.gpu.name for g in cluster.node_groups))
    res = search(model, wl, cluster, Calibration.defaults(types), "sglang", 3,
                 ("colocated", "disagg"))
    dis = res.disagg[0] if res.disagg else None
    co = res.colocated[0] if res.colocated else None
    return {"gpu": types[0], "best_disagg": _summary(dis, wl), "best_colocated": _summary(co, wl)}


def per_dollar(unit, baseline: dict) -> list[dict]:
    """AFD unit's decode tokens per unit of cost over the baseline's decode pool's, for each
    assumed L40S/H20 price ratio (H20 priced 1)."""
    dis = baseline["best_disagg"]
    if unit is None or dis is None:
        return []
    rows = []
    for r in PRICE_RATIOS:
        price = {"H20-96GB": 1.0, "L40S": r}
        cost = (unit.layout.attention_gpus * price[unit.attention_gpu]
                + unit.layout.ffn_gpus * price[unit.ffn_gpu])
        rows.append({"l40s_over_h20_price": r,
                     "afd_tokens_per_s_per_cost": unit.output_tokens_per_s / cost,
                     "baseline_tokens_per_s_per_cost": dis["decode_tokens_per_s_per_gpu"],
                     "gain": unit.output_tokens_per_s / cost / dis[
                         "decode_tokens_per_s_per_gpu"]})
    return rows


# --- aiconfigurator ---------------------------------------------------------------------

def _aic_rows(save_dir: Path) -> list[dict]:
    found = sorted(save_dir.rglob("best_config_topn.csv"))
    if not found:
        return []
    with found[0].open() as f:
        return list(csv.DictReader(f))


def run_aic(case: dict, venv: Path, raw: Path) -> dict:
    """aiconfigurator's AFD sweep on the case (its own venv; module docstring)."""
    import yaml
    from serving_vs_aiconfigurator import aic_bin
    task = {"serving_mode": "afd", "model_path": case["hf"], "system_name": "h200_sxm",
            "backend_name": "trtllm", "total_gpus": 32, "isl": case["isl"],
            "osl": case["osl"], "ttft": 5000.0, "tpot": case["tpot_ms"],
            "afd_combined_with_pd": False, "afd_tp_a_candidates": [1, 8],
            "afd_microbatch_candidates": [3], "afd_pipeline_model_candidates": ["optimistic"],
            "afd_f_moe_ep_size_candidates": ["tp_f"]}
    if case["model"] == "deepseek-v3":
        task["fmha_quant_mode"] = "bfloat16"  # its fp8 context-MLA tables are missing
    work = raw / case["id"]
    work.mkdir(parents=True, exist_ok=True)
    (work / "task.yaml").write_text(yaml.safe_dump({case["id"].replace("-", "_"): task}))
    t0 = time.perf_counter()
    proc = subprocess.run([str(aic_bin(venv, "aiconfigurator")), "cli", "exp", "--yaml-path",
                           str(work / "task.yaml"), "--top-n", "3", "--no-color",
                           "--save-dir", str(work / "out")], capture_output=True, text=True,
                          timeout=1800)
    wall = time.perf_counter() - t0
    rows = _aic_rows(work / "out")
    if proc.returncode != 0 or not rows:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no rows"],
                "wall_s": wall}
    top = rows[0]
    keep = ("(a)nodes", "(a)tp", "(a)bs", "(f)nodes", "(f)ep", "num_microbatches", "tpot",
            "tokens/s/gpu", "tokens/s/user", "t_a_layer", "t_f_layer", "t_c_layer",
            "balance_ratio")
    return {"wall_s": wall, "best": {k: top.get(k) for k in keep}}


ESTIMATE_KEYS = {"T_a_layer": "t_a_layer_ms", "T_f_layer": "t_f_layer_ms",
                 "T_c_layer": "t_c_layer_ms", "TPOT": "tpot_ms", "tokens/s/gpu": "tokens_per_s_per_gpu"}


def aic_estimate(case: dict, venv: Path, unit: dict) -> dict:
    """aiconfigurator's estimate of one AFD unit (``cli estimate --estimate-mode afd``)."""
    from serving_vs_aiconfigurator import aic_bin
    cmd = [str(aic_bin(venv, "aiconfigurator")), "cli", "estimate", "--model-path", case["hf"],
           "--system", "h200_sxm", "--backend", "trtllm", "--estimate-mode", "afd",
           "--n-a-nodes", str(unit["attention_gpus"] // 8), "--n-f-nodes",
           str(unit["ffn_gpus"] // 8), "--a-tp-size", str(unit["attention_tp"]),
           "--a-batch-size", str(unit["batch"]), "--f-moe-ep-size", str(unit["ffn_gpus"]),
           "--num-microbatches", str(unit["micro_batches"]), "--pipeline-model", "optimistic",
           "--no-afd-combined-with-pd", "--isl", str(case["isl"]), "--osl", str(case["osl"]),
           "--no-color"]
    if case["model"] == "deepseek-v3":
        cmd += ["--fmha-quant-mode", "bfloat16"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = {"unit": unit}
    for line in proc.stdout.splitlines():
        key, _, value = line.strip().partition(":")
        if key.strip() in ESTIMATE_KEYS and value.strip():
            out[ESTIMATE_KEYS[key.strip()]] = float(value.split()[0].replace(",", ""))
    if "tokens_per_s_per_gpu" not in out:
        out["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
    return out


def planner_on(case: dict, unit: dict) -> dict:
    """planner's estimate of a unit aiconfigurator chose (same degrees, batch, m)."""
    model = load_model(case["model"])
    cluster = load_cluster(str(case["cluster"]))
    cal = Calibration.defaults(tuple(dict.fromkeys(g.gpu.name for g in cluster.node_groups)))
    wl = ServingWorkload(isl=case["isl"], osl=case["osl"], tpot_ms=case["tpot_ms"],
                         precision=case["precision"], kv_dtype=case["kv_dtype"])
    site = sites(cluster)[0]
    lay = afd.AfdLayout(unit["attention_tp"], unit["attention_gpus"] // unit["attention_tp"],
                        unit["ffn_gpus"], unit["micro_batches"], unit["batch"])
    e = afd.evaluate(model, wl, cluster, cal, site, site, lay)
    st = e.stages
    return {"unit": unit, "tokens_per_s_per_gpu": e.output_tokens_per_s_per_gpu,
            "tpot_ms": e.tpot_s * 1e3, "t_a_layer_ms": st.attention_s * 1e3,
            "t_f_layer_ms": st.experts_s * 1e3,
            "t_c_layer_ms": (st.dispatch_s + st.combine_s) * 1e3}


def cross_check(case: dict, venv: Path, row: dict) -> None:
    """Each tool on the other's chosen unit (``row["aic"]``: ``on_planner_unit``,
    ``planner_on_aic_unit``), so that a gap splits into model and search."""
    u = row["planner"]["best_afd_unit"]
    best = (row.get("aic") or {}).get("best")
    if u is None or best is None:
        return
    mine = {"attention_tp": u["attention_tp"],
            "attention_gpus": u["attention_tp"] * u["attention_instances"],
            "ffn_gpus": u["ffn_gpus"], "batch": u["batch"], "micro_batches": u["micro_batches"]}
    theirs = {"attention_tp": int(best["(a)tp"]), "attention_gpus": int(best["(a)nodes"]) * 8,
              "ffn_gpus": int(best["(f)ep"]), "batch": int(best["(a)bs"]),
              "micro_batches": int(best["num_microbatches"])}
    row["aic"]["on_planner_unit"] = aic_estimate(case, venv, mine)
    row["aic"]["planner_on_aic_unit"] = planner_on(case, theirs)


def _unit_cell(u: dict | None, base: float | None) -> str:
    if u is None:
        return "-"
    gain = f", {u['output_tokens_per_s_per_gpu'] / base:.2f}x" if base else ""
    return (f"{u['output_tokens_per_s_per_gpu']:,.0f} ({u['attention_instances'] * u['attention_tp']}"
            f"A+{u['ffn_gpus']}F m{u['micro_batches']} b{u['batch']}{gain})")


def markdown(results: list[dict]) -> str:
    lines = ["| case | GPUs | P/D decode pool, decode tok/s/GPU | AFD unit alone on the cluster "
             "(A+F, m, batch, gain) | unit of the best AFD plan | end-to-end tok/s/GPU "
             "colocated / P/D / AFD | AFD search s | aiconfigurator AFD tok/s/GPU (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        p = r["planner"]
        dis = p["best_disagg"]
        base = dis["decode_tokens_per_s_per_gpu"] if dis else None

        def e2e(s):
            return "-" if s is None else f"{s['output_tokens_per_s_per_gpu']:,.0f}"
        u = p["best_afd_unit"]
        types = "" if u is None else f" {u['attention_gpu'].split('-')[0]}+{u['ffn_gpu'].split('-')[0]}"
        aic = r.get("aic") or {}
        aic_cell = ("-" if not aic else f"{float(aic['best']['tokens/s/gpu']):,.0f} "
                    f"({aic['wall_s']:.0f})" if "best" in aic else "error")
        lines.append(
            f"| {r['id']} | {r.get('gpus', '')}{types} | {'-' if base is None else format(base, ',.0f')} "
            f"| {_unit_cell(u, base)} | {_unit_cell(p['afd_plan_unit'], base)} "
            f"| {e2e(p['best_colocated'])} / {e2e(dis)} / {e2e(p['best_afd'])} "
            f"| {p['afd_search_s']:.2f} | {aic_cell} |")
    return "\n".join(lines)


def cross_markdown(results: list[dict]) -> str:
    lines = ["| case | unit (A+F, batch per attention GPU, m) | tool | tok/s/GPU | TPOT ms | "
             "attention / experts / transfer ms per layer and micro-batch |",
             "|---|---|---|---|---|---|"]
    for r in results:
        aic = r.get("aic") or {}
        for label, mine, theirs in (("planner's unit", "on_planner_unit", None),
                                    ("aiconfigurator's unit", None, "planner_on_aic_unit")):
            row = aic.get(mine or theirs)
            if not row or "tokens_per_s_per_gpu" not in row:
                continue
            u = row["unit"]
            unit = (f"{label}: {u['attention_gpus']}+{u['ffn_gpus']}, b{u['batch']}, "
                    f"m{u['micro_batches']}")
            p = r["planner"]["best_afd_unit"] if mine else row
            a = row if mine else {"tokens_per_s_per_gpu": float(aic["best"]["tokens/s/gpu"]),
                                  "tpot_ms": float(aic["best"]["tpot"]),
                                  "t_a_layer_ms": float(aic["best"]["t_a_layer"]),
                                  "t_f_layer_ms": float(aic["best"]["t_f_layer"]),
                                  "t_c_layer_ms": float(aic["best"]["t_c_layer"])}
            if mine:
                st = p["stages_us"]
                p = {"tokens_per_s_per_gpu": p["output_tokens_per_s_per_gpu"],
                     "tpot_ms": p["tpot_s"] * 1e3, "t_a_layer_ms": st["attention_s"] / 1e3,
                     "t_f_layer_ms": st["experts_s"] / 1e3,
                     "t_c_layer_ms": (st["dispatch_s"] + st["combine_s"]) / 1e3}
            for tool, v in (("planner", p), ("aiconfigurator", a)):
                lines.append(f"| {r['id']} | {unit} | {tool} | {v['tokens_per_s_per_gpu']:,.0f} "
                             f"| {v['tpot_ms']:.1f} | {v['t_a_layer_ms']:.3f} / "
                             f"{v['t_f_layer_ms']:.3f} / {v['t_c_layer_ms']:.3f} |")
    return "\n".join(lines)


DOC = ROOT / "docs" / "benchmarks.md"
HEADING = "## Attention/FFN disaggregation (issue 19)"


def doc_section(doc: dict) -> str:
    results = doc["cases"]
    hetero = next((r for r in results if r["planner"].get("per_dollar")), None)
    dollars = "" if hetero is None else "; ".join(
        f"{row['gain']:.2f}x at an L40S/H20 price ratio of {row['l40s_over_h20_price']:g}"
        for row in hetero["planner"]["per_dollar"])
    times = [r["planner"]["afd_search_s"] for r in results]
    verdicts = "\n".join(f"* `{r['id']}`: {r['planner']['verdict']}" for r in results)
    return f"""{HEADING}: `benchmarks/serving_afd.py`

Decode output tokens/s per decode GPU of AFD units (attention + FFN GPUs) against the decode
pool of the best prefill/decode plan (attention and experts on the same GPUs), under the same
TPOT target: the best unit the whole cluster holds, and the unit of the best AFD plan, which
leaves nodes for its prefill pool; and end-to-end tokens/s per GPU of each mode's best plan
(prefill included). The verdicts below are the report's, on the plan's unit.
AFD search alone {min(times):.2f}–{max(times):.2f} s per case in process (2 cores).
`python benchmarks/serving_afd.py --aic --aic-venv DIR` (aiconfigurator 0.12.0 in its own venv).

{markdown(results)}

MegaScale-Infer's heterogeneous setting (H20 attention nodes, L40S expert nodes, Mixtral-8x22B,
its trace's median lengths, 150 ms between tokens) against H20 alone, decode tokens per unit of
cost: {dollars} (published 1.86x; their Table 3 prices are not available here). Their 1.90x
per GPU is for a 317B "Scaled-MoE" whose dimensions are not public, against TP-sharded
colocated engines (vLLM, TensorRT-LLM). On Mixtral-8x22B over A100 nodes planner predicts
{_tp_gain(results)} over a TP-8 decode instance (what those engines run), but no gain over the
best decode pool planner finds (attention data parallel with expert parallelism, row above),
which already batches the experts as AFD does.

Each tool on the other's chosen unit (same degrees, batch and micro-batches):

{cross_markdown(results)}

Where the two disagree: aiconfigurator prices the experts from kernel tables measured under a
power-law token distribution (its `workload_distribution` default, `power_law`): the busiest
expert GPU's share is far above the mean, so its expert time is 1.4–4.5x planner's, which
assumes balanced load (`--moe-imbalance 1`, what EPLB-style redundant experts approach); its
best batch is therefore 5x smaller. On planner's Qwen3 unit it reports out of memory (its KV
default is bf16; planner's case runs fp8 KV).

Verdicts:

{verdicts}
"""


def _tp_gain(results: list[dict]) -> str:
    for r in results:
        tp = r["planner"].get("tp_decode_baseline")
        if tp:
            return (f"{r['planner']['decode_gain_over_tp']:.2f}x (AFD unit "
                    f"{r['planner']['best_afd_unit']['output_tokens_per_s_per_gpu']:,.0f} vs "
                    f"{tp['decode_tokens_per_s_per_gpu']:,.0f} decode tokens/s/GPU at TP {tp['tp']},"
                    f" batch {tp['batch']})")
    return "-"


def write_doc(doc: dict) -> None:
    text = DOC.read_text()
    section = doc_section(doc)
    if HEADING in text:
        start = text.index(HEADING)
        nxt = text.find("\n## ", start + len(HEADING))
        text = text[:start] + section + (text[nxt + 1:] if nxt != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-doc", action="store_true",
                    help="write the section of docs/benchmarks.md from the results")
    ap.add_argument("--aic", action="store_true", help="also run aiconfigurator's afd mode")
    ap.add_argument("--reuse-aic", action="store_true",
                    help="keep aiconfigurator's numbers from the existing result file")
    ap.add_argument("--aic-venv", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    old = {}
    if args.reuse_aic and args.out.exists():
        old = {r["id"]: r.get("aic") for r in json.loads(args.out.read_text())["cases"]}
    venv = None
    if args.aic or args.reuse_aic:
        from serving_vs_aiconfigurator import DEFAULT_AIC_VENV, ensure_aic_venv
        venv = args.aic_venv or DEFAULT_AIC_VENV
        ensure_aic_venv(venv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases(Path(tmp)):
            row = {"id": case["id"], "model": case["model"], "isl": case["isl"],
                   "gpus": load_cluster(str(case["cluster"])).num_gpus,
                   "osl": case["osl"], "tpot_ms": case["tpot_ms"],
                   "precision": case["precision"], "planner": run_planner(case)}
            if case.get("aic"):
                if args.reuse_aic and old.get(case["id"]):
                    row["aic"] = old[case["id"]]
                elif venv is not None:
                    row["aic"] = run_aic(case, venv, Path(tmp) / "aic")
                if venv is not None and row.get("aic"):
                    cross_check(case, venv, row)
            results.append(row)
            print(f"{case['id']}: {row['planner']['verdict']}", file=sys.stderr)
    doc = {"megascale_infer_published": MEGASCALE, "price_ratios": PRICE_RATIOS,
           "cases": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(markdown(results))
    print(cross_markdown(results))
    if args.write_doc:
        write_doc(doc)
    for r in results:
        for row in r["planner"].get("per_dollar", []):
            print(f"{r['id']}: L40S/H20 price {row['l40s_over_h20_price']}: AFD per cost "
                  f"{row['gain']:.2f}x the H20 decode pool")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
