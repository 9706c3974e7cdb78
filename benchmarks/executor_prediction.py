"""Predicted against measured step time of the reference job on this machine (issue: thin
executor and calibration).

Commands it runs, in order (all through the ``planner`` CLI, as a user would):

1. ``planner calibrate --out benchmarks/results/calibration-local.json`` (one process per
   core, gloo);
2. for each plan below: ``planner solve --cluster <the calibrated machine> --calibration ...
   --model benchmarks/data/reference-gpt.yaml --precision fp32 --optimizer sgd
   --global-batch 8 --seq-len 128 <degrees> --schedule 1f1b --out PLAN``;
3. ``planner launch PLAN --record RUN --script-arg=--size --script-arg=plan
   --script-arg=--steps --script-arg=6``;
4. ``planner check-run RUN --calibration ... --format json``.

Every plan trains the same model on the same global batch (8 sequences of 128 tokens), so their
step times rank them. The plans are fixed here, before any measurement. Writes
``benchmarks/results/executor_prediction.json`` and the ``executor_prediction`` section of
``docs/benchmarks.md``. Usage: ``python benchmarks/executor_prediction.py [--skip-calibrate]``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_tables import update_section  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
CAL = RESULTS / "calibration-local.json"
MACHINE = RESULTS / "calibration-local.cluster.yaml"
MODEL = ROOT / "benchmarks" / "data" / "reference-gpt.yaml"
PLANS = {  # name -> solve options (2 processes: the machine's cores)
    "DP2, micro-batch 1": ["--tp", "1", "--pp", "1", "--micro-batch", "1"],
    "DP2, micro-batch 4": ["--tp", "1", "--pp", "1", "--micro-batch", "4"],
    "PP2, micro-batch 1": ["--tp", "1", "--pp", "2", "--micro-batch", "1"],
    "PP2, micro-batch 4": ["--tp", "1", "--pp", "2", "--micro-batch", "4"],
    "TP2, micro-batch 1": ["--tp", "2", "--pp", "1", "--micro-batch", "1"],
}
STEPS = 6
LIMITS = [
    "What limits the accuracy (from `check-run` of these runs and repeated single-process "
    "timings):",
    "",
    "* Compute: one process alone, the calibrated model predicts a 128-token layer's forward + "
    "backward within 6% (8.95 ms against 9.5 ms); inside the 2-process jobs the same compute "
    "takes 20-40% longer. Two plain processes running that layer side by side did not "
    "slow down, so the cause is inside the job (gloo's threads, allocation, the schedule "
    "loop) and is not pinned down yet. The same "
    "single-process measurement also moved from 9.5 ms to 12.3 ms between two runs minutes "
    "apart: this VM's speed drifts by about 25%.",
    "* Collectives: gloo is fitted with one latency and bandwidth per collective over 1 KiB to "
    "16 MiB, which under-predicts large all-reduces (13.6 MB gradient bucket: 11 ms predicted, "
    "40 ms measured); TP all-reduces in the job also wait for the other rank (skew), which the "
    "model does not cost.",
    "* The optimizer step streams all weights from DRAM; the bandwidth is fitted on cache-sized "
    "copies (1-16 MiB), so it is predicted 3-4x too fast (2 ms of a 200 ms step).",
]


def planner(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "planner", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_plan(name: str, options: list[str], work: Path) -> dict:
    slug = name.lower().replace(", ", "-").replace(" ", "")
    plan, record = work / f"{slug}.json", work / f"{slug}-run.json"
    planner("solve", "--cluster", str(MACHINE), "--calibration", str(CAL), "--model", str(MODEL),
            "--precision", "fp32", "--optimizer", "sgd", "--global-batch", "8", "--seq-len",
            "128", *options, "--schedule", "1f1b", "--top-k", "1", "--out", str(plan))
    start = time.monotonic()
    planner("launch", str(plan), "--record", str(record), "--script-arg=--size",
            "--script-arg=plan", f"--script-arg=--steps", f"--script-arg={STEPS}")
    wall = time.monotonic() - start
    rows = json.loads(planner("check-run", str(record), "--calibration", str(CAL),
                              "--format", "json").stdout)
    run = json.loads(record.read_text())
    step = next(r for r in rows if r["what"] == "step")
    return {"plan": name, "options": options, "config": run["config"],
            "predicted_step_s": step["predicted_s"], "measured_step_s": step["measured_s"],
            "error": step["error"], "step_times_max_s": run["step_times_max_s"],
            "launch_wall_s": wall, "rows": rows}


def _ranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0] * len(values)
    for r, i in enumerate(order):
        out[i] = r + 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-calibrate", action="store_true",
                        help="reuse benchmarks/results/calibration-local.json")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.skip_calibrate:
        start = time.monotonic()
        planner("calibrate", "--out", str(CAL), "--cluster-out", str(MACHINE))
        print(f"calibrated in {time.monotonic() - start:.0f} s", flush=True)
    cal = json.loads(CAL.read_text())
    work = RESULTS / "executor_prediction_runs"
    work.mkdir(exist_ok=True)
    results = []
    for name, options in PLANS.items():
        res = run_plan(name, options, work)
        print(f"{name}: predicted {res['predicted_step_s']:.4f} s, measured "
              f"{res['measured_step_s']:.4f} s ({res['error']:+.1%})", flush=True)
        results.append(res)
    pred_rank = _ranks([r["predicted_step_s"] for r in results])
    meas_rank = _ranks([r["measured_step_s"] for r in results])
    for r, p, m in zip(results, pred_rank, meas_rank):
        r["predicted_rank"], r["measured_rank"] = p, m
    worst = max(abs(r["error"]) for r in results)
    summary = {"plans": len(results), "worst_abs_error": worst,
               "within_15_percent": sum(abs(r["error"]) <= 0.15 for r in results),
               "same_ranking": pred_rank == meas_rank}
    out = {"machine": cal["machine"], "profile": cal["profile"],
           "cluster": cal["cluster"], "summary": summary, "results": results,
           "cpu_count": os.cpu_count()}
    (RESULTS / "executor_prediction.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [
        "## Reference job: predicted vs measured step time (`benchmarks/executor_prediction.py`)",
        "",
        f"Machine: {cal['machine']['device']}, {os.cpu_count()} cores; {cal['machine']['world_size']}"
        f" gloo processes of {cal['machine']['threads']} thread(s); torch {cal['machine']['torch']}. "
        "Model `benchmarks/data/reference-gpt.yaml` (4 layers, hidden 256, fp32, SGD), "
        f"global batch 8 x 128 tokens, {STEPS} steps, median of steps 2..{STEPS}. Profile fitted "
        "by `planner calibrate` alone (no fitting to the runs).",
        "",
        "| plan | predicted s | measured s | error | rank predicted | rank measured |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(f"| {r['plan']} | {r['predicted_step_s']:.4f} | {r['measured_step_s']:.4f} "
                     f"| {r['error']:+.1%} | {r['predicted_rank']} | {r['measured_rank']} |")
    lines += ["", f"Within 15%: {summary['within_15_percent']} of {len(results)} plans (worst "
              f"{worst:.1%}); same ranking: {'yes' if summary['same_ranking'] else 'no'}.", ""]
    lines.append("Per-part comparison of each run: `planner check-run "
                 "benchmarks/results/executor_prediction_runs/<plan>-run.json --calibration "
                 "benchmarks/results/calibration-local.json`.")
    lines += ["", *LIMITS]
    update_section("executor_prediction", lines)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
