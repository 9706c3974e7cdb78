"""The cluster as a graph of GPUs, switches and NICs, and a per-tier summary of it.

:func:`build_graph` reads like a networkx generator: it returns an ``nx.Graph`` whose nodes are

- ``("gpu", rank)``: ``kind="gpu"``, ``rank``, ``node``, ``local``, ``gpu`` (catalog name),
  ``mem_bytes``, ``group`` (node group name);
- ``("intra", domain)``: the NVSwitch / PCIe switch / xGMI mesh of one fast domain (a node, or
  all trays of a GB200 NVL72 rack), ``kind="switch"``, ``tier`` in ``nvlink|xgmi|pcie``;
- ``("nic", node, i)``: ``kind="nic"``, ``transport``, ``gbps``, ``bw_bytes_per_s``, ``device``;
- ``("net", level, block, rail)``: a scale-out switch of tier ``level`` (0 = leaf) serving nodes
  ``block * nodes_per_switch ...``; ``rail`` is the NIC index for rail-optimised leaves, else -1.
  Each is one *logical* switch: the parallel spine planes of a real fabric are merged into it.

Every edge carries ``bw_bytes_per_s`` (one direction), ``latency_s``, ``tier``
(``nvlink|xgmi|pcie|nic|<network tier name>``) and ``gpus_sharing``: how many GPUs push
traffic through the link when every GPU sends at once, so ``bw_bytes_per_s / gpus_sharing`` is
one GPU's share. Latency is split over the two edges around a device so that a path's sum is
what :func:`~topologies.cluster.group_view` charges: a NIC's end-to-end latency half on each
side, a tier's latency half on the way up and half on the way down.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from topologies.catalog import GB
from topologies.cluster import Cluster, LinkTier, Nic, NodeGroup

INTRA_TIER = {"nvswitch": "nvlink", "nvlink": "nvlink", "xgmi": "xgmi", "pcie": "pcie", "host": "host"}
TRANSPORT_LABELS = {"ib": "IB", "roce": "RoCE", "tcp": "TCP"}

if TYPE_CHECKING:  # networkx is imported where a graph is built (it costs 0.25 s at start-up)
    import networkx as nx

SwitchId = tuple[str, int, int, int]


@dataclass(frozen=True)
class TierRow:
    """One line of ``topo show``: a tier, what it joins, and what one GPU gets from it."""

    name: str
    connects: str
    count: int  # switches (or NICs) of this tier in the cluster
    bw_per_gpu_GBps: float  # one direction, one GPU's share when all GPUs communicate
    latency_us: float


@dataclass(frozen=True)
class _Node:
    """One server (or tray) in rank order."""

    index: int
    group: NodeGroup
    domain: int
    first_rank: int


def _nodes(cluster: Cluster, max_nodes: int | None = None) -> Iterator[_Node]:
    """Nodes in rank order with their NVLink domain, up to ``max_nodes``."""
    index = rank = domain = 0
    for group in cluster.node_groups:
        for i in range(group.count):
            if max_nodes is not None and index >= max_nodes:
                return
            yield _Node(index, group, domain + i // group.nvlink_domain_nodes, rank)
            index, rank = index + 1, rank + group.gpus_per_node
        domain += -(-group.count // group.nvlink_domain_nodes)


def _ports(group: NodeGroup) -> list[tuple[Nic, str]]:
    """Every NIC port of one node, in order, with its device name ('' when not given)."""
    return [(nic, nic.devices[k] if nic.devices else "")
            for nic in group.nics for k in range(nic.count)]


def _gpus_of_port(port: int, num_ports: int, gpus_per_node: int) -> list[int]:
    """Local GPUs whose traffic NIC ``port`` carries (GPU g uses port g * ports // gpus)."""
    if num_ports >= gpus_per_node:
        return [port * gpus_per_node // num_ports]
    return [g for g in range(gpus_per_node) if g * num_ports // gpus_per_node == port]


def _switch_id(cluster: Cluster, level: int, node: int, rail: int) -> SwitchId:
    """The tier-``level`` switch above ``node`` (leaves are per rail when rail-optimised)."""
    block = node // cluster.tiers[level].nodes_per_switch
    return ("net", level, block, rail if level == 0 and cluster.rail_optimized else -1)


def _add_domain(graph: nx.Graph, node: _Node) -> None:
    """GPUs of one node and their link to the domain's switch."""
    g, switch = node.group, ("intra", node.domain)
    tier = INTRA_TIER[g.fabric]
    graph.add_node(switch, kind="switch", tier=tier, fabric=g.fabric, domain=node.domain)
    for local in range(g.gpus_per_node):
        rank = node.first_rank + local
        graph.add_node(("gpu", rank), kind="gpu", rank=rank, node=node.index, local=local,
                       gpu=g.gpu.name, mem_bytes=g.gpu.hbm_bytes, group=g.name)
        graph.add_edge(("gpu", rank), switch, bw_bytes_per_s=g.intra_bw_bytes_per_s,
                       latency_s=g.intra_latency_s / 2, tier=tier, gpus_sharing=1)


def _add_nics(graph: nx.Graph, cluster: Cluster, node: _Node, uplinks: dict) -> None:
    """NICs of one node, their GPUs, their leaf, and the uplink load they put above it."""
    g, ports = node.group, _ports(node.group)
    for port, (nic, device) in enumerate(ports):
        nic_id, port_bw = ("nic", node.index, port), nic.bw_bytes_per_s / nic.count
        graph.add_node(nic_id, kind="nic", node=node.index, transport=nic.transport,
                       gbps=nic.gbps, bw_bytes_per_s=port_bw, device=device)
        gpus = _gpus_of_port(port, len(ports), g.gpus_per_node)
        for local in gpus:
            graph.add_edge(("gpu", node.first_rank + local), nic_id, bw_bytes_per_s=port_bw,
                           latency_s=nic.latency_s / 2, tier="nic", gpus_sharing=1)
        if cluster.tiers:
            _add_leaf(graph, cluster, node.index, port, nic_id, port_bw, len(gpus), uplinks)


def _add_leaf(graph: nx.Graph, cluster: Cluster, node: int, port: int, nic_id: tuple,
              port_bw: float, gpus: int, uplinks: dict) -> None:
    """Link a NIC to its leaf; add its share of every uplink above (cut by oversubscription)."""
    leaf, tier = _switch_id(cluster, 0, node, port), cluster.tiers[0]
    graph.add_node(leaf, kind="switch", tier=tier.name, level=0)
    graph.add_edge(nic_id, leaf, bw_bytes_per_s=port_bw, latency_s=tier.latency_s / 2,
                   tier=tier.name, gpus_sharing=gpus)
    child, bw = leaf, port_bw
    for level in range(1, len(cluster.tiers)):
        bw /= cluster.tiers[level - 1].oversubscription
        parent = _switch_id(cluster, level, node, -1)
        load = uplinks[(child, parent, level)]
        load[0], load[1] = load[0] + bw, load[1] + gpus
        child = parent


def _add_uplinks(graph: nx.Graph, cluster: Cluster, uplinks: dict) -> None:
    """Switch-to-switch edges with the bandwidth and GPU count accumulated below them."""
    for (child, parent, level), (bw, gpus) in uplinks.items():
        tier = cluster.tiers[level]
        graph.add_node(parent, kind="switch", tier=tier.name, level=level)
        graph.add_edge(child, parent, bw_bytes_per_s=bw, latency_s=tier.latency_s / 2,
                       tier=tier.name, gpus_sharing=gpus)


def build_graph(cluster: Cluster, max_nodes: int | None = None) -> nx.Graph:
    """The cluster as an ``nx.Graph`` (see the module docstring for node and edge attributes).

    ``max_nodes`` keeps only the first that many nodes (in rank order) for a quick look at a
    large cluster; a 2,048-node (16,384-GPU) cluster builds whole in a few seconds.
    """
    import networkx as nx

    graph = nx.Graph(name=cluster.name)
    uplinks: dict = defaultdict(lambda: [0.0, 0])
    for node in _nodes(cluster, max_nodes):
        _add_domain(graph, node)
        _add_nics(graph, cluster, node, uplinks)
    _add_uplinks(graph, cluster, uplinks)
    return graph


def path_tier(graph: nx.Graph, rank_a: int, rank_b: int) -> LinkTier:
    """What one GPU gets between two ranks, read off the lowest-latency path in the graph.

    Bandwidth: the smallest per-GPU share (``bw_bytes_per_s / gpus_sharing``) on the path;
    latency: the sum of edge latencies; name: the tier of the bottleneck edge.
    """
    import networkx as nx

    path = nx.shortest_path(graph, ("gpu", rank_a), ("gpu", rank_b), weight="latency_s")
    edges = [graph.edges[u, v] for u, v in zip(path, path[1:])]
    neck = min(edges, key=lambda e: e["bw_bytes_per_s"] / e["gpus_sharing"])
    return LinkTier(neck["tier"], neck["bw_bytes_per_s"] / neck["gpus_sharing"],
                    sum(e["latency_s"] for e in edges))


# --- topo show summary --------------------------------------------------------------------


def nic_text(group: NodeGroup) -> str:
    """The NICs of one node as people write them: ``8x 400G IB``."""
    return " + ".join(f"{n.count}x {n.gbps:g}G {TRANSPORT_LABELS[n.transport]}"
                      for n in group.nics)


def _group_rows(group: NodeGroup) -> list[TierRow]:
    """The fast-domain row and the NIC row of one node group."""
    rows = []
    domain_nodes = min(group.nvlink_domain_nodes, group.count)
    if domain_nodes * group.gpus_per_node > 1:
        span = f"across {domain_nodes} nodes" if domain_nodes > 1 else "in a node"
        rows.append(TierRow(group.fabric, f"{group.name}: "
                            f"{domain_nodes * group.gpus_per_node} GPUs {span}",
                            -(-group.count // group.nvlink_domain_nodes),
                            group.intra_bw_bytes_per_s / GB, group.intra_latency_s * 1e6))
    if group.nics:
        rows.append(TierRow("nic", f"{group.name}: {nic_text(group)} per node",
                            group.count * sum(n.count for n in group.nics),
                            group.nic_bw_bytes_per_s / group.gpus_per_node / GB,
                            group.nic_latency_s * 1e6))
    return rows


def _switch_count(cluster: Cluster, level: int) -> int:
    """Logical switches of tier ``level`` (leaves: one per block and rail)."""
    return len({_switch_id(cluster, level, node.index, port)
                for node in _nodes(cluster) for port in range(len(_ports(node.group)))})


def _network_rows(cluster: Cluster) -> list[TierRow]:
    """One row per scale-out tier: a GPU's share of its NICs after the oversubscription below."""
    shares = [g.nic_bw_bytes_per_s / g.gpus_per_node for g in cluster.node_groups if g.nics]
    share, rows = min(shares, default=0.0), []
    slowest = ", slowest NICs" if len(set(shares)) > 1 else ""
    for level, tier in enumerate(cluster.tiers):
        rail = ", one per rail" if level == 0 and cluster.rail_optimized else ""
        over = f", {tier.oversubscription:g}:1 oversubscribed" if tier.oversubscription > 1 else ""
        rows.append(TierRow(tier.name, f"{tier.nodes_per_switch} nodes per switch"
                            f"{rail}{over}{slowest}",
                            _switch_count(cluster, level), share / GB, tier.latency_s * 1e6))
        share /= tier.oversubscription
    return rows


def tier_summary(cluster: Cluster) -> list[TierRow]:
    """Every tier of the cluster, fastest first: fast domains and NICs per node group, then
    the scale-out tiers leaf first."""
    rows = [row for group in cluster.node_groups for row in _group_rows(group)]
    return rows + _network_rows(cluster)
