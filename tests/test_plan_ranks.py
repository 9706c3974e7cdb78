"""A pool's rank table as a rule plus exceptions (``planner/plan/ranks.py``).

The rule is checked against an independent reading of the placement (each logical rank's
physical GPU by :func:`cost_models.groups.rank_map` and :meth:`Cluster.locate`), exceptions
against random within-node permutations, and a plan for 131,072 GPUs against the size target
of issue 21 (plan files for 100K GPUs <= 5 MB).
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from cost_models.groups import groups_of, rank_map
from cost_models.parallel import COORD_AXES, KINDS, Degrees, rank_coords
from cost_models.profile import default_profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.step import estimate
from planner.inputs.models import load_model
from planner.plan.document import plan_from_dict, plan_to_dict, plan_to_json
from planner.plan.ranks import (RANK_RULE, exceptions_of, make_pool, placed_slots, rule_slots)
from planner.plan.validate import plan_problems, pool_problems
from planner.training.build import build_plan
from topologies.spec import cluster_from_dict
from topologies.standard import homogeneous_cluster

MAX_PLAN_BYTES = 5 * 10**6  # issue 21: plan files for 100K GPUs <= 5 MB


def mixed_cluster():
    """Three node groups with 8, 4 and 8 GPUs per node (8 nodes, 48 GPUs)."""
    def group(name, count, gpus):
        return {"name": name, "count": count, "gpu": "H100", "gpus_per_node": gpus,
                "fabric": "nvswitch", "nics": [{"count": gpus, "gbps": 400, "transport": "ib"}]}
    return cluster_from_dict({"name": "mixed", "node_groups": [
        group("a", 3, 8), group("b", 4, 4), group("c", 1, 8)],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 8}]}})


@pytest.mark.parametrize("seed", range(5))
def test_the_rule_is_the_placement_rank_map_gives(seed):
    """Rank r of the pool runs on node_order's node and GPU that ``rank_map`` + ``locate``
    give it, and its coordinates and groups are the rank order's."""
    cluster = mixed_cluster()
    order = np.random.default_rng(seed).permutation(cluster.num_nodes).tolist()
    d = Degrees(tp=4, pp=2, dp=6)
    pool = make_pool("train", "train", cluster, d, order)
    rows = pool.rank_rows()
    physical = rank_map(cluster, order)
    coords = rank_coords(d)
    for r, row in enumerate(rows):
        _, node, local = cluster.locate(int(physical[r]))
        assert (row["rank"], order[row["node_rank"]], row["local"]) == (r, node, local)
        assert all(row[str(a)] == coords[a][r] for a in COORD_AXES)
    assert pool.groups == {kind: groups_of(d, kind) for kind in KINDS}
    assert pool.num_gpus == d.num_gpus == len(rows)
    assert [n["first_rank"] for n in pool.nodes] == [
        next(r["rank"] for r in rows if r["node_rank"] == i) for i in range(len(order))]


@pytest.mark.parametrize("seed", range(5))
def test_exceptions_round_trip_random_gpu_permutations(seed):
    """Any permutation of GPUs within nodes is stored as exactly the ranks that moved, and
    reads back to the same slots."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([2, 4, 8], size=6).tolist()
    node_rank, local = rule_slots(gpus)
    for i in rng.choice(len(gpus), size=3, replace=False):  # shuffle three nodes' GPUs
        mine = np.flatnonzero(node_rank == i)
        local[mine] = rng.permutation(local[mine])
    exceptions = exceptions_of(gpus, node_rank, local)
    rule_node, rule_local = rule_slots(gpus)
    assert [e[0] for e in exceptions] == np.flatnonzero(local != rule_local).tolist()
    again = placed_slots(gpus, exceptions)
    assert np.array_equal(again[0], node_rank) and np.array_equal(again[1], local)
    assert np.array_equal(again[0], rule_node)  # GPUs moved, nodes did not


@pytest.fixture(scope="module")
def small_pool_plan():
    model, cluster = load_model("llama-3.1-8b"), homogeneous_cluster("H100", 2)
    prof = default_profile("H100-SXM5-80GB")
    est = estimate(model, cluster, Workload(4096, 64),
                   TrainingConfig(degrees=Degrees(tp=2, pp=2, dp=4)), prof)
    return build_plan(model, cluster, est, prof)


def _with_exceptions(plan, exceptions):
    data = copy.deepcopy(plan_to_dict(plan))
    data["pools"][0]["ranks"]["exceptions"] = exceptions
    return plan_from_dict(data)


@pytest.mark.parametrize("exceptions, problem", [
    ([[2, 0, 3], [3, 0, 2]], None),  # a swap: valid
    ([[2, 0, 3]], "two ranks share one GPU (node rank 0 GPU 3)"),
    ([[3, 0, 2], [2, 0, 3]], "distinct and in increasing order"),
    ([[2, 0, 3], [2, 0, 3]], "distinct and in increasing order"),
    ([[-1, 0, 0]], "rank -1 is not one of 0..15"),
    ([[9, 1, -1]], "uses GPU -1"),
    ([[9, 5, 0]], "torchrun runs it on node rank 1"),
    ([[2, 0]], "whole numbers"),
    ({"2": [0, 3]}, "must be a list"),
])
def test_the_validator_checks_every_exception(small_pool_plan, exceptions, problem):
    plan = _with_exceptions(small_pool_plan, exceptions)
    problems = plan_problems(plan)
    if problem is None:
        assert problems == []
        assert [r["local"] for r in plan.rank_rows()[:4]] == [0, 1, 3, 2]
    else:
        assert any(problem in p for p in problems), problems


def test_a_pool_with_a_foreign_rule_is_invalid(small_pool_plan):
    data = copy.deepcopy(plan_to_dict(small_pool_plan))
    data["pools"][0]["ranks"] = {"rule": RANK_RULE, "exceptions": [], "rows": []}
    pool = plan_from_dict(data).pool()
    problems = pool_problems(pool, small_pool_plan.model_spec(), small_pool_plan.cluster())
    assert problems == ["pool 'train': ranks must be an object with keys 'rule' and "
                        "'exceptions'"]


def test_a_plan_for_131072_gpus_is_small_and_valid():
    """Llama-3.1-405B on 16,384 nodes of 8 H100: the file holds no per-rank data (it grows
    with the nodes, not the ranks) and stays under the 5 MB target; it still validates and
    reads back to the same rank table."""
    model, cluster = load_model("llama-3.1-405b"), homogeneous_cluster("H100", 16384)
    prof = default_profile("H100-SXM5-80GB")
    est = estimate(model, cluster, Workload(8192, 2048),
                   TrainingConfig(degrees=Degrees(tp=8, pp=16, dp=1024)), prof)
    plan = build_plan(model, cluster, est, prof)
    assert plan.num_gpus == 131072 and plan_problems(plan) == []
    text = plan_to_json(plan)
    assert len(text.encode()) <= MAX_PLAN_BYTES
    pool_json = json.dumps(plan_to_dict(plan)["pools"][0], indent=1)
    assert len(pool_json) < 200 * cluster.num_nodes  # bytes per node, not per rank
    again = plan_from_dict(json.loads(text)).pool()
    assert again.ranks == {"rule": RANK_RULE, "exceptions": []}
    assert np.array_equal(again.rank_array, plan.pool().rank_array)
    assert again.rank_row(131071) == {"rank": 131071, "node_rank": 16383, "local": 7,
                                      "tp": 7, "cp": 0, "dp": 1023, "pp": 15, "ep": 0,
                                      "etp": 7, "edp": 1023}
