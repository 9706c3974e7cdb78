"""Process groups of a parallel configuration, where they land on the cluster, and the worst
view of each kind per pipeline stage.

Logical ranks follow Megatron-LM's default order tp-cp-ep-dp-pp: rank = tp_r + tp*(cp_r +
cp*(dp_r + dp*pp_r)) (``megatron/core/parallel_state.py``, ``RankGenerator``). The expert
layers re-cut each stage's tp*cp*dp ranks as etp-ep-edp (MoE parallel folding).

A *placement* says which physical node serves each block of logical ranks: ``node_order[i]``
is the cluster node that torchrun gives node rank ``i`` (so logical ranks fill the nodes in
that order). ``None`` is the cluster's own listing order, i.e. Megatron's default mapping.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from cost_models.parallel import ParallelConfig
from topologies.cluster import Cluster, GroupView, worst_group_views

KINDS = ("tp", "cp", "dp", "dp_cp", "pp", "ep", "edp")


def _grid(cfg: ParallelConfig) -> np.ndarray:
    """Logical ranks as an array indexed [pp, dp, cp, tp] (Megatron order)."""
    return np.arange(cfg.num_gpus, dtype=np.int64).reshape(cfg.pp, cfg.dp, cfg.cp, cfg.tp)


def stage_groups(cfg: ParallelConfig, kind: str) -> np.ndarray:
    """Groups of ``kind`` as an int array [stage, group, member] of logical ranks.

    For ``pp`` the "groups" of stage s are the pairs (rank in s, its peer in s + 1): the links a
    stage's activations cross (the last stage: pairs with the stage before it).
    """
    g, pp = _grid(cfg), cfg.pp
    if kind == "tp":
        return g.reshape(pp, -1, cfg.tp)
    if kind == "cp":
        return g.transpose(0, 1, 3, 2).reshape(pp, -1, cfg.cp)
    if kind == "dp":
        return g.transpose(0, 2, 3, 1).reshape(pp, -1, cfg.dp)
    if kind == "dp_cp":
        return g.transpose(0, 3, 1, 2).reshape(pp, -1, cfg.dp * cfg.cp)
    if kind in ("ep", "edp"):
        e = g.reshape(pp, cfg.expert_dp, cfg.ep, cfg.expert_tp)
        if kind == "ep":
            return e.transpose(0, 1, 3, 2).reshape(pp, -1, cfg.ep)
        return e.transpose(0, 2, 3, 1).reshape(pp, -1, cfg.expert_dp)
    if kind == "pp":
        flat = g.reshape(pp, -1)
        if pp == 1:
            return flat[:, :, None]
        nxt = np.concatenate([flat[1:], flat[-2:-1]])
        return np.stack([flat, nxt], axis=2)
    raise ValueError(f"unknown group kind '{kind}', expected one of {KINDS}")


def groups_of(cfg: ParallelConfig, kind: str) -> list[list[int]]:
    """Every group of ``kind`` as a list of logical ranks (``pp``: the whole pipelines)."""
    if kind == "pp":
        return _grid(cfg).reshape(cfg.pp, -1).T.tolist()
    return stage_groups(cfg, kind).reshape(-1, stage_groups(cfg, kind).shape[2]).tolist()


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


def stage_views(cluster: Cluster, cfg: ParallelConfig,
                node_order: Sequence[int] | None = None) -> tuple[GroupViews, ...]:
    """Views of every group kind, per pipeline stage, for ``cfg`` placed by ``node_order``."""
    physical = rank_map(cluster, node_order)
    per_kind = {kind: worst_group_views(cluster, physical[stage_groups(cfg, kind)], kind == "ep")
                for kind in KINDS}
    return tuple(GroupViews(**{kind: per_kind[kind][s] for kind in KINDS}) for s in range(cfg.pp))


def _slowness(view: GroupView) -> tuple[float, float]:
    """Sort key: smaller bottleneck bandwidth first, then larger latency."""
    b = view.bottleneck
    return (b.bw_bytes_per_s * (view.members_per_domain if b is view.inter else 1), -b.latency_s)


def worst_of(views: Sequence[GroupView]) -> GroupView:
    """The slowest of several views (e.g. one kind over all stages)."""
    return min(views, key=_slowness)
