"""Parallel degrees, their axis names and the one rank order: the mesh every plan family shares.

Degrees follow Megatron-LM: world = tp * cp * dp * pp; the expert layers fold the same
tp * cp * dp ranks of a pipeline stage into etp * ep * edp (MoE parallel folding, Megatron-Core
MoE docs), so ``ep * etp`` must divide ``tp * cp * dp``.

The rank order is Megatron-LM's default tp-cp-ep-dp-pp (``megatron/core/parallel_state.py``,
``RankGenerator``): rank = tp_r + tp*(cp_r + cp*(dp_r + dp*pp_r)), and inside a stage's block of
tp*cp*dp ranks the expert coordinates are etp_r + etp*(ep_r + ep*edp_r). :func:`rank_grid` is the
only place that order is written; coordinates and groups are read off it.

Errors name the quantity (``tp``, ``ep*etp``), not a command-line flag; the CLI maps them.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np


class Axis(StrEnum):
    """Names of the parallel axes (torchtitan's ``ParallelDims`` mesh names, Megatron's degrees)."""

    TP = "tp"
    CP = "cp"
    DP = "dp"
    PP = "pp"
    EP = "ep"
    ETP = "etp"
    EDP = "edp"


# Axes of the dense mesh, fastest-varying first (Megatron tp-cp-dp-pp), and of the expert
# folding of one stage's tp*cp*dp block, fastest first.
DENSE_ORDER: tuple[Axis, ...] = (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
EXPERT_ORDER: tuple[Axis, ...] = (Axis.ETP, Axis.EP, Axis.EDP)
# Process-group kinds and the axes each one varies (every other coordinate is fixed in a group).
GROUP_AXES: dict[str, tuple[Axis, ...]] = {
    "tp": (Axis.TP,), "cp": (Axis.CP,), "dp": (Axis.DP,), "dp_cp": (Axis.DP, Axis.CP),
    "pp": (Axis.PP,), "ep": (Axis.EP,), "edp": (Axis.EDP,)}
KINDS: tuple[str, ...] = tuple(GROUP_AXES)
# Columns of a plan's rank table: rank, where it runs, and its coordinate on every axis.
COORD_AXES: tuple[Axis, ...] = (Axis.TP, Axis.CP, Axis.DP, Axis.PP, Axis.EP, Axis.ETP, Axis.EDP)


class ConfigError(ValueError):
    """A choice that does not fit the model, workload or cluster; names the quantity.

    ``quantity`` is the name of what is wrong (``tp``, ``ep*etp``, ``global_batch``); the CLI
    maps it to the option a user typed.
    """

    def __init__(self, quantity: str, expected: str, got: object) -> None:
        self.quantity, self.expected, self.got = quantity, expected, got
        super().__init__(f"{quantity}: expected {expected}, got {got!r}")


@dataclass(frozen=True, kw_only=True)
class Degrees:
    """One factorisation of the GPUs: world = tp * cp * dp * pp; experts fold as etp*ep*edp.

    ``etp=None`` means expert TP equals attention TP (Megatron's default); an ``etp`` equal to
    ``tp`` is stored as ``None`` so that each layout has one encoding.
    """

    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    etp: int | None = None

    def __post_init__(self) -> None:
        for axis in (Axis.TP, Axis.CP, Axis.PP, Axis.DP, Axis.EP):
            if getattr(self, axis) < 1:
                raise ConfigError(axis, "a degree >= 1", getattr(self, axis))
        if self.etp is not None and self.etp < 1:
            raise ConfigError(Axis.ETP, "a degree >= 1", self.etp)
        if self.etp == self.tp:
            object.__setattr__(self, "etp", None)
        if (self.tp * self.cp * self.dp) % (self.ep * self.expert_tp):
            raise ConfigError("ep*etp", f"a divisor of tp*cp*dp = {self.tp}*{self.cp}*{self.dp} "
                              "(MoE parallel folding)", f"{self.ep}*{self.expert_tp}")

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tp)

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    def size(self, axis: Axis | str) -> int:
        """The degree of ``axis`` (``etp`` and ``edp`` resolved)."""
        axis = Axis(axis)
        if axis is Axis.ETP:
            return self.expert_tp
        if axis is Axis.EDP:
            return self.expert_dp
        return getattr(self, axis)

    def group_size(self, kind: str) -> int:
        """Members of one process group of ``kind`` (a key of :data:`GROUP_AXES`)."""
        return int(np.prod([self.size(a) for a in GROUP_AXES[kind]]))

    def sort_key(self) -> tuple[int, ...]:
        """Less model parallelism first: (tp, cp, pp, dp, ep, expert tp)."""
        return (self.tp, self.cp, self.pp, self.dp, self.ep, self.expert_tp)

    def text(self) -> str:
        """``tp=2 pp=4 dp=8`` plus cp, ep and etp where they are not 1 / tp."""
        parts = [f"tp={self.tp}", f"pp={self.pp}", f"dp={self.dp}"]
        parts += [f"cp={self.cp}"] * (self.cp > 1) + [f"ep={self.ep}"] * (self.ep > 1)
        return " ".join(parts + [f"etp={self.etp}"] * (self.etp is not None))


def rank_grid(d: Degrees) -> np.ndarray:
    """Global ranks as an int array indexed [pp, dp, cp, tp]: THE rank order (module docstring)."""
    return np.arange(d.num_gpus, dtype=np.int64).reshape(d.pp, d.dp, d.cp, d.tp)


def expert_grid(d: Degrees) -> np.ndarray:
    """Global ranks as an int array indexed [pp, edp, ep, etp]: the expert folding of each
    stage's block of the same ranks."""
    return rank_grid(d).reshape(d.pp, d.expert_dp, d.ep, d.expert_tp)


def lockstep_replicas(d: Degrees) -> tuple[tuple[int, ...], ...]:
    """The data-parallel replicas (dp coordinates) that must run the same micro-batches: those
    joined by an expert-parallel group (each MoE layer's all-to-all takes every EP member's
    tokens of one micro-batch at once, so its members advance micro-batch by micro-batch
    together). Connected blocks in ascending order; one replica per block when ``ep == 1``."""
    parent = list(range(d.dp))

    def root(r: int) -> int:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    if d.ep > 1:
        stage = expert_grid(d)[0]  # [edp, ep, etp]: every stage has the same folding
        for edp in range(stage.shape[0]):
            for etp in range(stage.shape[2]):
                replicas = sorted({int(r) // (d.tp * d.cp) for r in stage[edp, :, etp]})
                for r in replicas[1:]:
                    parent[root(r)] = root(replicas[0])
    blocks: dict[int, list[int]] = {}
    for r in range(d.dp):
        blocks.setdefault(root(r), []).append(r)
    return tuple(tuple(b) for b in sorted(blocks.values()))


def rank_coords(d: Degrees) -> dict[Axis, np.ndarray]:
    """Every rank's coordinate on every axis, as arrays indexed by global rank."""
    coords: dict[Axis, np.ndarray] = {}
    for grid, axes in ((rank_grid(d), (Axis.PP, Axis.DP, Axis.CP, Axis.TP)),
                       (expert_grid(d), (Axis.PP, Axis.EDP, Axis.EP, Axis.ETP))):
        index = np.indices(grid.shape).reshape(len(axes), -1)
        order = np.argsort(grid.ravel(), kind="stable")
        for axis, values in zip(axes, index):
            coords[axis] = values[order]
    return coords


def rank_of(d: Degrees, tp: int, cp: int, dp: int, pp: int) -> int:
    """The global rank at dense coordinates (tp, cp, dp, pp)."""
    return int(rank_grid(d)[pp, dp, cp, tp])


def divides(quantity: str, value: int, what: str, total: int) -> None:
    """Raise :class:`ConfigError` unless ``value`` divides ``total``."""
    if total % value:
        raise ConfigError(quantity, f"a divisor of {what} ({total})", value)


def check_degrees(model, d: Degrees, num_gpus: int) -> None:
    """Raise :class:`ConfigError` naming the first degree the model or cluster cannot take.

    ``model`` is a :class:`cost_models.model_spec.ModelSpec` (untyped here to keep imports flat).
    """
    if d.num_gpus != num_gpus:
        raise ConfigError("tp*pp*dp*cp", f"equal to the cluster's {num_gpus} GPUs",
                          f"{d.tp}*{d.pp}*{d.dp}*{d.cp} = {d.num_gpus}")
    divides("tp", d.tp, "attention heads", model.num_heads)
    if model.mla is None and model.num_kv_heads % d.tp and d.tp % model.num_kv_heads:
        raise ConfigError("tp", f"a divisor or multiple of the KV heads ({model.num_kv_heads})",
                          d.tp)
    if d.ep > 1 and not model.is_moe:
        raise ConfigError("ep", "1 for a dense model", d.ep)
    if model.is_moe:
        divides("ep", d.ep, "the routed experts", model.moe.num_experts)
