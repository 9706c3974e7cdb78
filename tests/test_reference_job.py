"""The reference job under real 4-process torchrun (gloo, CPU) computes the single-process losses
and records every rank's per-step timings."""
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

torch = pytest.importorskip("torch")
from planner.run.reference_job import (STEP_KINDS, TIMED_KINDS, JobShape, main,  # noqa: E402
                                       one_f_one_b, reference_losses)
from planner.run.reference_job.params import param_errors, reference_params  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-5  # relative: float32 sums in another order (micro-batches, DP all-reduce)
PARAM_TOLERANCE = 2e-6  # ||rank - reference|| / ||reference|| per parameter after step 1
UPDATE_TOLERANCE = 1e-5  # the step's update against the reference update (10% error: 0.1)


def _plan(tmp_path: Path, pp: int, tp: int = 1) -> Path:
    return solve_to(tmp_path / f"plan-tp{tp}-pp{pp}.json", "--pp", str(pp), "--tp", str(tp),
                    "--schedule", "1f1b")


def _run(plan: Path, record: Path, *args: str) -> subprocess.CompletedProcess:
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not on PATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node=4", "-m", "planner.run.reference_job", str(plan),
                           "--out", str(record), "--device", "cpu", *args], capture_output=True, text=True,
                          timeout=240, env=env)


TINY_MOE = dict(num_layers=4, moe_layers=(False, True, True, True), num_experts=8, top_k=2)


def _run_and_check_losses(plan: Path, tmp_path: Path, *args: str, **shape) -> dict:
    """Run the plan under torchrun (job options ``args``); its losses must equal the
    single-process reference's (``JobShape(**shape)``) and its timings be consistent
    (:func:`_check_timings`). Returns the run record."""
    record_path = tmp_path / "run.json"
    result = _run(plan, record_path, "--dump-params", str(tmp_path / "params"), *args)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(record_path.read_text())
    expected = reference_losses(JobShape(**shape))
    assert len(record["losses"]) == len(expected) == shape.get("steps", 3)
    for got, want in zip(record["losses"], expected):
        assert abs(got - want) <= TOLERANCE * abs(want)
    check = _param_check(tmp_path / "params", record["world_size"], JobShape(**shape))
    assert check.worst[1] <= PARAM_TOLERANCE, check.worst
    assert check.update_error <= UPDATE_TOLERANCE, check.update_error
    assert record["plan"] == json.loads(plan.read_text())  # the whole plan, as its file has it
    _check_timings(record)
    return record


def _param_check(prefix: Path, world: int, shape: JobShape):
    """Every rank's parameters after the first step against the single-process model's."""
    dumps = [torch.load(f"{prefix}.rank{r}.pt") for r in range(world)]
    return param_errors(dumps, reference_params(shape, 1), reference_params(shape, 0))


def _check_timings(record: dict) -> None:
    """Every rank's per-step timings: every kind, none negative, the disjoint kinds within the
    step; communication only where the plan has that axis (none on a DP-only, dense plan)."""
    plan, cfg = record["plan"], record["config"]
    moe = plan["inputs"]["model"]["moe"] is not None
    timings = record["rank_timings"]
    assert [t["rank"] for t in timings] == list(range(4))
    steps = len(record["losses"])
    for t in timings:
        assert t["threads"] == 1  # OMP_NUM_THREADS=1
        assert t["coords"]["pp"] == t["stage"] and set(t["coords"]) >= {"tp", "dp", "pp", "ep"}
        assert len(t["steps"]) == steps
        for step in t["steps"]:
            assert set(step) == set(STEP_KINDS)
            assert all(v >= 0 for v in step.values())
            assert sum(step[k] for k in TIMED_KINDS) <= 1.05 * step["step"] + 0.005
            assert step["forward"] > 0 and step["backward"] > 0 and step["optimizer"] > 0
            assert (step["tp_comm"] > 0) == (cfg["tp"] > 1)
            assert (step["ep_comm"] > 0) == (cfg["ep"] > 1 and moe)
            assert (step["quota_solve"] > 0) == (cfg["ep"] > 1 and moe)
            if cfg["pp"] == 1:
                assert step["pp_wait"] == 0
            elif t["stage"] > 0:  # waits for the previous stage's activations
                assert step["pp_wait"] > 0
            assert step["dp_comm"] > 0 or cfg["dp"] == 1
    assert record["step_times_s"] == [s["step"] for s in timings[0]["steps"]]
    assert record["step_times_max_s"] == [max(t["steps"][i]["step"] for t in timings)
                                          for i in range(steps)]
    # every rank timed the speed and link probes before and after the steps
    # (planner.run.speed_probe)
    for key in ("speed_probe_s", "link_probe_s"):
        probe = record["environment"][key]
        assert sorted(probe) == ["after", "before"]
        assert all(len(probe[k]) == record["world_size"] and min(probe[k]) > 0 for k in probe)


@pytest.mark.parametrize("tp,pp", [(1, 2), (1, 4), (2, 2), (2, 1)],
                         ids=["dp2xpp2", "pp4", "tp2xpp2", "tp2xdp2"])
def test_parallel_losses_equal_the_single_process_reference(tmp_path, tp, pp):
    plan = _plan(tmp_path, pp, tp)
    dp = 4 // (tp * pp)
    record = _run_and_check_losses(plan, tmp_path, num_layers=32, dp=dp)
    assert record["config"] == {"tp": tp, "pp": pp, "dp": dp, "cp": 1, "ep": 1}
    assert record["plan_inputs_hash"] == json.loads(plan.read_text())["inputs_hash"]
    assert len(record["step_times_s"]) == 3 and all(t > 0 for t in record["step_times_s"])


def test_a_ten_percent_gradient_error_fails_the_parameter_check(tmp_path):
    """The same DP2 x PP2 run with every gradient 10% too large: the parameter check fails by
    four orders of magnitude (update error 0.1 against 1e-5), where the losses move by about
    1e-4 (the first step's loss not at all: it is computed before the update)."""
    plan = _plan(tmp_path, 2)
    shape = JobShape(num_layers=32, dp=2, micro_batches=4, hidden=32, seq_len=16)
    record_path = tmp_path / "run.json"
    result = _run(plan, record_path, "--dump-params", str(tmp_path / "params"),
                  "--grad-error", "0.1")
    assert result.returncode == 0, result.stderr[-3000:]
    check = _param_check(tmp_path / "params", 4, shape)
    assert check.update_error == pytest.approx(0.1, rel=0.01)
    assert check.worst[1] > 1000 * PARAM_TOLERANCE
    record = json.loads(record_path.read_text())
    loss_gap = max(abs(g / w - 1) for g, w in zip(record["losses"], reference_losses(shape)))
    assert loss_gap < 1e-3  # what a loss-only check sees of a 10% gradient error


def test_dp_batch_shares_run_as_planned_and_match_the_reference(tmp_path):
    """A DP2 x PP2 plan whose replicas take unequal batch shares (3 and 5 micro-batches, as
    ``planner solve`` gives replicas on faster GPUs): each pipeline runs its own share, and
    the losses and first-step parameters equal the single-process reference on the same
    global batch. Shares weighted per replica instead of per global token would put the
    parameters off by about 1e-1, far above the check's 2e-6."""
    plan = _plan(tmp_path, 2)
    doc = json.loads(plan.read_text())
    assert doc["training"]["micro_batches"] == 4
    doc["training"]["options"]["dp_shares"] = [3, 5]
    plan.write_text(json.dumps(doc))
    assert load_plan(plan).replica_micro_batches() == (3, 5)
    record = _run_and_check_losses(plan, tmp_path, num_layers=32, dp=2, shares=(3, 5))
    assert record["shape"]["replica_micro_batches"] == [3, 5]
    assert record["shape"]["global_batch"] == 8
    for rank in record["rank_timings"]:  # forwards each rank ran, every step
        assert rank["micro_batches"] == [(3, 5)[rank["coords"]["dp"]]] * 3


@pytest.mark.parametrize("stages,micro", [(1, 3), (2, 4), (4, 4), (4, 2), (3, 5)])
def test_one_f_one_b_order(stages, micro):
    for stage in range(stages):
        order = one_f_one_b(stage, stages, micro)
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

    from planner.inputs.expert_loads import synthetic_loads

    folder = tmp_path_factory.mktemp("moe")
    loads = folder / "loads.npy"
    np.save(loads, synthetic_loads(layers=3, experts=8, steps=1, tokens_per_step=4096, top_k=2, seed=1)[0])
    return solve_to(folder / "plan.json", "--pp", "1", "--ep", "4", "--schedule", "1f1b",
                    "--expert-loads", str(loads), model=str(ROOT / "tests" / "fixtures" / "tiny-moe.yaml"))


@pytest.mark.parametrize("seed", range(6))
def test_grouping_puts_each_slots_rows_together_in_arrival_order(seed):
    """The all-to-all delivers each source's rows in slot order; ``grouping`` lists slot 0's
    rows first (sources in rank order, each in arrival order), then slot 1's, ..., and is a
    permutation of all rows (empty slots and sources included)."""
    import numpy as np

    from planner.run.reference_job.ep import grouping

    rng = np.random.default_rng(seed)
    received = rng.integers(0, 4, size=(rng.integers(1, 5), rng.integers(1, 5)))
    slot_of_row = np.concatenate([np.repeat(np.arange(received.shape[1]), row)
                                  for row in received])  # arrival order
    perm = grouping(received)
    assert sorted(perm.tolist()) == list(range(received.sum()))
    assert slot_of_row[perm].tolist() == sorted(slot_of_row.tolist())
    for i in range(received.shape[1]):  # within a slot: arrival order
        rows = perm[slot_of_row[perm] == i]
        assert rows.tolist() == sorted(rows.tolist())


def test_expert_parallel_run_follows_the_placement_and_matches_the_reference(tmp_path, moe_plan):
    import numpy as np

    from solvers.experts.quota import solve_quotas

    doc = load_plan(moe_plan).experts
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


def _plan_size_model(folder: Path) -> Path:
    """tests/fixtures/tiny-moe.yaml (hidden 256, vocab 1024, 8 experts top-2) as the job
    builds it exactly: plain GELU MLP, LayerNorm, biases everywhere but the router."""
    import yaml

    data = yaml.safe_load((ROOT / "tests" / "fixtures" / "tiny-moe.yaml").read_text())
    data.update(glu=False, activation="gelu", norm="layernorm", qkv_bias=True,
                attn_out_bias=True, mlp_bias=True)
    data["moe"].update(expert_bias=True, router_bias=False)
    path = folder / "tiny-moe-gelu.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_plan_size_trains_the_plans_model_and_batch(tmp_path):
    """``--size plan``: the plan's widths, vocabulary, sequence and micro-batches (EP4)."""
    plan = solve_to(tmp_path / "plan.json", "--pp", "1", "--ep", "4", "--schedule", "1f1b",
                    "--seq-len", "64", model=str(_plan_size_model(tmp_path)))
    doc = load_plan(plan)
    shape = dict(TINY_MOE, hidden=256, heads=4, ffn=1024, vocab=1024, expert_ffn=512, seq_len=64,
                 micro_batch=doc.config["micro_batch"], micro_batches=doc.micro_batches,
                 dp=doc.config["dp"], steps=2)
    assert doc.config["dp"] * shape["micro_batch"] * shape["micro_batches"] == 8
    record = _run_and_check_losses(plan, tmp_path, "--size", "plan", "--steps", "2", **shape)
    shape["moe_layers"] = [False, True, True, True]
    assert {k: record["shape"][k] for k in shape} == shape


def test_plan_size_refuses_a_model_the_job_cannot_build(tmp_path):
    plan = _plan(tmp_path, 2)  # llama-3.1-8b: SwiGLU, RMSNorm, GQA
    with pytest.raises(SystemExit) as err:
        main([str(plan), "--size", "plan"])
    message = str(err.value.code)
    assert "\n" not in message and "cannot build model 'llama-3.1-8b'" in message
    assert "glu=true (the job needs glu: false" in message and "norm=rmsnorm" in message


def test_plan_size_takes_no_tiny_size_options(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        main([str(tmp_path / "plan.json"), "--size", "plan", "--hidden", "64", "--seq-len", "8"])
    assert err.value.code == 2
    assert "--hidden, --seq-len: only with --size tiny" in capsys.readouterr().err
