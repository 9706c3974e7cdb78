"""Expert placement against the EPLB-style baseline on SGLang's DeepSeek-V3 traces, measured
under the dispatch rule each runtime really applies.

    python benchmarks/expert_placement.py [--quick]

Six real workloads (``benchmarks/data/moe_traces/sglang``: 58 MoE layers x 256 experts each).
Every number is busiest GPU / mean GPU load, averaged over the 58 layers, computed in the same
run for planner (``planner.experts.plan_experts``, what ``planner experts plan`` runs) and for
the baseline (``solvers.experts.eplb_baseline``: DeepSeek's EPLB as published; "EPLB default"
is the policy EPLB picks, hierarchical when the 8 expert groups divide over the nodes (EP32: 4
nodes, EP64: 8 nodes) and global otherwise (EP144: 18 nodes); "EPLB global" forces the global
policy). Shapes: EP32 = 32 GPUs x 9 slots, EP64 = 64 x 5 (one redundant slot per GPU each),
EP144 = 144 x 2 (DeepSeek's decode shape).

Dispatch rules (``solvers.experts.dispatch``): ``even`` (vLLM; SGLang's dynamic dispatch),
``sglang`` (SGLang's static per-rank dispatch, expected split with every rank originating
1/G of every expert), ``static`` (planner's split ratios) and ``realtime`` (quotas re-planned
for the evaluated loads). A placement is always scored under the rule it was planned for, and
the baseline under the same rule.

Sections:

1. same workload under each engine rule (even, SGLang static): plan and evaluate on one trace;
2. same workload with planned ratios (static) and the replica-count lower bound;
3. cross workload: plan on A, evaluate on B, every ordered pair within prefill (4 traces) and
   within decode (2): under real-time quotas (every placement gets quotas re-planned for B),
   under the even split and under SGLang's rule; nominal plans and robust plans (A plus 16
   log-normal drifts of it, sigma 0.15; never B);
4. real-time quotas on sampled micro-batches (16,384 tokens x top-8) and their solve time;
5. locality: cross-node tokens against balance as ``--locality-slack`` grows, with the
   token-origin model stated (``planner.experts.plan.LOCALITY_MODEL``);
6. small instances: CP-SAT and the heuristic against brute force;
7. whole-model planning time per rule (EP64 and EP144, best of 3) and byte-identical plans.

``--quick`` runs sections 1, 2 and 7 only (no JSON or docs written).
Writes ``benchmarks/results/expert_placement.json`` and a section of ``docs/benchmarks.md``.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from doc_tables import update_section  # noqa: E402
from planner.experts.plan import LOCALITY_MODEL, ExpertOptions, plan_experts  # noqa: E402
from planner.inputs.expert_loads import ExpertLoads  # noqa: E402
from solvers.experts import (ExpertLayout, brute_force_layer, cross_node_tokens, dispatch_split,  # noqa: E402
                             even_split, lp_lower_bound, plan_layer, plan_layers, rebalance_experts,
                             solve_layer_milp, solve_quotas, static_gpu_loads)

TRACES = ROOT / "benchmarks" / "data" / "moe_traces" / "sglang"
RESULT = ROOT / "benchmarks" / "results" / "expert_placement.json"
GROUPS = 8  # DeepSeek-V3 n_group
SHAPES = {"EP32": (32, 9), "EP64": (64, 5), "EP144": (144, 2)}
ENGINE_RULES = ("even", "sglang")


def load_traces() -> dict[str, np.ndarray]:
    """Every trace's MoE layers ``[58, 256]``."""
    out = {}
    for path in sorted(TRACES.glob("*.json")):
        counts = np.array(json.loads(path.read_text())["logical_count"], dtype=np.float64)
        out[path.stem] = counts[counts.sum(1) > 0]
    return out


def layout_of(shape: str) -> ExpertLayout:
    return ExpertLayout(256, *SHAPES[shape])


def ratio(gpu_load: np.ndarray) -> float:
    return float(gpu_load.max() / gpu_load.mean())


def eplb(loads: np.ndarray, layout: ExpertLayout, policy: str) -> np.ndarray:
    nodes = layout.num_gpus // layout.gpus_per_node
    hier = policy == "default" and GROUPS % nodes == 0
    return rebalance_experts(loads, layout.num_slots, GROUPS if hier else 1, nodes if hier else 1,
                             layout.num_gpus).phy2log


def plan(loads: np.ndarray, layout: ExpertLayout, dispatch: str, robust: bool = False):
    """planner's plan of ``loads [L, E]``: ``(phy2log [L, P], split [L, P], seconds)``."""
    options = ExpertOptions(layout.num_gpus, layout.gpus_per_node, layout.slots_per_gpu,
                            robust=robust, dispatch=dispatch, groups=GROUPS)
    start = time.perf_counter()
    result = plan_experts(ExpertLoads(loads[None], "trace"), options)
    return result.phy2log, result.split, time.perf_counter() - start


def score(loads: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout, rule: str,
          split: np.ndarray | None = None) -> list[float]:
    """Busiest/mean of every layer of ``loads`` under ``rule`` (``static`` uses ``split``)."""
    out = []
    for i, w in enumerate(loads):
        s = dispatch_split(phy2log[i], layout, rule, loads=w,
                           planned=None if split is None else split[i])
        out.append(ratio(static_gpu_loads(w, phy2log[i], s, layout.num_gpus)))
    return out


def same_workload(traces, shape: str) -> dict:
    """Section 1 and 2: per trace, EPLB and planner under each rule, and the bound."""
    layout = layout_of(shape)
    rows = {}
    for name, loads in traces.items():
        base = {p: eplb(loads, layout, p) for p in ("default", "global")}
        row = {"lower_bound": float(np.mean([lp_lower_bound(w, layout) / (w.sum() / layout.num_gpus)
                                              for w in loads]))}
        for rule in ENGINE_RULES:
            phy, _, _ = plan(loads, layout, rule)
            row[f"{rule}_planner"] = float(np.mean(score(loads, phy, layout, rule)))
            for p, b in base.items():
                row[f"{rule}_eplb_{p}"] = float(np.mean(score(loads, b, layout, rule)))
        phy, split, _ = plan(loads, layout, "static")
        row["static_planner"] = float(np.mean(score(loads, phy, layout, "static", split)))
        rows[name] = row
    return {"rows": rows, "mean": _mean(rows)}


def cross_workload(traces, shape: str) -> dict:
    """Section 3: plan on A, evaluate on B (same phase), nominal and robust, per rule."""
    layout = layout_of(shape)
    plans: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for name, loads in traces.items():
        for rule in ("realtime",) + ENGINE_RULES:
            for robust in (False, True):
                plans[(name, f"{rule}_{'robust' if robust else 'nominal'}")] = plan(loads, layout, rule, robust)[0]
        for p in ("default", "global"):
            plans[(name, f"eplb_{p}")] = eplb(loads, layout, p)
    rows = {}
    for a, b in itertools.permutations(traces, 2):
        if a.split("_")[0] != b.split("_")[0]:
            continue
        lb, row = traces[b], {}
        for rule in ("realtime",) + ENGINE_RULES:
            for kind in ("nominal", "robust"):
                row[f"{rule}_planner_{kind}"] = float(np.mean(score(lb, plans[(a, f"{rule}_{kind}")], layout, rule)))
            for p in ("default", "global"):
                row[f"{rule}_eplb_{p}"] = float(np.mean(score(lb, plans[(a, f"eplb_{p}")], layout, rule)))
        rows[f"{a} -> {b}"] = row
    return {"rows": rows, "mean": _mean(rows)}


def realtime(traces) -> dict:
    """Section 4 (EP64, planner's real-time placement)."""
    layout = layout_of("EP64")
    rng = np.random.default_rng(0)
    rows, times = {}, []
    for name, loads in traces.items():
        phy, _, _ = plan(loads, layout, "realtime")
        exact = score(loads, phy, layout, "realtime")
        sampled = []
        for w, p in zip(loads, phy):
            for _ in range(8):
                batch = rng.multinomial(16384 * 8, w / w.sum()).astype(np.float64)
                start = time.perf_counter()
                sol = solve_quotas(batch, p, layout.gpu_of_slot, layout.num_gpus)
                times.append(time.perf_counter() - start)
                sampled.append(ratio(sol.gpu_load))
        rows[name] = {"max_layer": max(exact), "mean_layer": float(np.mean(exact)),
                      "microbatch_max": max(sampled), "microbatch_mean": float(np.mean(sampled)),
                      "microbatch_p99": float(np.percentile(sampled, 99))}
    return {"rows": rows, "median_ms_per_layer": float(np.median(times) * 1e3),
            "p99_ms_per_layer": float(np.percentile(times, 99) * 1e3)}


def locality(traces) -> dict:
    """Section 5 (EP64, prefill_in1024): the slack curve and EPLB, model stated."""
    layout = layout_of("EP64")
    loads = traces["prefill_in1024"]
    node_of_slot = layout.node_of_gpu[layout.gpu_of_slot]
    nodes = layout.num_gpus // layout.gpus_per_node

    def cross(w, p, quota) -> float:
        return cross_node_tokens(w, p, quota, node_of_slot, nodes) / w.sum()

    curve = []
    for slack in (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0):
        placed = plan_layers(loads, layout, locality_slack=slack)
        ratios = [ratio(static_gpu_loads(w, p.phy2log, p.split, layout.num_gpus)) for w, p in zip(loads, placed)]
        crosses = [cross(w, p.phy2log, w[p.phy2log] * p.split) for w, p in zip(loads, placed)]
        curve.append({"slack": slack, "ratio": float(np.mean(ratios)), "cross_node": float(np.mean(crosses))})
    engines = {}
    for rule in ENGINE_RULES:
        phy, split, _ = plan(loads, layout, rule)
        engines[f"planner ({rule})"] = {
            "ratio": float(np.mean(score(loads, phy, layout, rule))),
            "cross_node": float(np.mean([cross(w, p, w[p] * s) for w, p, s in zip(loads, phy, split)]))}
    for policy in ("default", "global"):
        phy = eplb(loads, layout, policy)
        split = [even_split(p, 256) for p in phy]
        engines[f"EPLB {policy} (even)"] = {
            "ratio": float(np.mean(score(loads, phy, layout, "even"))),
            "cross_node": float(np.mean([cross(w, p, w[p] * s) for w, p, s in zip(loads, phy, split)]))}
    return {"trace": "prefill_in1024", "model": LOCALITY_MODEL, "curve": curve, "engines": engines}


def small_instances(count: int = 400) -> dict:
    """Section 6: CP-SAT and the heuristic against brute force on random small layers."""
    rng = np.random.default_rng(7)
    worst_gap, milp_equal, milp_optimal, n = 0.0, 0, 0, 0
    while n < count:
        E, G = int(rng.integers(3, 7)), int(rng.integers(2, 4))
        S = int(rng.integers(-(-E // G), -(-E // G) + 2))
        if len(list(itertools.combinations_with_replacement(range(E), S))) ** G > 2e5:
            continue
        layout = ExpertLayout(E, G, S, 2)
        if n % 2:  # skewed: log-normal loads
            w = np.maximum(np.round(rng.lognormal(3, 1, size=E)), 1)
        else:
            w = (rng.integers(1, 100, size=E) * rng.choice([1, 1, 5], size=E)).astype(np.float64)
        opt, _ = brute_force_layer(w, layout)
        heur = plan_layer(w[None], layout).ratio * w.sum() / G
        milp = solve_layer_milp(w, layout, time_limit_s=10)
        worst_gap = max(worst_gap, heur / opt - 1)
        milp_equal += abs(milp.max_load - opt) < 1e-6
        milp_optimal += milp.optimal
        n += 1
    return {"instances": n, "milp_equal_brute_force": milp_equal, "milp_proven_optimal": milp_optimal,
            "heuristic_worst_gap": worst_gap}


def whole_model_time(traces) -> dict:
    """Section 7: ``plan_experts`` on decode_in1000out1000, best of 3, plan hashes per run."""
    loads = traces["decode_in1000out1000"]
    out = {}
    for shape in ("EP64", "EP144"):
        layout = layout_of(shape)
        for rule in ("static", "even", "sglang"):
            runs, hashes = [], set()
            for _ in range(3):
                phy, split, seconds = plan(loads, layout, rule)
                runs.append(seconds)
                hashes.add(hashlib.sha256(phy.tobytes() + split.tobytes()).hexdigest())
            out[f"{shape} {rule}"] = {"best_s": min(runs), "runs_s": runs, "identical": len(hashes) == 1}
    return {"layers": int(loads.shape[0]), "experts": 256, "rows": out}


def _mean(rows: dict) -> dict:
    keys = next(iter(rows.values())).keys()
    return {k: float(np.mean([r[k] for r in rows.values()])) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="sections 1, 2 and 7 only; write nothing")
    args = parser.parse_args()
    traces = load_traces()
    started = time.perf_counter()
    result = {"machine": platform.processor() or platform.machine(),
              "same": {s: same_workload(traces, s) for s in SHAPES},
              "whole_model": whole_model_time(traces)}
    if args.quick:
        print(json.dumps({k: result[k] for k in ("same", "whole_model")}, indent=1))
        return
    result.update({"cross": {s: cross_workload(traces, s) for s in SHAPES},
                   "realtime": realtime(traces), "locality": locality(traces),
                   "small": small_instances()})
    result["elapsed_s"] = time.perf_counter() - started
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    update_section("expert_placement", doc_lines(result))
    print(json.dumps({k: result[k] for k in ("small", "whole_model", "elapsed_s")}, indent=1))


def _wins(rows: dict, ours: str, theirs: str) -> str:
    """``won/tied/lost`` counts of ``ours`` against ``theirs`` over rows (ties within 1e-9)."""
    won = sum(r[ours] < r[theirs] - 1e-9 for r in rows.values())
    lost = sum(r[ours] > r[theirs] + 1e-9 for r in rows.values())
    return f"{won}/{len(rows) - won - lost}/{lost}"


def doc_lines(r: dict) -> list[str]:
    lines = ["## Expert placement vs EPLB (`benchmarks/expert_placement.py`)", "",
             "DeepSeek-V3 routing counts from SGLang (6 workloads, 58 MoE layers x 256 experts). "
             "Numbers are busiest GPU / mean GPU load, mean over layers (1.0 is perfect). Each "
             "placement is scored under the dispatch rule it is planned for and EPLB's under the "
             "same rule: **even** (vLLM, SGLang dynamic dispatch), **SGLang static** (each rank "
             "sends an expert's tokens to its own GPU's replica, else its node's first, else a "
             "fair choice; every rank originates 1/G of every expert), **static** (planner's "
             "split ratios, only planner's runtime applies them), **real-time** (quotas re-planned "
             "for the evaluated loads). EPLB default = the policy EPLB picks (hierarchical at "
             "EP32/EP64, global at EP144). Slots per GPU: EP32 9, EP64 5, EP144 2.", "",
             "### Same workload (plan and evaluate on one trace)", "",
             "| shape | rule | EPLB default | EPLB global | planner | planner vs best EPLB, traces won/tied/lost |",
             "|---|---|---:|---:|---:|---:|"]
    for shape, sec in r["same"].items():
        m, rows = sec["mean"], sec["rows"]
        for rule in ENGINE_RULES:
            best = {n: {"p": v[f"{rule}_planner"], "e": min(v[f"{rule}_eplb_default"], v[f"{rule}_eplb_global"])}
                    for n, v in rows.items()}
            lines.append(f"| {shape} | {'even' if rule == 'even' else 'SGLang static'} | "
                         f"{m[f'{rule}_eplb_default']:.4f} | {m[f'{rule}_eplb_global']:.4f} | "
                         f"{m[f'{rule}_planner']:.4f} | {_wins(best, 'p', 'e')} |")
        lines.append(f"| {shape} | static ratios | {m['even_eplb_default']:.4f} | "
                     f"{m['even_eplb_global']:.4f} | {m['static_planner']:.4f} | "
                     f"(bound {m['lower_bound']:.4f}) |")
    lines += ["", "EPLB columns of the static-ratio rows are EPLB's own even split. The bound is the "
              "replica-count bound (`lp_lower_bound`), valid for any split; at EP144 the "
              "covering-LP bound on sampled layers is in its own section below.", "",
              "Per trace, even split:", "",
              "| trace | " + " | ".join(f"{s} EPLB global | {s} planner" for s in r["same"]) + " |",
              "|---|" + "---:|---:|" * len(r["same"])]
    for name in next(iter(r["same"].values()))["rows"]:
        lines.append(f"| {name} | " + " | ".join(
            f"{sec['rows'][name]['even_eplb_global']:.4f} | {sec['rows'][name]['even_planner']:.4f}"
            for sec in r["same"].values()) + " |")
    if "cross" in r:
        lines += ["", "### Cross workload (plan on A, evaluate on B; 14 ordered pairs within a phase)", "",
                  "Robust plans use A and 16 log-normal drifts of it (sigma 0.15), never B. "
                  "Real-time: every placement gets quotas re-planned for B's loads.", "",
                  "| shape | rule | EPLB default | EPLB global | planner nominal | planner robust | "
                  "nominal vs EPLB global, won/tied/lost | robust vs nominal, won/tied/lost |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for shape, sec in r["cross"].items():
            m, rows = sec["mean"], sec["rows"]
            for rule, word in (("realtime", "real-time"), ("even", "even"), ("sglang", "SGLang static")):
                lines.append(f"| {shape} | {word} | {m[f'{rule}_eplb_default']:.4f} | "
                             f"{m[f'{rule}_eplb_global']:.4f} | {m[f'{rule}_planner_nominal']:.4f} | "
                             f"{m[f'{rule}_planner_robust']:.4f} | "
                             f"{_wins(rows, f'{rule}_planner_nominal', f'{rule}_eplb_global')} | "
                             f"{_wins(rows, f'{rule}_planner_robust', f'{rule}_planner_nominal')} |")
        rt = r["realtime"]
        worst = max(v["max_layer"] for v in rt["rows"].values())
        mb = max(v["microbatch_max"] for v in rt["rows"].values())
        mb99 = max(v["microbatch_p99"] for v in rt["rows"].values())
        lines += ["", f"Real-time quotas, EP64, planned placement: worst layer of any trace {worst:.4f}; "
                  f"on sampled micro-batches (16,384 tokens x top-8) worst {mb:.4f}, p99 {mb99:.4f}; "
                  f"solve time per layer median {rt['median_ms_per_layer']:.3f} ms, "
                  f"p99 {rt['p99_ms_per_layer']:.3f} ms.", "",
                  f"Locality (EP64, prefill_in1024). Cross-node tokens assume: {r['locality']['model']}. "
                  "The SGLang traces carry per-expert totals only, so no co-routing statistics are used.", "",
                  "| locality | busiest/mean | cross-node tokens |", "|---|---:|---:|"]
        for p in r["locality"]["curve"]:
            lines.append(f"| planner real-time, slack {p['slack']:g} | {p['ratio']:.4f} | {p['cross_node']:.1%} |")
        for name, p in r["locality"]["engines"].items():
            lines.append(f"| {name} | {p['ratio']:.4f} | {p['cross_node']:.1%} |")
        s = r["small"]
        lines += ["", f"Small instances ({s['instances']} random, E 3-6, G 2-3, uniform and log-normal "
                  f"loads): CP-SAT equals brute force on {s['milp_equal_brute_force']} (proven optimal "
                  f"on {s['milp_proven_optimal']}); heuristic worst gap {s['heuristic_worst_gap']:.2%}."]
    wm = r["whole_model"]
    lines += ["", f"Whole-model planning time (`plan_experts`, {wm['layers']} layers x {wm['experts']} "
              "experts, decode_in1000out1000, best of 3; identical = the three plans hash equal):", "",
              "| shape | rule | best s | identical |", "|---|---|---:|---|"]
    for key, v in wm["rows"].items():
        shape, rule = key.split()
        lines.append(f"| {shape} | {rule} | {v['best_s']:.2f} | {'yes' if v['identical'] else 'NO'} |")
    return lines


if __name__ == "__main__":
    main()
