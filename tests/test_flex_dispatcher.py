"""The flex (DeepEP / HybridEP) MoE token dispatcher: tokens sent once per destination GPU and,
across nodes, once per destination node (``cost_models.communication.dedup_dispatch_s``)."""
from __future__ import annotations

import itertools
import json

import pytest
from typer.testing import CliRunner

from cost_models import communication as comm
from cost_models.parallel import ConfigError, Degrees
from cost_models.profile import Profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.step import estimate
from planner.cli.app import app
from planner.inputs.models import load_model
from topologies.cluster import GroupView, LinkTier
from topologies.standard import homogeneous_cluster

PROF = Profile()
NVLINK = LinkTier("nvlink", 450e9, 3e-6)
IB = LinkTier("ib", 50e9, 5e-6)


def _brute_distinct(num_experts: int, top_k: int, groups: int) -> float:
    """Mean over every set of top_k distinct experts of the groups it touches."""
    per = num_experts // groups
    sets = list(itertools.combinations(range(num_experts), top_k))
    return sum(len({e // per for e in s}) for s in sets) / len(sets)


@pytest.mark.parametrize("e,k,g", [(8, 2, 1), (8, 2, 2), (8, 2, 4), (8, 2, 8), (12, 3, 3),
                                   (12, 3, 4), (16, 4, 4), (16, 8, 2), (10, 1, 5)])
def test_distinct_groups_equals_enumeration(e, k, g):
    assert comm.distinct_groups_hit(e, k, g) == pytest.approx(_brute_distinct(e, k, g), rel=1e-12)


def _brute_limited(e: int, k: int, slices: int, groups: int, chosen: int) -> float:
    """Mean over every choice of ``chosen`` router groups, then of top_k experts among theirs
    (each equally likely, as force-balanced group-limited routing draws them), of the slices
    the experts touch (consecutive, expert x in slice ``x * slices // e``: whole experts, so
    the slices differ by one expert where ``slices`` does not divide ``e``)."""
    per_group = e // groups
    total = count = 0
    for picked in itertools.combinations(range(groups), chosen):
        pool = [j * per_group + i for j in picked for i in range(per_group)]
        sets = list(itertools.combinations(pool, k))
        total += sum(len({x * slices // e for x in s}) for s in sets) / len(sets)
        count += 1
    return total / count


@pytest.mark.parametrize("e,k,slices,groups,chosen", [
    (16, 3, 1, 4, 2), (16, 3, 2, 4, 2), (16, 3, 4, 4, 2), (16, 3, 8, 4, 2), (16, 3, 16, 4, 2),
    (12, 2, 3, 4, 2),    # a slice of 4 experts straddles groups of 3
    (16, 4, 8, 8, 3), (16, 2, 4, 4, 4),
    # slices that do not divide the experts (an expert is never split between two slices)
    (17, 4, 16, 17, 4), (5, 2, 4, 5, 2), (12, 3, 5, 4, 2), (12, 2, 7, 6, 3), (10, 3, 3, 1, 1),
    (9, 2, 12, 3, 2)])   # more slices than experts: some slices hold none
def test_group_limited_routing_equals_enumeration(e, k, slices, groups, chosen):
    """DeepSeek-V3's node-limited routing (``MoESpec.router_groups`` / ``router_group_topk``):
    the expected slices a token touches, against every draw."""
    got = comm.distinct_groups_hit(e, k, slices, groups, chosen)
    assert got == pytest.approx(_brute_limited(e, k, slices, groups, chosen), rel=1e-12)
    assert got <= min(k, slices) + 1e-12


@pytest.mark.parametrize("slices", [1, 2, 8, 64, 256])
def test_many_router_groups_are_counted_not_enumerated(slices):
    """256 groups of one expert, any 8 of them: no limit at all, so the same as unlimited
    routing (the count was a sum over the subsets of a slice's groups, 2^256 for one slice)."""
    assert comm.distinct_groups_hit(256, 8, slices, 256, 8) == pytest.approx(
        comm.distinct_groups_hit(256, 8, slices), rel=1e-12)


@pytest.mark.parametrize("slices", [2, 4, 8, 32, 64])
def test_group_limited_routing_touches_fewer_gpus_and_nodes(slices):
    """DeepSeek-V3 (256 experts, top 8 within 4 of 8 groups) on 2-64 GPUs or nodes: fewer
    destinations than routing over all experts, the same when every group may be picked."""
    limited = comm.distinct_groups_hit(256, 8, slices, 8, 4)
    assert limited < comm.distinct_groups_hit(256, 8, slices)
    assert comm.distinct_groups_hit(256, 8, slices, 8, 8) == pytest.approx(
        comm.distinct_groups_hit(256, 8, slices), rel=1e-12)
    if slices == 8:  # a slice per group: at most the 4 picked groups' slices (unlimited: 5.3)
        assert limited <= 4 < comm.distinct_groups_hit(256, 8, slices)


def _views():
    one_node = GroupView(size=8, members_per_domain=8, num_domains=1, intra=NVLINK, inter=None)
    four_nodes = GroupView(size=32, members_per_domain=8, num_domains=4, intra=NVLINK, inter=IB)
    return one_node, four_nodes


@pytest.mark.parametrize("top_k,experts", [(2, 8), (8, 256), (8, 128), (4, 64)])
def test_dedup_never_slower_than_all_to_all(top_k, experts):
    tokens, width = 4096, 7168 * 2
    for view in _views():
        flat = comm.all_to_all_s(view, tokens * top_k * width, PROF)
        dedup = comm.dedup_dispatch_s(view, tokens, top_k, experts, width, PROF)
        assert 0 < dedup <= flat * (1 + 1e-12)


def test_top1_across_nodes_moves_what_all_to_all_moves():
    """With one expert per token there is nothing to deduplicate: the network part (the
    slower here) equals the plain all-to-all's."""
    _, four = _views()
    tokens, width = 4096, 4096 * 2
    assert comm.dedup_dispatch_s(four, tokens, 1, 64, width, PROF) == pytest.approx(
        comm.all_to_all_s(four, tokens * width, PROF), rel=1e-9)


def test_deepseek_v3_over_four_nodes_sends_each_token_to_fewer_nodes():
    """Top-8 of 256 experts over 4 nodes: about 3.6 distinct nodes per token (2.7 remote)
    instead of 6 remote expert copies: the network part shrinks by that ratio."""
    _, four = _views()
    tokens, width = 4096, 7168 * 2
    remote_nodes = comm.distinct_groups_hit(256, 8, 4) * 3 / 4
    assert 2.6 < remote_nodes < 2.8
    flat = comm.all_to_all_s(four, tokens * 8 * width, PROF) - IB.latency_s
    dedup = comm.dedup_dispatch_s(four, tokens, 8, 256, width, PROF) - IB.latency_s
    assert dedup / flat == pytest.approx(remote_nodes / 6, rel=1e-9)


def test_flex_lowers_only_the_expert_all_to_all():
    model = load_model("deepseek-v3")
    cluster = homogeneous_cluster("H100", 32)
    w = Workload(seq_len=4096, global_batch=1024, precision="bf16")
    base = TrainingConfig(degrees=Degrees(tp=1, pp=8, dp=32, ep=32), recompute="full")
    prof = Profile()
    a = estimate(model, cluster, w, base, prof)
    b = estimate(model, cluster, w, TrainingConfig.from_dict(
        {**base.options_dict(), "degrees": {"tp": 1, "pp": 8, "dp": 32, "ep": 32},
         "moe_dispatcher": "flex"}), prof)
    assert b.time.ep_comm_s < 0.6 * a.time.ep_comm_s
    # the same GEMMs and copies; flex launches 20 fewer kernels a layer (compute.layer_launches)
    assert 0 < a.time.compute_s - b.time.compute_s < 0.01 * a.time.compute_s
    assert b.memory.peak_bytes == a.memory.peak_bytes


def test_config_names_the_dispatcher_only_when_not_the_default():
    d = Degrees(tp=1, pp=1, dp=8, ep=8)
    assert "moe_dispatcher" not in TrainingConfig(degrees=d).options_dict()
    flex = TrainingConfig(degrees=d, moe_dispatcher="flex")
    assert flex.options_dict()["moe_dispatcher"] == "flex"
    assert TrainingConfig.from_dict({"degrees": {"dp": 8, "ep": 8}, **flex.options_dict()}) == flex
    with pytest.raises(ConfigError):
        TrainingConfig(degrees=d, moe_dispatcher="deepep")


def test_cli_estimate_and_refusal():
    runner = CliRunner()
    args = ["estimate", "--model", "qwen3-30b-a3b", "--gpu", "H100", "--nodes", "2", "--ep", "16",
            "--recompute", "auto", "--format", "json"]
    plain = json.loads(runner.invoke(app, args).stdout)
    flex = json.loads(runner.invoke(app, args + ["--moe-dispatcher", "flex"]).stdout)
    assert flex["config"]["moe_dispatcher"] == "flex"
    assert flex["time"]["ep_comm_s"] < plain["time"]["ep_comm_s"]
    bad = runner.invoke(app, args + ["--moe-dispatcher", "deepep"])
    assert bad.exit_code == 2
