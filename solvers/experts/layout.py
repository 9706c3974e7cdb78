"""The expert-placement problem's shape and its answer: :class:`ExpertLayout` (``G`` GPUs with
``S`` expert slots each, grouped into nodes) and :class:`LayerPlacement` (one layer's
``phy2log`` and split fractions), with the two layout-only helpers every placement solver
shares: the node-interleaved GPU order and the exact flow quotas of a placement.

Slot convention (also EPLB's): physical slots ``g*S .. g*S+S-1`` live on GPU ``g``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solvers.experts.quota import QuotaSolution, solve_quotas

__all__ = ["ExpertLayout", "LayerPlacement", "interleaved_gpu_order", "layout_quotas"]


@dataclass(frozen=True)
class ExpertLayout:
    """Shape of the expert-parallel group: ``num_gpus`` GPUs with ``slots_per_gpu`` slots."""

    num_experts: int
    num_gpus: int
    slots_per_gpu: int
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        if min(self.num_experts, self.num_gpus, self.slots_per_gpu, self.gpus_per_node) < 1:
            raise ValueError(f"layout sizes must be >= 1, got {self}")
        if self.num_gpus * self.slots_per_gpu < self.num_experts:
            raise ValueError(
                f"{self.num_gpus} GPUs x {self.slots_per_gpu} slots = "
                f"{self.num_gpus * self.slots_per_gpu} slots < {self.num_experts} experts"
            )

    @property
    def num_slots(self) -> int:
        return self.num_gpus * self.slots_per_gpu

    @property
    def gpu_of_slot(self) -> np.ndarray:
        """GPU of each physical slot: slots ``g*S .. g*S+S-1`` live on GPU ``g``."""
        return np.repeat(np.arange(self.num_gpus), self.slots_per_gpu)

    @property
    def node_of_gpu(self) -> np.ndarray:
        return np.arange(self.num_gpus) // self.gpus_per_node


@dataclass(frozen=True)
class LayerPlacement:
    """One layer's plan. ``phy2log`` and ``split`` are ``[G*S]``: the expert in each slot and
    the fraction of that expert's tokens the slot serves (fractions of an expert sum to 1).
    ``ratio`` is busiest/mean on the planning loads (worst scenario in robust mode);
    ``lower_bound_ratio`` is :func:`solvers.experts.scoring.lp_lower_bound` over the mean
    load (nominal mean loads)."""

    phy2log: np.ndarray
    split: np.ndarray
    ratio: float
    lower_bound_ratio: float


def interleaved_gpu_order(layout: ExpertLayout) -> np.ndarray:
    """Chain order that visits nodes round-robin, so a heavy's replicas land on different nodes."""
    G, n = layout.num_gpus, layout.gpus_per_node
    nodes = -(-G // n)
    order = [node * n + i for i in range(n) for node in range(nodes) if node * n + i < G]
    return np.array(order, dtype=np.int64)


def layout_quotas(w: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout) -> QuotaSolution:
    """Exact min-max token quotas (:func:`solvers.experts.quota.solve_quotas`) of ``phy2log``."""
    return solve_quotas(w, phy2log, layout.gpu_of_slot, layout.num_gpus)
