"""A pool's rank table and process groups: where each global rank runs and its coordinates.

Coordinates come from :func:`cost_models.parallel.rank_coords` and groups from
:func:`cost_models.groups.groups_of`, both read off the one rank-order function
(:func:`cost_models.parallel.rank_grid`); node placement from
:func:`cost_models.groups.rank_map`.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any, Sequence

from cost_models.groups import groups_of, rank_map
from cost_models.parallel import COORD_AXES, KINDS, Axis, Degrees, rank_coords
from planner.plan.document import Pool
from topologies.cluster import Cluster

RANK_COLUMNS = ("rank", "node_rank", "local", *(str(a) for a in COORD_AXES))


def rank_table(cluster: Cluster, d: Degrees,
               node_order: Sequence[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(nodes, ranks): per node rank its cluster node, host, group, GPU count and first rank;
    per global rank its node rank, local GPU and coordinate on every axis."""
    physical = rank_map(cluster, node_order)
    located = [cluster.locate(int(p)) for p in physical]
    node_rank_of = {node: i for i, node in enumerate(node_order)}
    first_rank: dict[int, int] = {}
    for r, (_, n, _) in enumerate(located):
        first_rank.setdefault(n, r)
    nodes = []
    for i, node in enumerate(node_order):
        group = cluster.node_groups[cluster.group_of_node(node)]
        nodes.append({"node_rank": i, "node": node, "host": cluster.host_of_node(node),
                      "node_group": group.name, "gpus": group.gpus_per_node,
                      "first_rank": first_rank[node]})
    coords = rank_coords(d)
    columns = zip(*(coords[Axis(a)].tolist() for a in RANK_COLUMNS[3:]))  # per rank, in order
    rows = [[r, node_rank_of[node], local, *axes]
            for r, ((_, node, local), axes) in enumerate(zip(located, columns))]
    return nodes, {"columns": list(RANK_COLUMNS), "rows": rows}


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
    """The pool of degrees ``d`` on the cluster's nodes in ``node_order``."""
    nodes, ranks = rank_table(cluster, d, node_order)
    return Pool(name=name, role=role, gpu=pool_gpu(cluster, node_order), degrees=asdict(d),
                nodes=nodes, node_order=list(node_order), ranks=ranks,
                groups={kind: groups_of(d, kind) for kind in KINDS})
