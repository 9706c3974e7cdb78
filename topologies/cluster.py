"""Frozen cluster description and what a group of GPUs sees when it runs a collective.

A :class:`Cluster` is a list of node groups (each: a node count, a GPU type, an intra-node
fabric, NICs) under a scale-out network of tiers (leaf, spine, ...). Ranks are numbered node
group by node group, node by node, GPU by GPU, which is the order torchrun assigns them when
node ranks follow the node list.

:func:`group_view` reduces any set of ranks to the facts the communication cost model needs:
how many members share a fast domain (a node, or a rack-scale NVLink domain such as GB200
NVL72), how many domains the group spans, and the bandwidth and latency of the tier inside and
between domains.

Transport rule (:func:`group_view`): a collective runs on RDMA only when every member's node
reaches every other over one RDMA network: the same transport class (``ib`` or ``roce``: an
InfiniBand HCA and a RoCE NIC do not interoperate) and the same RDMA island
(``NodeGroup.rdma_island``; groups without one share their class's default island). A group
whose nodes differ in either, or that mixes RDMA and TCP-only nodes, runs on NCCL's socket
transport at the slowest member's socket share (:attr:`NodeGroup.socket_bw_bytes_per_s`, each
NIC at most :data:`SOCKET_NIC_GBPS_MAX`: the socket path is CPU-bound): NCCL
cannot run one communicator over IB/RoCE and TCP at once (NVIDIA/nccl#878) and picks its
network per communicator (``src/plugin/net.cc``, ``ncclNetInit``: the communicator's
``netName``/``NCCL_NET``, else the first plugin that initialises locally), so a mixed group
only works over ``Socket`` (the per-group ``NCCL_NET=Socket`` switch of NVIDIA/apex#1620).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Sequence

import numpy as np

from topologies.catalog import GpuSpec

TRANSPORTS = ("ib", "roce", "tcp")
RDMA_TRANSPORTS = ("ib", "roce")
FABRICS = ("nvswitch", "nvlink", "pcie", "xgmi", "host")

# Names that end up in NCCL settings and launch scripts: RDMA device names (``mlx5_0``, with an
# optional ``:port`` as NCCL_IB_HCA accepts), interface names (``eth0``, at most 15
# characters: Linux IFNAMSIZ 16 with its NUL) and RDMA island labels. No comma (NCCL's list
# separator), no ``=``/``^`` (NCCL's match prefixes), no whitespace or shell metacharacters.
DEVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}")
ISLAND_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# An NCCL topology XML on the nodes (NCCL_TOPO_FILE): an absolute path of letters, digits and
# _ . - / only (no spaces, quotes, ``$`` or other shell characters), at most 255 characters.
TOPO_FILE = re.compile(r"/[A-Za-z0-9_./-]{1,254}")

# NCCL_IB_GID_INDEX written for RoCE NICs whose spec gives none. NCCL's own default is -1
# (pick a RoCE v2 GID by itself) since 2.21 and 0 (a RoCE v1 link-local GID) before (NCCL
# docs, env.html NCCL_IB_GID_INDEX); 3 is the RoCE v2 GID of the interface's IPv4 address on
# ConnectX NICs with one IPv4 address per interface (index 0/1: link-local v1/v2, 2/3: IPv4
# v1/v2), the value NVIDIA's and switch vendors' RoCE guides set. Pinning it keeps old and new
# NCCL on the same GID; give gid_index where the GID table differs (IPv6, several addresses).
DEFAULT_ROCE_GID_INDEX = 3

# Latency of NCCL's socket transport over RDMA ports used as IP interfaces (IPoIB, Ethernet):
# kernel sockets, the ``tcp`` figure of ``topologies.spec.NIC_LATENCY_US`` (estimate).
SOCKET_LATENCY_S = 25e-6

# NCCL's socket transport runs no faster per NIC than it does on a 100 Gb/s port: it copies
# every byte through kernel sockets on NCCL's own threads (one per NIC by default outside AWS
# and GCP: NCCL env docs, NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD, at most 64 sockets;
# src/transport/net_socket.cc), so the host CPU bounds it, not the port. Public nccl-tests
# figures: 100 GbE, 4-6 GB/s all-reduce busbw at the best thread/socket setting
# (NVIDIA/nccl#450); AWS p3dn 100 Gb/s, about 4.7 GB/s (NVIDIA/nccl#398); 25 GbE, 1.7 GB/s
# (NVIDIA/nccl-tests#83): 0.32-0.54 of line rate, what the ``tcp`` tier's link efficiency
# (0.5, cost_models/profile.py) prices. No public figure above 100 Gb/s was found, so a faster
# port is priced as a 100 Gb/s one (estimate).
SOCKET_NIC_GBPS_MAX = 100.0


@dataclass(frozen=True)
class Nic:
    """NICs of one kind in a node. ``gbps`` is Gbit/s per NIC, as marketed."""

    count: int
    gbps: float
    transport: str  # "ib" | "roce" | "tcp"
    devices: tuple[str, ...] = ()
    latency_s: float = 5e-6
    gid_index: int | None = None  # RoCE: NCCL_IB_GID_INDEX (None: DEFAULT_ROCE_GID_INDEX)
    ifname: str | None = None  # the IP interface NCCL's sockets use on these NICs (eth0, ib0)

    def __post_init__(self) -> None:
        if self.count < 0 or self.gbps <= 0:
            raise ValueError(f"NIC count {self.count} must be >= 0 and speed {self.gbps} Gb/s > 0")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"NIC transport '{self.transport}' must be one of {TRANSPORTS}")
        if self.devices and len(self.devices) != self.count:
            raise ValueError(f"NIC has {len(self.devices)} device names for {self.count} NICs")
        bad = [d for d in self.devices if not DEVICE_NAME.fullmatch(d)]
        if bad:
            raise ValueError(f"NIC device names {bad!r}: letters, digits and _ . : - only")
        if self.ifname is not None and not IFNAME.fullmatch(self.ifname):
            raise ValueError(f"NIC ifname {self.ifname!r}: an interface name of at most 15 "
                             f"letters, digits and _ . : -")
        if self.gid_index is not None and (self.transport != "roce" or self.gid_index < 0):
            raise ValueError(f"NIC gid_index {self.gid_index}: an index >= 0, for RoCE NICs only")

    @property
    def rdma(self) -> bool:
        return self.transport in RDMA_TRANSPORTS

    @property
    def bw_bytes_per_s(self) -> float:
        """Total one-direction bandwidth of these NICs, bytes/s."""
        return self.count * self.gbps * 1e9 / 8


@dataclass(frozen=True)
class NodeGroup:
    """``count`` identical nodes."""

    name: str
    count: int
    gpu: GpuSpec
    gpus_per_node: int
    fabric: str  # intra-node fabric: "nvswitch" | "nvlink" | "pcie" | "xgmi" | "host"
    intra_bw_bytes_per_s: float  # one direction, per GPU, nominal
    intra_latency_s: float
    nics: tuple[Nic, ...]
    nvlink_domain_nodes: int = 1  # nodes sharing one NVLink domain (GB200 NVL72: 18 trays)
    hosts: tuple[str, ...] = ()  # host names, one per node; () = "<name>-<index>"
    price_per_gpu_hour: float | None = None  # what one GPU costs per hour (None: not given)
    rdma_island: str | None = None  # RDMA network of the nodes (None: their class's default)
    nccl_topo_file: str | None = None  # NCCL topology XML on every node (NCCL_TOPO_FILE)

    def __post_init__(self) -> None:
        if self.nccl_topo_file is not None and not TOPO_FILE.fullmatch(self.nccl_topo_file):
            raise ValueError(f"node group '{self.name}': nccl_topo_file {self.nccl_topo_file!r}: "
                             f"an absolute path of letters, digits and _ . - / only")
        if self.rdma_island is not None and not ISLAND_NAME.fullmatch(self.rdma_island):
            raise ValueError(f"node group '{self.name}': rdma_island {self.rdma_island!r}: "
                             f"letters, digits and _ . - only")
        if self.hosts and len(self.hosts) != self.count:
            raise ValueError(f"node group '{self.name}': {len(self.hosts)} host names for "
                             f"{self.count} nodes")
        if self.count < 1 or self.gpus_per_node < 1:
            raise ValueError(f"node group '{self.name}': count {self.count} and gpus_per_node "
                             f"{self.gpus_per_node} must be >= 1")
        if self.fabric not in FABRICS:
            raise ValueError(f"node group '{self.name}': fabric '{self.fabric}' not in {FABRICS}")
        if self.nvlink_domain_nodes < 1:
            raise ValueError(f"node group '{self.name}': nvlink_domain_nodes must be >= 1")

    @property
    def num_gpus(self) -> int:
        return self.count * self.gpus_per_node

    @property
    def nic_bw_bytes_per_s(self) -> float:
        """All NICs of one node, one direction, bytes/s."""
        return sum(n.bw_bytes_per_s for n in self.nics)

    @property
    def nic_latency_s(self) -> float:
        return max((n.latency_s for n in self.nics), default=10e-6)

    @property
    def transport(self) -> str:
        """The fastest transport in the node (what NCCL would pick by default)."""
        if not self.nics:
            return "none"
        return max(self.nics, key=lambda n: n.bw_bytes_per_s).transport

    @property
    def rdma_nics(self) -> tuple[Nic, ...]:
        """The NICs NCCL's IB plugin uses: those of the node's transport, when it is RDMA."""
        return tuple(n for n in self.nics if n.rdma and n.transport == self.transport)

    @property
    def rdma_network(self) -> tuple[str, str] | None:
        """(transport, island) of the RDMA network the node is on; None for TCP-only nodes.
        Two nodes can do RDMA with each other exactly when these are equal."""
        if self.transport not in RDMA_TRANSPORTS:
            return None
        return (self.transport, self.rdma_island or "")

    @property
    def socket_nics(self) -> tuple[Nic, ...]:
        """The NICs NCCL's socket transport runs on: the TCP NICs, else those naming an IP
        interface (``ifname``), else every NIC (RDMA ports carry IP: IPoIB, Ethernet)."""
        return (tuple(n for n in self.nics if n.transport == "tcp")
                or tuple(n for n in self.nics if n.ifname) or self.nics)

    @property
    def socket_bw_bytes_per_s(self) -> float:
        """One node's bandwidth over NCCL's socket transport, one direction, bytes/s: each
        socket NIC at its line rate, at most :data:`SOCKET_NIC_GBPS_MAX`."""
        return sum(n.count * min(n.gbps, SOCKET_NIC_GBPS_MAX) * 1e9 / 8
                   for n in self.socket_nics)

    @property
    def socket_latency_s(self) -> float:
        """Latency over the socket transport: a TCP NIC's own, kernel sockets on RDMA ports."""
        return max((n.latency_s if n.transport == "tcp" else max(n.latency_s, SOCKET_LATENCY_S)
                    for n in self.socket_nics), default=SOCKET_LATENCY_S)


@dataclass(frozen=True)
class NetworkTier:
    """One scale-out switching tier. ``nodes_per_switch`` nodes hang below one switch of it."""

    name: str
    nodes_per_switch: int
    oversubscription: float = 1.0
    latency_s: float = 1e-6

    def __post_init__(self) -> None:
        if self.nodes_per_switch < 1 or self.oversubscription < 1:
            raise ValueError(f"tier '{self.name}': nodes_per_switch {self.nodes_per_switch} "
                             f"must be >= 1 and oversubscription {self.oversubscription} >= 1")


@dataclass(frozen=True)
class LinkTier:
    """Bandwidth and latency one GPU sees on a tier. ``bw_bytes_per_s`` is one direction."""

    name: str
    bw_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class GroupView:
    """What a collective over a group of GPUs sees.

    ``members_per_domain``: the most group members inside one fast domain (node or NVLink
    domain). ``num_domains``: domains the group touches. ``intra``: the fast tier (None when
    every member sits in its own domain). ``inter``: the scale-out tier as one GPU's share of
    its node's NICs when every GPU of the node communicates at once, after oversubscription
    (None when the group fits in one domain).
    """

    size: int
    members_per_domain: int
    num_domains: int
    intra: LinkTier | None
    inter: LinkTier | None

    @property
    def bottleneck(self) -> LinkTier:
        """The tier that limits a ring over the group (the scale-out tier when it is used)."""
        tiers = [t for t in (self.intra, self.inter) if t is not None]
        if not tiers:
            return LinkTier("local", float("inf"), 0.0)
        return min(tiers, key=lambda t: t.bw_bytes_per_s * (self.members_per_domain
                                                              if t is self.inter else 1))


@dataclass(frozen=True)
class Cluster:
    """A whole cluster: node groups in rank order under scale-out tiers (leaf first)."""

    name: str
    node_groups: tuple[NodeGroup, ...]
    tiers: tuple[NetworkTier, ...] = ()
    rail_optimized: bool = True
    description: str = ""

    def __post_init__(self) -> None:
        if not self.node_groups:
            raise ValueError(f"cluster '{self.name}' has no node groups")

    @property
    def num_gpus(self) -> int:
        return sum(g.num_gpus for g in self.node_groups)

    @property
    def num_nodes(self) -> int:
        return sum(g.count for g in self.node_groups)

    @property
    def homogeneous(self) -> bool:
        first = self.node_groups[0]
        return all(g.gpu.name == first.gpu.name and g.gpus_per_node == first.gpus_per_node
                   for g in self.node_groups)

    @property
    def gpus_per_node(self) -> int:
        """GPUs per node of the smallest node (the conservative figure for mixed clusters)."""
        return min(g.gpus_per_node for g in self.node_groups)

    @property
    def slowest_gpu(self) -> GpuSpec:
        """The GPU type with the lowest bf16 peak: the straggler in a synchronous job."""
        return min((g.gpu for g in self.node_groups),
                   key=lambda gpu: (gpu.peak_flops.get("bf16", 0.0), gpu.hbm_bytes))

    @property
    def min_hbm_bytes(self) -> float:
        return min(g.gpu.hbm_bytes for g in self.node_groups)

    @cached_property
    def _rank_table(self) -> tuple[tuple[int, int, int], ...]:
        """rank -> (node group index, global node index, local GPU index)."""
        rows, node = [], 0
        for gi, g in enumerate(self.node_groups):
            for _ in range(g.count):
                rows.extend((gi, node, local) for local in range(g.gpus_per_node))
                node += 1
        return tuple(rows)

    def locate(self, rank: int) -> tuple[int, int, int]:
        """(node group index, node index, local GPU index) of ``rank``."""
        if not 0 <= rank < self.num_gpus:
            raise ValueError(f"rank {rank} outside cluster of {self.num_gpus} GPUs")
        return self._rank_table[rank]

    @cached_property
    def rank_arrays(self) -> RankArrays:
        """Per-rank facts as numpy arrays, for vectorised group views (:func:`worst_group_view`)."""
        table = np.array(self._rank_table, dtype=np.int64).reshape(-1, 3)
        domains = np.array([self.domain_of_node(n) for n in range(self.num_nodes)], dtype=np.int64)
        g = self.node_groups
        networks = sorted({x.rdma_network for x in g if x.rdma_network is not None})
        net_id = [networks.index(x.rdma_network) if x.rdma_network is not None else -1
                  for x in g]
        return RankArrays(
            group=table[:, 0], node=table[:, 1], domain=domains[table[:, 1]],
            nic_share=np.array([x.nic_bw_bytes_per_s / x.gpus_per_node for x in g])[table[:, 0]],
            nic_latency_s=np.array([x.nic_latency_s for x in g])[table[:, 0]],
            intra_bw=np.array([x.intra_bw_bytes_per_s for x in g])[table[:, 0]],
            intra_latency_s=np.array([x.intra_latency_s for x in g])[table[:, 0]],
            rdma_network=np.array(net_id, dtype=np.int64)[table[:, 0]],
            socket_share=np.array([x.socket_bw_bytes_per_s / x.gpus_per_node
                                   for x in g])[table[:, 0]],
            socket_latency_s=np.array([x.socket_latency_s for x in g])[table[:, 0]])

    def host_of_node(self, node: int) -> str:
        """Host name of global node ``node``: from the spec, else ``<group name>-<index>``."""
        start = 0
        for g in self.node_groups:
            if node < start + g.count:
                return g.hosts[node - start] if g.hosts else f"{g.name}-{node - start}"
            start += g.count
        raise ValueError(f"node {node} outside cluster of {self.num_nodes} nodes")

    def node_first_rank(self, node: int) -> int:
        """Rank of global node ``node``'s first GPU (ranks run node group by node group)."""
        rank = start = 0
        for g in self.node_groups:
            if node < start + g.count:
                return rank + (node - start) * g.gpus_per_node
            rank += g.count * g.gpus_per_node
            start += g.count
        raise ValueError(f"node {node} outside cluster of {self.num_nodes} nodes")

    def group_of_node(self, node: int) -> int:
        """Index of the node group holding global node ``node``."""
        start = 0
        for gi, g in enumerate(self.node_groups):
            if node < start + g.count:
                return gi
            start += g.count
        raise ValueError(f"node {node} outside cluster of {self.num_nodes} nodes")

    def domain_of_node(self, node: int) -> int:
        """Index of the NVLink domain holding ``node`` (== node for ordinary servers)."""
        start, domain = 0, 0
        for g in self.node_groups:
            if node < start + g.count:
                return domain + (node - start) // g.nvlink_domain_nodes
            domain += -(-g.count // g.nvlink_domain_nodes)
            start += g.count
        raise ValueError(f"node {node} outside cluster of {self.num_nodes} nodes")


@dataclass(frozen=True, eq=False)
class RankArrays:
    """Per-rank arrays (index = rank): node group, node, NVLink domain, and the link figures
    of the rank's node group (NIC share per GPU, NIC latency, intra-domain bandwidth/latency,
    its RDMA network as an id (-1: TCP only) and its share and latency over sockets)."""

    group: np.ndarray
    node: np.ndarray
    domain: np.ndarray
    nic_share: np.ndarray
    nic_latency_s: np.ndarray
    intra_bw: np.ndarray
    intra_latency_s: np.ndarray
    rdma_network: np.ndarray
    socket_share: np.ndarray
    socket_latency_s: np.ndarray


def first_nodes(cluster: Cluster, nodes: int) -> Cluster:
    """The sub-cluster of the first ``nodes`` nodes in listing order (same network)."""
    if not 1 <= nodes <= cluster.num_nodes:
        raise ValueError(f"nodes {nodes} outside 1..{cluster.num_nodes}")
    if nodes == cluster.num_nodes:
        return cluster
    groups, left = [], nodes
    for g in cluster.node_groups:
        take = min(left, g.count)
        if take:
            groups.append(replace(g, count=take, hosts=g.hosts[:take]))
        left -= take
    return replace(cluster, name=f"{cluster.name}[:{nodes}]", node_groups=tuple(groups))


def _max_run_length(sorted_rows: np.ndarray) -> np.ndarray:
    """Per row of a row-sorted array, the length of its longest run of equal values."""
    size = sorted_rows.shape[1]
    starts = np.ones(sorted_rows.shape, dtype=bool)
    starts[:, 1:] = sorted_rows[:, 1:] != sorted_rows[:, :-1]
    idx = np.broadcast_to(np.arange(size), sorted_rows.shape)
    last_start = np.maximum.accumulate(np.where(starts, idx, 0), axis=1)
    return (idx - last_start + 1).max(axis=1)


def worst_group_view(cluster: Cluster, groups: np.ndarray, all_to_all: bool = False) -> GroupView:
    """The slowest of many equal-size groups (rows of ``groups``, physical ranks).

    For ring collectives, exactly ``min(group_view(row) ...)`` by bottleneck bandwidth then
    latency, vectorised. With ``all_to_all``, the row whose all-to-all takes longest: traffic to
    the n - k members outside the fullest domain over the NIC share, to the k - 1 inside over
    the fast tier, the slower of the two (as ``cost_models.communication.all_to_all_s``, before
    link efficiencies)."""
    return worst_group_views(cluster, np.asarray(groups)[None], all_to_all)[0]


def worst_group_views(cluster: Cluster, groups: np.ndarray,
                      all_to_all: bool = False) -> list[GroupView]:
    """:func:`worst_group_view` of each block ``groups[b]`` of a [block, group, member] array,
    in one vectorised pass (blocks are pipeline stages).

    Per-row extremes of per-node-group figures are constants on a one-group cluster and are
    not gathered; a row's extreme switch index under each tier is the tier's index of its
    extreme node (``n // nodes_per_switch`` is monotone), so each tier costs no reduction."""
    groups = np.asarray(groups, dtype=np.int64)
    blocks, per_block, size = groups.shape
    if size <= 1:  # a lone GPU sees no link: one view serves every block
        return [group_view(cluster, groups[0, 0].tolist())] * blocks
    flat = groups.reshape(-1, size)
    a = cluster.rank_arrays
    uniform = len(cluster.node_groups) == 1

    def row_min(values: np.ndarray) -> np.ndarray:
        return np.full(len(flat), values[0]) if uniform else values[flat].min(axis=1)

    def row_max(values: np.ndarray) -> np.ndarray:
        return np.full(len(flat), values[0]) if uniform else values[flat].max(axis=1)

    dom = np.sort(a.domain[flat], axis=1)
    k = _max_run_length(dom)
    num_domains = 1 + (dom[:, 1:] != dom[:, :-1]).sum(axis=1)
    intra_bw = np.where(k > 1, row_min(a.intra_bw), np.inf)
    intra_lat = np.where(k > 1, row_max(a.intra_latency_s), 0.0)
    # scale-out tier, as _inter_tier: a tier's latency counts when the group spans several units
    # of the tier beneath, its oversubscription when the group spans several of its switches
    # transport rule (module docstring): members on different RDMA networks use sockets
    node = a.node[flat]
    node_lo, node_hi = node.min(axis=1), node.max(axis=1)
    sockets = row_max(a.rdma_network) != row_min(a.rdma_network)
    share = np.where(sockets, row_min(a.socket_share), row_min(a.nic_share))
    inter_lat = np.where(sockets, row_max(a.socket_latency_s), row_max(a.nic_latency_s))
    multi_below = node_hi != node_lo
    spans = [multi_below]  # per tier from the leaf: whether the row spans several switches
    for tier in cluster.tiers:
        multi = node_hi // tier.nodes_per_switch != node_lo // tier.nodes_per_switch
        inter_lat = inter_lat + np.where(multi_below, tier.latency_s, 0.0)
        share = np.where(multi, share / tier.oversubscription, share)
        multi_below = multi
        spans.append(multi)
    if all_to_all:
        with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 where the branch is unused
            t_out = np.where(num_domains > 1, (size - k) / size / share, 0.0)
            t_in = np.where(k > 1, (k - 1) / size / intra_bw, 0.0)
        worst = np.argmax(np.maximum(t_out, t_in).reshape(blocks, per_block), axis=1)
    else:
        inter_key = np.where(num_domains > 1, share * k, np.inf)
        use_inter = inter_key < intra_bw  # GroupView.bottleneck: the smaller of the two rates
        key_bw = np.minimum(intra_bw, inter_key).reshape(blocks, per_block)
        key_lat = np.where(use_inter, inter_lat, intra_lat).reshape(blocks, per_block)
        worst = [int(np.lexsort((-key_lat[b], key_bw[b]))[0]) for b in range(blocks)]
    views: list[GroupView] = []
    memo: dict[tuple, GroupView] = {}
    for b in range(blocks):
        i = b * per_block + int(worst[b])
        # what group_view reads: the fullest domain, the domains, node groups and which tiers
        # the row's nodes span
        signature = (int(k[i]), int(num_domains[i]),
                     (0,) if uniform else tuple(np.unique(a.group[flat[i]]).tolist()),
                     tuple(bool(s[i]) for s in spans))
        if signature not in memo:
            memo[signature] = group_view(cluster, flat[i].tolist())
        views.append(memo[signature])
    return views


def runs_on_sockets(node_groups: Sequence[NodeGroup]) -> bool:
    """Whether a communicator over nodes of these groups runs on NCCL's socket transport
    (the transport rule of the module docstring): its nodes are not all on one RDMA network
    (TCP-only nodes among RDMA ones included). A group of TCP-only nodes uses its TCP NICs."""
    return len({g.rdma_network for g in node_groups}) > 1


def _inter_tier(cluster: Cluster, groups: set[int], nodes: set[int]) -> LinkTier:
    """One GPU's share of the scale-out network, limited by the slowest node group touched.

    Node ``n`` sits below switch ``n // nodes_per_switch`` of each tier. The group crosses a
    tier when its nodes sit below more than one switch of the tier beneath (a node alone is its
    own unit), and pays a tier's oversubscription when it leaves that tier's switches. A group
    whose nodes are not on one RDMA network runs on sockets (:func:`runs_on_sockets`): the
    tier is named ``tcp`` and uses each node's socket share and latency.
    """
    touched = [cluster.node_groups[g] for g in sorted(groups)]
    if runs_on_sockets(touched):
        share = min(g.socket_bw_bytes_per_s / g.gpus_per_node for g in touched)
        latency = max(g.socket_latency_s for g in touched)
        name = "tcp"
    else:
        share = min(g.nic_bw_bytes_per_s / g.gpus_per_node for g in touched)
        latency = max(g.nic_latency_s for g in touched)
        name = "/".join(sorted({g.transport for g in touched}))
    below = len(nodes)  # units of the tier beneath the group touches
    for tier in cluster.tiers:
        switches = len({n // tier.nodes_per_switch for n in nodes})
        if below > 1:
            latency += tier.latency_s
        if switches > 1:
            share /= tier.oversubscription
            name = f"{name}+{tier.name}"
        below = switches
    return LinkTier(name, share, latency)


def _intra_tier(cluster: Cluster, groups: set[int]) -> LinkTier:
    slowest = min((cluster.node_groups[g] for g in groups), key=lambda g: g.intra_bw_bytes_per_s)
    return LinkTier(slowest.fabric, slowest.intra_bw_bytes_per_s, slowest.intra_latency_s)


def group_view(cluster: Cluster, ranks: Sequence[int]) -> GroupView:
    """Reduce a group of ranks to the tiers its collectives use (see :class:`GroupView`)."""
    located = [cluster.locate(r) for r in ranks]
    per_domain: dict[int, int] = {}
    for _, node, _ in located:
        d = cluster.domain_of_node(node)
        per_domain[d] = per_domain.get(d, 0) + 1
    groups = {g for g, _, _ in located}
    nodes = {n for _, n, _ in located}
    k = max(per_domain.values())
    intra = _intra_tier(cluster, groups) if k > 1 else None
    inter = _inter_tier(cluster, groups, nodes) if len(per_domain) > 1 else None
    return GroupView(len(located), k, len(per_domain), intra, inter)
