"""Keeping every TP/CP/DP/EP group on one RDMA network (issue 20, Holmes: one NIC class per group).

Nodes that cannot do RDMA with each other (another NIC class, another RDMA island, TCP-only)
are on different networks (``topologies.cluster.NodeGroup.rdma_network``; TCP-only nodes share
one). A process group whose nodes span networks runs on NCCL's socket transport. The pipeline
axis is outermost in the rank order, so the tensor-, context-, data- and expert-parallel groups
of a plan all lie inside one pipeline stage and together connect all of its GPUs: every such
group is on one network exactly when every stage is. Only pipeline send/recv may cross.

* :func:`off_network_stages` counts the stages of a placed estimate that span networks;
* :func:`containment_obstacle` says, from node counts alone, why no placement of some degrees
  can keep each stage on one network (None when one may exist: the mapping solver decides);
* :func:`no_contained_note` is the plan's note when no candidate is contained, and
  :func:`containment_cost_note` the one when the rule costs predicted speed.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from cost_models.parallel import Degrees
from cost_models.training.step import Estimate
from topologies.cluster import Cluster

Network = tuple[str, str] | None  # (transport, island) of an RDMA network; None: TCP-only


def node_networks(cluster: Cluster) -> list[Network]:
    """The network of every node, in listing order."""
    return [g.rdma_network for g in cluster.node_groups for _ in range(g.count)]


def has_several_networks(cluster: Cluster) -> bool:
    """Whether some nodes cannot do RDMA with each other (then containment matters)."""
    return len({g.rdma_network for g in cluster.node_groups}) > 1


def network_name(net: Network) -> str:
    """``IB``, ``RoCE`` (with its island), or ``TCP-only``, for notes."""
    if net is None:
        return "TCP-only"
    transport, island = net
    name = {"ib": "IB", "roce": "RoCE"}.get(transport, transport)
    return f"{name} (island {island})" if island else name


def stage_gpus(d: Degrees) -> int:
    """GPUs of one pipeline stage."""
    return d.tp * d.cp * d.dp


def off_network_stages(cluster: Cluster, pp: int, node_order: Sequence[int] | None) -> int:
    """Pipeline stages whose GPUs sit on nodes of more than one network, for ``pp`` stages of
    equal size laid out over ``node_order`` (None: the listing order) in rank order."""
    nets = node_networks(cluster)
    node_gpus = [g.gpus_per_node for g in cluster.node_groups for _ in range(g.count)]
    order = range(cluster.num_nodes) if node_order is None else node_order
    per_stage = cluster.num_gpus // pp
    touched: list[set] = [set() for _ in range(pp)]
    first = 0  # first global rank of the node rank
    for node in order:
        gpus = node_gpus[node]
        for s in range(first // per_stage, (first + gpus - 1) // per_stage + 1):
            touched[s].add(nets[node])
        first += gpus
    return sum(len(t) > 1 for t in touched)


def contained(cluster: Cluster, est: Estimate) -> bool:
    """Whether every TP/CP/DP/EP group of the placed estimate stays on one network."""
    return off_network_stages(cluster, est.config.degrees.pp, est.node_order) == 0


def network_sizes(cluster: Cluster) -> dict[Network, Counter]:
    """Per network, how many of its nodes have each GPU count (networks in listing order)."""
    sizes: dict[Network, Counter] = {}
    for g in cluster.node_groups:
        sizes.setdefault(g.rdma_network, Counter())[g.gpus_per_node] += g.count
    return sizes


def containment_obstacle(cluster: Cluster, d: Degrees,
                         sizes: dict[Network, Counter] | None = None) -> str | None:
    """Why no placement of ``d`` keeps each stage on one network, from node counts alone; None
    when one may exist. Every node is used, so each network's GPUs must split into whole
    stages: a network of n nodes of g GPUs needs stages of a whole number k of its nodes and
    n divisible by k (or stages inside one node: g divisible by the stage's GPUs). A network
    whose nodes differ in size is left to the mapping solver. ``sizes``: the cluster's
    :func:`network_sizes`, when the caller checks many degrees."""
    gpus = stage_gpus(d)
    for net, counter in (network_sizes(cluster) if sizes is None else sizes).items():
        if len(counter) > 1:
            continue
        (g, n), = counter.items()
        if g % gpus == 0:
            continue  # stages inside one node
        if gpus % g:
            return (f"pipeline stages of {gpus} GPUs straddle the {g}-GPU nodes of "
                    f"{network_name(net)}")
        per = gpus // g
        if n % per:
            return (f"{n} {network_name(net)} nodes cannot hold whole pipeline stages of "
                    f"{per} nodes")
    return None


def no_contained_note(obstacle: str | None, reason: str) -> str:
    """The plan's note when no candidate keeps every group on one network: what stood in the
    way of the chosen degrees, and why no other degrees did it."""
    head = "no contained plan"
    if obstacle:
        head += f": {obstacle}"
    return (f"{head} ({reason}); the plan lets groups span RDMA networks, they run on TCP "
            f"sockets and the prediction charges them so")


COST_NOTE_MIN = 0.005  # below this relative difference the rule is said to cost nothing


def containment_cost_note(contained_best: Estimate, fastest: Estimate) -> str | None:
    """The plan's note when the fastest plan by cost alone (which lets groups span networks)
    is predicted faster than the best contained one; None when it is not (by 0.5%)."""
    kept, free = contained_best.step_time_s, fastest.step_time_s
    if free >= kept * (1 - COST_NOTE_MIN):
        return None
    d = fastest.config.degrees
    ep = f" ep{d.ep}" if d.ep > 1 else ""
    return (f"contained: every TP/CP/DP/EP group stays on one RDMA network; the fastest plan "
            f"that lets groups span networks (tp{d.tp} pp{d.pp} dp{d.dp}{ep}) is predicted "
            f"{kept / free - 1:.0%} faster ({free:.2f} s per step, this one {kept:.2f} s), its "
            f"spanning groups on TCP sockets; --allow-mixed-networks chooses it")
