"""The one solver-agnostic validator every Plan passes before it is written, printed or emitted.

It checks properties, not how a solver got there. For every plan: the schema, the inputs hash,
and each pool (the degrees multiply to the pool's GPUs and divide what they split, every rank
and every (node, GPU) slot is used exactly once, every rank's coordinates are the rank
order's, every process group partitions the ranks with the right size and varies only its own
axes). Each family section then has its own checks: :mod:`planner.plan.validate_training`
(every layer on exactly one stage, the batch adds up, each stage's predicted memory fits),
:mod:`planner.plan.validate_experts` (every expert has a home, splits sum to 1) and
:func:`planner.plan.fabric.fabric_problems` (safe device and interface names, and the section
the plan's cluster and pool give, so emitted NCCL settings match every node's NICs).
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from cost_models.parallel import (COORD_AXES, DENSE_ORDER, EXPERT_ORDER, GROUP_AXES, Axis,
                                   ConfigError, Degrees, check_degrees, rank_coords)
from planner.errors import InvalidPlanError
from planner.plan.document import KINDS_OF_PLAN, ROLES, SCHEMA_VERSION, Plan, Pool, inputs_hash
from planner.plan.fabric import fabric_problems
from planner.plan.validate_experts import (expert_placement_problems, plan_expert_problems,
                                          validate_expert_placement)
from planner.plan.validate_training import training_problems

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
    if plan.training is not None and not problems:
        problems += training_problems(plan, model, cluster)
    if plan.experts is not None:
        problems += plan_expert_problems(plan.experts, model, Degrees(**plan.pool().degrees))
    if plan.fabric is not None and not problems:
        if plan.kind != "training":
            problems.append(f"a fabric section on a {plan.kind} plan (training plans only)")
        else:
            problems += fabric_problems(plan.fabric, cluster, plan.pool())
    return problems


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
    """A pool's role, degrees, rank table and groups."""
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
    return [f"{where}: {p}" for p in _rank_problems(pool, cluster, d) + _group_problems(pool, d)]


def _rank_problems(pool: Pool, cluster, d: Degrees) -> list[str]:
    problems = []
    rows = pool.rank_rows()
    if sorted(r["rank"] for r in rows) != list(range(d.num_gpus)):
        problems.append(f"ranks are not exactly 0..{d.num_gpus - 1}")
    order = pool.node_order
    if len(set(order)) != len(order) or not all(0 <= n < cluster.num_nodes for n in order):
        problems.append(f"node_order is not a list of distinct nodes of the cluster's "
                        f"{cluster.num_nodes}")
        return problems
    slots = Counter((r["node_rank"], r["local"]) for r in rows)
    if any(n > 1 for n in slots.values()):
        problems.append("two ranks share one GPU")
    for entry in pool.nodes:
        node = entry["node"]
        group = cluster.node_groups[cluster.group_of_node(node)]
        if entry["gpus"] != group.gpus_per_node or entry["host"] != cluster.host_of_node(node):
            problems.append(f"node rank {entry['node_rank']}: host/GPU count differ from the "
                            f"cluster's node {node}")
        if pool.node_order[entry["node_rank"]] != node:
            problems.append(f"node rank {entry['node_rank']} is node {node} in 'nodes' but "
                            f"{pool.node_order[entry['node_rank']]} in node_order")
    gpus_of = {e["node_rank"]: e["gpus"] for e in pool.nodes}
    if any(r["local"] >= gpus_of.get(r["node_rank"], 0) for r in rows):
        problems.append("a rank uses a GPU index its node does not have")
    coords = rank_coords(d)
    ranks = np.asarray([r["rank"] for r in rows], dtype=np.int64)
    valid = (ranks >= 0) & (ranks < d.num_gpus)
    for axis in COORD_AXES:
        given = np.asarray([r[axis] for r in rows], dtype=np.int64)
        bad = np.flatnonzero(valid & (given != coords[axis][np.where(valid, ranks, 0)]))
        if bad.size:
            problems.append(f"rank {int(ranks[bad[0]])}: coordinate {axis} is not the rank "
                            "order's")
            break
    return problems


def _group_problems(pool: Pool, d: Degrees) -> list[str]:
    problems = []
    size = {kind: d.group_size(kind) for kind in GROUP_AXES}
    table = np.asarray(pool.ranks["rows"], dtype=np.int64).reshape(-1, len(pool.ranks["columns"]))
    column = dict(zip(pool.ranks["columns"], table.T))
    order = np.argsort(column["rank"], kind="stable")  # row of each rank, if ranks are valid
    for kind, axes in GROUP_AXES.items():
        groups = pool.groups.get(kind)
        if groups is None:
            problems.append(f"groups.{kind} missing")
            continue
        members = sorted(r for g in groups for r in g)
        if members != list(range(d.num_gpus)):
            problems.append(f"groups.{kind} do not cover every rank exactly once")
        if {len(g) for g in groups} != {size[kind]}:
            problems.append(f"groups.{kind} sizes {sorted({len(g) for g in groups})}, expected "
                            f"{size[kind]}")
            continue
        if members != list(range(d.num_gpus)) or len(table) != d.num_gpus:
            continue  # coordinates are only comparable over a valid partition
        fixed = _fixed_axes(kind)
        rows_of = order[np.asarray(groups, dtype=np.int64)]  # (groups, size) row indices
        for a in fixed:
            values = column[a][rows_of]
            bad = np.flatnonzero((values != values[:, :1]).any(axis=1))
            if bad.size:
                g = groups[int(bad[0])]
                problems.append(f"groups.{kind} group {g[:4]}... mixes ranks of different "
                                f"{'/'.join(fixed)} coordinates")
                break
    return problems


def _fixed_axes(kind: str) -> tuple[str, ...]:
    """Coordinates all members of a group of ``kind`` share: the other axes of its mesh."""
    mesh = EXPERT_ORDER + (Axis.PP,) if kind in ("ep", "edp") else DENSE_ORDER
    return tuple(str(a) for a in mesh if a not in GROUP_AXES[kind])


def validate_plan(plan: Plan, source: str = "plan") -> Plan:
    """Return ``plan`` if it is valid, else raise :class:`InvalidPlanError` listing why."""
    problems = plan_problems(plan)
    if problems:
        raise InvalidPlanError(source, problems)
    return plan
