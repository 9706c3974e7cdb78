"""The reference job under real 4-process torchrun (gloo, CPU) computes the single-process losses."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from plan_helpers import solve_to

torch = pytest.importorskip("torch")
from planner.reference_job import JobShape, _one_f_one_b, reference_losses  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-5  # relative: float32 sums in another order (micro-batches, DP all-reduce)


def _plan(tmp_path: Path, pp: int, tp: int = 1) -> Path:
    return solve_to(tmp_path / f"plan-tp{tp}-pp{pp}.json", "--pp", str(pp), "--tp", str(tp),
                    "--schedule", "1f1b")


def _run(plan: Path, record: Path) -> subprocess.CompletedProcess:
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not on PATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node=4", "-m", "planner.reference_job", str(plan),
                           "--out", str(record)], capture_output=True, text=True, timeout=240, env=env)


TINY_MOE = dict(num_layers=4, moe_layers=(False, True, True, True), num_experts=8, top_k=2)


def _run_and_check_losses(plan: Path, tmp_path: Path, **shape) -> dict:
    """Run the plan under torchrun; its losses must equal the single-process reference's
    (``JobShape(**shape)``). Returns the run record."""
    record_path = tmp_path / "run.json"
    result = _run(plan, record_path)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(record_path.read_text())
    expected = reference_losses(JobShape(**shape))
    assert len(record["losses"]) == len(expected) == 3
    for got, want in zip(record["losses"], expected):
        assert abs(got - want) <= TOLERANCE * abs(want)
    return record


@pytest.mark.parametrize("tp,pp", [(1, 2), (1, 4), (2, 2), (2, 1)],
                         ids=["dp2xpp2", "pp4", "tp2xpp2", "tp2xdp2"])
def test_parallel_losses_equal_the_single_process_reference(tmp_path, tp, pp):
    plan = _plan(tmp_path, pp, tp)
    dp = 4 // (tp * pp)
    record = _run_and_check_losses(plan, tmp_path, num_layers=32, dp=dp)
    assert record["config"] == {"tp": tp, "pp": pp, "dp": dp, "cp": 1, "ep": 1}
    assert record["plan_inputs_hash"] == json.loads(plan.read_text())["inputs_hash"]
    assert len(record["step_times_s"]) == 3 and all(t > 0 for t in record["step_times_s"])


@pytest.mark.parametrize("stages,micro", [(1, 3), (2, 4), (4, 4), (4, 2), (3, 5)])
def test_one_f_one_b_order(stages, micro):
    for stage in range(stages):
        order = _one_f_one_b(stage, stages, micro)
        assert sorted(order) == sorted([("F", i) for i in range(micro)] + [("B", i) for i in range(micro)])
        seen = set()
        for kind, i in order:  # a backward follows its forward; in flight <= stages - stage
            assert kind == "F" or ("F", i) in seen
            seen.add((kind, i))
            in_flight = sum(1 for k, j in seen if k == "F") - sum(1 for k, j in seen if k == "B")
            assert in_flight <= stages - stage


@pytest.fixture(scope="module")
def moe_plan(tmp_path_factory):
    import numpy as np

    from planner.expert_loads import synthetic_loads

    folder = tmp_path_factory.mktemp("moe")
    loads = folder / "loads.npy"
    np.save(loads, synthetic_loads(layers=3, experts=8, steps=1, tokens_per_step=4096, top_k=2, seed=1)[0])
    return solve_to(folder / "plan.json", "--pp", "1", "--ep", "4", "--schedule", "1f1b",
                    "--expert-loads", str(loads), model=str(ROOT / "tests" / "fixtures" / "tiny-moe.yaml"))


def test_expert_parallel_run_follows_the_placement_and_matches_the_reference(tmp_path, moe_plan):
    import numpy as np

    from solvers.expert_quota import solve_quotas

    plan = json.loads(moe_plan.read_text())
    doc = plan["expert_placement"]
    assert max(max(c) for c in doc["replica_counts"]) >= 2  # some expert is replicated
    record = _run_and_check_losses(moe_plan, tmp_path, dp=4, **TINY_MOE)
    ranks = sorted(record["expert_events"], key=lambda r: r["ep"])
    assert [r["ep"] for r in ranks] == [0, 1, 2, 3]
    S = doc["slots_per_gpu"]
    gpu_of_slot = np.arange(4 * S) // S
    events = list(zip(*(r["events"] for r in ranks)))
    assert len(events) == 3 * 4 * 3  # steps x micro-batches x MoE layers
    for same in events:
        counts = same[0]["global_counts"]
        assert all(e["global_counts"] == counts and e["layer"] == same[0]["layer"] for e in same)
        row = [1, 2, 3].index(same[0]["layer"])  # the model's MoE layers, in order, map onto rows
        phy2log = np.array(doc["physical_to_logical"][row])
        quota = np.rint(solve_quotas(np.array(counts, float), phy2log, gpu_of_slot, 4).quota)
        received = {int(p): n for e in same for p, n in e["received"].items()}
        assert [received[p] for p in range(4 * S)] == quota.astype(int).tolist()


def test_moe_model_without_expert_parallelism_matches_the_reference(tmp_path):
    """Every expert on every DP rank: an expert that gets no token on one rank still joins
    the gradient all-reduce (else the ranks would hang)."""
    plan = solve_to(tmp_path / "plan.json", "--pp", "2", "--ep", "1", "--schedule", "1f1b",
                    model=str(ROOT / "tests" / "fixtures" / "tiny-moe.yaml"))
    _run_and_check_losses(plan, tmp_path, dp=2, **TINY_MOE)
