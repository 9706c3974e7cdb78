"""Against practice: is each published configuration in the planner's top 10?

    python benchmarks/published_in_topk.py [--limit N]

For every row of ``benchmarks/data/published_runs_calibration.json`` (copied from the shared
reference data; see its README) the planner searches the row's model, cluster and global batch
(``planner.training.search.search``, all degree tuples ranked by their best option). The published
degree tuple (tp, cp, pp, dp, ep, expert tp) is then looked up in that ranking:

* ``top-10``: it is among the planner's ten best tuples;
* ``planner faster``: it is not, and the table gives how much faster the planner's #1 is
  predicted to be than the published degrees with their best options (same cost model, same
  implementation assumptions: flash attention, distributed optimizer, overlap), and the part
  of the step where the published configuration loses the most;
* ``outside space``: the published tuple is outside the planner's space (e.g. TP across NVLink
  domains); it is evaluated directly with the same option search, so the comparison stands;
* ``does not fit``: the cost model predicts the published degrees do not fit in memory.

Writes ``benchmarks/results/published_in_topk.json`` and a table in ``docs/benchmarks.md``.
Rows published without full degrees (PP/DP unknown) match on the degrees they give.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from doc_tables import update_section  # noqa: E402
from cost_models.profile import default_profile  # noqa: E402
from planner.training.search import SearchSpace, best_for_degrees, rank_key, search  # noqa: E402
from planner.plan.parts import PART_NAMES  # noqa: E402
from planner.training.why import degrees_text  # noqa: E402
from published_runs import load_rows, row_cluster, row_model, row_workload  # noqa: E402
from cost_models.parallel import Degrees  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "published_in_topk.json"
TOP = 10


def published_degrees(row: dict, num_gpus: int) -> dict:
    """The degrees a row states (None where it does not)."""
    c = row["config"]
    tp, cp = c.get("tp") or 1, c.get("cp") or 1
    ep = c.get("ep") or 1
    etp = c.get("expert_tp") or (1 if c.get("ep") else tp)
    return {"tp": tp, "cp": cp, "pp": c.get("pp"), "dp": c.get("dp"), "ep": ep if c.get("ep")
            else None, "etp": etp if c.get("ep") else None}


def _matches(d: Degrees, want: dict) -> bool:
    return all(v is None or d.size(k) == v for k, v in want.items())


def _degrees_of(e) -> Degrees:
    c = e.config
    return c.degrees


def _loss(best, published) -> str:
    """Where the published configuration spends the most time beyond the planner's #1."""
    diffs = {k: getattr(published.time, k) - getattr(best.time, k) for k in PART_NAMES}
    part, delta = max(sorted(diffs.items()), key=lambda kv: kv[1])
    return f"{delta:.2f} s more per step on {PART_NAMES[part]}"


def evaluate(row: dict) -> dict:
    model, cluster, workload = row_model(row), row_cluster(row), row_workload(row)
    prof = default_profile(cluster.slowest_gpu.name)
    want = published_degrees(row, cluster.num_gpus)
    start = time.perf_counter()
    ranked = search(model, cluster, workload, prof, SearchSpace(), top_k=10**6).ranked
    seconds = time.perf_counter() - start
    best = ranked[0]
    position = next((i + 1 for i, e in enumerate(ranked) if _matches(_degrees_of(e), want)), None)
    out = {"id": row["id"], "model": model.name, "gpus": cluster.num_gpus,
           "gpu": cluster.slowest_gpu.name, "global_batch": workload.global_batch,
           "seq_len": workload.seq_len, "published": want, "tuples_ranked": len(ranked),
           "search_s": seconds, "planner_best": degrees_text(best),
           "planner_best_step_s": best.step_time_s, "planner_best_mfu": best.mfu}
    published = ranked[position - 1] if position else None
    if published is None and None not in want.values():
        d = Degrees(tp=want["tp"], cp=want["cp"], pp=want["pp"], dp=want["dp"], ep=want["ep"], etp=want["etp"])
        outcome = best_for_degrees(model, cluster, workload, prof, d)
        published = outcome[0] if outcome else None
        out["verdict"] = "outside space" if published is not None else "does not fit"
    elif position is not None and position <= TOP:
        out["verdict"] = "top-10"
    elif position is not None:
        out["verdict"] = "planner faster"
    else:
        out["verdict"] = "does not fit"
    out["position"] = position
    if published is not None:
        out["published_step_s"] = published.step_time_s
        out["published_mfu"] = published.mfu
        out["planner_gain"] = published.step_time_s / best.step_time_s - 1
        out["why"] = "" if published is best else _loss(best, published)
    return out


def _row_line(r: dict) -> str:
    p = r["published"]
    pub = " ".join(f"{k}{v}" for k, v in p.items() if v is not None and (v != 1 or k in
                                                                         ("tp", "pp", "dp")))
    pos = f"{r['position']}/{r['tuples_ranked']}" if r["position"] else f"-/{r['tuples_ranked']}"
    gain = f"{r['planner_gain']:+.1%}" if "planner_gain" in r else "n/a"
    return (f"| {r['id']} | {r['gpus']} | {pub} | {pos} | {r['verdict']} | {r['planner_best']} "
            f"| {gain} | {r.get('why', '')} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N rows only")
    args = parser.parse_args()
    rows = load_rows()[:args.limit]
    results = []
    for i, row in enumerate(rows):
        results.append(evaluate(row))
        r = results[-1]
        print(f"[{i + 1}/{len(rows)}] {r['id']}: {r['verdict']} (position {r['position']}, "
              f"{r['search_s']:.1f} s)", flush=True)
    counts = {v: sum(r["verdict"] == v for r in results)
              for v in ("top-10", "planner faster", "outside space", "does not fit")}
    summary = {"rows": len(results), **counts,
               "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
               "date": time.strftime("%Y-%m-%d")}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps({"summary": summary, "rows": results}, indent=1) + "\n")
    update_section("published_in_topk", [
        "## Published configurations vs the planner's top 10 (`benchmarks/published_in_topk.py`)",
        "",
        f"{len(results)} rows of the calibration data: **{counts['top-10']} in the top 10**, "
        f"{counts['planner faster']} where the planner's #1 is predicted faster than the "
        f"published degrees, {counts['outside space']} outside the planner's space (evaluated "
        f"directly), {counts['does not fit']} predicted not to fit. Position: rank of the "
        "published degree tuple among all tuples the planner ranks (each with its best "
        "micro-batch, schedule, recompute and ZeRO stage). Gain: predicted step time of the "
        "published degrees / planner's #1 - 1. Measured "
        f"{summary['date']} on {summary['machine']}.", "",
        "| row | GPUs | published | position | verdict | planner #1 | gain | published loses |",
        "|---|---:|---|---:|---|---|---:|---|",
        *[_row_line(r) for r in results]])
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
