"""The one solver-agnostic validator every Plan passes before it is written, printed or emitted.

It checks properties, not how a solver got there. For every plan: the schema, the inputs hash,
and each pool (the degrees multiply to the pool's GPUs and divide what they split; the nodes
are the cluster's, in node_order, each with its first global rank; the rank table's rule is
the one rank order and its exceptions, checked as arrays, keep each rank on its node and use
every (node, GPU) slot exactly once). Coordinates and process groups are not stored: they
are the rank order's by construction (:mod:`planner.plan.ranks`), and a schema-2 file whose
table or groups differ from it is refused when it is upgraded (:mod:`planner.plan.migrate`).
Each family section then has its own checks: :mod:`planner.plan.validate_training` (every
layer on exactly one stage, the batch adds up, each stage's predicted memory fits),
:mod:`planner.plan.validate_experts` (every expert has a home, splits sum to 1) and
:func:`planner.plan.fabric.fabric_problems` (safe device and interface names, and the section
the plan's cluster and pool give, so emitted NCCL settings match every node's NICs), with
:mod:`planner.plan.validate_fabric` recomputing the socket groups independently from the
section's own transports and islands and the pool's groups.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from cost_models.parallel import ConfigError, Degrees, check_degrees
from planner.errors import InvalidPlanError
from planner.plan.document import KINDS_OF_PLAN, ROLES, SCHEMA_VERSION, Plan, Pool, inputs_hash
from planner.plan.fabric import fabric_problems, serving_fabric_problems
from planner.plan.validate_fabric import socket_group_problems
from planner.plan.ranks import RANK_RULE, exception_array, rule_slots
from planner.plan.validate_experts import (expert_placement_problems, plan_expert_problems,
                                          validate_expert_placement)
from planner.plan.validate_training import finite_number, training_problems

__all__ = ["InvalidPlanError", "expert_placement_problems", "plan_problems", "pool_problems",
           "validate_expert_placement", "validate_plan"]


def plan_problems(plan: Plan) -> list[str]:
    """Every broken invariant of ``plan`` (empty when it is valid)."""
    if plan.schema_version != SCHEMA_VERSION:
        return [f"schema_version {plan.schema_version}, this planner reads {SCHEMA_VERSION}"]
    if plan.kind not in KINDS_OF_PLAN:
        return [f"kind '{plan.kind}', expected one of {KINDS_OF_PLAN}"]
    if not plan.pools:
        return ["a plan needs at least one pool"]
    try:
        model, cluster = plan.model_spec(), plan.cluster()
    except (TypeError, ValueError, KeyError) as err:
        return [f"inputs unreadable ({err})"]
    problems: list[str] = []
    if inputs_hash(plan.inputs) != plan.inputs_hash:
        problems.append("inputs_hash does not match the inputs")
    for pool in plan.pools:
        problems += pool_problems(pool, model, cluster)
    problems += _node_problems(plan.pools, cluster.num_nodes, plan.kind != "serving")
    if sum(p.num_gpus for p in plan.pools) > cluster.num_gpus:
        problems.append(f"pools use {plan.num_gpus} GPUs, the cluster has {cluster.num_gpus}")
    if plan.kind == "training" and plan.training is None:
        problems.append("a training plan needs a training section")
    if plan.kind == "serving":
        problems += serving_prediction_problems(plan.prediction)
    if plan.training is not None and not problems:
        problems += training_problems(plan, model, cluster)
    if plan.experts is not None:
        problems += plan_expert_problems(plan.experts, model, Degrees(**plan.pool().degrees))
    if plan.fabric is not None and not problems:
        if plan.kind == "serving" and plan.serving is not None:
            problems += serving_fabric_problems(plan.fabric, cluster, plan.pools,
                                                plan.serving.get("instances", []))
        elif plan.kind != "training":
            problems.append(f"a fabric section on a {plan.kind} plan (training and serving "
                            "plans only)")
        else:
            problems += fabric_problems(plan.fabric, cluster, plan.pool())
            problems += socket_group_problems(plan.fabric, plan.pool())
    return problems


# What the serving reports and the ranking read from a serving plan's prediction
SERVING_NUMBERS = ("output_tokens_per_s", "output_tokens_per_s_per_gpu",
                   "request_rate_per_s", "tpot_s", "ttft_s")
SERVING_OPTIONAL_NUMBERS = ("ttft_at_quantile_s", "ttft_p90_s", "ttft_p99_s", "kv_transfer_s",
                            "tpot_full_s")
# 1 / TPOT: infinite for one output token (no decode step; written as JSON's Infinity)
SERVING_RATES_MAYBE_INFINITE = ("output_tokens_per_s_per_user",)
SERVING_FLAGS = ("fits", "meets_slo")


def serving_prediction_problems(prediction: Any) -> list[str]:
    """A serving prediction holds finite numbers and true/false where the reports read them."""
    if not isinstance(prediction, dict):
        return ["prediction is not an object"]
    wrong = [k for k in SERVING_NUMBERS if not finite_number(prediction.get(k))]
    wrong += [k for k in SERVING_OPTIONAL_NUMBERS
              if prediction.get(k) is not None and not finite_number(prediction[k])]
    wrong += [k for k in SERVING_RATES_MAYBE_INFINITE
              if not (finite_number(prediction.get(k)) or prediction.get(k) == math.inf)]
    flags = [k for k in SERVING_FLAGS if not isinstance(prediction.get(k), bool)]
    return ([f"prediction needs finite numbers for {wrong}"] if wrong else []) + (
        [f"prediction needs true or false for {flags}"] if flags else [])


def _node_problems(pools: list[Pool], num_nodes: int, whole_cluster: bool = True) -> list[str]:
    """A training pool runs on every node of the cluster; several pools (or a serving plan's
    pools, which may leave nodes idle) on disjoint sets of nodes."""
    if len(pools) == 1 and whole_cluster:
        if sorted(pools[0].node_order) != list(range(num_nodes)):
            return [f"node_order is not a permutation of the cluster's {num_nodes} nodes"]
        return []
    nodes = [n for pool in pools for n in pool.node_order]
    return [] if len(set(nodes)) == len(nodes) else ["two pools share a node"]


def pool_problems(pool: Pool, model, cluster) -> list[str]:
    """A pool's role, degrees, nodes and rank table (rule plus exceptions)."""
    where = f"pool '{pool.name}'"
    if pool.role not in ROLES:
        return [f"{where}: role '{pool.role}', expected one of {ROLES}"]
    try:
        d = Degrees(**pool.degrees)
    except (TypeError, ValueError) as err:
        return [f"{where}: degrees unreadable ({err})"]
    gpus = sum(n["gpus"] for n in pool.nodes)
    try:
        check_degrees(model, d, gpus)
    except ConfigError as err:
        return [f"{where}: degrees {err}"]
    problems = _node_entry_problems(pool, cluster)
    if not problems:
        problems = _exception_problems(pool.ranks, [n["gpus"] for n in pool.nodes])
    return [f"{where}: {p}" for p in problems]


def _node_entry_problems(pool: Pool, cluster) -> list[str]:
    """``node_order`` names distinct nodes of the cluster, and ``nodes`` lists them in that
    order with the cluster's host and GPU count and each node rank's first global rank."""
    order = pool.node_order
    if len(set(order)) != len(order) or not all(0 <= n < cluster.num_nodes for n in order):
        return [f"node_order is not a list of distinct nodes of the cluster's "
                f"{cluster.num_nodes}"]
    if len(pool.nodes) != len(order):
        return [f"{len(pool.nodes)} entries in 'nodes', {len(order)} in node_order"]
    problems = []
    first_rank = 0  # the GPUs of the node ranks before this one
    for i, (entry, node) in enumerate(zip(pool.nodes, order)):
        group = cluster.node_groups[cluster.group_of_node(node)]
        if entry["node_rank"] != i or entry["node"] != node:
            problems.append(f"entry {i} of 'nodes' is node rank {entry['node_rank']} on node "
                            f"{entry['node']}, node_order says node rank {i} is node {node}")
        elif (entry["gpus"], entry["host"], entry["node_group"]) != (
                group.gpus_per_node, cluster.host_of_node(node), group.name):
            problems.append(f"node rank {i}: host/GPU count/node group differ from the "
                            f"cluster's node {node}")
        elif entry["first_rank"] != first_rank:
            problems.append(f"node rank {i}: first_rank {entry['first_rank']}, expected "
                            f"{first_rank} (the GPUs of the node ranks before it)")
        first_rank += group.gpus_per_node
    return problems[:3]


def _exception_problems(ranks: dict, gpus_per_node_rank: list[int]) -> list[str]:
    """The rule is the one this planner knows; each exception names a rank once (sorted), keeps
    it on the node torchrun gives it, moves it to a GPU the node has, and differs from the
    rule; after the exceptions every (node, GPU) slot runs exactly one rank."""
    if not isinstance(ranks, dict) or set(ranks) != {"rule", "exceptions"}:
        return ["ranks must be an object with keys 'rule' and 'exceptions'"]
    if ranks["rule"] != RANK_RULE:
        return [f"ranks.rule {ranks['rule']!r}, this planner knows {RANK_RULE!r}"]
    try:
        moved = exception_array(ranks["exceptions"])
    except ValueError as err:
        return [str(err)]
    gpus = np.asarray(gpus_per_node_rank, dtype=np.int64)
    rank, node_rank, local = moved.T
    num = int(gpus.sum())
    bad = np.flatnonzero((rank < 0) | (rank >= num))
    if bad.size:
        return [f"ranks.exceptions: rank {int(rank[bad[0]])} is not one of 0..{num - 1}"]
    if np.any(np.diff(rank) <= 0):
        return ["ranks.exceptions: ranks must be distinct and in increasing order"]
    rule_node, rule_local = rule_slots(gpus)
    bad = np.flatnonzero(node_rank != rule_node[rank])
    if bad.size:
        r = int(rank[bad[0]])
        return [f"ranks.exceptions: rank {r} on node rank {int(node_rank[bad[0]])}, but torchrun "
                f"runs it on node rank {int(rule_node[r])} (only its GPU may differ)"]
    bad = np.flatnonzero((local < 0) | (local >= gpus[node_rank]))
    if bad.size:
        return [f"ranks.exceptions: rank {int(rank[bad[0]])} uses GPU {int(local[bad[0]])}, its "
                f"node has {int(gpus[node_rank[bad[0]]])}"]
    bad = np.flatnonzero(local == rule_local[rank])
    if bad.size:
        return [f"ranks.exceptions: rank {int(rank[bad[0]])} repeats the rule's slot"]
    # a slot's id is the rank the rule puts there; every slot used once = a permutation
    slot = np.arange(num, dtype=np.int64)
    slot[rank] = rank - rule_local[rank] + local  # same node: first_rank + the new GPU
    used = np.bincount(slot, minlength=num)
    if used.max(initial=0) > 1:
        s = int(np.argmax(used))
        return [f"two ranks share one GPU (node rank {int(rule_node[s])} GPU "
                f"{int(rule_local[s])})"]
    return []


def validate_plan(plan: Plan, source: str = "plan") -> Plan:
    """Return ``plan`` if it is valid, else raise :class:`InvalidPlanError` listing why."""
    problems = plan_problems(plan)
    if problems:
        raise InvalidPlanError(source, problems)
    return plan
