"""planner.run.runtime: groups built from a plan under real torchrun (gloo, CPU), and worlds refused."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from plan_helpers import solve_to
from planner.plan.file import load_plan
from planner.run.runtime import WorldMismatch, rank_view

WORKER = Path(__file__).parent / "workers" / "runtime_worker.py"


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    return solve_to(tmp_path_factory.mktemp("plan") / "plan.json", "--pp", "2")


def _env(rank, world=4, local=None, local_world=4, node=0):
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank if local is None else local),
            "LOCAL_WORLD_SIZE": str(local_world), "GROUP_RANK": str(node)}


def test_rank_view_matches_the_rank_table(plan_path):
    plan = load_plan(plan_path)
    for row in plan.ranks["rows"]:
        cols = dict(zip(plan.ranks["columns"], row))
        view = rank_view(plan, _env(cols["rank"]))
        assert view.coords["pp"] == cols["pp"] and view.coords["dp"] == cols["dp"]
        assert view.layers == tuple(plan.stages[cols["pp"]]["layers"])


@pytest.mark.parametrize("env, message", [
    (_env(0, world=8), "plan is for 4 processes"),
    (_env(0, local_world=2), "LOCAL_WORLD_SIZE=2"),
    (_env(1, local=2), "places rank 1 on node rank 0 GPU 1"),
    ({"WORLD_SIZE": "4"}, "RANK is not set"),
])
def test_a_different_world_is_refused(plan_path, env, message):
    with pytest.raises(WorldMismatch, match=message):
        rank_view(load_plan(plan_path), env)


def _torchrun(nproc: int, plan: Path, out: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("torch")
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not on PATH")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
         str(WORKER), str(plan), str(out)], capture_output=True, text=True, timeout=180, env=env)


def test_torchrun_builds_the_plans_groups(plan_path, tmp_path):
    result = _torchrun(4, plan_path, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    plan = load_plan(plan_path)
    views = {r: json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)}
    for kind, groups in plan.groups.items():
        for ranks in groups:
            if len(ranks) > 1:
                for r in ranks:  # every member summed exactly its group's ranks
                    assert views[r]["sums"][kind] == sum(ranks)
    assert sorted(v["view"]["stage"] for v in views.values()) == [0, 0, 1, 1]


def test_torchrun_with_the_wrong_world_fails_before_any_collective(plan_path, tmp_path):
    result = _torchrun(2, plan_path, tmp_path)
    assert result.returncode != 0
    assert "plan is for 4 processes" in result.stderr + result.stdout
    assert not list(tmp_path.glob("rank*.json"))
