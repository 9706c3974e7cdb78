"""Where serving pools can run: one site per GPU type of the cluster (its nodes, in rank
order). Every pool of a deployment runs on one site."""
from __future__ import annotations

from dataclasses import dataclass

from topologies.catalog import GpuSpec
from topologies.cluster import Cluster

__all__ = ["Site", "sites"]


@dataclass(frozen=True)
class Site:
    """Where a pool can run: the nodes of one GPU type (the whole cluster when it has one)."""

    gpu: GpuSpec
    nodes: tuple[int, ...]
    gpus: int
    gpus_per_node: int
    first_rank: int
    price_per_gpu_hour: float | None = None  # the highest of its groups' (None: not given)


def sites(cluster: Cluster) -> tuple[Site, ...]:
    """One site per GPU type, in the order the cluster first lists it."""
    by_type: dict[str, list[int]] = {}
    specs: dict[str, GpuSpec] = {}
    node = 0
    for g in cluster.node_groups:
        by_type.setdefault(g.gpu.name, []).extend(range(node, node + g.count))
        specs[g.gpu.name] = g.gpu
        node += g.count
    out = []
    for name, nodes in by_type.items():
        groups = [cluster.node_groups[cluster.group_of_node(n)] for n in nodes]
        first = sum(cluster.node_groups[cluster.group_of_node(n)].gpus_per_node
                    for n in range(nodes[0]))
        prices = [g.price_per_gpu_hour for g in groups]
        price = None if None in prices else max(prices)
        out.append(Site(specs[name], tuple(nodes), sum(g.gpus_per_node for g in groups),
                        min(g.gpus_per_node for g in groups), first, price))
    return tuple(out)
