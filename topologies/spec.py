"""Cluster spec files: the pydantic schema at the file boundary and the defaults it fills.

A cluster YAML/JSON file is checked here (unknown keys, non-positive numbers, unknown GPUs,
inconsistent fabrics, counts beyond the limits of :mod:`topologies.limits`) and converted into
the frozen :class:`~topologies.cluster.Cluster` the cost models read (:func:`cluster_from_dict`).
Figures a file may leave out are filled from the GPU catalog (``data/gpu_specs.json``) and the
defaults below, each with its source. A device the catalog lacks (a CPU host measured by
``planner calibrate``, a new GPU) is written inline as a :class:`~topologies.devices.DeviceSpec`
in place of the catalog name (:mod:`topologies.devices`); standard clusters by GPU name are
built by :mod:`topologies.standard`.

Units in the file: bandwidths in GB/s one direction per GPU (``intra_bw_GBps``) or Gbit/s per
NIC port as marketed (``gbps``); latencies in microseconds. Inside :class:`Cluster` everything
is bytes/s and seconds.

This module raises ``pydantic.ValidationError`` (a ``ValueError``) and never imports
``planner``; ``planner.inputs.clusters`` turns those errors into one-line ``SpecError`` messages.
"""
from __future__ import annotations

import math

from types import UnionType
from typing import (Annotated, Any, Literal, Mapping, Sequence, Union, get_args,
                    get_origin)

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from topologies.catalog import GB, INLINE_CONFIDENCE, GpuSpec, UnknownGpuError, get_gpu
from topologies.cluster import (DEVICE_NAME, IFNAME, ISLAND_NAME, RDMA_TRANSPORTS, TOPO_FILE,
                                Cluster, NetworkTier, Nic, NodeGroup)
from topologies.devices import DeviceSpec, gpu_spec_of
from topologies.limits import (CLUSTER_GPUS, CLUSTER_NODES, GPUS_PER_NODE, NICS_PER_NODE,
                               PROCESSES_PER_HOST, Limit)

__all__ = ["PCIE_X16_EFFECTIVE_GBPS", "INTRA_LATENCY_US", "NIC_LATENCY_US", "pcie_generation",
           "NicSpec", "NodeGroupSpec", "NetworkTierSpec", "NetworkSpec", "ClusterSpec",
           "cluster_from_dict", "fields_at"]

# Effective one-direction GPU-to-GPU bandwidth over PCIe x16, GB/s: about 80% of the raw
# 16/32/64 GB/s of Gen3/4/5 (catalog "pcie" entries: Gen4 x16 = 64 GB/s bidir; Gen5 = 128).
PCIE_X16_EFFECTIVE_GBPS: dict[int, float] = {3: 12.0, 4: 25.0, 5: 50.0}

# Default intra-domain latency per fabric, us. NVSwitch: ASTRA-sim's validated HGX H100 model
# uses 936 ns (shared/data/topology/astra-sim_HGX-H100-validated.yml); NCCL's hwLat table
# (src/graph/tuning.cc) puts PCIe at about twice NVLink. xGMI: estimate, between the two.
# host: processes of one machine talking through host memory (gloo over loopback or shared
# memory); 20 us is a typical gloo loopback small-message latency (estimate), which
# ``planner calibrate`` replaces with the measured figure.
INTRA_LATENCY_US: dict[str, float] = {"nvswitch": 1.0, "nvlink": 1.0, "xgmi": 1.5, "pcie": 2.0,
                                      "host": 20.0}

# Default end-to-end NIC latency per transport, us. IB: NCCL hwLat NET (Tree/LL) = 5 us, also
# Nic's own default. RoCE: slightly above IB (estimate). TCP: kernel sockets (estimate).
NIC_LATENCY_US: dict[str, float] = {"ib": 5.0, "roce": 6.0, "tcp": 25.0}


def pcie_generation(gpu: GpuSpec) -> int:
    """PCIe generation of a GPU's host link, read from its architecture."""
    if gpu.arch.startswith("Volta"):
        return 3
    if gpu.arch.startswith(("Hopper", "Blackwell", "CDNA3")):
        return 5
    return 4


def _scalar_types(annotation: Any) -> set:
    """The plain types an annotation admits (``int | None`` -> {int, NoneType}; a Literal
    admits its values' types; containers contribute their own origin, e.g. list)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return {type(a) for a in args}
    if origin in (Union, UnionType):
        return set().union(*(_scalar_types(a) for a in args))
    if origin is Annotated:
        return _scalar_types(args[0])
    return {origin or annotation}


def exact_scalar(annotation: Any, value: Any) -> Any:
    """``value`` unchanged if it is what YAML writes for a field of ``annotation``: a number
    for a number, true/false for a flag. Pydantic's lax mode would read ``true`` as 1, ``"2"``
    as 2 and ``0`` as false, so a typo would pass as a setting; raise instead. Numbers are
    finite: YAML's ``.inf`` would pass ``gt=0`` as an infinitely fast link."""
    types = _scalar_types(annotation)
    number = bool(types & {int, float})
    if isinstance(value, bool) and number and bool not in types:
        raise ValueError(f"a number, not {str(value).lower()}")
    if number and isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"a finite number, not {value}")  # YAML's .inf and .nan
    if isinstance(value, str) and (number or bool in types) and str not in types:
        raise ValueError("a number, not a string" if number else "true or false, not a string")
    if bool in types and not isinstance(value, bool) and isinstance(value, (int, float)) and (
            not number):
        raise ValueError(f"true or false, not {value!r}")
    return value


class _Strict(BaseModel):
    """Base of every spec model: unknown keys are errors, instances are immutable, and
    numbers and flags are taken only as written (:func:`exact_scalar`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _exact_scalars(cls, value: Any, info: Any) -> Any:
        return exact_scalar(cls.model_fields[info.field_name].annotation, value)


class NicSpec(_Strict):
    """NICs of one kind in a node."""

    count: int = Field(ge=1, description="NICs of this kind in one node.")
    gbps: float = Field(gt=0, description="Line rate of one NIC, Gbit/s as marketed (NDR = 400).")
    transport: Literal["ib", "roce", "tcp"] = Field(
        description="ib (InfiniBand), roce (RDMA over Ethernet) or tcp (plain Ethernet sockets).")
    devices: list[str] | None = Field(
        default=None, description="Device names, one per NIC, in GPU (rail) order: RDMA "
        "devices for ib/roce (mlx5_0, ...; written to NCCL_IB_HCA as exact names), network "
        "interfaces for tcp (eth0, ...; NCCL_SOCKET_IFNAME).")
    latency_us: float | None = Field(
        default=None, gt=0, description="End-to-end latency, us; default by transport.")
    gid_index: int | None = Field(
        default=None, ge=0, description="RoCE only: the GID index NCCL uses "
        "(NCCL_IB_GID_INDEX); default 3, the RoCE v2 GID of an interface's IPv4 address.")
    ifname: str | None = Field(
        default=None, description="The IP interface (eth0, ib0, bond0) NCCL's sockets use on "
        "these NICs: bootstrap, and the socket transport (NCCL_SOCKET_IFNAME).")

    @field_validator("count")
    @classmethod
    def _count_within_limit(cls, count: int) -> int:
        return _within(count, NICS_PER_NODE)

    @field_validator("devices")
    @classmethod
    def _safe_devices(cls, devices: list[str] | None) -> list[str] | None:
        for name in devices or ():
            if not DEVICE_NAME.fullmatch(name):
                raise ValueError(f"device names of letters, digits and _ . : - (at most 64, no "
                                 f"commas, spaces or shell characters): got {name!r}")
        if devices is not None and len(set(devices)) != len(devices):
            raise ValueError(f"distinct device names: {devices} repeats one")
        return devices

    @field_validator("ifname")
    @classmethod
    def _safe_ifname(cls, ifname: str | None) -> str | None:
        if ifname is not None and not IFNAME.fullmatch(ifname):
            raise ValueError(f"an interface name of at most 15 letters, digits and _ . : - "
                             f"(no spaces or shell characters): got {ifname!r}")
        return ifname

    @model_validator(mode="after")
    def _one_device_per_nic(self) -> NicSpec:
        if self.devices is not None and len(self.devices) != self.count:
            raise ValueError(f"one device name per NIC: list {self.count} names in devices "
                             f"(got {len(self.devices)}) or drop devices")
        if self.gid_index is not None and self.transport != "roce":
            raise ValueError(f"gid_index only on roce NICs (this one is {self.transport}): "
                             f"NCCL_IB_GID_INDEX selects a RoCE GID; drop it")
        return self

    def to_nic(self) -> Nic:
        """The frozen NIC this entry describes."""
        latency_us = self.latency_us or NIC_LATENCY_US[self.transport]
        return Nic(self.count, self.gbps, self.transport, tuple(self.devices or ()),
                   latency_us * 1e-6, gid_index=self.gid_index, ifname=self.ifname)


class NodeGroupSpec(_Strict):
    """``count`` identical nodes (servers, or GB200 compute trays)."""

    name: str = Field(min_length=1, description="Name of the group, unique in the cluster.")
    count: int = Field(ge=1, description="Number of nodes in the group.")
    gpu: str | DeviceSpec = Field(
        description="GPU catalog name or alias (H100, A100, GB200, ...), or an inline device "
        "object (name, memory_gb, memory_bw_GBps, peak_tflops) for one the catalog lacks.")
    gpus_per_node: int = Field(ge=1, description="GPUs (devices, processes) in one node "
                               "(GB200 tray: 4).")
    fabric: Literal["nvswitch", "nvlink", "pcie", "xgmi", "host"] = Field(
        description="Intra-node fabric: nvswitch, nvlink (direct links), pcie, xgmi (AMD) or "
        "host (processes of one machine through host memory: gloo over loopback/shared memory).")
    intra_bw_GBps: float | None = Field(
        default=None, gt=0, description="Intra-domain bandwidth, GB/s one direction per GPU; "
        "default: catalog NVLink/xGMI figure, or PCIe x16 effective for fabric pcie; "
        "required for fabric host.")
    intra_latency_us: float | None = Field(
        default=None, gt=0, description="Intra-domain latency, us; default by fabric.")
    nics: list[NicSpec] = Field(default_factory=list, description="Scale-out NICs of one node.")
    nvlink_domain_nodes: int = Field(
        default=1, ge=1, description="Nodes sharing one NVLink domain (GB200 NVL72: 18 trays).")
    hosts: list[str] | None = Field(
        default=None, description="Host names of the nodes, one per node in order (used by the "
        "launch emitters); default '<group name>-<index>'.")
    price_per_gpu_hour: float | None = Field(
        default=None, gt=0, description="What one GPU of this group costs per hour, in any "
        "currency (planner serve --objective per-dollar).")
    rdma_island: str | None = Field(
        default=None, description="RDMA island of the nodes: groups on different islands have "
        "no RDMA path between them (their communicators fall back to TCP sockets); default: "
        "one island per transport (every ib group reaches every other ib group, every roce "
        "group every roce group).")
    nccl_topo_file: str | None = Field(
        default=None, description="Path, on every node of the group, of an NCCL topology XML "
        "that NCCL must load (NCCL_TOPO_FILE): for virtual machines whose PCI topology NCCL "
        "cannot see, e.g. Azure ND H100 v5's /opt/microsoft/ndv5-topo.xml. An absolute path "
        "of letters, digits and _ . - / only.")

    @field_validator("count", "nvlink_domain_nodes")
    @classmethod
    def _nodes_within_limit(cls, nodes: int) -> int:
        return _within(nodes, CLUSTER_NODES)

    @model_validator(mode="after")
    def _group_within_limits(self) -> NodeGroupSpec:
        per_node = PROCESSES_PER_HOST if self.fabric == "host" else GPUS_PER_NODE
        _within(self.gpus_per_node, per_node, "gpus_per_node")
        _within(self.count * self.gpus_per_node, CLUSTER_GPUS, "count x gpus_per_node")
        return self

    @field_validator("rdma_island")
    @classmethod
    def _safe_island(cls, island: str | None) -> str | None:
        if island is not None and not ISLAND_NAME.fullmatch(island):
            raise ValueError(f"an island name of letters, digits and _ . - (at most 64): "
                             f"got {island!r}")
        return island

    @field_validator("nccl_topo_file")
    @classmethod
    def _safe_topo_file(cls, path: str | None) -> str | None:
        if path is not None and not TOPO_FILE.fullmatch(path):
            raise ValueError(f"an absolute path of letters, digits and _ . - / (at most 255, "
                             f"no spaces or shell characters): got {path!r}")
        return path

    @model_validator(mode="after")
    def _fabric_names_fit(self) -> NodeGroupSpec:
        names = [d for n in self.nics for d in (n.devices or ())]
        repeats = sorted({d for d in names if names.count(d) > 1})
        if repeats:
            raise ValueError(f"distinct device names across the group's nics: {repeats} "
                             f"listed twice")
        named = [n.devices is not None for n in self.nics if n.transport in RDMA_TRANSPORTS]
        if any(named) and not all(named):
            raise ValueError("devices on every ib/roce nics entry of the group or on none: "
                             "NCCL_IB_HCA lists exactly the named devices, so an unnamed "
                             "entry would be left out")
        gids = {n.gid_index for n in self.nics if n.transport == "roce" and n.gid_index is not None}
        if len(gids) > 1:
            raise ValueError(f"one gid_index for the group's roce nics (NCCL_IB_GID_INDEX is "
                             f"one value per process): got {sorted(gids)}")
        if self.rdma_island is not None and not any(n.transport in RDMA_TRANSPORTS
                                                    for n in self.nics):
            raise ValueError(f"rdma_island only on a group with ib or roce nics: drop "
                             f"rdma_island '{self.rdma_island}' or add the RDMA nics")
        return self

    @field_validator("gpu", mode="before")
    @classmethod
    def _known_gpu(cls, gpu: Any) -> str | DeviceSpec:
        if isinstance(gpu, DeviceSpec):
            return gpu
        if isinstance(gpu, Mapping):  # an inline device: its errors keep their field paths
            return DeviceSpec.model_validate(gpu)
        if not isinstance(gpu, str):
            raise ValueError("a GPU catalog name (H100, A100, ...) or an inline device object "
                             "with name, memory_gb, memory_bw_GBps and peak_tflops")
        try:
            return get_gpu(gpu).name
        except UnknownGpuError as err:
            raise ValueError(f"a GPU from the catalog (or an inline device object with name, "
                             f"memory_gb, memory_bw_GBps and peak_tflops): {err}") from None

    def _gpu_spec(self) -> GpuSpec:
        """The group's GPU: the catalog entry, or the inline device's."""
        return gpu_spec_of(self.gpu)

    @model_validator(mode="after")
    def _fabric_fits_gpu(self) -> NodeGroupSpec:
        gpu = self._gpu_spec()
        if self.fabric == "host":
            if self.intra_bw_GBps is None:
                raise ValueError("an explicit intra_bw_GBps for fabric host: the bandwidth "
                                 "between two processes of a node through host memory, GB/s "
                                 "one direction (planner calibrate measures it)")
            if self.nvlink_domain_nodes != 1:
                raise ValueError(f"nvlink_domain_nodes: 1 for fabric host (got "
                                 f"{self.nvlink_domain_nodes}): host memory joins one node only")
            return self
        if self.fabric != "pcie" and self.intra_bw_GBps is None and gpu.nvlink_bw_bytes_per_s <= 0:
            where = ("an inline device carries" if gpu.confidence == INLINE_CONFIDENCE
                     else "the catalog gives")
            raise ValueError(f"fabric: pcie, or an explicit intra_bw_GBps: {where} "
                             f"{gpu.name} no NVLink/xGMI bandwidth for fabric '{self.fabric}'")
        if self.nvlink_domain_nodes > 1 and self.fabric == "pcie":
            raise ValueError(f"nvlink_domain_nodes: 1 for fabric pcie (got "
                             f"{self.nvlink_domain_nodes}), or an NVLink fabric such as nvswitch")
        return self

    @model_validator(mode="after")
    def _domain_fits_gpu(self) -> NodeGroupSpec:
        gpu = self._gpu_spec()
        limit = gpu.nvlink_domain_gpus
        domain_gpus = self.nvlink_domain_nodes * self.gpus_per_node
        if limit and domain_gpus > limit:
            raise ValueError(f"at most {limit} GPUs per {gpu.name} NVLink domain: "
                             f"nvlink_domain_nodes {self.nvlink_domain_nodes} x gpus_per_node "
                             f"{self.gpus_per_node} = {domain_gpus}; lower nvlink_domain_nodes")
        return self

    @model_validator(mode="after")
    def _one_host_per_node(self) -> NodeGroupSpec:
        if self.hosts is not None and len(self.hosts) != self.count:
            raise ValueError(f"one host name per node: list {self.count} names in hosts "
                             f"(got {len(self.hosts)}) or drop hosts")
        if self.hosts is not None and any(not h for h in self.hosts):
            raise ValueError("hosts: non-empty host names")
        return self

    @property
    def num_domains(self) -> int:
        """NVLink domains the group fills (the last one may be partial)."""
        return -(-self.count // self.nvlink_domain_nodes)

    def intra_bw_bytes_per_s(self) -> float:
        """The given intra-domain bandwidth, else the catalog or PCIe figure."""
        if self.intra_bw_GBps is not None:
            return self.intra_bw_GBps * GB
        gpu = self._gpu_spec()
        if self.fabric == "pcie":
            return PCIE_X16_EFFECTIVE_GBPS[pcie_generation(gpu)] * GB
        return gpu.nvlink_bw_bytes_per_s

    def to_node_group(self) -> NodeGroup:
        """The frozen node group this entry describes."""
        latency_us = self.intra_latency_us or INTRA_LATENCY_US[self.fabric]
        return NodeGroup(self.name, self.count, self._gpu_spec(), self.gpus_per_node,
                         self.fabric, self.intra_bw_bytes_per_s(), latency_us * 1e-6,
                         tuple(n.to_nic() for n in self.nics), self.nvlink_domain_nodes,
                         tuple(self.hosts or ()), self.price_per_gpu_hour,
                         rdma_island=self.rdma_island, nccl_topo_file=self.nccl_topo_file)


class NetworkTierSpec(_Strict):
    """One scale-out switching tier."""

    name: str = Field(min_length=1, description="Tier name: leaf, spine, core, ...")
    nodes_per_switch: int = Field(ge=1, description="Nodes below one switch of this tier.")
    oversubscription: float = Field(
        default=1.0, ge=1,
        description="Downlink:uplink ratio of this tier's switches (1 = non-blocking).")
    latency_us: float = Field(
        default=1.0, gt=0, description="Latency added by going through this tier, us.")

    def to_tier(self) -> NetworkTier:
        """The frozen tier this entry describes."""
        return NetworkTier(self.name, self.nodes_per_switch, self.oversubscription,
                           self.latency_us * 1e-6)


class NetworkSpec(_Strict):
    """The scale-out network: tiers listed leaf first."""

    rail_optimized: bool = Field(
        default=True, description="NIC i of every node goes to its own leaf (rail) switch.")
    tiers: list[NetworkTierSpec] = Field(default_factory=list, description="Leaf first.")

    @model_validator(mode="after")
    def _tiers_widen(self) -> NetworkSpec:
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"a distinct name per tier: rename the repeats in {names}")
        for lower, upper in zip(self.tiers, self.tiers[1:]):
            if upper.nodes_per_switch < lower.nodes_per_switch:
                raise ValueError(f"tiers listed leaf first, each reaching at least as many nodes "
                                 f"as the one below: '{upper.name}' has nodes_per_switch "
                                 f"{upper.nodes_per_switch} < '{lower.name}' "
                                 f"{lower.nodes_per_switch}")
        return self


class ClusterSpec(_Strict):
    """A whole cluster file."""

    name: str = Field(default="cluster", min_length=1, description="Cluster name.")
    description: str = Field(default="", description="One line: what this cluster is for.")
    node_groups: list[NodeGroupSpec] = Field(min_length=1, description="Node groups, rank order.")
    network: NetworkSpec = Field(default_factory=NetworkSpec, description="Scale-out network.")

    @model_validator(mode="after")
    def _within_limits(self) -> ClusterSpec:
        _within(sum(g.count for g in self.node_groups), CLUSTER_NODES, "all node groups")
        _within(sum(g.count * g.gpus_per_node for g in self.node_groups), CLUSTER_GPUS,
                "all node groups")
        return self

    @model_validator(mode="after")
    def _unique_group_names(self) -> ClusterSpec:
        names = [g.name for g in self.node_groups]
        if len(set(names)) != len(names):
            raise ValueError(f"a distinct name per node group: rename the repeats in {names}")
        return self

    @model_validator(mode="after")
    def _unique_hosts(self) -> ClusterSpec:
        """Every node's host name (listed, or the default ``<group>-<index>``) names one node:
        launch files address nodes by it."""
        seen: dict[str, str] = {}
        for g in self.node_groups:
            names = g.hosts if g.hosts is not None else [f"{g.name}-{i}" for i in range(g.count)]
            for host in names:
                if host in seen:
                    raise ValueError(f"hosts: a distinct host name per node; {host!r} names a "
                                     f"node of '{seen[host]}' and one of '{g.name}'"
                                     if seen[host] != g.name else
                                     f"hosts: a distinct host name per node; {host!r} is "
                                     f"listed twice in node group '{g.name}'")
                seen[host] = g.name
        return self

    @model_validator(mode="after")
    def _network_reaches_every_domain(self) -> ClusterSpec:
        if sum(g.num_domains for g in self.node_groups) == 1:
            return self  # one NVLink domain (or one node): no scale-out traffic
        for g in self.node_groups:
            if not g.nics:
                raise ValueError(f"a nics entry for node group '{g.name}': the cluster has more "
                                 f"than one NVLink domain, so every node needs scale-out NICs")
        nodes = sum(g.count for g in self.node_groups)
        tiers = self.network.tiers
        if not tiers or tiers[-1].nodes_per_switch < nodes:
            reach = tiers[-1].nodes_per_switch if tiers else 0
            raise ValueError(f"network.tiers whose top tier reaches all {nodes} nodes (now "
                             f"{reach}): raise its nodes_per_switch or add a tier above it")
        return self

    def to_cluster(self) -> Cluster:
        """The frozen cluster this file describes."""
        return Cluster(self.name, tuple(g.to_node_group() for g in self.node_groups),
                       tuple(t.to_tier() for t in self.network.tiers),
                       self.network.rail_optimized, self.description)


def _within(value: int, limit: Limit, counted: str | None = None) -> int:
    """``value``, or a ValueError naming ``limit``. A field's own value is quoted by the
    caller's error; a total (``counted`` says over what) is quoted here."""
    if limit.exceeded_by(value):
        got = "" if counted is None else f", got {value:,} ({counted})"
        raise ValueError(limit.expected() + got)
    return value


def cluster_from_dict(data: Mapping[str, Any]) -> Cluster:
    """Validate a parsed cluster file and build the :class:`Cluster`.

    Raises ``pydantic.ValidationError`` (field path in ``loc``) or ``ValueError``.
    """
    return ClusterSpec.model_validate(data).to_cluster()


def fields_at(loc: Sequence[str | int]) -> list[str]:
    """Field names allowed in the spec object at ``loc`` (``("node_groups", 0, "nics", 0)``)."""
    model: type[BaseModel] | None = ClusterSpec
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        model = _model_in(field.annotation) if field else None
    return list(model.model_fields) if model else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The spec model inside ``list[X]`` / ``X | None`` / ``X``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if (found := _model_in(arg)) is not None:
            return found
    return None
