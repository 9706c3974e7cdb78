"""The reference job's command line: ``python -m planner.run.reference_job PLAN [--out RUN.json]
[--steps N] [--size tiny|plan] [--hidden H] [--seq-len S] [--micro-batches M]
[--device auto|cpu|cuda] [--precision fp32|bf16]``, one process per rank under torchrun
(``planner launch PLAN`` starts it)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from types import MappingProxyType

from planner.errors import PlannerError
from planner.run.reference_job.device import DEVICES, DTYPES, job_device, planned_on_cpus
from planner.run.reference_job.shape import plan_shape_fields
from planner.run.reference_job.train import train

__all__ = ["main"]

TINY = MappingProxyType({"micro_batches": 4, "hidden": 32, "seq_len": 16})  # --size tiny's defaults


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="planner.run.reference_job",
        description="Reference job: a tiny GPT (optionally MoE) trained for a few steps under "
                    "a plan (plain torch).")
    parser.add_argument("plan")
    parser.add_argument("--out", default=None, help="run record JSON (written by rank 0)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--size", choices=("tiny", "plan"), default="tiny",
                        help="tiny: the --hidden/--seq-len/--micro-batches model (default); "
                             "plan: the plan's model widths and batch")
    parser.add_argument("--micro-batches", type=int, default=None,
                        help=f"tiny size only (default {TINY['micro_batches']})")
    parser.add_argument("--hidden", type=int, default=None,
                        help=f"tiny size only (default {TINY['hidden']})")
    parser.add_argument("--seq-len", type=int, default=None,
                        help=f"tiny size only (default {TINY['seq_len']})")
    parser.add_argument("--device", choices=DEVICES, default="auto",
                        help="cpu: gloo, fp32; cuda: NCCL, this rank's GPU, bf16; auto (default): "
                             "cuda when every process of the node has a GPU of its own and the "
                             "plan's devices are GPUs (not a gloo calibration's CPU processes)")
    parser.add_argument("--precision", choices=tuple(DTYPES), default=None,
                        help="parameters, activations and gradients (default: fp32 on the CPU, "
                             "bf16 on a GPU)")
    parser.add_argument("--dump-params", default=None, metavar="PREFIX",
                        help="after the first step, each rank saves its parameters to "
                             "PREFIX.rank<R>.pt (for the parameter check)")
    parser.add_argument("--grad-error", type=float, default=0.0, metavar="FRACTION",
                        help="testing only: scale every gradient by 1 + FRACTION before each "
                             "optimizer step (a deliberate error the checks must catch)")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv``, train on this rank, print the losses on rank 0; a
    :class:`PlannerError` exits with its one-line message."""
    parser = _parser()
    args = parser.parse_args(argv)
    given = {k: getattr(args, k) for k in TINY if getattr(args, k) is not None}
    if args.size == "plan" and given:
        names = ", ".join("--" + k.replace("_", "-") for k in given)
        parser.error(f"{names}: only with --size tiny (with --size plan the plan sets the "
                     "model widths, seq-len and micro-batches)")
    try:
        from planner.plan.file import load_plan

        plan = load_plan(Path(args.plan))
        # refused here, before torch.distributed starts
        overrides = plan_shape_fields(plan) if args.size == "plan" else {**TINY, **given}
        device = job_device(args.device, args.precision, os.environ, planned_on_cpus(plan))
        losses = train(args.plan, {"steps": args.steps, **overrides}, args.out,
                       args.dump_params, args.grad_error, device)
    except PlannerError as err:
        sys.exit(f"error: {err}")
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({"losses": losses}))
