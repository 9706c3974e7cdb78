"""Results of two batches of ``benchmarks/device/prediction_reps.sh`` on a lent GPU machine
(2026-11-28, commit d4d7595: ranks pinned to cores, calibrate's layer stack, the resume term),
one after the other: ``planner calibrate --backend nccl`` on its GPU (first batch only), then
3 executor-benchmark copies on 2 cores each and 2 AFD-benchmark copies on 4 cores each, at once
on disjoint physical cores (14 of 16 busy). With 4 cores an AFD copy gives each rank of its
3-process plans a core, which the project's 2-core box cannot.

Reads ``benchmarks/results/device-h200-pinned/run1`` and ``run2`` (each copy's results JSON,
calibration, log and per-rank records, as the script brought them back). Nothing is fitted:
every prediction is the copy's own, from its own calibration. Writes ``summary.json`` in the
folder and the ``device_prediction_pinned`` section of ``docs/benchmarks.md``.
Usage: ``python benchmarks/device/report_pinned.py [--dir DIR]``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(HERE))
from executor_prediction import discordant  # noqa: E402
from report import kernel_table, kernels, publish  # noqa: E402
from report_rerun import (AFD_PARTS, EXEC_PARTS, _afd_summary, _cell, afd_parts,  # noqa: E402
                          executor_parts)
from report_reps import executor_copies  # noqa: E402

BATCHES = ("run1", "run2")
# the project's device sections before ranks were pinned (same script, same kind of Xeon)
BEFORE = ("`device_prediction_reps` (4, 3 and 6 of 9 within 15%) and "
          "`device_prediction_rerun` (5, 2, 5 and, alone on the machine, 5 of 9)")


def executor_batches(folder: Path) -> list[dict]:
    """Every executor copy of every batch: its errors, Kendall tau and calibration."""
    out = []
    for batch in BATCHES:
        for c in executor_copies(folder / batch):
            doc = json.loads((folder / batch / f"{c['copy']}-executor_prediction.json")
                             .read_text())
            tau, wrong = discordant(doc["results"])
            out.append({**c, "copy": f"{batch}/{c['copy']}", "kendall_tau": tau,
                        "pairs_out_of_order": len(wrong)})
    return out


def median_parts(rows: list[dict], names: list[str]) -> list[dict]:
    """Per plan, the median over copies of each part's (predicted, measured) seconds."""
    by_plan: dict[str, list[dict]] = {}
    for r in rows:
        by_plan.setdefault(r["plan"], []).append(r)
    out = []
    for plan, copies in by_plan.items():
        parts = {}
        for name in names:
            have = [c["parts"][name] for c in copies if name in c["parts"]]
            if have:
                parts[name] = (statistics.median(p for p, _ in have),
                               statistics.median(m for _, m in have))
        out.append({"plan": plan, "copies": len(copies), "parts": parts})
    return out


def render(s: dict) -> list[str]:
    m, sh = s["measured"], s["shipped"]
    ex = s["executor"]
    plans = [r["plan"] for r in ex[0]["rows"]]
    within = [c["within_15"] for c in ex]
    lines = [f"## GPU session on {s['gpu']} with ranks pinned to cores, commit {s['commit']} "
             "(`benchmarks/device/prediction_reps.sh`, `benchmarks/device/report_pinned.py`)", "",
             f"{s['date']}; {s['cpu']}; raw files and every run's per-rank record in "
             f"`benchmarks/results/{s['dir']}/`. Two batches one after the other, each: 3 "
             "executor copies on 2 physical cores each and 2 AFD copies on 4 cores each, all at "
             "once (14 of 16 cores busy), each calibrating its own cores first. Nothing was "
             "fitted to these runs.", "",
             "`planner calibrate --backend nccl` (first batch, one process, alone on the "
             "machine), each kernel class as a fraction of the catalog's peak "
             f"({s['catalog']['bf16_tflops_dense']:g} bf16 TFLOP/s, "
             f"{s['catalog']['hbm_bw_GBps']:g} GB/s) next to the shipped profile:", "",
             *kernel_table(m, sh), "",
             f"**Executor prediction** (`executor_prediction.py --repeats 1`), error per plan; "
             f"{min(within)}-{max(within)} of 9 within 15% in the {len(ex)} copies (median "
             f"{statistics.median(within):g}), against {BEFORE} before ranks were pinned on the "
             "same machine type:", "",
             "| copy | " + " | ".join(plans) + " | within 15% | Kendall tau |",
             "|---|" + "---:|" * len(plans) + "---:|---:|"]
    for c in ex:
        lines.append(f"| {c['copy']} | " + " | ".join(f"{r['error']:+.0%}" for r in c["rows"])
                     + f" | {c['within_15']} of {len(c['rows'])} | {c['kendall_tau']:+.2f} |")
    names = [n for n, _ in EXEC_PARTS]
    lines += ["", "By part, median over the copies (check-run's rows; compute and pipeline wait "
              "of the slowest stage; measured ms / predicted ms (error)):", "",
              "| plan | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for p in s["executor_parts"]:
        cells = " | ".join(_cell(p["parts"][n]) if n in p["parts"] else "-" for n in names)
        lines.append(f"| {p['plan']} | {cells} |")
    afd = s["afd_summary"]
    lines += ["", "**AFD prediction** (`afd_executor_prediction.py --repeats 3 --quiet-wait 0 "
              "--max-external-cpu 1e9`, 4 cores each: no plan shares a core), the median of 3 "
              "runs / the prediction (error):", "", *afd_table(afd)]
    lines += ["", "Spread of the runs: " + "; ".join(
        f"{plan} {lo * 1e3:.1f}-{hi * 1e3:.1f} ms" for plan, (lo, hi) in s["afd_spread"].items())
        + " (every run of every copy). The five plans' medians lie within this spread of each "
        "other, so their measured order changes from copy to copy.", "",
        "AFD by part, the median over copies of each copy's median run (measured ms / "
        "predicted ms (error), per step):", "", "| plan | step | attention busy | attention pack | FFN busy | FFN pack | "
        "attention wait | FFN wait |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in s["afd_parts"]:
        cells = " | ".join(_cell(p["parts"][w]) for w in ("step", *AFD_PARTS))
        lines.append(f"| {p['plan']} | {cells} |")
    return lines


def afd_table(copies: list[dict], spreads: dict[str, float] | None = None) -> list[str]:
    """The AFD copies' table: per plan the median run / the prediction (error), then within
    15% and same ranking, and each copy's calibration rank speed spread where ``spreads``
    (copy -> spread) is given."""
    extra = spreads is not None
    lines = ["| copy | " + " | ".join(r["plan"] for r in copies[0]["rows"])
             + " | within 15% | same ranking |" + (" rank spread |" if extra else ""),
             "|---|" + "---:|" * len(copies[0]["rows"]) + "---:|---|" + ("---:|" if extra else "")]
    for c in copies:
        lines.append(f"| {c['copy']} | " + " | ".join(
            f"{r['measured_s'] * 1e3:.2f} ms / {r['predicted_s'] * 1e3:.2f} ({r['error']:+.0%})"
            for r in c["rows"]) + f" | {c['within_15']} of {len(c['rows'])} | "
            f"{'yes' if c['same_ranking'] else 'no'} |"
            + (f" {spreads[c['copy']]:.2f} |" if extra else ""))
    return lines


def afd_spread(folders: list[Path]) -> dict[str, tuple[float, float]]:
    """Per AFD plan, the fastest and slowest measured run over every copy in ``folders``."""
    runs: dict[str, list[float]] = {}
    for folder in folders:
        for res in sorted(folder.glob("afd*-afd_executor_prediction.json")):
            for plan, rs in json.loads(res.read_text())["runs"].items():
                runs.setdefault(plan, []).extend(r["measured_step_s"] for r in rs)
    return {plan: (min(v), max(v)) for plan, v in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path,
                        default=ROOT / "benchmarks" / "results" / "device-h200-pinned")
    parser.add_argument("--gpu", default="H200", help="catalog name of the GPU measured")
    parser.add_argument("--commit", default="d4d7595", help="the commit the copies ran")
    args = parser.parse_args()
    first = args.dir / BATCHES[0]
    machine = (first / "machine.txt").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in machine if ln.startswith("Model name")),
               "?")
    doc = json.loads((first / "calibration-nccl.json").read_text())
    afd = [{**c, "copy": f"{b}/{c['copy']}"} for b in BATCHES
           for c in _afd_summary(args.dir / b)]
    afd_rows = [r for b in BATCHES for r in afd_parts(args.dir / b)]
    summary = {"dir": args.dir.name, "commit": args.commit, "date": machine[0],
               "gpu": doc["machine"]["device"], "cpu": f"{cpu}, 16 cores",
               **kernels(doc, args.gpu),
               "executor": executor_batches(args.dir),
               "executor_parts": median_parts(
                   [r for b in BATCHES for r in executor_parts(args.dir / b)],
                   [n for n, _ in EXEC_PARTS]),
               "afd_summary": afd, "afd_spread": afd_spread([args.dir / b for b in BATCHES]),
               "afd_parts": median_parts(afd_rows, ["step", *AFD_PARTS])}
    publish(args.dir, "device_prediction_pinned", summary, render(summary))


if __name__ == "__main__":
    main()
