"""Process groups in Megatron order, placements, and the vectorised worst group view."""
from __future__ import annotations

import random

import numpy as np
import pytest

from cost_models import communication as comm
from cost_models.groups import KINDS, groups_of, rank_map, stage_groups, stage_views
from cost_models.parallel import Degrees
from cost_models.training.config import TrainingConfig
from cost_models.profile import Profile
from topologies.cluster import group_view, worst_group_view
from topologies.spec import cluster_from_dict


def _mixed_cluster():
    """Three node groups of two link speeds and two node sizes under a 2-node leaf tier."""
    def group(name, count, gpus, fabric, gbps):
        return {"name": name, "count": count, "gpu": "H100", "gpus_per_node": gpus,
                "fabric": fabric, "nics": [{"count": 1, "gbps": gbps, "transport": "ib"}]}
    return cluster_from_dict({
        "name": "mixed", "node_groups": [group("a", 2, 8, "nvswitch", 400),
                                         group("b", 2, 4, "pcie", 100),
                                         group("c", 1, 8, "nvswitch", 200)],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 2, "oversubscription": 2},
                              {"name": "spine", "nodes_per_switch": 8}]}})


def _slowness(view):
    b = view.bottleneck
    return (b.bw_bytes_per_s * (view.members_per_domain if b is view.inter else 1), -b.latency_s)


CONFIGS = [TrainingConfig(degrees=Degrees(tp=4, pp=2, dp=2, cp=2)), TrainingConfig(degrees=Degrees(tp=2, pp=4, dp=4)),
           TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=32, ep=8)), TrainingConfig(degrees=Degrees(tp=8, pp=2, dp=2, ep=2, etp=1)),
           TrainingConfig(degrees=Degrees(tp=2, pp=2, cp=2, dp=4, ep=4, etp=2))]


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_groups_partition_the_ranks(cfg, kind):
    """Every rank is in exactly one group of each kind (pp: one whole pipeline)."""
    groups = groups_of(cfg.degrees, kind)
    flat = sorted(r for g in groups for r in g)
    assert flat == list(range(cfg.degrees.num_gpus))
    size = {"tp": cfg.degrees.tp, "cp": cfg.degrees.cp, "dp": cfg.degrees.dp, "dp_cp": cfg.degrees.dp * cfg.degrees.cp, "pp": cfg.degrees.pp,
            "ep": cfg.degrees.ep, "edp": cfg.degrees.expert_dp}[kind]
    assert {len(g) for g in groups} == {size}


def test_megatron_order_formula():
    """rank = tp_r + tp*(cp_r + cp*(dp_r + dp*pp_r)) (Megatron RankGenerator, order tp-cp-dp-pp)."""
    cfg = TrainingConfig(degrees=Degrees(tp=2, pp=2, dp=2, cp=2))
    assert groups_of(cfg.degrees, "tp")[0] == [0, 1]
    assert groups_of(cfg.degrees, "cp")[0] == [0, 2]
    assert groups_of(cfg.degrees, "dp")[0] == [0, 4]
    assert groups_of(cfg.degrees, "pp")[0] == [0, 8]
    pairs = stage_groups(cfg.degrees, "pp")
    assert pairs[0][0].tolist() == [0, 8] and pairs[1][0].tolist() == [8, 0]


@pytest.mark.parametrize("seed", range(30))
def test_vectorised_worst_view_equals_brute_force(seed):
    cluster = _mixed_cluster()
    rng = random.Random(seed)
    size = rng.choice([2, 3, 4, 8])
    ranks = list(range(cluster.num_gpus))
    rng.shuffle(ranks)
    rows = np.array(ranks[: (len(ranks) // size) * size]).reshape(-1, size)
    fast = worst_group_view(cluster, rows)
    brute = min((group_view(cluster, r.tolist()) for r in rows), key=_slowness)
    assert _slowness(fast) == _slowness(brute)
    prof = Profile(link_efficiency={k: 1.0 for k in ("nvswitch", "pcie", "ib")})
    a2a = worst_group_view(cluster, rows, all_to_all=True)
    assert comm.all_to_all_s(a2a, 1e9, prof) == pytest.approx(
        max(comm.all_to_all_s(group_view(cluster, r.tolist()), 1e9, prof) for r in rows),
        rel=1e-3)


def _one_group_cluster():
    """One node group (the path that skips per-group gathers): 2-node NVLink domains under an
    oversubscribed 4-node leaf and a spine."""
    return cluster_from_dict({
        "name": "uniform", "node_groups": [
            {"name": "a", "count": 12, "gpu": "H100", "gpus_per_node": 4, "fabric": "nvswitch",
             "nvlink_domain_nodes": 2, "nics": [{"count": 4, "gbps": 400, "transport": "ib"}]}],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 4, "oversubscription": 3},
                              {"name": "spine", "nodes_per_switch": 12}]}})


@pytest.mark.parametrize("seed", range(20))
def test_one_group_worst_view_equals_brute_force(seed):
    cluster = _one_group_cluster()
    rng = random.Random(seed)
    size = rng.choice([2, 3, 4, 6, 8, 16])
    ranks = list(range(cluster.num_gpus))
    if seed % 2:
        rng.shuffle(ranks)  # odd seeds: members in no particular order
    rows = np.array(ranks[: (len(ranks) // size) * size]).reshape(-1, size)
    brute = min((group_view(cluster, r.tolist()) for r in rows), key=_slowness)
    assert _slowness(worst_group_view(cluster, rows)) == _slowness(brute)
    prof = Profile(link_efficiency={k: 1.0 for k in ("nvswitch", "pcie", "ib")})
    assert comm.all_to_all_s(worst_group_view(cluster, rows, all_to_all=True), 1e9, prof) == \
        pytest.approx(max(comm.all_to_all_s(group_view(cluster, r.tolist()), 1e9, prof)
                          for r in rows), rel=1e-3)


@pytest.mark.parametrize("make_cluster", [_mixed_cluster, _one_group_cluster])
def test_views_shared_by_layout_equal_fresh_views(make_cluster):
    """A search's layout memo hands later tuples views computed for earlier ones: they must be
    what each tuple's own computation gives, stage by stage and kind by kind."""
    from cost_models.groups import _stage_views
    cluster = make_cluster()
    n = cluster.num_gpus
    tuples = [Degrees(tp=tp, pp=pp, dp=n // (tp * pp), ep=ep)
              for tp in (1, 2, 4) for pp in (1, 2, 4) for ep in (1, 2, 4)
              if n % (tp * pp) == 0 and (n // (tp * pp)) % ep == 0]
    memo = {}
    for d in tuples:
        shared = _stage_views(cluster, d, None, memo)
        fresh = _stage_views(cluster, d, None, None)
        assert shared == fresh, d
    assert len(memo) < len(tuples) * len(KINDS)  # layouts did repeat


def test_rank_map_follows_node_order():
    cluster = _mixed_cluster()  # nodes: 8, 8, 4, 4, 8 GPUs
    mapped = rank_map(cluster, (4, 0, 1, 2, 3))
    assert sorted(mapped.tolist()) == list(range(cluster.num_gpus))
    assert mapped[:8].tolist() == list(range(24, 32))  # node 4 takes node rank 0
    assert rank_map(cluster, None).tolist() == list(range(cluster.num_gpus))


def test_stage_views_see_each_stages_own_links():
    """Two PCIe nodes host stage 1 when placed last: stage 0's TP stays on NVSwitch."""
    cluster = cluster_from_dict({
        "name": "two-speeds", "node_groups": [
            {"name": "fast", "count": 1, "gpu": "H100", "gpus_per_node": 8, "fabric": "nvswitch",
             "nics": [{"count": 8, "gbps": 400, "transport": "ib"}]},
            {"name": "slow", "count": 1, "gpu": "H100", "gpus_per_node": 8, "fabric": "pcie",
             "nics": [{"count": 8, "gbps": 400, "transport": "ib"}]}],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 2}]}})
    views = stage_views(cluster, Degrees(tp=8, pp=2, dp=1))
    assert views[0].tp.intra.name == "nvswitch" and views[1].tp.intra.name == "pcie"
    flipped = stage_views(cluster, Degrees(tp=8, pp=2, dp=1), node_order=(1, 0))
    assert flipped[0].tp.intra.name == "pcie"


def test_large_cluster_stage_views():
    """16,384 GPUs: TP stays in a node, DP spans the leaf switches (timed in benchmarks/)."""
    from topologies.standard import homogeneous_cluster
    views = stage_views(homogeneous_cluster("H100", 2048, 8), Degrees(tp=8, pp=16, dp=128))
    assert len(views) == 16 and views[0].tp.num_domains == 1 and views[0].tp.inter is None
    assert views[0].dp.num_domains == 128
