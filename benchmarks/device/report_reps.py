"""Results of ``benchmarks/device/prediction_reps.sh`` (a GPU machine's session: ``planner
calibrate --backend nccl`` on its GPU, then the executor- and AFD-prediction benchmarks as
independent copies at once on disjoint pairs of its idle CPU cores).

Reads ``benchmarks/results/device-<gpu>/``: ``calibration-nccl.json`` (kernels against the
shipped profile, as :mod:`report` does for the H200 session), ``executor-reps/exec*`` (each
copy's results JSON, calibration and log) and ``afd-reps/afd*`` (each copy's log and
calibration: the per-run lines are parsed from the log, since a copy cut at its time limit
writes no JSON). Nothing is fitted. Writes ``summary.json`` there and the
``device_prediction_reps`` section of ``docs/benchmarks.md``.
Usage: ``python benchmarks/device/report_reps.py [--dir DIR] [--gpu NAME]``.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(HERE))
from report import kernel_table, kernels, publish  # noqa: E402

AFD_RUN = re.compile(r"run \d+/\d+ (?P<plan>.+?): measured (?P<measured>[\d.]+) s, "
                     r"predicted (?P<predicted>[\d.]+) s")


def _ranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0] * len(values)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return ranks


def executor_copies(folder: Path) -> list[dict]:
    """Per copy: each plan's error, and what its calibration says of conditions and fit."""
    out = []
    for res in sorted(folder.glob("exec*-executor_prediction.json")):
        name = res.name.split("-")[0]
        doc = json.loads(res.read_text())
        rows = [{"plan": r["plan"], "predicted_s": r["predicted_step_s"],
                 "measured_s": r["measured_step_s"], "error": r["error"]}
                for r in doc["repetitions"][-1]["results"]]
        cal = json.loads((folder / f"{name}-calibration.json").read_text())
        out.append({"copy": name, "rows": rows,
                    "within_15": sum(abs(r["error"]) <= 0.15 for r in rows),
                    "same_ranking": doc["summary"]["same_ranking"],
                    "cores": cal["conditions"]["cores"],
                    "other_load_cores": cal["conditions"]["other_load_cores"],
                    "hbm_efficiency": cal["profile"]["hbm_efficiency"],
                    "fit_median_residual": cal["quality"]["median_abs_residual"]})
    return out


def afd_copies(folder: Path) -> list[dict]:
    """Per copy: each plan's runs (from the log), their median, the prediction (one per plan:
    it depends on the calibration only) and the error of the prediction against the median."""
    out = []
    for log in sorted(folder.glob("afd[0-9]*.log")):
        runs: dict[str, list[float]] = {}
        predicted: dict[str, float] = {}
        for line in log.read_text().splitlines():
            m = AFD_RUN.match(line)
            if m:
                runs.setdefault(m["plan"], []).append(float(m["measured"]))
                predicted[m["plan"]] = float(m["predicted"])
        rows = []
        for plan, values in runs.items():
            med = statistics.median(values)
            rows.append({"plan": plan, "runs": len(values), "measured_s": med,
                         "spread": (max(values) - min(values)) / med,
                         "predicted_s": predicted[plan], "error": predicted[plan] / med - 1})
        cal = json.loads((folder / f"{log.stem}-calibration.json").read_text())
        same = (_ranks([r["measured_s"] for r in rows])
                == _ranks([r["predicted_s"] for r in rows]))
        out.append({"copy": log.stem, "rows": rows, "same_ranking": same,
                    "within_15": sum(abs(r["error"]) <= 0.15 for r in rows),
                    "p2p_latency_s": cal["profile"]["p2p_latency_s"],
                    "resume_s": cal["profile"]["resume_s"],
                    "other_load_cores": cal["conditions"]["other_load_cores"]})
    return out


def render(s: dict) -> list[str]:
    m, sh = s["measured"], s["shipped"]
    lines = [f"## GPU session on {s['gpu']}: kernels, and the prediction benchmarks on its idle "
             "CPU cores (`benchmarks/device/prediction_reps.sh`, "
             "`benchmarks/device/report_reps.py`)", "",
             f"{s['date']}; raw files in `benchmarks/results/{s['dir']}/`. `planner calibrate "
             "--backend nccl`, one process, alone on the machine; each kernel class as a fraction "
             f"of the catalog's peak ({s['catalog']['bf16_tflops_dense']:g} bf16 TFLOP/s, "
             f"{s['catalog']['hbm_bw_GBps']:g} GB/s) next to what the shipped profile assumes. "
             "Nothing was refitted from it.", "", *kernel_table(m, sh)]
    ex = s["executor"]
    if ex:
        plans = [r["plan"] for r in ex[0]["rows"]]
        lines += ["", f"**Executor prediction** (`benchmarks/executor_prediction.py --repeats 1`, "
                  f"gloo): {len(ex)} copies at once, each pinned to its own pair of physical "
                  "cores and calibrating that pair first (so each calibration and run had the "
                  "other copies beside it: calibrate measured the other load below). Error of "
                  "the prediction per plan:", "",
                  "| copy | " + " | ".join(plans) + " | within 15% | same ranking | other load "
                  "(cores) | hbm_efficiency | fit median residual |",
                  "|---|" + "---:|" * len(plans) + "---:|---|---:|---:|---:|"]
        for c in ex:
            errs = " | ".join(f"{r['error']:+.0%}" for r in c["rows"])
            lines.append(f"| {c['copy']} | {errs} | {c['within_15']} of {len(c['rows'])} | "
                         f"{'yes' if c['same_ranking'] else 'no'} | {c['other_load_cores']:.1f} "
                         f"| {c['hbm_efficiency']:.2f} | {c['fit_median_residual']:.0%} |")
    afd = s["afd"]
    if afd:
        plans = [r["plan"] for r in afd[0]["rows"]]
        lines += ["", "**AFD prediction** (`benchmarks/afd_executor_prediction.py --repeats 3 "
                  "--quiet-wait 0 --max-external-cpu 1e9`, gloo, 2 cores each, so the 3-process "
                  f"plans time-share them): {len(afd)} copies at once, each cut at 300 s, so a plan "
                  "has 2-3 runs. Predicted against the median of its runs:", "",
                  "| copy | " + " | ".join(plans) + " | within 15% | same ranking | "
                  "p2p_latency_s | resume_s |",
                  "|---|" + "---:|" * len(plans) + "---:|---|---:|---:|"]
        for c in afd:
            cells = " | ".join(f"{r['measured_s'] * 1e3:.1f} ms / {r['predicted_s'] * 1e3:.1f} "
                               f"({r['error']:+.0%})" for r in c["rows"])
            lines.append(f"| {c['copy']} | {cells} | {c['within_15']} of {len(c['rows'])} | "
                         f"{'yes' if c['same_ranking'] else 'no'} | "
                         f"{c['p2p_latency_s'] * 1e3:.2f} ms | {c['resume_s'] * 1e3:.2f} ms |")
        def growth(plan: str) -> str:
            ratios = [by[plan] / by["1A+1F, m1"] for c in afd
                      for by in [{r["plan"]: r["measured_s"] for r in c["rows"]}]]
            return f"{min(ratios):.1f}-{max(ratios):.1f}x"

        lines += ["", "Cells: measured median / predicted (error). On this Xeon the measured "
                  f"step grows with the micro-batch count (1A+1F: m2 {growth('1A+1F, m2')} m1, "
                  f"m4 {growth('1A+1F, m4')}), where the prediction has the two stages overlap "
                  "and m2 cost about what m1 costs: the per-micro-batch cost that the overlap "
                  "does not hide is larger here than on the project's 2-core box (the "
                  "`afd_executor_prediction` section). The runs' per-rank records did not come "
                  "back (only the logs), so which part of a micro-batch (message posting, the "
                  "FFN's expert loop) it is, is not known. The first try ran the AFD job on NCCL "
                  "with two ranks on the one GPU and failed (`afd-reps/first-try-nccl-backend."
                  "log`): the job now picks NCCL only when every process has a GPU of its own, "
                  "and the benchmark asks for gloo."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path,
                        default=ROOT / "benchmarks" / "results" / "device-h100")
    parser.add_argument("--gpu", default="H100", help="catalog name of the GPU measured")
    args = parser.parse_args()
    doc = json.loads((args.dir / "calibration-nccl.json").read_text())
    summary = {"dir": args.dir.name, "gpu": doc["machine"]["device"],
               "date": (args.dir / "machine.txt").read_text().split("\n")[0],
               **kernels(doc, args.gpu),
               "executor": executor_copies(args.dir / "executor-reps"),
               "afd": afd_copies(args.dir / "afd-reps")}
    publish(args.dir, "device_prediction_reps", summary, render(summary))


if __name__ == "__main__":
    main()
