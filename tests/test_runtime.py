"""planner.run.runtime: rank views in Megatron's rank order, the backend choice, groups built
from a plan under real torchrun (gloo, CPU), and worlds refused."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from plan_helpers import solve_to
from planner.errors import PlannerError
from planner.plan.file import load_plan
from planner.run.runtime import (WorldMismatch, choose_backend, degrees_of, local_processes,
                                 rank_view)

WORKER = Path(__file__).parent / "workers" / "runtime_worker.py"


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    return solve_to(tmp_path_factory.mktemp("plan") / "plan.json", "--pp", "2")


def _env(rank, world=4, local=None, local_world=4, node=0):
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank if local is None else local),
            "LOCAL_WORLD_SIZE": str(local_world), "GROUP_RANK": str(node)}


@pytest.fixture(scope="module", params=[(1, 2), (2, 1)], ids=["dp2xpp2", "tp2xdp2"])
def degrees_and_plan(request, tmp_path_factory):
    """(tp, dp, pp) asked of ``planner solve`` on one node of 4, and the plan it wrote."""
    tp, pp = request.param
    path = solve_to(tmp_path_factory.mktemp("plan") / "plan.json", "--tp", str(tp), "--pp", str(pp))
    return (tp, 4 // (tp * pp), pp), load_plan(path)


def test_rank_view_follows_the_megatron_rank_order(degrees_and_plan):
    """Coordinates derived here from the rank alone, by Megatron-LM's order
    rank = tp_r + tp * (cp_r + cp * (dp_r + dp * pp_r)) (cp = 1), not read from the plan's
    rank table; the stages' layers (one set per stage) split the model's layers, each once."""
    (tp, dp, pp), plan = degrees_and_plan
    layers_by_stage = {}
    for rank in range(4):
        view = rank_view(plan, _env(rank))
        want = {"tp": rank % tp, "cp": 0, "dp": rank // tp % dp, "pp": rank // (tp * dp)}
        assert {k: view.coords[k] for k in want} == want, f"rank {rank}"
        assert (view.rank, view.world_size, view.node_rank, view.local_rank) == (rank, 4, 0, rank)
        assert view.stage == want["pp"]
        layers_by_stage.setdefault(view.stage, set()).add(view.layers)
    assert all(len(seen) == 1 for seen in layers_by_stage.values())  # one stage, one layer set
    every = sorted(layer for s in range(pp) for layer in next(iter(layers_by_stage[s])))
    assert every == list(range(plan.model_spec().num_layers))


def test_degrees_are_read_off_the_plans_groups(degrees_and_plan):
    (tp, dp, pp), plan = degrees_and_plan
    assert {k: degrees_of(plan)[k] for k in ("tp", "cp", "dp", "pp", "ep")} == {
        "tp": tp, "cp": 1, "dp": dp, "pp": pp, "ep": 1}


@pytest.mark.parametrize("requested, cuda, chosen", [
    (None, False, "gloo"),
    (None, True, "nccl"),
    ("gloo", True, "gloo"),
    ("gloo", False, "gloo"),
    ("nccl", True, "nccl"),
])
def test_choose_backend(requested, cuda, chosen):
    assert choose_backend(requested, cuda) == chosen


@pytest.mark.parametrize("requested, message", [
    ("nccl", "'nccl' needs CUDA"),
    ("mpi", "expected one of gloo, nccl"),
])
def test_choose_backend_refuses_what_cannot_run_here(requested, message):
    with pytest.raises(PlannerError, match=message):
        choose_backend(requested, cuda_available=False)


@pytest.mark.parametrize("requested, gpus, local, chosen", [
    (None, 1, 2, "gloo"),   # two ranks cannot share one GPU under NCCL
    (None, 2, 2, "nccl"),
    (None, 8, 4, "nccl"),
    ("gloo", 8, 2, "gloo"),
])
def test_choose_backend_counts_gpus_against_this_nodes_processes(requested, gpus, local, chosen):
    assert choose_backend(requested, True, gpus, local) == chosen


def test_nccl_with_fewer_gpus_than_processes_is_refused_before_init():
    with pytest.raises(PlannerError, match="needs a GPU per process: 2 processes on this node, 1"):
        choose_backend("nccl", True, gpus=1, local_processes=2)


@pytest.mark.parametrize("env, count", [({}, 1), ({"LOCAL_WORLD_SIZE": "4"}, 4),
                                        ({"LOCAL_WORLD_SIZE": "x"}, 1)])
def test_local_processes_reads_torchruns_local_world_size(env, count):
    assert local_processes(env) == count


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


def test_planner_runtime_is_the_import_path_training_scripts_use():
    """User scripts import ``planner.runtime``; it must stay the runtime of planner/run/."""
    import planner.run.runtime as run_runtime
    import planner.runtime as runtime

    assert set(runtime.__all__) >= {"init", "rank_view", "build_groups", "expert_maps"}
    for name in runtime.__all__:
        assert getattr(runtime, name) is getattr(run_runtime, name)
