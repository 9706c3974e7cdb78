"""Predicted against measured step time of the reference job on a GPU (NCCL, bf16), after
``planner calibrate --backend nccl`` on the same GPU (issues: an executor you can trust, its
NCCL path).

Run on a machine with CUDA GPUs (the lent device machine: ``benchmarks/device/gpu_jobs.sh``).
Commands it runs, in order, all through the ``planner`` CLI as a user would:

1. ``planner calibrate --backend nccl --nproc 1 --out DIR/calibration-nccl.json`` (GEMM,
   FlashAttention, transformer blocks, HBM copies in bf16; its cluster file beside it);
2. for each plan below: ``planner solve --cluster <the calibrated machine> --calibration ...
   --model <a GPU-sized reference GPT> --precision bf16 --optimizer sgd --global-batch G
   --seq-len S --tp 1 --pp 1 --micro-batch M --schedule 1f1b --out PLAN``;
3. ``planner launch PLAN --record RUN`` with the job options ``--size plan --steps 6 --device
   cuda`` (the reference job on the GPU in bf16, timed with the device synchronised at each
   section's edges);
4. ``planner check-run RUN --calibration ... --format json``.

The plans are fixed here, before any measurement. One model trains one global batch at four
micro-batch sizes (their order is the ranking checked); three more train shapes the
calibration never measured: a wide model, a long sequence and a model so small that the GPU
waits on kernel launches. Every plan is launched ``--runs`` times, round robin, and its median
run compared. Results go to ``DIR/gpu_executor_prediction.json`` after every plan (a run cut
short keeps what it measured); ``--render FILE`` writes the ``gpu_executor_prediction``
section of ``docs/benchmarks.md`` from such a file. With one GPU only one-GPU plans run: NCCL
refuses two ranks on one GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_tables import update_section  # noqa: E402
from executor_prediction import (_ranks, discordant, median_of, planner, run_plan,  # noqa: E402
                                 slug)

DATA = ROOT / "benchmarks" / "data"
GPT = DATA / "reference-gpt-gpu.yaml"
WIDE = DATA / "reference-gpt-gpu-wide.yaml"
SMALL = DATA / "reference-gpt-gpu-small.yaml"
STEPS = 6
SWEEP = "h2048 x 8 layers, s2048, batch 8"
# name -> (model, sequence length, global batch, micro-batch); one GPU each
PLANS = {
    f"{SWEEP}, micro-batch 1": (GPT, 2048, 8, 1),
    f"{SWEEP}, micro-batch 2": (GPT, 2048, 8, 2),
    f"{SWEEP}, micro-batch 4": (GPT, 2048, 8, 4),
    f"{SWEEP}, micro-batch 8": (GPT, 2048, 8, 8),
    "wide: h4096 x 4 layers, s1024, batch 8, micro-batch 2": (WIDE, 1024, 8, 2),
    "long: h2048 x 8 layers, s8192, batch 2, micro-batch 1": (GPT, 8192, 2, 1),
    "small: h512 x 8 layers, s512, batch 16, micro-batch 2": (SMALL, 512, 16, 2),
}
# --smoke: the script's plumbing on a machine without a GPU (tiny plans, gloo, the CPU)
SMOKE_PLANS = {f"{SWEEP}, micro-batch 1": (SMALL, 64, 2, 1), "small: smoke": (SMALL, 64, 2, 2)}


def plan_file(name: str, spec: tuple, cal: Path, machine: Path, work: Path,
              precision: str = "bf16") -> Path:
    model, seq_len, batch, micro = spec
    plan = work / f"{slug(name)[:60]}.json"
    planner("solve", "--cluster", str(machine), "--calibration", str(cal), "--model", str(model),
            "--precision", precision, "--optimizer", "sgd", "--global-batch", str(batch),
            "--seq-len", str(seq_len), "--tp", "1", "--pp", "1", "--micro-batch", str(micro),
            "--schedule", "1f1b", "--top-k", "1", "--out", str(plan))
    return plan


def summarise(results: list[dict]) -> dict:
    """Within 15%, the worst error, and the micro-batch sweep's order (predicted vs measured)."""
    sweep = [r for r in results if r["plan"].startswith(SWEEP)]
    tau, wrong = discordant(sweep) if len(sweep) > 1 else (None, [])
    return {"plans": len(results),
            "within_15_percent": sum(abs(r["error"]) <= 0.15 for r in results),
            "worst_abs_error": max((abs(r["error"]) for r in results), default=None),
            "sweep_kendall_tau": tau, "sweep_wrong_pairs": wrong,
            "sweep_same_ranking": (_ranks([r["predicted_step_s"] for r in sweep])
                                   == _ranks([r["measured_step_s"] for r in sweep]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu",
                        help="folder for the calibration, plans, runs and results")
    parser.add_argument("--runs", type=int, default=2, help="launches of every plan")
    parser.add_argument("--skip-calibrate", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny plans on the CPU (gloo): checks the script without a GPU")
    parser.add_argument("--render", type=Path, default=None, metavar="RESULTS_JSON",
                        help="write the docs section from this results file; run nothing")
    args = parser.parse_args()
    if args.render is not None:
        update_section("gpu_executor_prediction", render(json.loads(args.render.read_text())))
        return
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    cal, machine = out / "calibration-nccl.json", out / "calibration-nccl.cluster.yaml"
    device, plans = ("cpu", SMOKE_PLANS) if args.smoke else ("cuda", PLANS)
    if not args.skip_calibrate:
        start = time.monotonic()
        planner("calibrate", "--backend", "gloo" if args.smoke else "nccl", "--nproc", "1",
                *(["--quick"] if args.smoke else []), "--out", str(cal),
                "--cluster-out", str(machine))
        print(f"calibrated in {time.monotonic() - start:.0f} s", flush=True)
    files = {name: plan_file(name, spec, cal, machine, out, "fp32" if args.smoke else "bf16")
             for name, spec in plans.items()}
    done: dict[str, list[dict]] = {name: [] for name in plans}
    calibration, results = json.loads(cal.read_text()), []
    for k in range(args.runs):
        for name, plan in files.items():
            try:
                res = run_plan(name, plan, plan.with_name(f"{plan.stem}-run{k}.json"), cal,
                               device, STEPS)
            except SystemExit as err:  # keep what was measured; say what failed
                print(str(err)[-2000:], flush=True)
                continue
            done[name].append(res)
            print(f"{name} (run {k + 1} of {args.runs}): predicted "
                  f"{res['predicted_step_s']:.4f} s, measured {res['measured_step_s']:.4f} s "
                  f"({res['error']:+.1%})", flush=True)
            results = [{"model": plans[n][0].name, "seq_len": plans[n][1],
                        "global_batch": plans[n][2], "micro_batch": plans[n][3],
                        **median_of(done[n])}
                       for n in plans if done[n]]
            doc = {"machine": calibration.get("machine"),
                   "conditions": calibration.get("conditions"),
                   "quality": calibration.get("quality"), "profile": calibration["profile"],
                   "runs": args.runs, "steps": STEPS, "summary": summarise(results),
                   "results": results}
            (out / "gpu_executor_prediction.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summarise(results), indent=1))


def render(doc: dict) -> list[str]:
    """The docs section: one row per plan, the calibration's machine and the sweep's order."""
    s = doc["summary"]
    env = doc["results"][0]["environment"] if doc["results"] else {}
    lines = [f"`python benchmarks/gpu_executor_prediction.py` on {env.get('device_name', '?')} "
             f"(torch {env.get('torch', '?')}), one GPU, the reference job in bf16 after "
             f"`planner calibrate --backend nccl` on the same GPU; "
             + (f"median of {doc['runs']} launches" if doc["runs"] > 1 else "one launch")
             + f" per plan, each timed over steps 2..{doc['steps']}.", "",
             "| plan | predicted s | measured s | error |", "|---|---:|---:|---:|"]
    for r in doc["results"]:
        lines.append(f"| {r['plan']} | {r['predicted_step_s']:.4f} | "
                     f"{r['measured_step_s']:.4f} | {r['error']:+.1%} |")
    tau = s["sweep_kendall_tau"]
    lines += ["", f"{s['within_15_percent']} of {s['plans']} plans within 15% (worst "
              f"{s['worst_abs_error']:.1%}); the micro-batch sweep's order "
              f"{'agrees' if s['sweep_same_ranking'] else 'differs'} (Kendall tau "
              f"{'n/a' if tau is None else f'{tau:+.2f}'})"
              + (f", wrong pairs: {'; '.join(s['sweep_wrong_pairs'])}."
                 if s["sweep_wrong_pairs"] else ".")]
    return lines


if __name__ == "__main__":
    main()
