"""A pool's rank table: where each global rank runs and its coordinates, stored as one rule
plus exceptions.

The rule (:data:`RANK_RULE`) is the one every planner-written plan follows:

* *placement*: torchrun's static rendezvous gives node rank ``i`` (the cluster node
  ``node_order[i]``) the ``gpus`` global ranks after those of node ranks ``0..i-1``
  (``first_rank``), and LOCAL_RANK ``j`` runs on the node's GPU ``j``, so rank ``r`` of the
  node's block runs on GPU ``r - first_rank``; this is :func:`cost_models.groups.rank_map`
  read per node rank;
* *coordinates*: Megatron's rank order tp-cp-ep-dp-pp as :func:`cost_models.parallel.rank_grid`
  writes it (:func:`cost_models.parallel.rank_coords`); process groups follow from the degrees
  (:func:`cost_models.groups.groups_of`).

An exception ``[rank, node_rank, local]`` moves one rank to another GPU of its node (a
hand-edited plan may pin ranks to GPU slots; torchrun fixes the node, so only the GPU can
move). Coordinates and groups have no exceptions: they are the rank order's by definition.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from cost_models.parallel import COORD_AXES, Degrees, rank_coords
from topologies.cluster import Cluster

if TYPE_CHECKING:
    from planner.plan.document import Pool

RANK_RULE = "nodes-in-order/tp-cp-ep-dp-pp"  # the value of a pool's ranks.rule
RANK_COLUMNS = ("rank", "node_rank", "local", *(str(a) for a in COORD_AXES))


def rule_slots(gpus_per_node_rank: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(node rank, local GPU) of every global rank by the rule: node rank ``i`` holds the
    ``gpus[i]`` ranks after those of node ranks ``0..i-1``, on its GPUs in order."""
    gpus = np.asarray(gpus_per_node_rank, dtype=np.int64).reshape(-1)
    node_rank = np.repeat(np.arange(gpus.size, dtype=np.int64), gpus)
    first = np.cumsum(gpus) - gpus
    return node_rank, np.arange(node_rank.size, dtype=np.int64) - first[node_rank]


def exception_array(exceptions: Any) -> np.ndarray:
    """``ranks.exceptions`` as an int array [exception, (rank, node_rank, local)]; raises
    ``ValueError`` unless it is a list of whole-number triples."""
    if not isinstance(exceptions, list):
        raise ValueError("ranks.exceptions must be a list of [rank, node_rank, local]")
    if not exceptions:
        return np.zeros((0, 3), dtype=np.int64)
    try:
        table = np.asarray(exceptions)
    except (ValueError, TypeError):  # ragged
        table = np.zeros(0)
    if table.ndim != 2 or table.shape[1] != 3 or table.dtype.kind not in "iu":
        raise ValueError("ranks.exceptions must be a list of [rank, node_rank, local] whole "
                         "numbers")
    return table.astype(np.int64)


def placed_slots(gpus_per_node_rank: Sequence[int],
                 exceptions: Any) -> tuple[np.ndarray, np.ndarray]:
    """(node rank, local GPU) of every global rank: the rule, then each exception's slot.
    Assumes valid exceptions (:func:`planner.plan.validate.pool_problems` checks them)."""
    node_rank, local = rule_slots(gpus_per_node_rank)
    moved = exception_array(exceptions)
    node_rank[moved[:, 0]], local[moved[:, 0]] = moved[:, 1], moved[:, 2]
    return node_rank, local


def exceptions_of(gpus_per_node_rank: Sequence[int], node_rank: np.ndarray,
                  local: np.ndarray) -> list[list[int]]:
    """The exceptions (sorted by rank) that turn the rule into the given per-rank slots."""
    rule_node, rule_local = rule_slots(gpus_per_node_rank)
    moved = np.flatnonzero((node_rank != rule_node) | (local != rule_local))
    return np.stack([moved, node_rank[moved], local[moved]], axis=1).tolist()


def rank_table(d: Degrees, node_rank: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Int array [rank, column] with the columns of :data:`RANK_COLUMNS`: the rank, its slot
    and its coordinate on every axis."""
    coords = rank_coords(d)
    rank = np.arange(d.num_gpus, dtype=np.int64)
    return np.stack([rank, node_rank, local, *(coords[a] for a in COORD_AXES)], axis=1)


def node_table(cluster: Cluster, node_order: Sequence[int]) -> list[dict[str, Any]]:
    """Per node rank: its cluster node, host, node group, GPU count and first global rank."""
    nodes, first = [], 0
    for i, node in enumerate(node_order):
        group = cluster.node_groups[cluster.group_of_node(node)]
        nodes.append({"node_rank": i, "node": node, "host": cluster.host_of_node(node),
                      "node_group": group.name, "gpus": group.gpus_per_node,
                      "first_rank": first})
        first += group.gpus_per_node
    return nodes


def pool_gpu(cluster: Cluster, node_order: Sequence[int]) -> str:
    """The GPU type of a pool's nodes; several types joined by ``+`` in first-seen order."""
    names: list[str] = []
    for node in node_order:
        name = cluster.node_groups[cluster.group_of_node(node)].gpu.name
        if name not in names:
            names.append(name)
    return "+".join(names)


def make_pool(name: str, role: str, cluster: Cluster, d: Degrees,
              node_order: Sequence[int]) -> Pool:
    """The pool of degrees ``d`` on the cluster's nodes in ``node_order`` (the rule, no
    exceptions)."""
    from planner.plan.document import Pool  # document reads the rule from this module

    return Pool(name=name, role=role, gpu=pool_gpu(cluster, node_order), degrees=asdict(d),
                nodes=node_table(cluster, node_order), node_order=[int(n) for n in node_order],
                ranks={"rule": RANK_RULE, "exceptions": []})
