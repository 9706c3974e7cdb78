"""Results of a second run of ``benchmarks/device/prediction_reps.sh`` on a lent GPU machine's
idle CPU cores, at a later commit: the executor- and AFD-prediction benchmarks as copies at once
on disjoint core pairs (``executor-reps``, ``afd-reps``), then one executor copy alone on the
machine (``executor-alone``). Every copy calibrated its own pair first; nothing is fitted here.

Beyond the per-plan errors of :mod:`report_reps`, it reads every run's per-rank record (the
``*-runs.tar.gz`` each copy brought back) and splits the prediction error by part: the
executor's compute, communication and optimizer rows (``check-run``'s rows, kept in each
results JSON) and the AFD job's busy, pack and wait rows
(:func:`planner.run.afd_check_run.compare_afd` against the copy's own calibration).
Writes ``summary.json`` in the folder and the ``device_prediction_rerun`` section of
``docs/benchmarks.md``.
Usage: ``python benchmarks/device/report_rerun.py [--dir DIR]``.
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
from report import publish  # noqa: E402
from report_reps import executor_copies  # noqa: E402

from planner.run.afd_check_run import compare_afd  # noqa: E402
from planner.serving.afd_run_prediction import predict_afd_run  # noqa: E402

# check-run rows of the executor benchmark, grouped into the parts the table shows
EXEC_PARTS = (("compute", ("compute",)), ("TP / EP / DP communication",
                                          ("all-reduce", "all-to-all")),
              ("pipeline wait", ("pipeline wait",)), ("optimizer", ("optimizer",)))
AFD_PARTS = ("attention ranks: busy (attention + pack)",
             "  of which pack (building, posting messages)", "FFN ranks: busy (experts + pack)",
             "  of which pack (posting receives and results)",
             "attention ranks: combine wait (+ send wait)", "FFN ranks: dispatch wait (+ send wait)")


def executor_parts(folder: Path) -> list[dict]:
    """Per copy and plan: predicted and measured seconds per part (summed over the stages'
    rows of that kind; the slowest stage's compute for pipelines)."""
    out = []
    for res in sorted(folder.glob("exec*-executor_prediction.json")):
        doc = json.loads(res.read_text())
        for r in doc["results"]:  # one repetition: its rows are the results'
            parts = {}
            for name, keys in EXEC_PARTS:
                rows = [x for x in r["rows"] if any(k in x["what"] for k in keys)
                        and x["predicted_s"] is not None]
                if not rows:
                    continue
                if name in ("compute", "pipeline wait"):  # the slowest stage's
                    row = max(rows, key=lambda x: x["measured_s"])
                    parts[name] = (row["predicted_s"], row["measured_s"])
                else:
                    parts[name] = (sum(x["predicted_s"] for x in rows),
                                   sum(x["measured_s"] for x in rows))
            out.append({"copy": res.name.split("-")[0], "plan": r["plan"], "parts": parts,
                        "step": (r["predicted_step_s"], r["measured_step_s"])})
    return out


def afd_parts(folder: Path) -> list[dict]:
    """Per copy and plan: the median over its runs of each AFD check-run row, measured and
    predicted (from the copy's own calibration)."""
    out = []
    for tar in sorted(folder.glob("afd*-runs.tar.gz")):
        name = tar.name.split("-")[0]
        cal = json.loads((folder / f"{name}-calibration.json").read_text())
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(tar) as t:
                t.extractall(tmp, filter="data")
            by_plan: dict[str, list[dict]] = {}
            for rec_path in sorted(Path(tmp).rglob("*-run[0-9]*.json")):
                rec = json.loads(rec_path.read_text())
                rows = {r.what: r for r in compare_afd(rec, predict_afd_run(rec, cal))}
                cfg, shape = rec["config"], rec["shape"]
                plan = (f"{cfg['attention_gpus']}A+{cfg['ffn_gpus']}F, "
                        f"m{shape['micro_batches']}")
                by_plan.setdefault(plan, []).append(rows)
        for plan, runs in by_plan.items():
            parts = {}
            for what in ("step", *AFD_PARTS):
                parts[what] = (statistics.median(r[what].predicted_s for r in runs),
                               statistics.median(r[what].measured_s for r in runs))
            out.append({"copy": name, "plan": plan, "runs": len(runs), "parts": parts})
    return out


def _cell(pair: tuple[float, float], scale: float = 1e3) -> str:
    pred, meas = pair
    return f"{meas * scale:.1f} / {pred * scale:.1f} ({pred / meas - 1:+.0%})" if meas else "-"


def render(s: dict) -> list[str]:
    lines = [f"## Prediction benchmarks again on a lent machine's idle CPU cores, commit "
             f"{s['commit']} (`benchmarks/device/prediction_reps.sh`, "
             "`benchmarks/device/report_rerun.py`)", "",
             f"{s['date']}; {s['cpu']}; raw files and every run's per-rank record in "
             f"`benchmarks/results/{s['dir']}/`. First {len(s['executor'])} executor copies and "
             f"{len({a['copy'] for a in s['afd']})} AFD copies at once, each on its own pair of "
             "physical cores (10 of 16 busy); then one executor copy alone on the machine "
             "(2 of 16 busy). Each copy calibrated its own pair first. No GPU work: the GPU "
             "calibration of the first session (above) was not repeated.", ""]
    plans = [r["plan"] for r in s["executor"][0]["rows"]]
    lines += ["**Executor prediction**, error per plan (`executor_prediction.py --repeats 1`):",
              "", "| copy | " + " | ".join(plans) + " | within 15% |",
              "|---|" + "---:|" * len(plans) + "---:|"]
    for c in [*s["executor"], *s["alone"]]:
        label = c["copy"] + (" (alone)" if c in s["alone"] else "")
        lines.append(f"| {label} | " + " | ".join(f"{r['error']:+.0%}" for r in c["rows"])
                     + f" | {c['within_15']} of {len(c['rows'])} |")
    names = [n for n, _ in EXEC_PARTS]
    lines += ["", "The copy alone, by part (check-run's rows; compute and pipeline wait of the "
              "slowest stage; measured ms / predicted ms (error)):", "",
              "| plan | step | " + " | ".join(names) + " |",
              "|---|---:|" + "---:|" * len(names)]
    for p in s["alone_parts"]:
        cells = " | ".join(_cell(p["parts"][n]) if n in p["parts"] else "-" for n in names)
        lines.append(f"| {p['plan']} | {_cell(p['step'])} | {cells} |")
    lines += ["", "**AFD prediction** (`afd_executor_prediction.py --repeats 3`, 3 runs of every "
              "plan), error of the prediction against the median of the runs:", "",
              "| copy | " + " | ".join(r["plan"] for r in s["afd_summary"][0]["rows"])
              + " | within 15% | same ranking |",
              "|---|" + "---:|" * len(s["afd_summary"][0]["rows"]) + "---:|---|"]
    for c in s["afd_summary"]:
        lines.append(f"| {c['copy']} | " + " | ".join(
            f"{r['measured_s'] * 1e3:.1f} ms / {r['predicted_s'] * 1e3:.1f} ({r['error']:+.0%})"
            for r in c["rows"]) + f" | {c['within_15']} of {len(c['rows'])} | "
            f"{'yes' if c['same_ranking'] else 'no'} |")
    short = ["step", "attention busy", "attention pack", "FFN busy", "FFN pack",
             "attention wait", "FFN wait"]
    lines += ["", "By part, median over each plan's runs (measured ms / predicted ms (error), "
              "per step):", "", "| copy | plan | " + " | ".join(short) + " |",
              "|---|---|" + "---:|" * len(short)]
    for p in s["afd"]:
        cells = " | ".join(_cell(p["parts"][w]) for w in ("step", *AFD_PARTS))
        lines.append(f"| {p['copy']} | {p['plan']} | {cells} |")
    return lines


def _afd_summary(folder: Path) -> list[dict]:
    out = []
    for res in sorted(folder.glob("afd*-afd_executor_prediction.json")):
        doc = json.loads(res.read_text())
        rows = [{"plan": r["plan"], "measured_s": r["measured_step_s"],
                 "predicted_s": r["predicted_step_s"], "error": r["error"]}
                for r in doc["results"]]
        out.append({"copy": res.name.split("-")[0], "rows": rows,
                    "within_15": doc["summary"]["within_15_percent"],
                    "same_ranking": doc["summary"]["same_ranking"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path,
                        default=ROOT / "benchmarks" / "results" / "device-h100-rerun")
    parser.add_argument("--commit", default="870105e", help="the commit the copies ran")
    args = parser.parse_args()
    machine = (args.dir / "machine.txt").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in machine if ln.startswith("Model name")),
               "?")
    summary = {"dir": args.dir.name, "commit": args.commit, "date": machine[0],
               "cpu": f"{cpu}, 16 cores",
               "executor": executor_copies(args.dir / "executor-reps"),
               "alone": executor_copies(args.dir / "executor-alone"),
               "alone_parts": executor_parts(args.dir / "executor-alone"),
               "afd_summary": _afd_summary(args.dir / "afd-reps"),
               "afd": afd_parts(args.dir / "afd-reps")}
    publish(args.dir, "device_prediction_rerun", summary, render(summary))


if __name__ == "__main__":
    main()
