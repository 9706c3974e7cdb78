"""The AFD decode reference job (planner.run.afd_job): a rank's role from the plan
(planner.runtime.afd_role), the pieces in one process, and real torchrun worlds (gloo, CPU)
whose generated ids and last logits equal a single-process decode; ``planner launch`` of an
AFD plan."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.app import app
from planner.errors import PlannerError
from planner.plan.file import load_plan
from planner.runtime import AfdRole, afd_expert_homes, afd_role, afd_world

torch = pytest.importorskip("torch")
from planner.run.afd_job import (AFD_STEP_KINDS, AfdShape, AttentionSide, ExpertBank,  # noqa: E402
                                 KVCache, afd_shape, busy_idle, job_experts, prompts,
                                 reference_decode, run_experts, sample_layers)
from planner.run.afd_job.link import pack_tokens, unpack_tokens  # noqa: E402
from planner.run.afd_job.job import _world  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-5  # relative: float32 sums of the same terms in another order (row blocks)

CLUSTER = """name: {name}
node_groups:
  - {{name: n, count: 3, gpu: H100, gpus_per_node: {gpus}, fabric: nvswitch, nics: [{{count: 2, gbps: 400, transport: ib}}]}}
network:
  tiers: [{{name: leaf, nodes_per_switch: 4}}]
"""
# A small MoE with a dense first layer and a shared expert (the 1 + 1 plans use it).
SHARED_MOE = """name: tiny-shared-moe
num_layers: 3
hidden_size: 256
num_heads: 4
num_kv_heads: 4
head_dim: 64
ffn_hidden_size: 1024
vocab_size: 1024
moe: {num_experts: 8, top_k: 2, expert_ffn_hidden: 512, num_shared_experts: 1, shared_ffn_hidden: 512}
moe_layers: [false, true, true]
"""


def _serve(tmp: Path, model: str, gpus_per_node: int, name: str) -> Path:
    """``planner serve --mode afd`` on 3 nodes of ``gpus_per_node`` H100s: whole-node pools of
    prefill, attention and FFN GPUs (one node each)."""
    cluster = tmp / f"{name}-cluster.yaml"
    cluster.write_text(CLUSTER.format(name=name, gpus=gpus_per_node))
    out = tmp / f"{name}.json"
    result = CliRunner().invoke(app, ["serve", "--model", model, "--cluster", str(cluster),
                                      "--mode", "afd", "--isl", "512", "--osl", "64",
                                      "--tpot-ms", "200", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def plan_2x2(tmp_path_factory) -> Path:
    """mixtral-8x7b: 2 prefill + 2 attention + 2 FFN GPUs, m = 2."""
    return _serve(tmp_path_factory.mktemp("afd"), "mixtral-8x7b", 2, "afd-2x2")


@pytest.fixture(scope="module")
def plan_1x1(tmp_path_factory) -> Path:
    """The shared-expert model: 1 prefill + 1 attention + 1 FFN GPU."""
    tmp = tmp_path_factory.mktemp("afd")
    model = tmp / "tiny-shared-moe.yaml"
    model.write_text(SHARED_MOE)
    return _serve(tmp, str(model), 1, "afd-1x1")


# --- the plan's roles (pure data) ---------------------------------------------------------


def test_afd_role_gives_each_rank_its_role_peers_and_experts(plan_2x2):
    plan = load_plan(plan_2x2)
    assert afd_world(plan) == (2, 2)
    roles = [afd_role(plan, r) for r in range(4)]
    assert [r.role for r in roles] == ["attention", "attention", "ffn", "ffn"]
    assert [r.index for r in roles] == [0, 1, 0, 1]
    for r in roles:
        assert (r.attention_ranks, r.ffn_ranks) == ((0, 1), (2, 3))
        assert r.micro_batches == plan.serving["micro_batches"] == 2
        assert r.attention_tp == 1 and r.world_size == 4 and r.unit == 0
    assert roles[0].peers == (2, 3) and roles[2].peers == (0, 1)
    assert roles[0].experts == () and roles[2].experts == (0, 1, 2, 3)
    assert roles[3].experts == (4, 5, 6, 7)
    att_hosts = {n["host"] for n in plan.pool("attention").nodes}
    ffn_hosts = {n["host"] for n in plan.pool("ffn").nodes}
    assert roles[0].host in att_hosts and roles[3].host in ffn_hosts
    assert [r.local_gpu for r in roles] == [0, 1, 0, 1]
    with pytest.raises(PlannerError, match="outside the AFD decode world"):
        afd_role(plan, 4)
    assert isinstance(roles[0], AfdRole)


def test_afd_role_refuses_a_plan_that_is_not_afd(tmp_path):
    from plan_helpers import solve_to
    plan = load_plan(solve_to(tmp_path / "train.json", "--pp", "2", "--schedule", "1f1b"))
    with pytest.raises(PlannerError, match="not an AFD serving plan"):
        afd_role(plan, 0)


def test_expert_homes_are_contiguous_blocks():
    assert afd_expert_homes(8, 2) == (0, 0, 0, 0, 1, 1, 1, 1)
    assert afd_expert_homes(8, 1) == (0,) * 8
    assert afd_expert_homes(4, 4) == (0, 1, 2, 3)
    assert afd_expert_homes(8, 3) == (0, 0, 0, 1, 1, 1, 2, 2)  # the job's capped counts
    with pytest.raises(PlannerError):
        afd_expert_homes(0, 2)


def test_job_shape_follows_the_plan_and_refuses_attention_tp(plan_2x2, plan_1x1):
    shape = afd_shape(load_plan(plan_2x2), {})
    assert shape.moe_layers == (True,) * 4 and (shape.num_experts, shape.top_k) == (8, 2)
    assert (shape.attention_ranks, shape.ffn_ranks, shape.micro_batches) == (2, 2, 2)
    assert shape.shared_experts == 0
    shape = afd_shape(load_plan(plan_1x1), {"micro_batches": 3, "batch": 6})
    assert shape.moe_layers == (False, True, True) and shape.shared_experts == 1
    assert (shape.micro_batches, shape.batch) == (3, 6)
    plan = load_plan(plan_2x2)
    pools = [dict(p, tp=2) if p["role"] == "attention" else p for p in plan.serving["pools"]]
    tp2 = dataclasses.replace(plan, serving={**plan.serving, "pools": pools})
    with pytest.raises(PlannerError, match="attention TP 1 only"):
        afd_shape(tp2, {})


def test_layer_pattern_is_sampled_down_keeping_dense_layers_in_front():
    deepseek = (False,) * 3 + (True,) * 58
    assert sample_layers(deepseek) == (False, True, True, True)
    assert sample_layers((True,) * 32) == (True,) * 4
    assert sample_layers((False, True)) == (False, True)
    assert sample_layers((False,) * 8) == (False, False, False, True)  # at least one MoE


def test_micro_batches_split_the_batch_evenly():
    shape = AfdShape((True,), 8, 2, 1, 1, 3, batch=8)
    assert shape.micro_batch_rows() == ((0, 3), (3, 6), (6, 8))
    with pytest.raises(PlannerError):
        AfdShape((True,), 8, 2, 1, 1, 4, batch=3)


def test_world_must_be_the_plans_decode_pools(plan_2x2):
    plan = load_plan(plan_2x2)
    assert _world(plan, {"RANK": "3", "WORLD_SIZE": "4"}) == (3, 4)
    with pytest.raises(PlannerError, match="2 attention \\+ 2 FFN GPUs = 4 processes"):
        _world(plan, {"RANK": "0", "WORLD_SIZE": "6"})


# --- the pieces in one process ------------------------------------------------------------


def test_tokens_pack_once_per_destination_and_unpack():
    flat = torch.randn(5, 4)
    idx = torch.tensor([[0, 3], [1, 2], [3, 2], [0, 1], [2, 3]])
    gates = torch.rand(5, 2)
    here = torch.tensor(afd_expert_homes(4, 2))[idx] == 1  # experts 2, 3 on FFN rank 1
    rows, payload = pack_tokens(flat, idx, gates, here)
    assert rows.tolist() == [0, 1, 2, 4]
    x, ids, g = unpack_tokens(payload, 2)
    assert torch.equal(x, flat[rows])
    assert ids.tolist() == [[-1, 3], [-1, 2], [3, 2], [2, 3]]
    assert torch.equal(g, (gates * here)[rows])


def test_experts_split_over_ffn_ranks_sum_to_all_experts():
    shape = AfdShape((False, True), 8, 2, 1, 2, 1)
    bank = ExpertBank(shape, {1: tuple(range(8))})
    x, idx = torch.randn(20, shape.hidden), torch.randint(0, 8, (20, 2))
    gates = torch.rand(20, 2)
    whole = run_experts(bank.of_layer(1), x, idx, gates)
    homes = torch.tensor(afd_expert_homes(8, 2))
    parts = torch.zeros_like(x)
    for f in range(2):
        held = ExpertBank(shape, {1: tuple(e for e in range(8) if homes[e] == f)})
        rows, payload = pack_tokens(x, idx, gates, homes[idx] == f)
        xs, ids, gs = unpack_tokens(payload, 2)
        parts.index_add_(0, rows, run_experts(held.of_layer(1), xs, ids, gs))
    assert torch.allclose(parts, whole, rtol=TOLERANCE, atol=1e-6)


def test_decode_with_the_kv_cache_equals_recomputing_every_token():
    shape = AfdShape((False, True, True), 8, 2, 2, 1, 1, shared_experts=1, batch=3, context=5,
                     steps=3)
    tokens, logits = reference_decode(shape)
    assert tokens.shape == (6, 4) and logits.shape == (6, shape.vocab)
    # the whole sequence (prompt + fed-back tokens) in one pass, fresh cache
    side = AttentionSide(shape)
    bank = ExpertBank(shape, {i: tuple(range(8)) for i in shape.moe_layer_ids})
    seq = torch.cat([prompts(shape), tokens[:, :-1]], dim=1)
    full = dataclasses.replace(shape, context=seq.shape[1], steps=1)  # cache of >= seq
    cache = KVCache(full, shape.sequences)
    with torch.no_grad():
        x = side.embed(seq)
        for i, layer in enumerate(side.layers):
            x = layer.attend(x, cache.rows(i, 0, shape.sequences), 0)
            if layer.moe:
                flat, idx, gates, shared = layer.route(x)
                x = layer.combine(x, shared, run_experts(bank.of_layer(i), flat, idx, gates))
            else:
                x = layer.dense(x)
        again = side.logits(x)
    assert torch.allclose(again, logits, rtol=TOLERANCE, atol=1e-5)
    assert torch.equal(again.argmax(-1), tokens[:, -1])


def test_busy_idle_splits_the_steps():
    steps = [{"attention": 1.0, "experts": 0.0, "pack": 0.5, "dispatch_wait": 0.0,
              "combine_wait": 2.0, "send_wait": 0.25, "step": 4.0}] * 2
    got = busy_idle(steps)
    assert (got["busy_s"], got["wait_s"], got["other_s"]) == (3.0, 4.5, 0.5)
    assert got["busy_fraction"] == 3.0 / 8.0 and got["combine_wait_s"] == 4.0


# --- torchrun worlds (gloo, CPU) ----------------------------------------------------------


def _torchrun(plan: Path, nproc: int, record: Path, *args: str) -> subprocess.CompletedProcess:
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not on PATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={nproc}", "-m", "planner.run.afd_job", str(plan),
                           "--out", str(record), "--keep-logits", *args],
                          capture_output=True, text=True, timeout=240, env=env)


def _check_against_reference(record: dict) -> None:
    """Generated ids identical, last logits within TOLERANCE of the single-process decode."""
    shape = AfdShape.from_dict(record["shape"])
    tokens, logits = reference_decode(shape)
    assert record["tokens"] == tokens.tolist()
    got = torch.tensor(record["final_logits"])
    assert got.shape == logits.shape
    assert torch.all((got - logits).abs() <= TOLERANCE * logits.abs().max())


def _check_timings(record: dict) -> None:
    """Every rank's decode steps: every kind, none negative, the disjoint kinds within the
    step; attention ranks compute attention and wait for combines, FFN ranks compute experts
    and wait for dispatches; the record's step times are rank 0's and the max over ranks."""
    shape = AfdShape.from_dict(record["shape"])
    timings = record["rank_timings"]
    assert [t["rank"] for t in timings] == list(range(record["world_size"]))
    for t in timings:
        assert t["threads"] == 1 and len(t["steps"]) == shape.steps
        for step in t["steps"] + [t["prefill"]]:
            assert set(step) == set(AFD_STEP_KINDS) and all(v >= 0 for v in step.values())
            assert sum(v for k, v in step.items() if k != "step") <= 1.05 * step["step"] + 0.005
            if t["role"] == "attention":
                assert step["attention"] > 0 and step["experts"] == step["dispatch_wait"] == 0
            else:
                assert step["experts"] > 0 and step["attention"] == step["combine_wait"] == 0
        split = t["busy_idle"]
        assert split["busy_s"] > 0 and split["wait_s"] > 0 and 0 < split["busy_fraction"] < 1
    assert record["step_times_s"] == [s["step"] for s in timings[0]["steps"]]
    assert record["step_times_max_s"] == [max(t["steps"][i]["step"] for t in timings)
                                          for i in range(shape.steps)]
    # every rank timed the speed and link probes before and after the steps
    # (planner.run.speed_probe)
    for key in ("speed_probe_s", "link_probe_s"):
        probe = record["environment"][key]
        assert [len(probe[k]) for k in ("before", "after")] == [record["world_size"]] * 2
        assert min(probe["before"] + probe["after"]) > 0
    # gloo ranks are pinned (planner.run.affinity): a block each where they fit, else one
    # shared core each, round-robin; each rank records its cores for the prediction
    cores = record["environment"]["cores"]
    if sys.platform == "linux" and not os.environ.get("PLANNER_PIN") == "0":
        pinned = [t["pinned_cores"] for t in timings]
        assert all(t["pinned"] for t in timings)
        if record["world_size"] > cores:
            assert [len(p) for p in pinned] == [1] * record["world_size"]
            assert [p[0] for p in pinned] == [pinned[r % cores][0]
                                             for r in range(record["world_size"])]
        else:
            flat = [c for p in pinned for c in p]
            assert len(set(flat)) == len(flat)


def test_two_attention_two_ffn_ranks_decode_as_one_process(plan_2x2, tmp_path):
    record_path = tmp_path / "run.json"
    result = _torchrun(plan_2x2, 4, record_path)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(record_path.read_text())
    assert record["schema"] == "planner.afd-run-record/v1"
    assert record["config"] == {"attention_gpus": 2, "ffn_gpus": 2, "micro_batches": 2,
                                "units": 1}
    assert record["plan"] == json.loads(plan_2x2.read_text())
    assert len(record["tokens"]) == 16 and len(record["tokens"][0]) == 5  # prefill + 4 steps
    _check_against_reference(record)
    _check_timings(record)
    plan, shape = load_plan(plan_2x2), AfdShape.from_dict(record["shape"])
    for t in record["rank_timings"][2:]:  # the FFN ranks hold the plan's placement
        held = job_experts(shape, afd_role(plan, t["rank"]))
        assert t["experts"] == {str(k): list(v) for k, v in held.items()}
        assert held[0] == afd_role(plan, t["rank"]).experts


def test_empty_dispatches_keep_the_pre_posted_receives_paired(plan_2x2, tmp_path):
    # one sequence per micro-batch: a decode token often picks no expert of an FFN rank, so
    # attention ranks send empty tokens messages into the FFN ranks' pre-posted receives
    record_path = tmp_path / "run.json"
    result = _torchrun(plan_2x2, 4, record_path, "--micro-batches", "4", "--batch", "4",
                       "--steps", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(record_path.read_text())
    assert record["implementation"]["token_receives"] == "pre-posted, header row"
    # every rank's gloo transport threads (default, dispatch and combine groups) went idle
    assert all(t["idle_transport_threads"] >= 3 for t in record["rank_timings"])
    assert sum(t.get("empty_dispatches", 0) for t in record["rank_timings"]) > 0
    _check_against_reference(record)


@pytest.mark.parametrize("micro_batches", [1, 3])
def test_one_attention_one_ffn_rank_decode_as_one_process(plan_1x1, tmp_path, micro_batches):
    record_path = tmp_path / "run.json"
    result = _torchrun(plan_1x1, 2, record_path, "--micro-batches", str(micro_batches),
                       "--batch", "7", "--steps", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(record_path.read_text())
    assert record["config"]["micro_batches"] == micro_batches
    assert record["shape"]["shared_experts"] == 1
    assert record["shape"]["moe_layers"] == [False, True, True]
    _check_against_reference(record)
    _check_timings(record)


def test_a_world_of_the_wrong_size_is_refused(plan_1x1, tmp_path):
    result = _torchrun(plan_1x1, 1, tmp_path / "run.json")
    assert result.returncode != 0
    assert "error: the plan's AFD decode world is 1 attention + 1 FFN GPUs" in result.stderr


# --- planner launch -----------------------------------------------------------------------


def test_planner_launch_runs_the_decode_pools_of_an_afd_plan(plan_2x2, tmp_path):
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not on PATH")
    record_path = tmp_path / "launch.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "planner", "launch", str(plan_2x2),
                             "--record", str(record_path), "--script-arg", "--steps",
                             "--script-arg", "2"],
                            capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    assert ("planner launch: AFD plan: running its decode pools here (2 attention + 2 FFN "
            "processes); the prefill pool (2 GPUs) is not run") in lines
    assert any("--nproc-per-node=4 -m planner.run.afd_job" in line for line in lines)
    record = json.loads(record_path.read_text())
    assert record["schema"] == "planner.afd-run-record/v1" and record["world_size"] == 4
    assert len(record["step_times_max_s"]) == 2


def test_planner_launch_dry_run_of_an_afd_plan(plan_2x2):
    result = CliRunner().invoke(app, ["launch", str(plan_2x2), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "--nproc-per-node=4" in result.output and "planner.run.afd_job" in result.output


def test_planner_launch_refuses_an_afd_world_too_big_for_one_machine(plan_2x2, monkeypatch):
    import planner.run.launch as launch
    monkeypatch.setattr(launch, "MAX_LOCAL_PROCESSES", 3)
    result = CliRunner().invoke(app, ["launch", str(plan_2x2), "--dry-run"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "error: the plan's AFD decode pools need 2 attention + 2 FFN = 4 processes on this "
        "machine, more than 3")


def test_planner_launch_refuses_a_serving_plan_that_is_not_afd(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER.format(name="col", gpus=2))
    out = tmp_path / "colocated.json"
    result = CliRunner().invoke(app, ["serve", "--model", str(ROOT / "tests/fixtures/tiny-moe.yaml"),
                                      "--cluster", str(cluster), "--mode", "colocated",
                                      "--isl", "512", "--osl", "64", "--out", str(out)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["launch", str(out), "--dry-run"])
    assert result.exit_code == 2
    assert "this is a colocated serving plan" in result.output
