"""Local search on one layer's placement, scored by the exact flow optimum of its quotas: slot
swaps out of the binding GPU set (step 5 of :mod:`solvers.experts.placement`) and moves of
one redundant replica between experts (the replica-count search).

A move is kept only when it lowers the busiest GPU after re-solving every quota
(:func:`solvers.experts.layout.layout_quotas`), so the result is never worse than the start.
Pure: arrays in, a new ``(phy2log, QuotaSolution)`` out.
"""

from __future__ import annotations

import itertools

import numpy as np

from solvers.experts.construction import greedy_counts, replication_placement
from solvers.experts.layout import ExpertLayout, layout_quotas
from solvers.experts.quota import QuotaSolution

__all__ = ["improve_by_swaps", "improve_counts"]

# A move must lower the busiest GPU by more than this fraction: ties and float noise in the
# flow's rescaled quotas (resolution 2**-30 of the total) are not improvements.
_MIN_GAIN = 1e-9
# Replica moves tried per round of improve_counts before the search stops. Not measured (the
# value predates this note): the takers are the binding GPUs' experts, busiest first, and each
# move costs a packing and a max flow.
_COUNT_MOVES_PER_ROUND = 8
# _swap_candidates: the binding set's busiest GPUs whose slots are tried, and the swaps tried per
# round. Measured at EP64 (see solvers/experts/placement.py) with 16 swap evals: 8 GPUs and 16
# swaps give 1.00002 in 9.7 s against 1.00003 in 6.2 s for these values.
_SWAP_GPUS = 4
_SWAPS_PER_ROUND = 8


def _better(trial: QuotaSolution, sol: QuotaSolution) -> bool:
    return trial.max_load < sol.max_load - _MIN_GAIN * max(sol.max_load, 1.0)


def improve_counts(w: np.ndarray, layout: ExpertLayout, max_evals: int) -> tuple[np.ndarray, QuotaSolution]:
    """Local search over replica counts (packing by
    :func:`solvers.experts.construction.replication_placement`, quotas by flow): move one
    redundant replica from an expert with several to an expert on the binding GPUs while
    that lowers the optimum, at most ``max_evals`` flows."""
    counts = greedy_counts(w, layout.num_slots)
    best = replication_placement(w, layout, counts)
    sol = layout_quotas(w, best, layout)
    evals = 0
    while evals < max_evals:
        S = layout.slots_per_gpu
        on_binding = {int(e) for g in sol.binding_gpus for e in best[g * S:(g + 1) * S]}
        takers = sorted(on_binding, key=lambda e: -w[e] / counts[e])
        givers = sorted(np.flatnonzero(counts > 1).tolist(), key=lambda e: w[e] / counts[e])
        improved = False
        pairs = ((y, x) for y in takers for x in givers if x != y)
        for y, x in itertools.islice(pairs, _COUNT_MOVES_PER_ROUND):
            trial_counts = counts.copy()
            trial_counts[x] -= 1
            trial_counts[y] += 1
            trial = replication_placement(w, layout, trial_counts)
            trial_sol = layout_quotas(w, trial, layout)
            evals += 1
            if _better(trial_sol, sol):
                counts, best, sol, improved = trial_counts, trial, trial_sol, True
                break
        if not improved:
            break
    return best, sol


def _swap_candidates(phy2log: np.ndarray, sol: QuotaSolution, S: int, gpus: int = _SWAP_GPUS,
                     limit: int = _SWAPS_PER_ROUND) -> list[tuple[int, int]]:
    """Up to ``limit`` slot swaps between a GPU of the binding set (its ``gpus`` busiest) and
    any other GPU that lower the binding GPU's load, best first by the two GPUs' new loads
    under the current quotas (the flow then re-optimises every quota, so this is only the
    order in which swaps are tried)."""
    load, quota = sol.gpu_load, sol.quota
    G = load.shape[0]
    binding = np.array(sol.binding_gpus or (int(np.argmax(load)),), dtype=np.int64)
    gpu = np.repeat(np.arange(G), S)
    holds = np.zeros((G, int(phy2log.max()) + 1), dtype=bool)
    holds[gpu, phy2log] = True
    slots_a = np.concatenate([np.arange(g * S, (g + 1) * S)
                              for g in binding[np.argsort(-load[binding], kind="stable")][:gpus]])
    g_a = gpu[slots_a][:, None]
    new_g = load[g_a] - quota[slots_a][:, None] + quota[None, :]
    worst = np.maximum(new_g, load[gpu][None, :] - quota[None, :] + quota[slots_a][:, None])
    ok = (gpu[None, :] != g_a) & (phy2log[None, :] != phy2log[slots_a][:, None])
    ok &= ~holds[gpu[None, :], phy2log[slots_a][:, None]] & ~holds[g_a, phy2log[None, :]]
    ok &= new_g < load[g_a] * (1 - _MIN_GAIN)  # the other GPU may shed replicated load
    rows, cols = np.nonzero(ok)
    best = np.lexsort((cols, slots_a[rows], worst[rows, cols]))[:limit]
    return [(int(slots_a[rows[i]]), int(cols[i])) for i in best]


def improve_by_swaps(w: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout, max_evals: int) -> tuple[np.ndarray, QuotaSolution]:
    """Step 5 of :mod:`solvers.experts.placement`: accept a slot swap whenever it lowers the
    flow optimum, at most ``max_evals`` flows. ``phy2log`` is not modified."""
    best = phy2log.copy()
    sol = layout_quotas(w, best, layout)
    evals = 0
    while evals < max_evals:
        improved = False
        for a, b in _swap_candidates(best, sol, layout.slots_per_gpu):
            trial = best.copy()
            trial[a], trial[b] = trial[b], trial[a]
            trial_sol = layout_quotas(w, trial, layout)
            evals += 1
            if _better(trial_sol, sol):
                best, sol, improved = trial, trial_sol, True
                break
        if not improved:
            break
    return best, sol
