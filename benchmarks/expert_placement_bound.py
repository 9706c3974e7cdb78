"""How close EP144 with two slots per GPU can get: planner and EPLB against the covering-LP bound.

    python benchmarks/expert_placement_bound.py [--layers 0 29]

With two slots per GPU the optimum is a partition of the experts into ``E - G`` groups
(``solvers.experts.groups``), so a lower bound far tighter than the replica-count one is the
configuration LP of that bin covering (``covering_lp_bound``: column generation, about a
minute per layer on 2 cores). It runs on sampled layers of each of the six SGLang traces
(default layers 0 and 29), on the same-workload EP144 shape of ``benchmarks/expert_placement.py``
(256 experts, 144 GPUs, 2 slots): EPLB global (the policy EPLB picks at 18 nodes, even split),
planner (``plan_layer``, static quotas), the replica-count bound and the covering-LP bound,
all as busiest / mean GPU load. "Headroom closed" is the share of EPLB's excess over the
covering bound that planner removes.

Writes ``benchmarks/results/expert_placement_bound.json`` and a section of ``docs/benchmarks.md``.
"""
from __future__ import annotations

import argparse
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
from expert_placement import eplb, load_traces, score  # noqa: E402
from solvers.experts import (ExpertLayout, covering_lp_bound, lp_lower_bound, plan_layer,  # noqa: E402
                             static_gpu_loads)

RESULT = ROOT / "benchmarks" / "results" / "expert_placement_bound.json"
LAYOUT = ExpertLayout(256, 144, 2)


def layer_row(w: np.ndarray) -> dict:
    mean = w.sum() / LAYOUT.num_gpus
    plan = plan_layer(w[None], LAYOUT)
    planner = float(static_gpu_loads(w, plan.phy2log, plan.split, LAYOUT.num_gpus).max() / mean)
    base = score(w[None], eplb(w[None], LAYOUT, "global"), LAYOUT, "even")[0]
    replica = lp_lower_bound(w, LAYOUT) / mean
    started = time.perf_counter()
    cover = covering_lp_bound(w, LAYOUT.num_experts - LAYOUT.num_gpus, replica * mean, planner * mean,
                              tol=0.001, max_iter=1500) / mean
    return {"eplb_global": base, "planner": planner, "replica_bound": replica, "covering_bound": cover,
            "bound_s": time.perf_counter() - started}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[0, 29])
    args = ap.parse_args()
    rows = {}
    for name, loads in load_traces().items():
        for layer in args.layers:
            rows[f"{name}:{layer}"] = row = layer_row(loads[layer])
            print(f"{name}:{layer}", {k: round(v, 4) for k, v in row.items()}, flush=True)
    keys = ("eplb_global", "planner", "replica_bound", "covering_bound")
    mean = {k: float(np.mean([r[k] for r in rows.values()])) for k in keys}
    closed = (mean["eplb_global"] - mean["planner"]) / max(mean["eplb_global"] - mean["covering_bound"], 1e-12)
    result = {"machine": platform.processor() or platform.machine(), "layers": args.layers,
              "rows": rows, "mean": mean, "headroom_closed": closed}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    update_section("expert_placement_bound", doc_lines(result))
    print(json.dumps({"mean": mean, "headroom_closed": closed}, indent=1))


def doc_lines(r: dict) -> list[str]:
    lines = ["## EP144 (2 slots per GPU): how much better can any placement be? "
             "(`benchmarks/expert_placement_bound.py`)", "",
             "Sampled layers (" + ", ".join(map(str, r["layers"])) + ") of each SGLang trace, same "
             "workload, busiest / mean GPU load. The covering-LP bound is a proven lower bound on "
             "every placement with any split (`solvers.experts.groups.covering_lp_bound`); the "
             "replica bound is the one the main table uses.", "",
             "| layer | EPLB global | planner | covering-LP bound | replica bound |", "|---|---:|---:|---:|---:|"]
    for key, row in r["rows"].items():
        lines.append(f"| {key} | {row['eplb_global']:.4f} | {row['planner']:.4f} | "
                     f"{row['covering_bound']:.4f} | {row['replica_bound']:.4f} |")
    m = r["mean"]
    lines.append(f"| **mean** | {m['eplb_global']:.4f} | {m['planner']:.4f} | "
                 f"{m['covering_bound']:.4f} | {m['replica_bound']:.4f} |")
    lines += ["", f"Planner removes {r['headroom_closed']:.0%} of EPLB's excess over the covering-LP "
              "bound on these layers."]
    return lines


if __name__ == "__main__":
    main()
