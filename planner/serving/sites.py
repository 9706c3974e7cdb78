"""Where serving pools can run: one site per GPU type of the cluster (its nodes, in rank
order). Every pool of a deployment runs on one site. :func:`island_order` puts an engine
instance's nodes on one RDMA network where the free nodes allow (the plan's builder uses it
for every instance of a pool); :func:`instance_ranks` gives the GPUs it picks for one instance,
which the estimate prices (an instance that no network can hold spans them, on sockets)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from topologies.catalog import GpuSpec
from topologies.cluster import Cluster

__all__ = ["Site", "instance_ranks", "island_order", "sites"]


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
        first = cluster.node_first_rank(nodes[0])
        prices = [g.price_per_gpu_hour for g in groups]
        price = None if None in prices else max(prices)
        out.append(Site(specs[name], tuple(nodes), sum(g.gpus_per_node for g in groups),
                        min(g.gpus_per_node for g in groups), first, price))
    return tuple(out)


def island_order(cluster: Cluster, free: list[int], sets: list[list[int]]
                 ) -> tuple[list[int], int]:
    """Nodes for a pool's positions such that each set of ``sets`` (an instance's positions:
    ``planner.serving.build._position_sets``) lies on one RDMA network
    (``NodeGroup.rdma_network``; TCP-only nodes form one of their own) where the free nodes
    allow: an engine instance's collectives (TP all-reduce, EP all-to-all) then stay off TCP
    sockets (NCCL picks one transport per communicator; ``topologies.cluster`` module
    docstring). The listing order ``free[:n]`` is kept when it already does that; otherwise
    the sets, largest first, take the fullest-fitting network (fewest nodes left over, then
    the network listed first), lowest nodes first. Returns (node per position, sets that had to span networks)."""
    n = sum(len(s) for s in sets)
    net = {x: cluster.node_groups[cluster.group_of_node(x)].rdma_network for x in free}

    def spans(order: list[int]) -> int:
        return sum(len({net[order[p]] for p in s}) > 1 for s in sets)

    listing = free[:n]
    if spans(listing) == 0:
        return listing, 0
    pools: dict[Any, list[int]] = {}
    for x in free:
        pools.setdefault(net[x], []).append(x)
    rank = {key: i for i, key in enumerate(pools)}
    order: list[int | None] = [None] * n
    left: list[list[int]] = []
    for s in sorted(sets, key=lambda s: (-len(s), s[0])):
        fits = [k for k, nodes in pools.items() if len(nodes) >= len(s)]
        if not fits:
            left.append(s)
            continue
        key = min(fits, key=lambda k: (len(pools[k]) - len(s), rank[k]))
        for pos, x in zip(s, pools[key][:len(s)]):
            order[pos] = x
        pools[key] = pools[key][len(s):]
    rest = sorted(x for nodes in pools.values() for x in nodes)
    for s in left:  # no network has room: across networks, in listing order
        for pos in s:
            order[pos] = rest.pop(0)
    return [x for x in order if x is not None], len(left)


@lru_cache(maxsize=4096)
def instance_ranks(cluster: Cluster, gpus: int, first_rank: int) -> tuple[int, ...]:
    """The ranks of one engine instance of ``gpus`` GPUs, in rank order, on the site that
    starts at rank ``first_rank``: the nodes :func:`island_order` gives one instance on the
    site's nodes (one RDMA network when one holds it, else across networks, as the plan's
    builder places it), their GPUs in order. Where ``first_rank`` starts no site, or the
    instance does not fit the site, the ranks from ``first_rank`` on, wrapping at the
    cluster's end (what the estimate priced before islands)."""
    n = cluster.num_gpus
    contiguous = tuple((first_rank + r) % n for r in range(gpus))
    site = next((s for s in sites(cluster) if s.first_rank == first_rank), None)
    if site is None or gpus > site.gpus or gpus <= site.gpus_per_node:
        return contiguous
    count = -(-gpus // site.gpus_per_node)
    order, _ = island_order(cluster, list(site.nodes), [list(range(count))])
    ranks = [cluster.node_first_rank(x) + local for x in order
             for local in range(cluster.node_groups[cluster.group_of_node(x)].gpus_per_node)]
    return tuple(ranks[:gpus])
