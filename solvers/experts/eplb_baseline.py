"""EPLB-style baseline for expert replication and placement (comparison only).

Written from the published description of DeepSeek's Expert-Parallelism Load Balancer
(github.com/deepseek-ai/EPLB, README "Interface and Example" and "Algorithm"):

* **replication** - start with one replica per logical expert, then repeatedly give one more
  replica to the expert with the highest load *per replica* until every redundant slot is used
  (tokens of an expert are assumed to split evenly over its replicas);
* **balanced packing** - place items (replicas) heaviest first, each on the pack (GPU) with the
  lowest load among the packs that still have room, so that every pack holds the same number;
* **hierarchical** - when the expert groups divide evenly over nodes: first pack the groups onto
  nodes (balanced packing of group loads), then replicate within each node, then pack the
  node's replicas onto its GPUs. Otherwise the global policy: one group, one node.

This module is *only* a baseline for tests and benchmarks: planner's own plans come from
:mod:`solvers.experts.placement`. Ties are broken by the lower index (a stable sort), which
reproduces the README example exactly (``tests/fixtures/eplb_readme_example.json``).

Shapes: ``weight`` is ``[layers, logical_experts]`` (tokens per expert); outputs are
``phy2log [layers, physical_experts]`` (the logical expert of each physical slot, slots of GPU
``g`` are ``g*slots .. (g+1)*slots-1``), ``phyrank`` (replica index of the slot within its
expert) and ``logcnt [layers, logical_experts]`` (replicas per logical expert).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["EplbResult", "balanced_packing", "rebalance_experts", "rebalance_hierarchical", "replicate_experts"]


@dataclass(frozen=True)
class EplbResult:
    """``phy2log``, ``phyrank``: ``[layers, physical]``; ``logcnt``: ``[layers, logical]``."""

    phy2log: np.ndarray
    phyrank: np.ndarray
    logcnt: np.ndarray


def balanced_packing(weight: np.ndarray, num_packs: int) -> tuple[np.ndarray, np.ndarray]:
    """Pack ``[rows, items]`` weights into ``num_packs`` packs of ``items / num_packs`` items.

    Heaviest item first, onto the lightest pack that still has room (lowest index on ties).
    Returns ``(pack_index, rank_in_pack)``, both ``[rows, items]``.
    """
    rows, items = weight.shape
    if items % num_packs:
        raise ValueError(f"{items} items do not divide into {num_packs} packs")
    per_pack = items // num_packs
    pack_index = np.zeros((rows, items), dtype=np.int64)
    rank_in_pack = np.zeros((rows, items), dtype=np.int64)
    for r in range(rows):
        pack_w = np.zeros(num_packs)
        pack_n = np.zeros(num_packs, dtype=np.int64)
        for i in np.argsort(-weight[r], kind="stable"):
            open_w = np.where(pack_n < per_pack, pack_w, np.inf)
            p = int(np.argmin(open_w))
            pack_index[r, i] = p
            rank_in_pack[r, i] = pack_n[p]
            pack_w[p] += weight[r, i]
            pack_n[p] += 1
    return pack_index, rank_in_pack


def replicate_experts(weight: np.ndarray, num_physical: int) -> EplbResult:
    """Greedy replication: each redundant slot goes to the max load-per-replica expert.

    ``weight`` ``[rows, logical]``; returns physical slots in creation order (the logical
    experts first, then the redundant replicas).
    """
    rows, num_logical = weight.shape
    phy2log = np.tile(np.arange(num_physical, dtype=np.int64), (rows, 1))
    phy2log[:, num_logical:] = 0
    phyrank = np.zeros((rows, num_physical), dtype=np.int64)
    logcnt = np.ones((rows, num_logical), dtype=np.int64)
    arange_rows = np.arange(rows)
    for i in range(num_logical, num_physical):
        pick = np.argmax(weight / logcnt, axis=1)
        phy2log[:, i] = pick
        phyrank[:, i] = logcnt[arange_rows, pick]
        logcnt[arange_rows, pick] += 1
    return EplbResult(phy2log, phyrank, logcnt)


def _inverse(perm: np.ndarray) -> np.ndarray:
    inv = np.empty_like(perm)
    np.put_along_axis(inv, perm, np.tile(np.arange(perm.shape[1]), (perm.shape[0], 1)), axis=1)
    return inv


def rebalance_hierarchical(
    weight: np.ndarray, num_physical: int, num_groups: int, num_nodes: int, num_gpus: int
) -> EplbResult:
    """Hierarchical EPLB: groups onto nodes, replicate inside nodes, pack onto GPUs."""
    layers, num_logical = weight.shape
    group_size = num_logical // num_groups
    groups_per_node = num_groups // num_nodes
    per_node_logical = num_logical // num_nodes
    per_gpu = num_physical // num_gpus
    # Step 1: pack expert groups onto nodes; "mlog" = node-major logical order.
    group_w = weight.reshape(layers, num_groups, group_size).sum(-1)
    gpack, grank = balanced_packing(group_w, num_nodes)
    log2mlog = (
        ((gpack * groups_per_node + grank) * group_size)[:, :, None] + np.arange(group_size)
    ).reshape(layers, num_logical)
    mlog2log = _inverse(log2mlog)
    # Step 2: replicate within each node.
    mlog_w = np.take_along_axis(weight, mlog2log, axis=1).reshape(-1, per_node_logical)
    rep = replicate_experts(mlog_w, num_physical // num_nodes)
    # Step 3: pack each node's replicas onto its GPUs (load of a replica = even share).
    phy_w = np.take_along_axis(mlog_w / rep.logcnt, rep.phy2log, axis=1)
    pack, rank = balanced_packing(phy_w, num_gpus // num_nodes)
    phy2pphy = pack * per_gpu + rank
    pphy2phy = _inverse(phy2pphy)
    pphy2mlog = np.take_along_axis(rep.phy2log, pphy2phy, axis=1)
    offsets = np.arange(0, num_logical, per_node_logical)[None, :, None]
    pphy2mlog = (pphy2mlog.reshape(layers, num_nodes, -1) + offsets).reshape(layers, -1)
    pphy2log = np.take_along_axis(mlog2log, pphy2mlog, axis=1)
    pphyrank = np.take_along_axis(rep.phyrank, pphy2phy, axis=1).reshape(layers, -1)
    logcnt = np.take_along_axis(rep.logcnt.reshape(layers, -1), log2mlog, axis=1)
    return EplbResult(pphy2log, pphyrank, logcnt)


def rebalance_experts(
    weight: np.ndarray, num_physical: int, num_groups: int, num_nodes: int, num_gpus: int
) -> EplbResult:
    """EPLB entry point: hierarchical when groups divide over nodes, else global."""
    weight = np.asarray(weight, dtype=np.float64)
    if num_groups % num_nodes == 0:
        return rebalance_hierarchical(weight, num_physical, num_groups, num_nodes, num_gpus)
    return rebalance_hierarchical(weight, num_physical, 1, 1, num_gpus)
