"""An independent check that a plan's fabric section tells the truth about its socket groups.

``fabric.socket_groups`` says, per process-group kind, how many groups span RDMA networks and so
run on NCCL's socket transport; the emitters and the notes rely on it. This module recomputes it
from the plan alone, without the cluster model that wrote it (``planner.plan.fabric`` reads the
cluster's node groups): each node rank's network is its fabric entry's ``transport`` and
``rdma_island`` (two RDMA nodes can do RDMA with each other exactly when both are equal; every
TCP-only node uses sockets), each rank's node rank is the pool's rank rule, and the groups are
the pool's. A section whose declared socket groups disagree is refused.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["group_networks", "off_network_groups", "socket_group_problems"]

RDMA = ("ib", "roce")


def group_networks(section: dict[str, Any]) -> list[tuple[str, ...]]:
    """The network of every node rank, read from the section's node entries."""
    return [(e["transport"], e["rdma_island"] or "") if e["transport"] in RDMA
            else (e["transport"],) for e in section["nodes"]]


def off_network_groups(section: dict[str, Any], pool: Any) -> dict[str, int]:
    """Per group kind of ``pool``, how many groups have ranks on more than one network (kinds
    with none left out)."""
    nets = group_networks(section)
    ids = {net: i for i, net in enumerate(sorted(set(nets)))}
    net_of_rank = np.array([ids[n] for n in nets], dtype=np.int64)[pool.slots[0]]
    out: dict[str, int] = {}
    for kind, groups in sorted(pool.groups.items()):
        members = net_of_rank[np.asarray(groups, dtype=np.int64)]
        count = int(np.count_nonzero(members.min(1) != members.max(1)))
        if count:
            out[kind] = count
    return out


def socket_group_problems(section: Any, pool: Any) -> list[str]:
    """A problem when ``section["socket_groups"]`` is not what the nodes' transports and
    islands give for the pool's groups (shape problems are ``fabric_problems``')."""
    if not isinstance(section, dict) or not isinstance(section.get("nodes"), list) or len(
            section["nodes"]) != len(pool.nodes):
        return []
    if not all(isinstance(e, dict) and isinstance(e.get("transport"), str)
               and isinstance(e.get("rdma_island"), (str, type(None)))
               for e in section["nodes"]):
        return []
    recomputed = off_network_groups(section, pool)
    if section.get("socket_groups") != recomputed:
        return [f"fabric.socket_groups declares {section.get('socket_groups')!r}, but the "
                f"nodes' transports and RDMA islands put {recomputed!r} groups on more than "
                f"one RDMA network"]
    return []
