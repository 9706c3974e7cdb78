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


def holmes_spec(kinds: list[tuple[str, str | None]]) -> dict:
    """One node group per node, listed as given: (transport, RDMA island)."""
    groups = []
    for i, (transport, island) in enumerate(kinds):
        nics = [{"count": 8, "gbps": 400 if transport != "tcp" else 100, "transport": transport}]
        if transport == "roce" and island is None:
            nics.append({"count": 1, "gbps": 100, "transport": "tcp"})
        g = {"name": f"n{i:02d}", "count": 1, "gpu": "H100", "gpus_per_node": 8,
             "fabric": "nvswitch", "nics": nics}
        if island:
            g["rdma_island"] = island
        groups.append(g)
    return {"name": "holmes", "node_groups": groups,
            "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 16}]}}
