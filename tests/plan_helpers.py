"""Small plans for the torchrun tests: 4 processes on one node (llama-3.1-8b or a tiny MoE)."""
from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from planner.cli.app import app

ONE_NODE_OF_4 = ["--gpu", "H100", "--nodes", "1", "--gpus-per-node", "4",
                 "--global-batch", "8", "--seq-len", "1024"]


def solve_to(out: Path, *options: str, model: str = "llama-3.1-8b") -> Path:
    """``planner solve --model MODEL <one node of 4> [--tp 1] OPTIONS --out OUT``; the plan's
    path (``--tp 1`` unless OPTIONS give one)."""
    tp = [] if "--tp" in options else ["--tp", "1"]
    result = CliRunner().invoke(app, ["solve", "--model", model, *ONE_NODE_OF_4, *tp, *options,
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out
