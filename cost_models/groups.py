"""Process groups under Megatron-LM's default rank order, and the worst view of each kind.

Megatron's order is tp-cp-ep-dp-pp: rank = tp_r + tp*(cp_r + cp*(dp_r + dp*pp_r))
(``megatron/core/parallel_state.py``, ``RankGenerator``). The expert layers re-cut each
stage's tp*cp*dp ranks as etp-ep-edp (MoE parallel folding).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from cost_models.parallel import ParallelConfig
from topologies.cluster import Cluster, GroupView, group_view

KINDS = ("tp", "cp", "dp", "dp_cp", "pp", "ep", "edp")


def _strided(start: int, stride: int, size: int) -> list[int]:
    return [start + i * stride for i in range(size)]


def groups_of(cfg: ParallelConfig, kind: str) -> Iterator[list[int]]:
    """Every group of ``kind`` as a list of global ranks."""
    tp, cp, dp, pp = cfg.tp, cfg.cp, cfg.dp, cfg.pp
    block = tp * cp * dp  # ranks of one pipeline stage
    if kind == "pp":
        yield from (_strided(r, block, pp) for r in range(block))
        return
    for stage in range(pp):
        base = stage * block
        yield from (_stage_groups(cfg, kind, base))


def _stage_groups(cfg: ParallelConfig, kind: str, base: int) -> Iterator[list[int]]:
    tp, cp, dp = cfg.tp, cfg.cp, cfg.dp
    if kind == "tp":
        yield from (_strided(base + i * tp, 1, tp) for i in range(cp * dp))
    elif kind == "cp":
        yield from (_strided(base + t + tp * cp * d, tp, cp) for d in range(dp) for t in range(tp))
    elif kind == "dp":
        yield from (_strided(base + t + tp * c, tp * cp, dp) for c in range(cp) for t in range(tp))
    elif kind == "dp_cp":
        yield from (_strided(base + t, tp, cp * dp) for t in range(tp))
    elif kind in ("ep", "edp"):
        etp, ep, edp = cfg.expert_tp, cfg.ep, cfg.expert_dp
        if kind == "ep":
            yield from (_strided(base + e + etp * ep * d, etp, ep)
                        for d in range(edp) for e in range(etp))
        else:
            yield from (_strided(base + e, etp * ep, edp) for e in range(etp * ep))
    else:
        raise ValueError(f"unknown group kind '{kind}', expected one of {KINDS}")


def _slowness(view: GroupView) -> tuple[float, float]:
    """Sort key: smaller bottleneck bandwidth first, then larger latency."""
    b = view.bottleneck
    return (b.bw_bytes_per_s * (view.members_per_domain if b is view.inter else 1), -b.latency_s)


@dataclass(frozen=True)
class GroupViews:
    """The slowest group of each kind: in a synchronous step the slowest one sets the pace."""

    tp: GroupView
    cp: GroupView
    dp: GroupView
    dp_cp: GroupView
    pp: GroupView
    ep: GroupView
    edp: GroupView


def worst_view(cluster: Cluster, cfg: ParallelConfig, kind: str) -> GroupView:
    """The slowest view among all groups of ``kind``."""
    return min((group_view(cluster, ranks) for ranks in groups_of(cfg, kind)), key=_slowness)


def group_views(cluster: Cluster, cfg: ParallelConfig) -> GroupViews:
    """Views of every group kind for ``cfg`` placed in Megatron order on ``cluster``."""
    return GroupViews(**{kind: worst_view(cluster, cfg, kind) for kind in KINDS})
