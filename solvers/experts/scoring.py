"""How a placement is measured and bounded: GPU loads under a static split, the even split,
busiest/mean over load scenarios, drifted load scenarios, split fractions from flow quotas,
and the lower bound on the busiest GPU that any placement must respect.

Shapes: ``loads``/``w`` ``[E]`` tokens per logical expert (scenarios ``[K, E]``);
``phy2log``/``split`` ``[G*S]`` (slots of GPU ``g`` are ``g*S .. g*S+S-1``). Arrays in, arrays
or floats out; nothing here searches.
"""

from __future__ import annotations

import numpy as np

from solvers.experts.layout import ExpertLayout

__all__ = [
    "drift_scenarios",
    "even_split",
    "lp_lower_bound",
    "split_from_quota",
    "static_gpu_loads",
    "worst_ratio",
]

# 60 halvings shrink the bracket [mean, max w] by 2**-60, finer than float64's 2**-52 relative
# precision, so more steps cannot change the bound.
_BISECTION_STEPS = 60


def drift_scenarios(loads: np.ndarray, sigma: float, count: int, seed: int = 0) -> np.ndarray:
    """``count`` scenarios ``[count, ..., E]``: each expert's load times ``exp(sigma * z)``.

    The first scenario is ``loads`` itself. Deterministic for a given seed.
    """
    loads = np.asarray(loads, dtype=np.float64)
    rng = np.random.default_rng(seed)
    noise = np.exp(sigma * rng.standard_normal((count - 1,) + loads.shape))
    return np.concatenate([loads[None], loads[None] * noise])


def static_gpu_loads(loads: np.ndarray, phy2log: np.ndarray, split: np.ndarray, num_gpus: int) -> np.ndarray:
    """GPU loads ``[G]`` of one layer's ``loads [E]`` under static split fractions."""
    slots_per_gpu = phy2log.shape[0] // num_gpus
    return (np.asarray(loads)[phy2log] * split).reshape(num_gpus, slots_per_gpu).sum(1)


def even_split(phy2log: np.ndarray, num_experts: int) -> np.ndarray:
    """Split fractions ``[P]`` when every replica serves the same share (EPLB's assumption)."""
    counts = np.bincount(phy2log, minlength=num_experts)
    return 1.0 / counts[phy2log]


def worst_ratio(scenarios: np.ndarray, phy2log: np.ndarray, split: np.ndarray, num_gpus: int) -> float:
    """Worst busiest/mean over scenarios ``[K, E]`` for a static split."""
    loads = (scenarios[:, phy2log] * split).reshape(scenarios.shape[0], num_gpus, -1).sum(2)
    mean = np.maximum(loads.mean(1), 1e-300)  # an all-zero scenario scores 0, not NaN
    return float((loads.max(1) / mean).max())


def split_from_quota(w: np.ndarray, phy2log: np.ndarray, quota: np.ndarray) -> np.ndarray:
    """Split fractions ``[P]`` of token quotas ``[P]``: ``quota / w[expert]``, normalised so an
    expert's fractions sum to 1; an expert with no load gets the even split."""
    share = w[phy2log]
    fallback = even_split(phy2log, w.shape[0])
    split = np.where(share > 0, quota / np.where(share > 0, share, 1.0), fallback)
    # Quotas of non-integer loads are rounded to 2**-30 of the total inside the flow, so the
    # fractions of an expert sum to 1 only within that; normalise them so they sum to 1 to
    # float precision (what every consumer checks).
    sums = np.bincount(phy2log, weights=split, minlength=w.shape[0])
    return split / np.where(sums > 0, sums, 1.0)[phy2log]


def lp_lower_bound(w: np.ndarray, layout: ExpertLayout) -> float:
    """Lower bound on the busiest GPU: the best of the mean load and the replica-count bound.

    The LP relaxation of :func:`solvers.experts.exact.solve_layer_milp` (replica counts
    fractional) is the mean load ``sum(w)/G``: fractional replicas spread every expert over
    every GPU. The replica-count bound is tighter with few slots: at busiest load ``T`` an
    expert needs at least ``ceil(w_e / T)`` replicas (one replica serves at most ``T``), and
    there are only ``G*S`` slots, so ``T`` must satisfy ``sum_e ceil(w_e / T) <= G*S`` (found
    by bisection).
    """
    w = np.asarray(w, dtype=np.float64)
    mean = w.sum() / layout.num_gpus
    lo, hi = mean, max(mean, float(w.max()))
    if np.ceil(w / lo).clip(min=1).sum() <= layout.num_slots:
        return mean
    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2
        if np.ceil(w / mid).clip(min=1).sum() <= layout.num_slots:
            hi = mid
        else:
            lo = mid
    return hi
