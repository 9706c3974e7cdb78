"""Static expert replication, placement and token-split ratios for MoE layers.

The problem (one MoE layer)
---------------------------
``E`` logical experts with loads ``w_e`` (tokens), ``G`` GPUs with ``S`` expert slots each
(``G*S >= E``). Choose how many replicas each expert gets, which GPU holds each replica, and
what fraction of the expert's tokens each replica serves, to minimise the busiest GPU's load.
In robust mode the loads are a set of scenarios ``[K, E]`` and the objective is the worst
scenario's busiest GPU divided by its mean (the split ratios are static, shared by all
scenarios).

The heuristic ("light pack + heavy chain", ours)
------------------------------------------------
For a split threshold ``H`` (tried over a small grid, the best kept):

1. The ``H`` heaviest experts are *heavy*: laid out one after another along a chain of the
   first ``k = min(G, G*S - E + 1)`` GPUs (in ``gpu_order``), each heavy covering the GPUs its
   load spans at an even top-up of ``sum(heavy) / k`` per GPU. Consecutive heavies share the
   GPU where one ends and the next starts, so the chain is connected and any imbalance can be
   moved along it by the quotas. ``k`` is the most GPUs a chain can cover with the slots left.
2. The *light* experts get one replica each, heaviest first, onto the GPU with the largest
   remaining target *per free slot* (target: the mean load minus the GPU's heavy top-up), so
   GPUs with few free slots are not left short.
3. Free slots left over hold extra replicas of the experts with the highest load per replica.
4. The split ratios are the exact min-max token quotas of :mod:`solvers.experts.quota`
   (max-flow), so the layer's busiest GPU is optimal for the placement built.
5. A short local search swaps replicas between the busiest GPU of the binding set (the flow's
   min cut) and the least-loaded GPU outside it while that lowers the optimum.

With two slots per GPU the problem is a partition of the experts into groups
(:mod:`solvers.experts.groups`); :func:`solvers.experts.construction.group_placement` searches
that space directly. It is one more candidate on small instances, with a locality slack and in
robust mode; otherwise (e.g. EP144) it places the layer alone, without steps 1-3 and 5.

Splittable bin packing with cardinality constraints is the underlying problem (Epstein and
van Stee, "Approximation schemes for packing splittable items with cardinality constraints",
2012); the chain of split items is the classic "next fit with splitting" idea. Quotas follow
UltraEP's observation that an expert's tokens need not split evenly over its replicas.

Where the pieces live
---------------------
This module owns the selection: :func:`plan_layer` (candidates, scores, local search,
locality, robust mode) and :func:`plan_layers`. The problem and answer types are in
:mod:`solvers.experts.layout`; steps 1-3 and the other builders in
:mod:`solvers.experts.construction`; step 5 and the replica-count search in
:mod:`solvers.experts.local_search`; scores, drifted scenarios and the lower bound (the
LP relaxation) in :mod:`solvers.experts.scoring`; the exact CP-SAT model
(:func:`solvers.experts.exact.solve_layer_milp`, bound and gap reported) and the brute force
for tests in :mod:`solvers.experts.exact`; GPU relabelling for migration in
:mod:`solvers.experts.migration`. Import the public names from :mod:`solvers.experts`.
Everything here is numpy in, frozen dataclasses out.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from solvers.experts.construction import chain_placement, group_placement, replication_placement
from solvers.experts.layout import ExpertLayout, LayerPlacement, interleaved_gpu_order, layout_quotas
from solvers.experts.local_search import improve_by_swaps, improve_counts
from solvers.experts.quota import QuotaSolution, cross_node_tokens, locality_quotas
from solvers.experts.scoring import even_split, lp_lower_bound, split_from_quota, worst_ratio

__all__ = ["plan_layer", "plan_layers"]

# Measured (one-off sensitivity runs for issue 16, one setting changed at a time; mean
# busiest/mean and seconds): EP64 = plan_layer on every other layer of the six shared SGLang
# traces (benchmarks/data/moe_traces/sglang, 256 experts, G=64, S=5); small = three seeded
# 64-expert synthetic_loads files of 24 layers.
# Heavy counts H tried by the chain construction (one candidate each). Measured at EP64:
# (2..16) 1.00102 in 3.4 s; this grid 1.00020 in 4.1 s; adding 48, 64: 1.00019 in 5.4 s.
_H_GRID = (2, 4, 8, 16, 24, 32)
_H_GRID_SMALL = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)  # small instances: flows are cheap
# Long chains (more replicated experts): added for locality slack and robust real-time quotas.
_H_LONG = (64, 96, 128)
# An instance is small when E * G is at most this (e.g. 64 experts on 64 GPUs): each max flow
# then costs microseconds, so the wider grid, more swaps and the replica-count search run.
# Measured on 64-expert synthetic loads: at G=32/S=3 1.00201 vs 1.00315 with the large
# settings, at G=64/S=2 1.03673 vs 1.04508, for at most 1.5x the time.
_SMALL_INSTANCE = 4096
# Skip the swap search when the best candidate is this close to the bound: 0.02 %, about the
# swap search's mean gain at EP64 (1.00020 with it vs 1.00251 without, below).
_NEAR_BOUND = 2e-4
# Flow evaluations of the local searches when the caller passes none. Swaps, measured at EP64:
# 0 evals 1.00251 in 1.8 s, 4 evals 1.00020 in 4.1 s, 16 evals 1.00003 in 6.2 s; on the small
# synthetic instances 200 evals gain nothing over 60.
# Replica-count search (scarce slots): at EP144 (G=144, S=2, every fourth layer) 10 evals give
# the same mean (1.10539) as 30; 30 is kept as a margin. (Nominal EP144 no longer runs it: the
# group search alone places such layers, see _groups_suffice.)
_COUNT_EVALS = 30
_SWAP_EVALS_SMALL = 60
_SWAP_EVALS_LARGE = 4
# Tabu steps per start of the two-slot group search in robust mode, which keeps every candidate
# (nominal mode uses the search's own default). Measured at EP144, 16 drift scenarios, 24 sampled
# layers of three SGLang traces: mean worst ratio 2.0748 in 114 ms per layer, against 2.0815 in
# 396 ms with the previous search's 60 steps per target.
_GROUP_ITERS_ROBUST = 60
# Float tolerance for ties between scores (busiest/mean ratios near 1).
_TIE = 1e-12


def _is_small(layout: ExpertLayout) -> bool:
    return layout.num_experts * layout.num_gpus <= _SMALL_INSTANCE


def _scarce(layout: ExpertLayout) -> bool:
    """Fewer redundant slots than a chain over every GPU needs (``G - 1``)."""
    return layout.num_slots - layout.num_experts < layout.num_gpus - 1


def plan_layer(
    scenarios: np.ndarray,
    layout: ExpertLayout,
    *,
    local_search_evals: int | None = None,
    count_evals: int | None = None,
    locality_slack: float | None = None,
    robust_quotas: str = "realtime",
    nominal: np.ndarray | None = None,
) -> LayerPlacement:
    """Best candidate placement for one layer; ``scenarios`` is ``[K, E]`` (``K = 1``: nominal).

    Nominal (``K = 1``): candidates (a chain per ``H`` in the grid, along a node-interleaved
    GPU order - :func:`solvers.experts.layout.interleaved_gpu_order`: balance does not depend
    on GPU labels, locality does - the EPLB-like
    :func:`solvers.experts.construction.replication_placement`, with a replica-count search
    when slots are scarce, and with two slots per GPU
    :func:`solvers.experts.construction.group_placement`) each get their exact quotas; the
    best is improved by :func:`solvers.experts.local_search.improve_by_swaps` (skipped when
    already within 0.02% of :func:`solvers.experts.scoring.lp_lower_bound`). With two slots
    per GPU on a large instance and no ``locality_slack``, the group placement alone
    (:func:`_groups_suffice`).
    ``locality_slack``: long chains join the candidates (a heavy
    expert's replicas then span more nodes); among candidates within ``(1 + slack)`` of the
    best ratio, keep the one with the fewest cross-node tokens under
    :func:`solvers.experts.quota.locality_quotas` capped at ``(1 + slack)`` times the best.

    Robust (``K > 1``): the score is the worst scenario. ``robust_quotas="realtime"`` assumes
    the runtime re-plans quotas for each step's loads (:func:`solvers.experts.quota.solve_quotas`),
    so a candidate's score is its worst per-scenario flow optimum and the grid adds long
    chains (more replicated experts, more room to re-balance); ``"static"`` scores the
    static split ratios (exact quotas of the mean, the even split, and their half-way blend)
    the runtime would keep. The returned split is the best static one for the mean load.
    ``nominal``: the loads the nominal parts plan on (default: the scenarios' mean; drifted
    copies of a trace should pass the trace itself).
    """
    # Step 1: the mean load, its lower bound, and robust mode's own search.
    scenarios = np.atleast_2d(np.asarray(scenarios, dtype=np.float64))
    w = scenarios.mean(0) if nominal is None else np.asarray(nominal, dtype=np.float64)
    mean = max(w.sum() / layout.num_gpus, 1e-300)
    bound = lp_lower_bound(w, layout) / mean if w.sum() > 0 else 1.0
    # Robust mode keeps the nominal placement where the group search places layers alone (e.g.
    # EP144) and only reports the worst scenario. Measured on the SGLang traces, planning on
    # one trace and evaluating on the others of its phase with real-time quotas
    # (benchmarks/expert_placement.py, 14 pairs): at EP144 the robust search (16 log-normal
    # drifts, sigma 0.15) scored by the worst scenario gave 1.3206 and lost to the nominal plan
    # (1.2905) on 12 of 14 pairs; scored by the mean scenario 1.3103, still 12 of 14 lost. At
    # EP32 and EP64 it helps (1.0198 against 1.0543, 10 of 14 won; 1.0396 against 1.0436, 9
    # of 14), so those keep the robust search.
    if scenarios.shape[0] > 1 and _groups_suffice(layout):
        placed = plan_layer(w[None], layout, local_search_evals=local_search_evals)
        score = (_worst_flow_ratio(scenarios, placed.phy2log, layout) if robust_quotas == "realtime"
                 else worst_ratio(scenarios, placed.phy2log, placed.split, layout.num_gpus))
        return LayerPlacement(placed.phy2log, placed.split, score, min(bound, score))
    if scenarios.shape[0] > 1:
        score, phy2log, split = _robust(scenarios, w, layout, robust_quotas)
        return LayerPlacement(phy2log, split, score, min(bound, score))
    # Step 2: every candidate with its exact quotas; the best one.
    small = _is_small(layout)  # flows cost microseconds: search more
    if count_evals is None:  # the replica-count search pays off when slots are scarce
        count_evals = _COUNT_EVALS if _scarce(layout) or small else 0
    if local_search_evals is None:
        local_search_evals = _SWAP_EVALS_SMALL if small else _SWAP_EVALS_LARGE
    grid = (_H_GRID_SMALL if small else _H_GRID) + (_H_LONG if locality_slack is not None else ())
    groups_only = locality_slack is None and _groups_suffice(layout)
    scored = [(worst_ratio(scenarios, p, split_from_quota(w, p, sol.quota), layout.num_gpus), p, sol)
              for p, sol in _candidates(w, layout, count_evals, grid, groups_only=groups_only)]
    score, phy2log, sol = min(scored, key=lambda c: c[0])
    # Step 3: swaps out of the binding set, unless the bound is already (nearly) reached or the
    # group search placed the layer alone (they gain nothing after it: see _groups_suffice).
    if local_search_evals and score > bound * (1 + _NEAR_BOUND) and not groups_only:
        phy2log, sol = improve_by_swaps(w, phy2log, layout, local_search_evals)
        score = min(score, sol.max_load / mean)
        scored = scored + [(score, phy2log, sol)]
    split = split_from_quota(w, phy2log, sol.quota)
    # Step 4: trade balance within the slack for locality.
    if locality_slack is not None and w.sum() > 0:
        phy2log, split = _most_local(w, layout, scored, score, locality_slack)
        score = worst_ratio(scenarios, phy2log, split, layout.num_gpus)
    return LayerPlacement(phy2log, split, score, min(bound, score))


def _robust(scenarios: np.ndarray, w: np.ndarray, layout: ExpertLayout,
            quotas: str) -> tuple[float, np.ndarray, np.ndarray]:
    """``(worst score, phy2log, split)`` of the best candidate over ``scenarios [K, E]``."""
    if quotas not in ("realtime", "static"):
        raise ValueError(f"robust_quotas must be 'realtime' or 'static', got {quotas!r}")
    grid = _H_GRID + (_H_LONG if quotas == "realtime" else ())
    best = None
    for p, sol in _candidates(w, layout, 0, tuple(h for h in grid if h <= layout.num_experts),
                              group_iters=_GROUP_ITERS_ROBUST):
        exact = split_from_quota(w, p, sol.quota)
        if quotas == "realtime":
            options = [(_worst_flow_ratio(scenarios, p, layout), exact)]
        else:
            even = even_split(p, w.shape[0])
            options = [(worst_ratio(scenarios, p, s, layout.num_gpus), s)
                       for s in (exact, 0.5 * (exact + even), even)]
        for score, split in options:
            if best is None or score < best[0] - _TIE:
                best = (score, p, split)
    return best


def _worst_flow_ratio(scenarios: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout) -> float:
    """Worst busiest/mean over scenarios when quotas are re-planned for each one."""
    worst = 0.0
    for x in scenarios:
        if x.sum() > 0:
            worst = max(worst, layout_quotas(x, phy2log, layout).max_load * layout.num_gpus / x.sum())
    return worst


def _groups_suffice(layout: ExpertLayout) -> bool:
    """Two slots per GPU, more experts than GPUs, and not small: the group search alone places
    the layer (no chains, replica-count search or swaps).

    Measured at EP144 (256 experts, G=144, S=2, every second layer of the six SGLang traces,
    174 layers) with :func:`solvers.experts.groups.search_groups`: the chain and replica-count
    candidates won no layer (one tie), and the swap search after it lowered the mean ratio by
    4e-7 (two layers, at most 4e-5) for 8 ms per layer. A whole model (58 layers) takes about
    1.5 s instead of 70 s, at a mean ratio 0.0006 lower (all 348 layers)."""
    return (layout.slots_per_gpu == 2 and layout.num_experts > layout.num_gpus
            and not _is_small(layout))


def _candidates(w: np.ndarray, layout: ExpertLayout, count_evals: int, grid: tuple[int, ...],
                group_iters: int | None = None,
                groups_only: bool = False) -> list[tuple[np.ndarray, QuotaSolution]]:
    """Every constructed placement with its exact quotas (see :func:`plan_layer`); with
    ``groups_only`` just the two-slot group search's (unless it does not apply). ``group_iters``:
    tabu steps per start of the group search (default its own)."""
    order = interleaved_gpu_order(layout)
    if groups_only:
        grouped = group_placement(w, layout, order, group_iters)
        if grouped is not None:
            return [(grouped, layout_quotas(w, grouped, layout))]
    built = [chain_placement(w, layout, h, order) for h in grid if h <= layout.num_experts]
    built = [c for c in built if c is not None]
    out = [(p, layout_quotas(w, p, layout)) for p in built]
    if count_evals:
        out.append(improve_counts(w, layout, count_evals))
    elif _scarce(layout) or not out or _is_small(layout):
        placement = replication_placement(w, layout)  # the chain needs no help when slots abound
        out.append((placement, layout_quotas(w, placement, layout)))
    # Two slots per GPU: the group search from scratch and from the best candidate's components.
    starts = [None] + ([min(out, key=lambda c: c[1].max_load)[0]] if out else [])
    for start in starts:
        grouped = group_placement(w, layout, order, group_iters, start=start)
        if grouped is not None:
            out.append((grouped, layout_quotas(w, grouped, layout)))
    return out


def _most_local(w: np.ndarray, layout: ExpertLayout, scored: list, best: float,
                slack: float) -> tuple[np.ndarray, np.ndarray]:
    """``(phy2log, split)`` with the fewest cross-node tokens among the ``scored`` candidates
    within ``(1 + slack)`` of ``best``, under quotas capped at ``(1 + slack)`` times it."""
    cap = best * (1 + slack) * w.sum() / layout.num_gpus
    node_of_slot = layout.node_of_gpu[layout.gpu_of_slot]
    nodes = int(layout.node_of_gpu.max()) + 1
    options = []
    for score, p, _ in scored:
        if score <= best * (1 + slack) + _TIE:
            quota = locality_quotas(w, p, layout.gpu_of_slot, layout.node_of_gpu, cap)
            options.append((cross_node_tokens(w, p, quota, node_of_slot, nodes), p, quota))
    _, p, quota = min(options, key=lambda o: o[0])
    return p, split_from_quota(w, p, quota)


def plan_layers(
    loads: np.ndarray,
    layout: ExpertLayout,
    *,
    local_search_evals: int | None = None,
    locality_slack: float | None = None,
    progress: Callable[[], None] | None = None,
) -> tuple[LayerPlacement, ...]:
    """Plan every layer: ``loads`` is ``[L, E]`` or scenarios ``[K, L, E]``."""
    loads = np.asarray(loads, dtype=np.float64)
    scen = loads[None] if loads.ndim == 2 else loads
    out = []
    for layer in range(scen.shape[1]):
        out.append(plan_layer(scen[:, layer], layout, local_search_evals=local_search_evals,
                              locality_slack=locality_slack))
        if progress is not None:
            progress()
    return tuple(out)
