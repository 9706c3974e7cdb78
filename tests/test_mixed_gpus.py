"""Mixed GPU types in training plans (issue 20): each stage and each data-parallel replica
runs at its own GPU's pace and holds its own GPU's memory, the layer split follows both, and
replicas on faster GPUs take more micro-batches (DP batch shares)."""
from __future__ import annotations

import copy
import itertools
from dataclasses import replace

import pytest

from cost_models.parallel import Degrees
from cost_models.profile import default_profile
from cost_models.training.config import TrainingConfig
from cost_models.training.step import compute_floor_s, estimate
from planner.inputs.models import load_model
from planner.plan.document import Plan, plan_from_dict, plan_from_json, plan_to_dict, plan_to_json
from planner.plan.validate import plan_problems
from planner.training.estimation import make_workload
from planner.training.shares import refine_shares, share_problem
from planner.training.slicing import partition_problem, refine_partition
from planner.training.solve import solve
from cost_models.groups import stage_views
from solvers.batch_shares import brute_force_shares, solve_shares
from solvers.pipeline.dp import brute_force_partition, partition_layers
from topologies.spec import cluster_from_dict

PROF = default_profile("A100-SXM4-80GB")


def _mixed(a: int, b: int, gpu_a: str = "A100-SXM4-80GB", gpu_b: str = "H100-SXM5-80GB"):
    nics = [{"count": 8, "gbps": 400, "transport": "ib"}]
    return cluster_from_dict({"name": "mixed", "node_groups": [
        {"name": "a", "count": a, "gpu": gpu_a, "gpus_per_node": 8, "fabric": "nvswitch",
         "nics": nics},
        {"name": "b", "count": b, "gpu": gpu_b, "gpus_per_node": 8, "fabric": "nvswitch",
         "nics": nics}], "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 16}]}})


def _config(tp: int, pp: int, dp: int, **options) -> TrainingConfig:
    return TrainingConfig(degrees=Degrees(tp=tp, pp=pp, dp=dp),
                          **{"zero": 1, "recompute": "selective", **options})


def test_stage_on_faster_gpus_is_a_faster_stage() -> None:
    """Stage 0 on A100 nodes, stage 1 on H100 nodes (listing order): with the same layers the
    H100 stage is clearly faster, and the A100-only cluster is slower than the mixed one."""
    model, wl = load_model("llama-3.1-8b"), make_workload(4096, 64, "bf16")
    cfg = _config(8, 2, 2, stage_layer_counts=(16, 16))
    mixed = estimate(model, _mixed(2, 2), wl, cfg, PROF)
    a100 = estimate(model, _mixed(2, 2, gpu_b="A100-SXM4-80GB"), wl, cfg, PROF)
    first, last = (s.compute_s for s in mixed.stages)
    assert first > 1.5 * last  # 312 vs 989 bf16 TFLOPS (the LM head adds to the last stage)
    assert mixed.stages[0].compute_s == a100.stages[0].compute_s
    assert mixed.step_time_s < a100.step_time_s


def test_each_gpu_type_runs_at_its_own_gemm_efficiency() -> None:
    """A100 + H100 under the A100's profile (what planner loads for a mixed cluster): the H100
    stage computes exactly as it does on an all-H100 cluster under the H100's own defaults
    (GEMM efficiency 0.69, not the A100's 0.79), and the A100 stage as on an all-A100 one."""
    model, wl = load_model("llama-3.1-8b"), make_workload(4096, 64, "bf16")
    cfg = _config(8, 2, 2, stage_layer_counts=(16, 16))
    mixed = estimate(model, _mixed(2, 2), wl, cfg, PROF)
    h100 = estimate(model, _mixed(2, 2, gpu_a="H100-SXM5-80GB"), wl, cfg,
                    default_profile("H100-SXM5-80GB"))
    a100 = estimate(model, _mixed(2, 2, gpu_b="A100-SXM4-80GB"), wl, cfg, PROF)
    assert default_profile("H100-SXM5-80GB").gemm_efficiency < PROF.gemm_efficiency
    assert mixed.stages[1].compute_s == pytest.approx(h100.stages[1].compute_s, rel=1e-12)
    assert mixed.stages[0].compute_s == pytest.approx(a100.stages[0].compute_s, rel=1e-12)


def test_speed_proportional_split_beats_even_and_equals_brute_force() -> None:
    """The DP's split gives the A100 stage fewer layers, beats the even split, and is the best
    of every two-stage split by the full estimate."""
    model, wl, cluster = load_model("llama-3.1-8b"), make_workload(4096, 64, "bf16"), _mixed(2, 2)
    even = estimate(model, cluster, wl, _config(8, 2, 2), PROF)
    split = refine_partition(model, cluster, wl, even, PROF)
    counts = split.config.stage_layer_counts
    assert counts is not None and counts[0] < counts[1]
    assert split.step_time_s < even.step_time_s * 0.8
    every = [estimate(model, cluster, wl, _config(8, 2, 2, stage_layer_counts=(k, 32 - k)), PROF)
             for k in range(1, 32)]
    best = min(e.step_time_s for e in every if e.memory.fits)
    assert split.step_time_s == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("gpus", [("A100-SXM4-80GB", "H100-SXM5-80GB"),
                                  ("H100-SXM5-80GB", "H200-SXM-141GB")])
def test_partition_dp_equals_brute_force_on_mixed_stages(gpus) -> None:
    model, wl = load_model("llama-3.1-8b"), make_workload(4096, 64, "bf16")
    cluster = _mixed(1, 1, *gpus)
    est = estimate(model, cluster, wl, _config(4, 4, 1), PROF)
    problem = partition_problem(model, cluster, wl, est, PROF,
                                stage_views(cluster, est.config.degrees))
    assert problem.stage_memory_limit_bytes[0] <= problem.stage_memory_limit_bytes[-1]
    assert partition_layers(problem).bottleneck_s == pytest.approx(
        brute_force_partition(problem).bottleneck_s, rel=1e-12)


def test_memory_split_moves_layers_onto_the_larger_gpus() -> None:
    """H100 (80 GB) + H200 (141 GB): the even split does not fit on the H100 stage; the split
    by per-stage memory gives the H200 stage more layers and fits."""
    model, wl = load_model("llama-3.1-70b"), make_workload(4096, 8, "bf16")
    cluster = _mixed(1, 1, "H100-SXM5-80GB", "H200-SXM-141GB")
    even = estimate(model, cluster, wl, _config(8, 2, 1, recompute="full"), PROF)
    assert not even.memory.fits
    assert even.stage_memory[0].capacity_bytes < even.stage_memory[1].capacity_bytes
    split = refine_partition(model, cluster, wl, even, PROF)
    assert split.memory.fits
    assert split.config.stage_layer_counts[0] < split.config.stage_layer_counts[1]


def test_batch_shares_beat_equal_and_equal_brute_force() -> None:
    """pp = 1 on 2 A100 + 2 H100 nodes: replicas on H100s take more micro-batches; the shares
    are the best of every split by the full estimate (ZeRO-1: the sync does not depend on
    the shares, so the estimate is the solver's objective plus a constant)."""
    model, wl, cluster = load_model("llama-3.1-8b"), make_workload(4096, 16, "bf16"), _mixed(2, 2)
    equal = estimate(model, cluster, wl, _config(8, 1, 4), PROF)
    shared = refine_shares(model, cluster, wl, equal, PROF)
    shares = shared.config.dp_shares
    assert shares is not None and sum(shares) == 16
    assert shares[0] == shares[1] < shares[2] == shares[3]  # replicas 0, 1 on A100 nodes
    assert shared.step_time_s < equal.step_time_s * 0.85
    best = min(estimate(model, cluster, wl, _config(8, 1, 4, dp_shares=(*head, 16 - sum(head))),
                        PROF).step_time_s
               for head in itertools.product(range(1, 14), repeat=3) if sum(head) < 16)
    assert shared.step_time_s == pytest.approx(best, rel=1e-12)
    problem = share_problem(equal)
    assert solve_shares(problem).bottleneck_s == brute_force_shares(problem).bottleneck_s


def test_no_shares_on_one_gpu_type() -> None:
    model, wl = load_model("llama-3.1-8b"), make_workload(4096, 16, "bf16")
    cluster = _mixed(2, 2, gpu_b="A100-SXM4-80GB")
    est = estimate(model, cluster, wl, _config(8, 1, 4), PROF)
    assert est.replica_micro_batch_s == () and share_problem(est) is None
    assert refine_shares(model, cluster, wl, est, PROF) is est


def test_compute_floor_stays_a_lower_bound_on_mixed_clusters() -> None:
    model, wl, cluster = load_model("llama-3.1-8b"), make_workload(4096, 16, "bf16"), _mixed(2, 2)
    cfg = _config(8, 1, 4)
    shared = refine_shares(model, cluster, wl, estimate(model, cluster, wl, cfg, PROF), PROF)
    assert compute_floor_s(model, cluster, wl, cfg, PROF) <= shared.step_time_s


@pytest.fixture(scope="module")
def shared_plan() -> Plan:
    """The best plan of a small A100 + H100 cluster with pp fixed to 1: it uses shares."""
    from planner.training.search import SearchSpace
    model, wl, cluster = load_model("llama-3.1-8b"), make_workload(4096, 32, "bf16"), _mixed(1, 1)
    result = solve(model, cluster, wl, PROF, SearchSpace(pp=1, tp=8), top_k=2)
    return result.plans[0]


def test_plan_carries_shares_and_round_trips(shared_plan: Plan) -> None:
    shares = shared_plan.training["options"]["dp_shares"]
    assert shares[0] < shares[1] and sum(shares) == 2 * shared_plan.micro_batches
    assert shared_plan.replica_micro_batches() == tuple(shares)
    assert any(n.startswith("DP batch shares") and "faster" in n for n in shared_plan.notes)
    text = plan_to_json(shared_plan)
    again = plan_from_json(text)
    assert plan_to_json(again) == text
    assert again.training["options"]["dp_shares"] == shares
    assert plan_problems(again) == []


@pytest.mark.parametrize("bad, says", [
    (lambda s: [s[0] + 1, s[1]], "sum"),
    (lambda s: [0, s[0] + s[1]], ">= 1"),
    (lambda s: [s[0] + s[1]], ">= 1"),
])
def test_validator_refuses_bad_shares(shared_plan: Plan, bad, says) -> None:
    data = copy.deepcopy(plan_to_dict(shared_plan))
    opts = data["training"]["options"]
    opts["dp_shares"] = bad(opts["dp_shares"])
    problems = plan_problems(plan_from_dict(data))
    assert any("dp_shares" in p and says in p for p in problems), problems


def test_search_ranks_tuples_with_their_shares() -> None:
    """The search judges each degree tuple with its batch shares, so its single best 1F1B plan
    on a small A100 + H100 cluster (shares need vpp 1) is a shared one, faster than its best
    without shares."""
    from planner.training.search import SearchSpace, search
    model, wl, cluster = load_model("llama-3.1-8b"), make_workload(4096, 64, "bf16"), _mixed(2, 2)
    space = SearchSpace(schedules=("1f1b",))
    shared = search(model, cluster, wl, PROF, space, top_k=1).ranked[0]
    plain = search(model, cluster, wl, PROF, space, top_k=1, batch_shares=False).ranked[0]
    assert shared.config.dp_shares is not None
    assert shared.step_time_s < plain.step_time_s


@pytest.mark.parametrize("fmt", ["megatron", "deepspeed", "torchtitan"])
def test_emitters_say_they_cannot_run_shares(shared_plan: Plan, fmt: str) -> None:
    from planner.emit import emission
    from planner.plan.document import plan_from_dict
    out = emission(fmt, shared_plan)
    assert any("dp_shares" in n and "cannot express" in n for n in out.notes)
    equal = copy.deepcopy(plan_to_dict(shared_plan))
    del equal["training"]["options"]["dp_shares"]
    assert not any("dp_shares" in n for n in emission(fmt, plan_from_dict(equal)).notes)


def test_runtime_gives_each_rank_its_replicas_share(shared_plan: Plan) -> None:
    from planner.runtime import replica_micro_batches
    shares = shared_plan.training["options"]["dp_shares"]
    gpus_per_replica = shared_plan.num_gpus // len(shares)
    assert [replica_micro_batches(shared_plan, r * gpus_per_replica)
            for r in range(len(shares))] == shares


def test_search_uses_the_larger_gpus_memory() -> None:
    """H100 + H200, Llama-3.1-70B on two stages of one node each: the option the search keeps
    does not fit on the H100 with the even split; it fits with more layers on the H200 stage
    (without the memory-led split the search keeps more recompute or finds nothing)."""
    from cost_models.training.step import memory_fits
    from planner.training.search import SearchSpace, search
    model, wl = load_model("llama-3.1-70b"), make_workload(4096, 8, "bf16")
    cluster = _mixed(1, 1, "H100-SXM5-80GB", "H200-SXM-141GB")
    best = search(model, cluster, wl, PROF, SearchSpace(tp=8, pp=2, schedules=("1f1b",)),
                  top_k=1).ranked[0]
    assert best.memory.fits
    assert not memory_fits(model, cluster, wl, replace(best.config, stage_layer_counts=None),
                           PROF)
    counts = best.config.stage_layer_counts
    assert counts is not None and counts[0] < counts[1]


def test_memory_fits_only_when_every_stage_fits() -> None:
    """On GPUs of different memory sizes the stage that needs most (here on an H200) is not
    the one that binds: the H100 stage behind it needs less but has less. Placed H200 first,
    Llama-3.1-70B with pp = 4 and no recompute overflows stage 2 only."""
    model, wl = load_model("llama-3.1-70b"), make_workload(4096, 1024, "bf16")
    cluster = _mixed(8, 8, "H100-SXM5-80GB", "H200-SXM-141GB")
    order = (*range(12, 16), *range(8, 12), *range(4, 8), *range(4))
    est = estimate(model, cluster, wl, _config(1, 4, 32, recompute="none", zero=2), PROF, order)
    per_stage = [m.fits for m in est.stage_memory]
    assert per_stage == [True, True, False, True]
    assert max(est.stage_memory, key=lambda m: m.peak_bytes).fits  # the largest fits...
    assert not est.memory.fits  # ...but the configuration does not
    assert est.memory is est.stage_memory[2]


def test_explain_names_the_shares(shared_plan: Plan) -> None:
    from rich.console import Console

    from planner.report.explain import render_explain
    console = Console(width=200, record=True)
    console.print(render_explain(shared_plan))
    shares = shared_plan.training["options"]["dp_shares"]
    assert (f"micro-batches per DP replica 1 x {shares[0]}, 1 x {shares[1]}"
            in console.export_text())


def test_no_shares_when_a_replica_holds_fewer_micro_batches_than_stages() -> None:
    """With m < pp a larger share would hold more activations in flight than the estimate
    counted (1F1B keeps min(pp - s, m)), so shares are not tried; with m >= pp they are."""
    model, cluster = load_model("llama-3.1-8b"), _mixed(2, 2)
    order = (0, 2, 1, 3)  # each stage on one A100 and one H100 node, so its replicas differ
    few = estimate(model, cluster, make_workload(4096, 4, "bf16"), _config(4, 2, 4), PROF, order)
    assert few.config.micro_batches(few.workload) < 2 and len(set(few.replica_micro_batch_s)) > 1
    assert share_problem(few) is None
    many = estimate(model, cluster, make_workload(4096, 64, "bf16"), _config(8, 2, 2), PROF,
                    order)
    problem = share_problem(many)
    assert problem is not None and problem.total == 64
    # stages that mix GPU types: the H100 replica takes more and the step gets shorter
    shared = refine_shares(model, cluster, many.workload, many, PROF)
    assert shared.config.dp_shares[0] < shared.config.dp_shares[1]
    assert shared.step_time_s < many.step_time_s


def _blocks_from_groups(d) -> set[frozenset[int]]:
    """Connected DP replicas, computed independently: every EP group's members' dp coordinates
    joined until nothing changes."""
    import numpy as np

    from cost_models.groups import groups_of
    from cost_models.parallel import Axis, rank_coords
    dp_of = rank_coords(d)[Axis.DP]
    blocks = [{r} for r in range(d.dp)]
    for members in (groups_of(d, "ep") if d.ep > 1 else []):
        joined = {int(dp_of[m]) for m in members}
        touching = [b for b in blocks if b & joined]
        merged = set().union(joined, *touching)
        blocks = [b for b in blocks if not b & joined] + [merged]
    assert sorted(np.concatenate([sorted(b) for b in blocks])) == list(range(d.dp))
    return {frozenset(b) for b in blocks}


@pytest.mark.parametrize("tp,dp,ep,etp", [(1, 8, 1, None), (1, 8, 4, None), (8, 4, 16, 1),
                                          (4, 3, 6, 1), (2, 4, 2, 1), (2, 4, 4, None),
                                          (2, 6, 4, 1), (4, 4, 8, 2)])
def test_lockstep_replicas_are_the_replicas_ep_groups_join(tp, dp, ep, etp) -> None:
    from cost_models.parallel import lockstep_replicas
    d = Degrees(tp=tp, dp=dp, ep=ep, etp=etp, pp=2)
    blocks = lockstep_replicas(d)
    assert {frozenset(b) for b in blocks} == _blocks_from_groups(d)
    assert [b[0] for b in blocks] == sorted(b[0] for b in blocks)


def test_shares_with_expert_parallelism_keep_each_ep_group_in_lockstep() -> None:
    """Qwen3-30B-A3B, tp 8 dp 4 ep 16 (etp 1) on 2 A100 + 2 H100 nodes: each EP group joins
    two replicas. The shares give both members of a group the same count (A100 replicas
    fewer), are the best of every such split by the full estimate, and a config that splits
    a group unequally is refused."""
    from cost_models.parallel import ConfigError
    model, wl, cluster = load_model("qwen3-30b-a3b"), make_workload(4096, 32, "bf16"), _mixed(2, 2)
    cfg = TrainingConfig(degrees=Degrees(tp=8, dp=4, ep=16, etp=1), zero=1,
                         recompute="selective", micro_batch=1)
    equal = estimate(model, cluster, wl, cfg, PROF)
    shared = refine_shares(model, cluster, wl, equal, PROF)
    shares = shared.config.dp_shares
    assert shares is not None and shares[0] == shares[1] < shares[2] == shares[3]
    assert shared.step_time_s < equal.step_time_s
    best = min(estimate(model, cluster, wl, replace(cfg, dp_shares=(a, a, 16 - a, 16 - a)),
                        PROF).step_time_s for a in range(1, 16))
    assert shared.step_time_s == pytest.approx(best, rel=1e-12)
    with pytest.raises(ConfigError, match="expert-parallel group"):
        replace(cfg, dp_shares=(7, 9, 8, 8))
    # one EP group joins the A100 replica and the H100 replica: they run in lockstep, so no
    # shares, though their speeds differ (a per-replica split would give the H100 more)
    one = TrainingConfig(degrees=Degrees(tp=8, dp=2, ep=16, etp=1), zero=1,
                         recompute="selective", micro_batch=1)
    both = estimate(model, _mixed(1, 1), wl, one, PROF)
    assert len(set(both.replica_micro_batch_s)) == 2
    assert refine_shares(model, _mixed(1, 1), wl, both, PROF).config.dp_shares is None


def test_timeline_of_a_shares_plan_says_it_shows_the_mean_count() -> None:
    """Two stages mixing A100 and H100 nodes, replicas with unequal shares: the timeline keeps
    the shares and its note says the picture is one pipeline at the mean count."""
    from planner.report.timeline import timeline_note
    from planner.training.build import build_plan
    from planner.training.timeline import plan_timeline
    model, cluster = load_model("llama-3.1-8b"), _mixed(2, 2)
    wl = make_workload(4096, 64, "bf16")
    est = estimate(model, cluster, wl, _config(8, 2, 2), PROF, (0, 2, 1, 3))
    shared = refine_shares(model, cluster, wl, est, PROF)
    shares = shared.config.dp_shares
    assert shares is not None and len(set(shares)) > 1
    timeline = plan_timeline(build_plan(model, cluster, shared, PROF))
    assert timeline.replica_shares == shares
    assert timeline.plan_microbatches == sum(shares) // 2
    note = timeline_note(timeline).plain
    assert f"DP batch shares of {min(shares)}-{max(shares)} micro-batches" in note
    even = plan_timeline(build_plan(model, cluster, est, PROF))
    assert even.replica_shares == () and "shares" not in timeline_note(even).plain
