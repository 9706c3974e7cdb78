"""Process groups of a parallel layout, where they land on the cluster, and the worst view of
each kind per pipeline stage.

Groups are read off :func:`cost_models.parallel.rank_grid` (Megatron's tp-cp-ep-dp-pp order,
the one rank-order function) and its expert folding :func:`cost_models.parallel.expert_grid`.

A *placement* says which physical node serves each block of logical ranks: ``node_order[i]``
is the cluster node that torchrun gives node rank ``i`` (so logical ranks fill the nodes in
that order). ``None`` is the cluster's own listing order, i.e. Megatron's default mapping.
"""
from __future__ import annotations

import hashlib

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from cost_models.parallel import GROUP_AXES, KINDS, Degrees, expert_grid, rank_grid
from topologies.cluster import Cluster, GroupView, worst_group_views

# Axis positions in the [pp, dp, cp, tp] rank grid and the [pp, edp, ep, etp] expert grid.
_DENSE_POS = {"pp": 0, "dp": 1, "cp": 2, "tp": 3}
_EXPERT_POS = {"pp": 0, "edp": 1, "ep": 2, "etp": 3}


def _varying_last(grid: np.ndarray, positions: dict[str, int], axes: tuple[str, ...],
                  size: int) -> np.ndarray:
    """[stage, group, member]: ``grid`` with ``axes`` moved last (in the given order, slowest
    first) and flattened into groups of ``size``."""
    varying = [positions[a] for a in axes]
    fixed = [i for i in range(1, grid.ndim) if i not in varying]
    return grid.transpose([0, *fixed, *varying]).reshape(grid.shape[0], -1, size)


def stage_groups(d: Degrees, kind: str) -> np.ndarray:
    """Groups of ``kind`` as an int array [stage, group, member] of logical ranks.

    For ``pp`` the "groups" of stage s are the pairs (rank in s, its peer in s + 1): the links a
    stage's activations cross (the last stage: pairs with the stage before it).
    """
    if kind not in GROUP_AXES:
        raise ValueError(f"unknown group kind '{kind}', expected one of {KINDS}")
    if kind == "pp":
        flat = rank_grid(d).reshape(d.pp, -1)
        if d.pp == 1:
            return flat[:, :, None]
        nxt = np.concatenate([flat[1:], flat[-2:-1]])
        return np.stack([flat, nxt], axis=2)
    axes = tuple(str(a) for a in GROUP_AXES[kind])  # dp_cp: (dp, cp), members cp-fastest
    if kind in ("ep", "edp"):
        return _varying_last(expert_grid(d), _EXPERT_POS, axes, d.group_size(kind))
    return _varying_last(rank_grid(d), _DENSE_POS, axes, d.group_size(kind))


def groups_of(d: Degrees, kind: str) -> list[list[int]]:
    """Every group of ``kind`` as a list of logical ranks (``pp``: the whole pipelines)."""
    if kind == "pp":
        return rank_grid(d).reshape(d.pp, -1).T.tolist()
    groups = stage_groups(d, kind)
    return groups.reshape(-1, groups.shape[2]).tolist()


def rank_map(cluster: Cluster, node_order: Sequence[int] | None) -> np.ndarray:
    """Physical rank of each logical rank when nodes take node ranks in ``node_order``."""
    if node_order is None:
        return np.arange(cluster.num_gpus, dtype=np.int64)
    node = cluster.rank_arrays.node
    firsts = np.searchsorted(node, np.arange(cluster.num_nodes))
    sizes = np.bincount(node, minlength=cluster.num_nodes)
    return np.concatenate([np.arange(firsts[n], firsts[n] + sizes[n]) for n in node_order])


@dataclass(frozen=True)
class GroupViews:
    """The slowest group of each kind in one stage: the slowest one sets the stage's pace."""

    tp: GroupView
    cp: GroupView
    dp: GroupView
    dp_cp: GroupView
    pp: GroupView
    ep: GroupView
    edp: GroupView


ViewsMemo = dict[tuple[str, tuple[int, ...], bytes], list[GroupView]]


def stage_views(cluster: Cluster, d: Degrees, node_order: Sequence[int] | None = None,
                memo: ViewsMemo | None = None) -> tuple[GroupViews, ...]:
    """Views of every group kind, per pipeline stage, for degrees ``d`` placed by ``node_order``.

    ``memo`` (one dict per cluster and node order, e.g. for one search) keeps each kind's views
    by the groups' layout: degree tuples that share a layout (all tuples with the same TP and
    PP share their TP groups) compute it once. The last few answers are also kept whole, as
    ``solve`` asks again for the views of the plans it refines."""
    order = None if node_order is None else tuple(int(n) for n in node_order)
    key = (cluster, d, order)
    if key not in _RECENT:
        if len(_RECENT) >= RECENT_VIEWS:
            del _RECENT[next(iter(_RECENT))]  # the oldest
        _RECENT[key] = _stage_views(cluster, d, order, memo)
    return _RECENT[key]


RECENT_VIEWS = 32  # whole answers kept: the top plans of one solve, placed and refined
_RECENT: dict[tuple[Cluster, Degrees, tuple[int, ...] | None], tuple[GroupViews, ...]] = {}


def _stage_views(cluster: Cluster, d: Degrees, node_order: tuple[int, ...] | None,
                 memo: ViewsMemo | None) -> tuple[GroupViews, ...]:
    physical = rank_map(cluster, node_order)
    per_kind = {}
    for kind in KINDS:
        groups = physical[stage_groups(d, kind)]
        key = (kind, groups.shape, hashlib.sha1(groups.tobytes()).digest())
        views = memo.get(key) if memo is not None else None
        if views is None:
            views = worst_group_views(cluster, groups, kind == "ep")
            if memo is not None:
                memo[key] = views
        per_kind[kind] = views
    return tuple(GroupViews(**{kind: per_kind[kind][s] for kind in KINDS}) for s in range(d.pp))


def _slowness(view: GroupView) -> tuple[float, float]:
    """Sort key: smaller bottleneck bandwidth first, then larger latency."""
    b = view.bottleneck
    return (b.bw_bytes_per_s * (view.members_per_domain if b is view.inter else 1), -b.latency_s)


def worst_of(views: Sequence[GroupView]) -> GroupView:
    """The slowest of several views (e.g. one kind over all stages)."""
    return min(views, key=_slowness)


def replica_node_groups(cluster: Cluster, d: Degrees,
                        node_order: Sequence[int] | None = None) -> tuple[tuple[int, ...], ...]:
    """[stage][dp replica] -> index of the node group whose GPU is the slowest among that
    replica's ranks in that stage (its TP x CP block; :attr:`Cluster.slowest_gpu`'s order).

    A replica's block of a stage runs at its slowest GPU's pace; on a mixed cluster different
    replicas of one stage may sit on different GPU types (the DP batch shares of
    ``TrainingConfig.dp_shares`` then let the faster ones take more micro-batches)."""
    groups = cluster.rank_arrays.group[rank_map(cluster, node_order)[rank_grid(d)]]
    slowness = [(g.gpu.peak_flops.get("bf16", 0.0), g.gpu.hbm_bytes) for g in cluster.node_groups]
    rank = np.empty(len(slowness), dtype=np.int64)  # position of each node group, slowest first
    rank[sorted(range(len(slowness)), key=lambda i: (slowness[i], i))] = np.arange(len(slowness))
    order = np.argsort(rank)
    slowest = order[rank[groups].reshape(d.pp, d.dp, -1).min(axis=2)]
    return tuple(tuple(int(g) for g in row) for row in slowest)
