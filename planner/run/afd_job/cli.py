"""The AFD decode job's command line: ``python -m planner.run.afd_job PLAN [--out RUN.json]
[--steps N] [--batch B] [--context L] [--micro-batches M] [--size tiny]``, one process per
attention or FFN GPU of the plan under torchrun (``planner launch PLAN`` starts it)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from planner.errors import PlannerError
from planner.run.afd_job.job import run
from planner.run.afd_job.shape import TINY
from planner.run.runtime import BACKENDS

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="planner.run.afd_job",
        description="AFD decode reference job: a tiny MoE decoder, attention and FFN ranks as "
                    "an AFD serving plan says, micro-batches ping-ponging between them "
                    "(plain torch).")
    parser.add_argument("plan", help="an AFD serving plan ('planner serve --mode afd --out')")
    parser.add_argument("--out", default=None, help="run record JSON (written by rank 0)")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"decode steps after the prefill (default {TINY['steps']})")
    parser.add_argument("--batch", type=int, default=None,
                        help=f"sequences per attention rank (default {TINY['batch']})")
    parser.add_argument("--context", type=int, default=None,
                        help=f"prompt tokens per sequence (default {TINY['context']})")
    parser.add_argument("--micro-batches", type=int, default=None,
                        help="micro-batches per attention rank (default: the plan's)")
    parser.add_argument("--hidden", type=int, default=None,
                        help=f"model width (default {TINY['hidden']})")
    parser.add_argument("--size", choices=("tiny",), default="tiny",
                        help="tiny: the plan's layer pattern (at most 4 layers), experts and "
                             "top-k capped (8, 2), the widths above (the only size so far)")
    parser.add_argument("--keep-logits", action="store_true",
                        help="also record the last step's logits of every sequence")
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="default: nccl with a GPU per process, else gloo")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` and run this rank; rank 0 prints the generated ids' count. A
    :class:`PlannerError` exits with its one-line message."""
    args = _parser().parse_args(argv)
    overrides = {"steps": args.steps, "batch": args.batch, "context": args.context,
                 "micro_batches": args.micro_batches, "hidden": args.hidden}
    try:
        tokens = run(args.plan, overrides, args.out, args.keep_logits, args.backend)
    except PlannerError as err:
        sys.exit(f"error: {err}")
    if int(os.environ.get("RANK", "0")) == 0 and tokens is not None:
        print(json.dumps({"sequences": len(tokens), "tokens_per_sequence": len(tokens[0]),
                          "out": args.out}))
