"""SlimPipe sequence slicing end to end: the cost model's bubble and activation memory agree
with ``solvers.pipeline.slimpipe``'s formulas, the plan's timeline simulation agrees with both, and the
search picks slicing when the pipeline bubble matters at long context."""
from __future__ import annotations

import pytest

from cost_models.parallel import ConfigError, Degrees

from cost_models.training.config import TrainingConfig, Workload, check_config
from cost_models.profile import default_profile
from cost_models.training.step import estimate
from planner.emit import EmitOptions, emit
from planner.inputs.models import load_model
from planner.training.build import build_plan
from planner.training.search import SLIMPIPE_MIN_SEQ, SearchSpace, search, seq_slice_counts
from planner.training.timeline import simulate_plan
from planner.plan.validate import plan_problems
from solvers.pipeline import slimpipe
from topologies.standard import homogeneous_cluster

GPU = "H100-SXM5-80GB"
WORK = Workload(131072, 8)


@pytest.fixture(scope="module")
def setup():
    return load_model("llama-3.1-8b"), homogeneous_cluster(GPU, 4, 8), default_profile(GPU)


def _cfg(k: int, **kw) -> TrainingConfig:
    base = dict(tp=8, pp=4, dp=1, micro_batch=1, sequence_parallel=True, recompute="none")
    base.update(kw)
    return TrainingConfig.from_dict({**base, "seq_slices": k})


@pytest.mark.parametrize("k", [2, 4, 8, 16])
def test_cost_model_bubble_is_slimpipes(setup, k):
    model, cluster, prof = setup
    est = estimate(model, cluster, WORK, _cfg(k), prof)
    mean_s = sum(s.total_s for s in est.stages) / len(est.stages)
    m = est.config.micro_batches(WORK)
    problem = slimpipe.SlicingProblem(linear_s=mean_s, attention_s=0.0, num_stages=4,
                                      num_microbatches=m, activation_bytes=1.0,
                                      memory_budget_bytes=1.0)
    assert est.time.bubble_s == pytest.approx(slimpipe.step_time_s(problem, k) - m * mean_s,
                                              rel=1e-12)


@pytest.mark.parametrize("k", [2, 4, 8, 16])
def test_cost_model_activations_follow_slimpipe_in_flight_slices(setup, k):
    model, cluster, prof = setup
    one = estimate(model, cluster, WORK, _cfg(1), prof)
    sliced = estimate(model, cluster, WORK, _cfg(k), prof)
    m = one.config.micro_batches(WORK)
    problem = slimpipe.SlicingProblem(linear_s=1.0, attention_s=0.0, num_stages=4,
                                      num_microbatches=m, activation_bytes=1.0,
                                      memory_budget_bytes=1.0)
    for s in range(4):
        ratio = sliced.stage_memory[s].activations_bytes / one.stage_memory[s].activations_bytes
        expected = (slimpipe.in_flight_slices(problem, k, s) / k) / min(4 - s, m)
        assert ratio == pytest.approx(expected, rel=1e-12)
    assert sliced.memory.peak_bytes < one.memory.peak_bytes


def test_slicing_costs_more_kernels_but_the_same_attention(setup):
    model, cluster, prof = setup
    one, four = (estimate(model, cluster, WORK, _cfg(k), prof) for k in (1, 4))
    # smaller GEMMs and 4x the launches: each micro-batch's own work can only grow
    assert four.stages[0].compute_s >= one.stages[0].compute_s
    # ... but by little at 128K tokens, while the bubble shrinks fourfold
    assert four.stages[0].compute_s < 1.05 * one.stages[0].compute_s
    assert four.time.bubble_s < one.time.bubble_s / 3.5


def test_plan_timeline_simulates_slimpipe_order(setup):
    model, cluster, prof = setup
    k = 8
    est = estimate(model, cluster, WORK, _cfg(k), prof)
    plan = build_plan(model, cluster, est, prof)
    assert plan.schedule == "slimpipe" and plan_problems(plan) == []
    problem, result = simulate_plan(plan, max_microbatches=None)
    m = plan.micro_batches
    assert problem.num_microbatches == m * k
    # stage s holds min(m k, k + p - s - 1) slices at its peak: the memory model's count
    assert result.peak_in_flight == tuple(min(m * k, k + 4 - s - 1) for s in range(4))
    # one device's work plus a bubble near the cost model's (p - 1)/k * mean stage time
    assert result.step_s == pytest.approx(est.step_time_s - est.time.dp_comm_s
                                          - est.time.optimizer_s, rel=0.05)


def test_search_slices_long_context_pipelines(setup):
    model, cluster, prof = setup
    space = SearchSpace(pp=4, cp=1, tp=8, schedules=("1f1b", "slimpipe"))
    result = search(model, cluster, WORK, prof, space, top_k=1)
    best = result.ranked[0].config
    assert best.seq_slices > 1
    no_slices = search(model, cluster, WORK, prof,
                       SearchSpace(pp=4, cp=1, tp=8, schedules=("1f1b",)), top_k=1).ranked[0]
    assert result.ranked[0].step_time_s < no_slices.step_time_s


def test_short_sequences_are_not_sliced(setup):
    """Below the search's long-context threshold no plan is sliced, from it up slices are
    tried (the threshold is imported, not pinned here)."""
    model, cluster, prof = setup
    short = Workload(SLIMPIPE_MIN_SEQ // 2, 64)
    ranked = search(model, cluster, short, prof, SearchSpace(pp=4), top_k=5).ranked
    assert all(e.config.seq_slices == 1 for e in ranked)
    cfg = TrainingConfig(degrees=Degrees(tp=8, pp=4), sequence_parallel=True)
    assert seq_slice_counts(cfg, short) == []
    assert seq_slice_counts(cfg, Workload(SLIMPIPE_MIN_SEQ, 8)) != []


def test_slices_must_divide_the_sequence_and_need_plain_1f1b(setup):
    model, _, _ = setup
    with pytest.raises(ConfigError):
        check_config(model, Workload(131072 + 8, 8), _cfg(16), 32)
    with pytest.raises(ConfigError):
        TrainingConfig(degrees=Degrees(tp=8, pp=4), vpp=2, seq_slices=2)
    with pytest.raises(ConfigError):
        TrainingConfig(degrees=Degrees(tp=8, pp=4), zero_bubble=True, seq_slices=2)
    with pytest.raises(ConfigError):
        TrainingConfig(degrees=Degrees(tp=8, pp=1, dp=4), seq_slices=2)


def test_emitters_warn_that_frameworks_run_plain_1f1b(setup):
    model, cluster, prof = setup
    plan = build_plan(model, cluster, estimate(model, cluster, WORK, _cfg(4), prof), prof)
    for fmt, name in (("megatron", "megatron_args.sh"), ("torchtitan", "torchtitan.toml")):
        text = emit(fmt, plan, EmitOptions())[name]
        assert "SlimPipe (4 sequence slices" in text


def test_estimate_command_takes_seq_slices_and_zero_bubble(setup):
    import json

    from typer.testing import CliRunner

    from planner.cli.app import app
    runner = CliRunner()
    args = ["estimate", "--model", "llama-3.1-8b", "--gpu", GPU, "--nodes", "4", "--tp", "8",
            "--pp", "4", "--seq-len", "131072", "--global-batch", "8", "--format", "json"]
    one = json.loads(runner.invoke(app, args).output)
    eight = json.loads(runner.invoke(app, args + ["--seq-slices", "8"]).output)
    assert eight["config"]["seq_slices"] == 8 and eight["config"]["schedule"] == "slimpipe"
    assert eight["time"]["bubble_s"] < one["time"]["bubble_s"] / 7
    zb = json.loads(runner.invoke(app, args + ["--zero-bubble"]).output)
    assert zb["config"]["schedule"] == "zb-h1" and zb["time"]["bubble_s"] < one["time"]["bubble_s"]
    bad = runner.invoke(app, args[:-2] + ["--pp", "1", "--dp", "4", "--seq-slices", "2"])
    assert bad.exit_code == 2 and "--seq-slices" in bad.output
