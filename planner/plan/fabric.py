"""The Plan's ``fabric`` section: what each node's NCCL must be told, and the settings it implies.

A training or serving plan carries the section when its cluster spec names any of its fabric (NIC
``devices``, ``ifname`` or ``gid_index``, or a node group's ``rdma_island``) or has nodes that
are not on InfiniBand (RoCE or TCP-only: NCCL's defaults assume IB); plans of all-IB clusters
without them have no section and keep their bytes. The section is::

    {"nodes": [one entry per torchrun node rank, in node-rank order],
     "socket_groups": {group kind: number of its groups that run on TCP sockets}}

and each node entry::

    {"node_rank", "host", "node_group",
     "transport":      "ib" | "roce" | "tcp" | "none" (no NICs: a single-node cluster),
     "rdma_island":    the group's island, null for its transport's default island,
     "hcas":           the RDMA devices NCCL may use, exact names in GPU (rail) order
                       ([] when the spec names none, or for TCP nodes),
     "gid_index":      RoCE GID index (NCCL_IB_GID_INDEX), null unless transport is roce,
     "socket_ifnames": IP interfaces for NCCL's sockets (bootstrap, TCP transport), maybe [],
     "rank_hcas":      per LOCAL_RANK the devices of its rail, or null when the node's ranks
                       all use the same devices}

plus ``"topo_file"`` (the node group's ``nccl_topo_file``: an NCCL topology XML on the node)
only when the spec gives one, so plans without it keep their bytes.

NCCL reads its NIC list once per process (``NCCL_IB_HCA``), so per-rank rails need a wrapper
that sets it from ``LOCAL_RANK`` before the training process starts; the network (IB or
Socket) is chosen per communicator (``topologies.cluster`` module docstring: the transport
rule). :func:`nccl_env` and :func:`rank_env` turn an entry into environment variables
(NCCL docs, ``env.html``):

* ``NCCL_IB_HCA``: a leading ``=`` makes every listed name an exact match; without it each
  name is a prefix (``mlx5_1`` would also select ``mlx5_10`` ... ``mlx5_19``);
* ``NCCL_IB_GID_INDEX`` for RoCE (``topologies.cluster.DEFAULT_ROCE_GID_INDEX`` when the spec
  gives none);
* ``NCCL_SOCKET_IFNAME``, also with ``=`` (exact interface names);
* ``NCCL_NET``: ``IB`` on RDMA nodes (NCCL fails instead of silently running on sockets when
  the HCAs cannot be opened), ``Socket`` and ``NCCL_IB_DISABLE=1`` on TCP-only nodes;
* ``NCCL_TOPO_FILE``: an XML NCCL loads before detecting the topology, where the node group
  names one. Virtual machines need it: their PCI tree hides which NIC sits by which GPU (Azure
  ND H100 v5 ships ``/opt/microsoft/ndv5-topo.xml`` for this). planner points to the file the
  nodes have rather than writing one: NCCL matches the XML's GPUs and NICs by PCI bus id,
  which a cluster spec does not carry.

Every name passed the spec's name rules (``topologies.cluster.DEVICE_NAME`` / ``IFNAME``); the
checks here repeat them for plan files edited by hand, and the emitters quote every value.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from topologies.cluster import (DEFAULT_ROCE_GID_INDEX, DEVICE_NAME, IFNAME, ISLAND_NAME,
                                TOPO_FILE, Cluster, NodeGroup, runs_on_sockets)

NODE_KEYS = ("gid_index", "hcas", "host", "node_group", "node_rank", "rank_hcas",
             "rdma_island", "socket_ifnames", "transport")
OPTIONAL_KEYS = ("topo_file",)  # present only when set
TRANSPORTS = ("ib", "roce", "tcp", "none")


def describes_fabric(cluster: Cluster) -> bool:
    """Whether plans on the cluster carry the section: its spec names any of its fabric, or
    some node is not on InfiniBand (RoCE needs its GID index, TCP-only nodes NCCL's socket
    network; NCCL's defaults assume IB). All-IB clusters with nothing named keep their bytes."""
    return any(g.rdma_island is not None or g.nccl_topo_file is not None
               or g.transport in ("roce", "tcp") or any(
                   n.devices or n.ifname is not None or n.gid_index is not None for n in g.nics)
               for g in cluster.node_groups)


def rails_of_gpu(local: int, num_ports: int, gpus: int) -> list[int]:
    """Ports (NIC indices of a node) GPU ``local`` uses: GPU g uses port g * ports // gpus, and
    with more ports than GPUs the ports p with p * gpus // ports == g (the rule of
    ``topologies.graph``)."""
    if num_ports >= gpus:
        return [p for p in range(num_ports) if p * gpus // num_ports == local]
    return [local * num_ports // gpus]


def socket_ifnames(group: NodeGroup) -> list[str]:
    """The interfaces NCCL's sockets use on a node of ``group``: those of its TCP NICs (their
    ``ifname``, else their device names), else the ``ifname`` of its other NICs; [] when the
    spec names none (NCCL then picks one itself). Same NICs as ``NodeGroup.socket_nics``."""
    names: list[str] = []
    tcp = [n for n in group.nics if n.transport == "tcp"]
    for nic in tcp or group.nics:
        for name in ([nic.ifname] if nic.ifname else list(nic.devices) if tcp else []):
            if name not in names:
                names.append(name)
    return names


def _node_entry(cluster: Cluster, node: dict[str, Any], locals_: list[int]) -> dict[str, Any]:
    group = cluster.node_groups[cluster.group_of_node(node["node"])]
    transport = group.transport
    rdma = group.rdma_nics
    ports = [d for n in rdma for d in n.devices] if rdma and all(n.devices for n in rdma) else []
    rank_hcas = None
    if ports:
        rails = [[ports[p] for p in rails_of_gpu(local, len(ports), group.gpus_per_node)]
                 for local in locals_]
        if len({tuple(r) for r in rails}) > 1:
            rank_hcas = rails
    gid = None
    if transport == "roce":
        gid = next((n.gid_index for n in rdma if n.gid_index is not None),
                   DEFAULT_ROCE_GID_INDEX)
    entry = {"node_rank": node["node_rank"], "host": node["host"], "node_group": group.name,
             "transport": transport, "rdma_island": group.rdma_island, "hcas": ports,
             "gid_index": gid, "socket_ifnames": socket_ifnames(group), "rank_hcas": rank_hcas}
    if group.nccl_topo_file is not None:
        entry["topo_file"] = group.nccl_topo_file
    return entry


def fabric_section(cluster: Cluster, pool: Any) -> dict[str, Any] | None:
    """The fabric section of a plan whose pool is ``pool`` (a ``planner.plan.document.Pool``),
    or None when :func:`describes_fabric` says the cluster needs none."""
    if not describes_fabric(cluster):
        return None
    local = pool.slots[1]  # LOCAL_RANK j of a node is global rank first_rank + j
    nodes = [_node_entry(cluster, n, local[n["first_rank"]:n["first_rank"] + n["gpus"]].tolist())
             for n in pool.nodes]
    return {"nodes": nodes, "socket_groups": socket_groups(cluster, pool)}


def serving_fabric_section(cluster: Cluster, pools: list[Any],
                           instances: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fabric section of a serving plan (None when the cluster spec names none of its
    fabric): per pool, in plan order, its role, a node entry per node (as a training plan's;
    the engine starts its own GPU workers, so launchers set only the node-wide settings) and
    how many of its engine instances span RDMA networks (their collectives run on sockets).
    ``instances``: the serving section's, each with its nodes' ``cluster_node``."""
    if not describes_fabric(cluster):
        return None
    out = []
    for pool in pools:
        spanning = sum(runs_on_sockets([cluster.node_groups[cluster.group_of_node(n["cluster_node"])]
                                        for n in inst["nodes"]])
                       for inst in instances if inst["role"] == pool.role
                       and len({n["cluster_node"] for n in inst["nodes"]}) > 1)
        out.append({"role": pool.role,
                    "nodes": [_node_entry(cluster, n, list(range(n["gpus"]))) for n in pool.nodes],
                    "socket_instances": spanning})
    return {"pools": out}


def socket_groups(cluster: Cluster, pool: Any) -> dict[str, int]:
    """Per process-group kind, how many of its groups span RDMA networks (and so run on TCP
    sockets, ``topologies.cluster.runs_on_sockets``); kinds with none are left out."""
    group_of_node_rank = np.array([cluster.group_of_node(n["node"]) for n in pool.nodes],
                                  dtype=np.int64)
    group_of_rank = group_of_node_rank[pool.slots[0]]
    out: dict[str, int] = {}
    for kind in sorted(pool.groups):
        member_groups = group_of_rank[np.asarray(pool.groups[kind], dtype=np.int64)]
        mixed = np.sort(member_groups[member_groups.min(1) != member_groups.max(1)], axis=1)
        if not mixed.size:
            continue  # every group on one node group: one network
        combos, counts = np.unique(mixed, axis=0, return_counts=True)
        count = sum(int(c) for combo, c in zip(combos, counts)
                    if runs_on_sockets([cluster.node_groups[g] for g in set(combo.tolist())]))
        if count:
            out[kind] = count
    return out


# --- NCCL settings ----------------------------------------------------------------------


def exact_list(names: list[str]) -> str:
    """An NCCL device or interface list whose names all match exactly (leading ``=``)."""
    return "=" + ",".join(names)


def nccl_env(entry: dict[str, Any]) -> list[tuple[str, str]]:
    """The NCCL environment of one node (a fabric ``nodes`` entry), in a fixed order."""
    transport = entry["transport"]
    env: list[tuple[str, str]] = []
    if transport in ("ib", "roce"):
        env.append(("NCCL_NET", "IB"))
        if entry["hcas"]:
            env.append(("NCCL_IB_HCA", exact_list(entry["hcas"])))
        if entry["gid_index"] is not None:
            env.append(("NCCL_IB_GID_INDEX", str(entry["gid_index"])))
    elif transport == "tcp":
        env += [("NCCL_NET", "Socket"), ("NCCL_IB_DISABLE", "1")]
    if entry["socket_ifnames"] and transport != "none":
        env.append(("NCCL_SOCKET_IFNAME", exact_list(entry["socket_ifnames"])))
    if entry.get("topo_file") is not None:
        env.append(("NCCL_TOPO_FILE", entry["topo_file"]))
    return env


def rank_env(entry: dict[str, Any], local_rank: int) -> list[tuple[str, str]]:
    """What the per-rank wrapper sets for ``LOCAL_RANK`` ``local_rank`` ([] without rails)."""
    if entry["rank_hcas"] is None:
        return []
    return [("NCCL_IB_HCA", exact_list(entry["rank_hcas"][local_rank]))]


def socket_group_note(section: dict[str, Any]) -> str | None:
    """One line on the communicators that run on sockets, or None when there are none."""
    groups = section.get("socket_groups") or {}
    if not groups:
        return None
    kinds = ", ".join(f"{n} {kind}" for kind, n in groups.items())
    return (f"Process groups spanning RDMA networks run on TCP sockets ({kinds} groups; the "
            f"plan's cost model charges them at socket speed). NCCL picks its network per "
            f"communicator and cannot mix IB/RoCE and TCP in one (NVIDIA/nccl#878): create "
            f"those groups with NCCL_NET=Socket (or ncclConfig netName \"Socket\"); each "
            f"node's NCCL_NET is the default for all other groups.")


# --- checks ------------------------------------------------------------------------------


def _name_problems(where: str, names: Any, pattern, what: str) -> list[str]:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return [f"{where}: a list of {what} names"]
    bad = [n for n in names if not pattern.fullmatch(n)]
    if bad:
        return [f"{where}: {what} names of letters, digits and _ . : - only (no commas, "
                f"spaces or shell characters), got {bad[0]!r}"]
    if len(set(names)) != len(names):
        return [f"{where}: repeated {what} names"]
    return []


def entry_problems(i: int, entry: Any, gpus: int | None = None) -> list[str]:
    """Shape and name checks of ``nodes[i]`` of a fabric section (no cluster needed)."""
    where = f"fabric.nodes[{i}]"
    if not isinstance(entry, dict) or sorted(set(entry) - set(OPTIONAL_KEYS)) != sorted(NODE_KEYS):
        return [f"{where}: an object with keys {list(NODE_KEYS)} (and {list(OPTIONAL_KEYS)} "
                f"where set)"]
    problems: list[str] = []
    topo = entry.get("topo_file", "")
    if "topo_file" in entry and not (isinstance(topo, str) and TOPO_FILE.fullmatch(topo)):
        problems.append(f"{where}.topo_file: an absolute path of letters, digits and _ . - / "
                        f"only")
    if entry["transport"] not in TRANSPORTS:
        problems.append(f"{where}.transport: one of {TRANSPORTS}, got {entry['transport']!r}")
    island = entry["rdma_island"]
    if island is not None and not (isinstance(island, str) and ISLAND_NAME.fullmatch(island)):
        problems.append(f"{where}.rdma_island: null or letters, digits and _ . -")
    problems += _name_problems(f"{where}.hcas", entry["hcas"], DEVICE_NAME, "device")
    problems += _name_problems(f"{where}.socket_ifnames", entry["socket_ifnames"], IFNAME,
                               "interface")
    gid = entry["gid_index"]
    if gid is not None and (type(gid) is not int or gid < 0 or entry["transport"] != "roce"):
        problems.append(f"{where}.gid_index: null, or an integer >= 0 on a roce node")
    rails = entry["rank_hcas"]
    if rails is not None:
        if not isinstance(rails, list) or (gpus is not None and len(rails) != gpus):
            problems.append(f"{where}.rank_hcas: null or one device list per LOCAL_RANK")
        else:
            for lr, names in enumerate(rails):
                found = _name_problems(f"{where}.rank_hcas[{lr}]", names, DEVICE_NAME, "device")
                if not found and (not names or not set(names) <= set(entry["hcas"] or [])):
                    found = [f"{where}.rank_hcas[{lr}]: devices of the node's hcas"]
                problems += found
    return problems


def fabric_problems(section: Any, cluster: Cluster, pool: Any) -> list[str]:
    """Every problem of a plan's fabric section: its shape, its names, and whether it is the
    section the plan's cluster and pool give (so emitted settings match the NICs)."""
    if not isinstance(section, dict) or sorted(section) != ["nodes", "socket_groups"]:
        return ["fabric: an object with keys nodes and socket_groups"]
    nodes = section["nodes"]
    if not isinstance(nodes, list) or len(nodes) != len(pool.nodes):
        return [f"fabric.nodes: one entry per node of the pool ({len(pool.nodes)})"]
    problems = [p for i, (e, n) in enumerate(zip(nodes, pool.nodes))
                for p in entry_problems(i, e, n.get("gpus"))]
    if problems:
        return problems
    expected = fabric_section(cluster, pool)
    if expected is None:
        return ["fabric: the plan's cluster is all InfiniBand and names no NIC devices, "
                "interfaces, GID indices, RDMA islands or NCCL topology files, so the plan "
                "has no fabric section"]
    mismatch = _node_mismatch("fabric.nodes", nodes, expected["nodes"])
    if mismatch:
        return mismatch
    if section["socket_groups"] != expected["socket_groups"]:
        return [f"fabric.socket_groups is {section['socket_groups']!r} but the plan's groups "
                f"give {expected['socket_groups']!r}"]
    return []


def serving_fabric_problems(section: Any, cluster: Cluster, pools: list[Any],
                            instances: list[dict[str, Any]]) -> list[str]:
    """Every problem of a serving plan's fabric section: its shape, its names, and whether it
    is the section the plan's cluster, pools and instances give."""
    if not isinstance(section, dict) or sorted(section) != ["pools"] or not isinstance(
            section["pools"], list) or len(section["pools"]) != len(pools):
        return [f"fabric: an object with key pools, one entry per pool ({len(pools)})"]
    problems: list[str] = []
    for k, (got, pool) in enumerate(zip(section["pools"], pools)):
        if not isinstance(got, dict) or sorted(got) != ["nodes", "role", "socket_instances"]:
            return [f"fabric.pools[{k}]: an object with keys nodes, role, socket_instances"]
        if not isinstance(got["nodes"], list) or len(got["nodes"]) != len(pool.nodes):
            return [f"fabric.pools[{k}].nodes: one entry per node of the pool ({len(pool.nodes)})"]
        problems += [f"fabric.pools[{k}].{p.removeprefix('fabric.')}"
                     for i, (e, n) in enumerate(zip(got["nodes"], pool.nodes))
                     for p in entry_problems(i, e, n.get("gpus"))]
    if problems:
        return problems
    expected = serving_fabric_section(cluster, pools, instances)
    if expected is None:
        return ["fabric: the plan's cluster is all InfiniBand and names no NIC devices, "
                "interfaces, GID indices, RDMA islands or NCCL topology files, so the plan "
                "has no fabric section"]
    for k, (got, want) in enumerate(zip(section["pools"], expected["pools"])):
        for key in ("role", "socket_instances"):
            if got[key] != want[key]:
                return [f"fabric.pools[{k}].{key} is {got[key]!r} but the plan's cluster and "
                        f"pools give {want[key]!r}"]
        mismatch = _node_mismatch(f"fabric.pools[{k}].nodes", got["nodes"], want["nodes"])
        if mismatch:
            return mismatch
    return []


def _node_mismatch(where: str, got: list[dict], want: list[dict]) -> list[str]:
    """The first node entry field of ``got`` that differs from ``want``'s ([] when none)."""
    for i, (e, w) in enumerate(zip(got, want)):
        for key in (*NODE_KEYS, *OPTIONAL_KEYS):
            if e.get(key) != w.get(key):
                return [f"{where}[{i}].{key} is {e.get(key)!r} but the plan's cluster and pool "
                        f"give {w.get(key)!r}"]
    return []
