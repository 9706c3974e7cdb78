"""Results of ``benchmarks/device/prediction_reps.sh`` on a lent machine's CPU cores with
nothing else on it (2026-11-28, commit 4ace683 plus the script's ``EXEC_ARGS``), two calls
one after the other: first 3 executor-benchmark copies at once (``--repeats 1 --runs 1``, 2
physical cores each, 6 of 16 cores busy), then 2 AFD-benchmark copies at once (4 cores each,
8 of 16 busy). Each copy calibrated its own cores first. A third call, on another fresh machine,
ran ``planner calibrate`` alone on 2 cores (``alone/``; quoted in the text, not tabulated).

Reads ``benchmarks/results/device-h200-idle/exec`` and ``afd`` (each copy's results JSON,
calibration, log and per-rank records, as the script brought them back). Nothing is fitted:
every prediction is the copy's own, from its own calibration. Besides the errors it reports
what the machine did to them: each calibration's rank speed spread
(:func:`planner.run.calibrate.rank_speed_spread`) and each compared run's rank imbalance
(:func:`planner.run.check_run.rank_imbalance`), over these copies and the 6 copies of
``device-h200-pinned`` (same machine type, same code but the attention fit, 14 of 16 cores
busy). Writes ``summary.json`` in the folder and the ``device_prediction_idle`` section of
``docs/benchmarks.md``. Usage: ``python benchmarks/device/report_idle.py``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(HERE))
from executor_prediction import discordant  # noqa: E402
from report import publish  # noqa: E402
from report_pinned import afd_spread, afd_table, median_parts  # noqa: E402
from report_rerun import EXEC_PARTS, _afd_summary, _cell, executor_parts  # noqa: E402
from report_reps import executor_copies  # noqa: E402

from planner.run.calibrate import rank_speed_spread  # noqa: E402
from planner.run.check_run import rank_imbalance  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SPLIT = 1.1  # rank imbalance at which the errors are split


def _slug(plan: str) -> str:
    return "".join(c for c in plan.lower().replace(", ", "-").replace(" ", "-")
                   if c.isalnum() or c == "-")


def run_imbalances(folder: Path) -> list[dict]:
    """Every executor copy's compared runs in ``folder``: plan, error, rank imbalance (None
    for plans with one rank per stage)."""
    out = []
    for res in sorted(folder.glob("exec*-executor_prediction.json")):
        name = res.name.split("-")[0]
        doc = json.loads(res.read_text())
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(folder / f"{name}-runs.tar.gz") as t:
                t.extractall(tmp, filter="data")
            for r in doc["results"]:
                rec = json.loads((Path(tmp) / "executor_prediction_runs"
                                  / f"{_slug(r['plan'])}-run.json").read_text())
                found = rank_imbalance(rec)
                out.append({"copy": f"{folder.parent.name}/{folder.name}/{name}",
                            "plan": r["plan"], "error": r["error"],
                            "imbalance": found[0] if found else None})
    return out


def split(rows: list[dict]) -> dict:
    """The errors of runs with a rank imbalance under :data:`SPLIT` and at or above it."""
    out = {}
    for key, keep in (("even", lambda x: x < SPLIT), ("uneven", lambda x: x >= SPLIT)):
        errs = [r["error"] for r in rows if r["imbalance"] is not None and keep(r["imbalance"])]
        out[key] = {"runs": len(errs), "within_15": sum(abs(e) <= 0.15 for e in errs),
                    "median_error": statistics.median(errs) if errs else None}
    return out


def calibration_spreads(folder: Path) -> dict[str, float]:
    return {cal.name.split("-")[0]: rank_speed_spread(json.loads(cal.read_text())["raw"])
            for cal in sorted(folder.glob("*-calibration.json"))}


def render(s: dict) -> list[str]:
    ex = s["executor"]
    plans = [r["plan"] for r in ex[0]["rows"]]
    within = [c["within_15"] for c in ex]
    lines = [f"## Prediction benchmarks alone on a lent machine's CPU cores, commit {s['commit']} "
             "(`benchmarks/device/prediction_reps.sh`, `benchmarks/device/report_idle.py`)", "",
             f"{s['date']}; {s['cpu']}; raw files and every run's per-rank record in "
             f"`benchmarks/results/{s['dir']}/`. Two calls one after the other, nothing else on "
             "the machine: 3 executor copies at once on 2 physical cores each (6 of 16 cores "
             "busy), then 2 AFD copies at once on 4 cores each (8 of 16). Each copy calibrated "
             "its own cores first; nothing was fitted to these runs.", "",
             f"**Executor prediction** (`executor_prediction.py --repeats 1 --runs 1`), error "
             f"per plan: {', '.join(str(w) for w in within)} of 9 within 15% (14 of 16 cores "
             "busy, `device_prediction_pinned`: 7, 6, 8, 7, 5 and 7):", "",
             "| copy | " + " | ".join(plans) + " | within 15% | Kendall tau | rank spread |",
             "|---|" + "---:|" * len(plans) + "---:|---:|---:|"]
    for c in ex:
        lines.append(f"| {c['copy']} | " + " | ".join(f"{r['error']:+.0%}" for r in c["rows"])
                     + f" | {c['within_15']} of {len(c['rows'])} | {c['kendall_tau']:+.2f} | "
                     f"{s['spreads'][c['copy']]:.2f} |")
    names = [n for n, _ in EXEC_PARTS]
    lines += ["", "By part, median over the copies (check-run's rows; measured ms / predicted ms "
              "(error)):", "", "| plan | " + " | ".join(names) + " |",
              "|---|" + "---:|" * len(names)]
    for p in s["executor_parts"]:
        cells = " | ".join(_cell(p["parts"][n]) if n in p["parts"] else "-" for n in names)
        lines.append(f"| {p['plan']} | {cells} |")
    both = s["imbalance_split"]
    lines += ["", "What the misses have in common: the ranks' cores did not run alike. "
              "\"rank spread\" is each calibration's slowest over fastest rank on the same "
              "kernel cases at the same moment (median over its cases; `planner calibrate` now "
              "warns above 1.25): 1.03 on one pair of cores, 1.5-1.7 on others. Within a run, "
              "the slowest over fastest forward + backward among ranks doing the same work "
              "(`planner check-run` warns above 1.15) went up to 1.40. Over the compared runs of "
              "these 3 copies and the 6 of `device_prediction_pinned` (DP, TP and EP plans; "
              f"pipeline stages do different work): {both['even']['runs']} runs with ranks "
              f"within {SPLIT:g}x of each other, {both['even']['within_15']} within 15% "
              f"(median error {both['even']['median_error']:+.1%}); {both['uneven']['runs']} "
              f"at {SPLIT:g}x or more, {both['uneven']['within_15']} within 15% (median "
              f"{both['uneven']['median_error']:+.1%}). Every DP2-wide miss (-24% to -33%) "
              "had an imbalance of 1.15-1.40; its 'DP all-reduce' is mostly the faster rank "
              "waiting for the slower. The calibration takes each case's median over the "
              "ranks; the slowest rank instead (tried on these 9 copies, refitted) moved the "
              "median error from -3.4% to -3.2% and the copies within 15% from 60 to 57 of 81: "
              "which core is slow changes from minute to minute. A third call (06:45 UTC, "
              "another fresh machine of the same kind) ran `planner calibrate` alone, one "
              "process per core on 2 of 16 cores, nothing else running (other load 0.00 "
              "cores): rank speed spread 1.34; the second rank ran the small GEMMs 1.8x faster "
              "than the first, then the layer cases up to 1.7x slower, then the largest GEMMs "
              "1.5x slower (`alone/cal-12-13.json`; two more, on cores 0-1 and 6-7, were cut at "
              "75 s and wrote nothing). The vCPUs' speeds differ with the machine otherwise "
              "idle.", "",
              "**AFD prediction** (`afd_executor_prediction.py --repeats 3 --quiet-wait 0 "
              "--max-external-cpu 1e9`, no plan shares a core), the median of 3 runs / the "
              "prediction (error):", ""]
    lines += afd_table(s["afd_summary"], s["spreads"])
    lines += ["", "Spread of the runs: " + "; ".join(
        f"{plan} {lo * 1e3:.1f}-{hi * 1e3:.1f} ms" for plan, (lo, hi) in s["afd_spread"].items())
        + " (both copies). In afd2 every plan was within 15%, and the order is right but for "
        "three plans measured within 4% of each other (1A+1F m1 5.00 ms, m2 4.99 ms, 1A+2F "
        "5.19 ms; predicted 4.98, 5.29 and 4.66 ms); in afd1 the calibration (rank spread "
        "1.33) predicted every plan 10-35% faster than its median run but 1A+1F m2."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=RESULTS / "device-h200-idle")
    parser.add_argument("--commit", default="4ace683", help="the commit the copies ran")
    args = parser.parse_args()
    machine = (args.dir / "exec" / "machine.txt").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in machine if ln.startswith("Model name")),
               "?")
    executor = []
    for c in executor_copies(args.dir / "exec"):
        doc = json.loads((args.dir / "exec" / f"{c['copy']}-executor_prediction.json")
                         .read_text())
        tau, wrong = discordant(doc["results"])
        executor.append({**c, "kendall_tau": tau, "pairs_out_of_order": len(wrong)})
    runs = run_imbalances(args.dir / "exec")
    pinned = RESULTS / "device-h200-pinned"
    for batch in ("run1", "run2"):
        runs += run_imbalances(pinned / batch)
    summary = {"dir": args.dir.name, "commit": args.commit, "date": machine[0],
               "cpu": f"{cpu}, 16 cores", "executor": executor,
               "spreads": {**calibration_spreads(args.dir / "exec"),
                           **calibration_spreads(args.dir / "afd")},
               "executor_parts": median_parts(executor_parts(args.dir / "exec"),
                                              [n for n, _ in EXEC_PARTS]),
               "runs": runs, "imbalance_split": split(runs),
               "afd_summary": _afd_summary(args.dir / "afd"),
               "afd_spread": afd_spread([args.dir / "afd"])}
    publish(args.dir, "device_prediction_idle", summary, render(summary))


if __name__ == "__main__":
    main()
