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
(:mod:`solvers.experts.groups`); :func:`group_placement` searches that space directly and is
one more candidate.

Splittable bin packing with cardinality constraints is the underlying problem (Epstein and
van Stee, "Approximation schemes for packing splittable items with cardinality constraints",
2012); the chain of split items is the classic "next fit with splitting" idea. Quotas follow
UltraEP's observation that an expert's tokens need not split evenly over its replicas.

:func:`solve_layer_milp` is the exact CP-SAT model for small instances (its bound and gap are
reported); :func:`brute_force_layer` enumerates placements for tests; :func:`lp_lower_bound`
is the LP relaxation. Everything here is numpy in, frozen dataclasses out.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import numpy as np

from solvers.experts.groups import groups_of_placement, search_groups, tree_gpus
from solvers.experts.quota import QuotaSolution, solve_quotas

_H_GRID = (2, 4, 8, 16, 24, 32)
_H_GRID_SMALL = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)  # small instances: flows are cheap
_NEAR_BOUND = 2e-4  # skip the swap search when the best candidate is this close to the bound


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
    ``lower_bound_ratio`` is :func:`lp_lower_bound` over the mean load (nominal mean loads)."""

    phy2log: np.ndarray
    split: np.ndarray
    ratio: float
    lower_bound_ratio: float


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
    mean = np.maximum(loads.mean(1), 1e-300)
    return float((loads.max(1) / mean).max())


# ----------------------------------------------------------------------------------------
# Construction
# ----------------------------------------------------------------------------------------


def _heavy_chain(w: np.ndarray, heavy: np.ndarray, chain_len: int, slots: int) -> list[list[int]] | None:
    """Expert lists of the chain GPUs for the heavies, or None if a GPU needs > ``slots``."""
    top = w[heavy].sum() / chain_len
    chain: list[list[int]] = [[] for _ in range(chain_len)]
    start = 0.0
    for e in heavy:
        end = start + (w[e] / top if top > 0 else 0.0)
        first = min(int(np.floor(start + 1e-9)), chain_len - 1)
        last = min(max(first, int(np.ceil(end - 1e-9)) - 1), chain_len - 1)
        for i in range(first, last + 1):
            chain[i].append(int(e))
        start = end
    if any(len(c) > slots for c in chain):
        return None
    return chain


def _pack_lights(w, light, per_gpu, target, slots) -> bool:
    """Heaviest light first onto the GPU with the largest remaining target per free slot."""
    free = np.array([slots - len(c) for c in per_gpu])
    load = np.zeros(len(per_gpu))
    heap = [(-target[g] / free[g], g) for g in range(len(per_gpu)) if free[g] > 0]
    heapq.heapify(heap)
    for e in light:
        if not heap:
            return False
        _, g = heapq.heappop(heap)
        per_gpu[g].append(int(e))
        load[g] += w[e]
        free[g] -= 1
        if free[g] > 0:
            heapq.heappush(heap, (-(target[g] - load[g]) / free[g], g))
    return True


def _fill_spare(w, per_gpu, slots) -> None:
    """Spare slots hold extra replicas of the highest load-per-replica expert not yet there."""
    counts = np.bincount([e for c in per_gpu for e in c], minlength=w.shape[0]).astype(float)
    for c in per_gpu:
        while len(c) < slots:
            score = w / np.maximum(counts, 1)
            score[c] = -1.0
            e = int(np.argmax(score))
            c.append(e)
            counts[e] += 1


def _to_phy2log(w: np.ndarray, per_gpu: list[list[int]], slots: int, gpu_order: np.ndarray) -> np.ndarray:
    """Spare slots filled (:func:`_fill_spare`), the ``i``-th GPU list put on GPU ``gpu_order[i]``."""
    _fill_spare(w, per_gpu, slots)
    phy2log = np.empty(len(per_gpu) * slots, dtype=np.int64)
    for i, experts in enumerate(per_gpu):
        g = int(gpu_order[i])
        phy2log[g * slots:(g + 1) * slots] = sorted(experts)
    return phy2log


def chain_placement(w: np.ndarray, layout: ExpertLayout, heavy_count: int, gpu_order: np.ndarray) -> np.ndarray | None:
    """Steps 1-3 of the module docstring for one ``H``; ``phy2log [G*S]`` or None."""
    G, S, E = layout.num_gpus, layout.slots_per_gpu, layout.num_experts
    order = np.argsort(-w, kind="stable")
    heavy, light = order[:heavy_count], order[heavy_count:]
    chain_len = min(G, G * S - E + 1)
    chain = _heavy_chain(w, heavy, chain_len, S) if heavy_count else [[] for _ in range(chain_len)]
    if chain is None:
        return None
    per_gpu = chain + [[] for _ in range(G - chain_len)]
    top = w[heavy].sum() / chain_len if heavy_count else 0.0
    target = np.full(G, w.sum() / G)
    target[:chain_len] -= top
    if not _pack_lights(w, light, per_gpu, target, S):
        return None
    return _to_phy2log(w, per_gpu, S, gpu_order)


def group_placement(w: np.ndarray, layout: ExpertLayout, gpu_order: np.ndarray,
                    iters: int = 300, start: np.ndarray | None = None) -> np.ndarray | None:
    """Two slots per GPU: the experts partitioned into ``E - G`` groups by
    :func:`solvers.experts.groups.search_groups` (from the components of the placement
    ``start`` when given, which it then never does worse than), each laid out as a tree
    (:func:`solvers.experts.groups.tree_gpus`) at its own load per GPU; spare slots as in
    :func:`_fill_spare`. None when ``S != 2`` or ``E <= G`` (the model needs both)."""
    G, S, E = layout.num_gpus, layout.slots_per_gpu, layout.num_experts
    groups = E - G
    if S != 2 or groups < 1 or w.sum() <= 0:
        return None
    first = None if start is None else groups_of_placement(w, start, groups)
    labels = search_groups(w, groups, iters=iters, start=first)
    per_gpu: list[list[int]] = []
    for g in range(groups):
        items = np.flatnonzero(labels == g)
        cap = w[items].sum() / max(items.size - 1, 1) * (1 + 1e-12)
        per_gpu += tree_gpus(w, items, cap)
    return _to_phy2log(w, per_gpu, S, gpu_order)


def greedy_counts(w: np.ndarray, num_slots: int) -> np.ndarray:
    """EPLB's replica counts: each redundant slot to the max load-per-replica expert."""
    counts = np.ones(w.shape[0], dtype=np.int64)
    for _ in range(num_slots - w.shape[0]):
        counts[int(np.argmax(w / counts))] += 1
    return counts


def replication_placement(w: np.ndarray, layout: ExpertLayout, counts: np.ndarray | None = None) -> np.ndarray:
    """Even-split pieces of the replica ``counts`` (default :func:`greedy_counts`) packed
    heaviest first onto the least-loaded GPU with a free slot, avoiding a second replica of
    the same expert on one GPU where possible."""
    G, S, E = layout.num_gpus, layout.slots_per_gpu, layout.num_experts
    counts = greedy_counts(w, layout.num_slots) if counts is None else counts
    pieces = np.repeat(np.arange(E), counts)
    size = (w / counts)[pieces]
    holds = np.zeros((G, E), dtype=bool)
    used = np.zeros(G, dtype=np.int64)
    load = np.zeros(G)
    phy2log = np.empty(G * S, dtype=np.int64)
    for p in np.argsort(-size, kind="stable"):
        e = int(pieces[p])
        open_load = np.where(used < S, load, np.inf)
        fresh = np.where(holds[:, e], np.inf, open_load)
        g = int(np.argmin(fresh if np.isfinite(fresh).any() else open_load))
        phy2log[g * S + used[g]] = e
        holds[g, e] = True
        used[g] += 1
        load[g] += size[p]
    return np.sort(phy2log.reshape(G, S), axis=1).ravel()


def improve_counts(w: np.ndarray, layout: ExpertLayout, max_evals: int) -> tuple[np.ndarray, QuotaSolution]:
    """Local search over replica counts (packing by :func:`replication_placement`, quotas by
    flow): move one redundant replica from an expert with several to an expert on the
    binding GPUs while that lowers the optimum."""
    counts = greedy_counts(w, layout.num_slots)
    best = replication_placement(w, layout, counts)
    sol = _quotas(w, best, layout)
    evals = 0
    while evals < max_evals:
        S = layout.slots_per_gpu
        on_binding = {int(e) for g in sol.binding_gpus for e in best[g * S:(g + 1) * S]}
        takers = sorted(on_binding, key=lambda e: -w[e] / counts[e])
        givers = sorted(np.flatnonzero(counts > 1).tolist(), key=lambda e: w[e] / counts[e])
        improved = False
        for y, x in itertools.islice(((y, x) for y in takers for x in givers if x != y), 8):
            trial_counts = counts.copy()
            trial_counts[x] -= 1
            trial_counts[y] += 1
            trial = replication_placement(w, layout, trial_counts)
            trial_sol = _quotas(w, trial, layout)
            evals += 1
            if trial_sol.max_load < sol.max_load - 1e-9 * max(sol.max_load, 1.0):
                counts, best, sol, improved = trial_counts, trial, trial_sol, True
                break
        if not improved:
            break
    return best, sol


# ----------------------------------------------------------------------------------------
# Improvement and selection
# ----------------------------------------------------------------------------------------


def _quotas(w: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout) -> QuotaSolution:
    return solve_quotas(w, phy2log, layout.gpu_of_slot, layout.num_gpus)


def _swap_candidates(phy2log: np.ndarray, sol: QuotaSolution, S: int, gpus: int = 4,
                     limit: int = 8) -> list[tuple[int, int]]:
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
    ok &= new_g < load[g_a] * (1 - 1e-9)  # the other GPU may shed replicated load
    rows, cols = np.nonzero(ok)
    best = np.lexsort((cols, slots_a[rows], worst[rows, cols]))[:limit]
    return [(int(slots_a[rows[i]]), int(cols[i])) for i in best]


def improve_by_swaps(w: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout, max_evals: int) -> tuple[np.ndarray, QuotaSolution]:
    """Step 5: accept a slot swap whenever it lowers the flow optimum."""
    best = phy2log.copy()
    sol = _quotas(w, best, layout)
    evals = 0
    while evals < max_evals:
        improved = False
        for a, b in _swap_candidates(best, sol, layout.slots_per_gpu):
            trial = best.copy()
            trial[a], trial[b] = trial[b], trial[a]
            trial_sol = _quotas(w, trial, layout)
            evals += 1
            if trial_sol.max_load < sol.max_load - 1e-9 * max(sol.max_load, 1.0):
                best, sol, improved = trial, trial_sol, True
                break
        if not improved:
            break
    return best, sol


def _split_from_quota(w: np.ndarray, phy2log: np.ndarray, quota: np.ndarray) -> np.ndarray:
    share = w[phy2log]
    fallback = even_split(phy2log, w.shape[0])
    return np.where(share > 0, quota / np.where(share > 0, share, 1.0), fallback)


def interleaved_gpu_order(layout: ExpertLayout) -> np.ndarray:
    """Chain order that visits nodes round-robin, so a heavy's replicas land on different nodes."""
    G, n = layout.num_gpus, layout.gpus_per_node
    nodes = -(-G // n)
    order = [node * n + i for i in range(n) for node in range(nodes) if node * n + i < G]
    return np.array(order, dtype=np.int64)


def plan_layer(
    scenarios: np.ndarray,
    layout: ExpertLayout,
    *,
    local_search_evals: int | None = None,
    count_evals: int | None = None,
    locality_slack: float | None = None,
    robust_quotas: str = "realtime",
) -> LayerPlacement:
    """Best candidate placement for one layer; ``scenarios`` is ``[K, E]`` (``K = 1``: nominal).

    Nominal (``K = 1``): candidates (a chain per ``H`` in the grid, along a node-interleaved
    GPU order - :func:`interleaved_gpu_order`: balance does not depend on GPU labels,
    locality does - the EPLB-like :func:`replication_placement`, with a replica-count
    search when slots are scarce, and with two slots per GPU :func:`group_placement`) each
    get their exact quotas; the best is improved by
    :func:`improve_by_swaps` (skipped when already within 0.02% of :func:`lp_lower_bound`).
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
    """
    scenarios = np.atleast_2d(np.asarray(scenarios, dtype=np.float64))
    w = scenarios.mean(0)
    mean = max(w.sum() / layout.num_gpus, 1e-300)
    bound = lp_lower_bound(w, layout) / mean if w.sum() > 0 else 1.0
    if scenarios.shape[0] > 1:
        score, phy2log, split = _robust(scenarios, w, layout, robust_quotas)
        return LayerPlacement(phy2log, split, score, min(bound, score))
    small = layout.num_experts * layout.num_gpus <= 4096  # flows cost microseconds: search more
    if count_evals is None:  # the replica-count search pays off when slots are scarce
        count_evals = 30 if layout.num_slots - layout.num_experts < layout.num_gpus - 1 or small else 0
    if local_search_evals is None:
        local_search_evals = 60 if small else 4
    grid = (_H_GRID_SMALL if small else _H_GRID) + ((64, 96, 128) if locality_slack is not None else ())
    scored = [(worst_ratio(scenarios, p, _split_from_quota(w, p, sol.quota), layout.num_gpus), p, sol)
              for p, sol in _candidates(w, layout, count_evals, grid)]
    score, phy2log, sol = min(scored, key=lambda c: c[0])
    if local_search_evals and score > bound * (1 + _NEAR_BOUND):
        phy2log, sol = improve_by_swaps(w, phy2log, layout, local_search_evals)
        score = min(score, sol.max_load / mean)
        scored.append((score, phy2log, sol))
    split = _split_from_quota(w, phy2log, sol.quota)
    if locality_slack is not None and w.sum() > 0:
        phy2log, split = _most_local(w, layout, scored, score, locality_slack)
        score = worst_ratio(scenarios, phy2log, split, layout.num_gpus)
    return LayerPlacement(phy2log, split, score, min(bound, score))


def _robust(scenarios: np.ndarray, w: np.ndarray, layout: ExpertLayout, quotas: str):
    if quotas not in ("realtime", "static"):
        raise ValueError(f"robust_quotas must be 'realtime' or 'static', got {quotas!r}")
    grid = _H_GRID + ((64, 96, 128) if quotas == "realtime" else ())
    best = None
    for p, sol in _candidates(w, layout, 0, tuple(h for h in grid if h <= layout.num_experts), group_iters=60):
        exact = _split_from_quota(w, p, sol.quota)
        if quotas == "realtime":
            options = [(_worst_flow_ratio(scenarios, p, layout), exact)]
        else:
            even = even_split(p, w.shape[0])
            options = [(worst_ratio(scenarios, p, s, layout.num_gpus), s)
                       for s in (exact, 0.5 * (exact + even), even)]
        for score, split in options:
            if best is None or score < best[0] - 1e-12:
                best = (score, p, split)
    return best


def _worst_flow_ratio(scenarios: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout) -> float:
    worst = 0.0
    for x in scenarios:
        if x.sum() > 0:
            worst = max(worst, _quotas(x, phy2log, layout).max_load * layout.num_gpus / x.sum())
    return worst


def _candidates(w: np.ndarray, layout: ExpertLayout, count_evals: int,
                grid: tuple[int, ...], group_iters: int = 300) -> list[tuple[np.ndarray, QuotaSolution]]:
    order = interleaved_gpu_order(layout)
    built = [chain_placement(w, layout, h, order) for h in grid if h <= layout.num_experts]
    built = [c for c in built if c is not None]
    out = [(p, _quotas(w, p, layout)) for p in built]
    scarce = layout.num_slots - layout.num_experts < layout.num_gpus - 1
    if count_evals:
        out.append(improve_counts(w, layout, count_evals))
    elif scarce or not out or layout.num_experts * layout.num_gpus <= 4096:
        placement = replication_placement(w, layout)  # the chain needs no help when slots abound
        out.append((placement, _quotas(w, placement, layout)))
    # Two slots per GPU: the group search from scratch and from the best candidate's components.
    starts = [None] + ([min(out, key=lambda c: c[1].max_load)[0]] if out else [])
    for start in starts:
        grouped = group_placement(w, layout, order, group_iters, start=start)
        if grouped is not None:
            out.append((grouped, _quotas(w, grouped, layout)))
    return out


def _most_local(w, layout: ExpertLayout, scored, best: float, slack: float) -> tuple[np.ndarray, np.ndarray]:
    from solvers.experts.quota import cross_node_tokens, locality_quotas

    cap = best * (1 + slack) * w.sum() / layout.num_gpus
    node_of_slot = layout.node_of_gpu[layout.gpu_of_slot]
    nodes = int(layout.node_of_gpu.max()) + 1
    options = []
    for score, p, _ in scored:
        if score <= best * (1 + slack) + 1e-12:
            quota = locality_quotas(w, p, layout.gpu_of_slot, layout.node_of_gpu, cap)
            options.append((cross_node_tokens(w, p, quota, node_of_slot, nodes), p, quota))
    _, p, quota = min(options, key=lambda o: o[0])
    return p, _split_from_quota(w, p, quota)


def plan_layers(
    loads: np.ndarray,
    layout: ExpertLayout,
    *,
    local_search_evals: int | None = None,
    locality_slack: float | None = None,
    progress=None,
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


# ----------------------------------------------------------------------------------------
# Exact references for small instances
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MilpResult:
    """Exact model result: ``max_load`` of the best placement found and the solver ``bound``."""

    phy2log: np.ndarray
    max_load: float
    bound: float
    optimal: bool

    @property
    def gap(self) -> float:
        return 0.0 if self.max_load <= 0 else max(0.0, (self.max_load - self.bound) / self.max_load)


def solve_layer_milp(w: np.ndarray, layout: ExpertLayout, time_limit_s: float = 30.0,
                     hint: np.ndarray | None = None) -> MilpResult:
    """CP-SAT: integer replica counts ``n[e,g]``, integer tokens ``x[e,g]``, min max GPU load.

    Loads must be integers (token counts); the optimum is then the integer min-max, equal to
    the flow optimum of the best placement. ``hint`` (a ``phy2log``, e.g. the heuristic's)
    seeds the search, so a time-limited solve returns at least that placement, with the
    solver's bound and gap (medium sizes).
    """
    from ortools.sat.python import cp_model

    w_int = np.asarray(w).astype(np.int64)
    E, G, S = layout.num_experts, layout.num_gpus, layout.slots_per_gpu
    total = int(w_int.sum())
    model = cp_model.CpModel()
    # Variables: replicas n[e,g], tokens x[e,g], busiest load t.
    n = {(e, g): model.new_int_var(0, S, f"n_{e}_{g}") for e in range(E) for g in range(G)}
    x = {(e, g): model.new_int_var(0, int(w_int[e]), f"x_{e}_{g}") for e in range(E) for g in range(G)}
    t = model.new_int_var(-(-total // G), total, "t")
    # Every GPU holds exactly S replicas; every expert at least one.
    for g in range(G):
        model.add(sum(n[e, g] for e in range(E)) == S)
    for e in range(E):
        model.add(sum(n[e, g] for g in range(G)) >= 1)
        # All of an expert's tokens are served, only where it has a replica.
        model.add(sum(x[e, g] for g in range(G)) == int(w_int[e]))
        for g in range(G):
            model.add(x[e, g] <= int(w_int[e]) * n[e, g])
    # The busiest GPU bounds every GPU; GPUs are interchangeable (symmetry: sorted loads).
    loads = [sum(x[e, g] for e in range(E)) for g in range(G)]
    for g in range(G):
        model.add(loads[g] <= t)
    for g in range(G - 1):
        model.add(loads[g] >= loads[g + 1])
    model.minimize(t)
    if hint is not None:
        _add_hint(model, n, x, w_int, hint, layout)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"CP-SAT found no placement in {time_limit_s} s (status {solver.status_name(status)})")
    phy2log = np.concatenate([np.repeat(np.arange(E), [solver.value(n[e, g]) for e in range(E)]) for g in range(G)])
    return MilpResult(phy2log.astype(np.int64), float(solver.objective_value), float(solver.best_objective_bound), status == cp_model.OPTIMAL)


def _add_hint(model, n, x, w_int, hint: np.ndarray, layout: ExpertLayout) -> None:
    """Hint replica counts and flow quotas of ``hint``, GPUs sorted by load (the symmetry)."""
    S = layout.slots_per_gpu
    sol = _quotas(w_int.astype(np.float64), hint, layout)
    order = np.argsort(-sol.gpu_load, kind="stable")
    for new_g, g in enumerate(order):
        experts = hint[g * S:(g + 1) * S]
        counts = np.bincount(experts, minlength=layout.num_experts)
        tokens = np.bincount(experts, weights=sol.quota[g * S:(g + 1) * S], minlength=layout.num_experts)
        for e in range(layout.num_experts):
            model.add_hint(n[e, new_g], int(counts[e]))
            model.add_hint(x[e, new_g], int(round(tokens[e])))


def brute_force_layer(w: np.ndarray, layout: ExpertLayout) -> tuple[float, np.ndarray]:
    """Exhaustive: every multiset of S experts per GPU (GPUs unordered), flow quotas each."""
    E, G, S = layout.num_experts, layout.num_gpus, layout.slots_per_gpu
    gpu_sets = list(itertools.combinations_with_replacement(range(E), S))
    best: tuple[float, np.ndarray] | None = None
    for combo in itertools.combinations_with_replacement(range(len(gpu_sets)), G):
        phy2log = np.array([e for i in combo for e in gpu_sets[i]], dtype=np.int64)
        if np.unique(phy2log).shape[0] < E:
            continue
        value = _quotas(np.asarray(w, dtype=np.float64), phy2log, layout).max_load
        if best is None or value < best[0]:
            best = (value, phy2log)
    assert best is not None
    return best


def lp_lower_bound(w: np.ndarray, layout: ExpertLayout) -> float:
    """Lower bound on the busiest GPU: the best of the mean load and the replica-count bound.

    The LP relaxation of :func:`solve_layer_milp` (replica counts fractional) is the mean
    load ``sum(w)/G``: fractional replicas spread every expert over every GPU. The
    replica-count bound is tighter with few slots: at busiest load ``T`` an expert needs at
    least ``ceil(w_e / T)`` replicas (one replica serves at most ``T``), and there are only
    ``G*S`` slots, so ``T`` must satisfy ``sum_e ceil(w_e / T) <= G*S`` (found by bisection).
    """
    w = np.asarray(w, dtype=np.float64)
    mean = w.sum() / layout.num_gpus
    lo, hi = mean, max(mean, float(w.max()))
    if np.ceil(w / lo).clip(min=1).sum() <= layout.num_slots:
        return mean
    for _ in range(60):
        mid = (lo + hi) / 2
        if np.ceil(w / mid).clip(min=1).sum() <= layout.num_slots:
            hi = mid
        else:
            lo = mid
    return hi


def relabel_to_current(new_phy2log: np.ndarray, current_phy2log: np.ndarray, num_gpus: int) -> tuple[np.ndarray, int]:
    """Permute the GPUs of a new placement to keep as many current replicas as possible.

    GPUs are interchangeable for balance, so the new plan's GPU ``i`` may become any physical
    GPU ``j``: a max-weight assignment (OR-Tools ``SimpleLinearSumAssignment``) on the number
    of replicas GPU ``i`` would keep from GPU ``j``. Slots of a GPU keep their current
    position where the expert stays. Returns the relabelled ``phy2log`` and the number of
    replicas that must be copied in (the migration).
    """
    from ortools.graph.python import linear_sum_assignment

    S = new_phy2log.shape[0] // num_gpus
    new, cur = new_phy2log.reshape(num_gpus, S), np.asarray(current_phy2log).reshape(num_gpus, S)
    num_experts = int(max(new.max(), cur.max())) + 1
    new_count = np.stack([np.bincount(r, minlength=num_experts) for r in new])
    cur_count = np.stack([np.bincount(r, minlength=num_experts) for r in cur])
    overlap = np.minimum(new_count[:, None, :], cur_count[None, :, :]).sum(2)
    solver = linear_sum_assignment.SimpleLinearSumAssignment()
    left, right = np.meshgrid(np.arange(num_gpus), np.arange(num_gpus), indexing="ij")
    solver.add_arcs_with_cost(left.ravel().astype(np.int32), right.ravel().astype(np.int32), (-overlap).ravel().astype(np.int64))
    if solver.solve() != solver.OPTIMAL:
        raise RuntimeError("GPU relabelling assignment failed")
    out = np.empty_like(cur)
    for i in range(num_gpus):
        j = solver.right_mate(i)
        out[j] = _keep_slots(list(new[i]), list(cur[j]))
    moved = int(num_gpus * S - overlap[np.arange(num_gpus), [solver.right_mate(i) for i in range(num_gpus)]].sum())
    return out.ravel(), moved


def _keep_slots(new_experts: list[int], current: list[int]) -> list[int]:
    """Order ``new_experts`` so experts already in ``current`` keep their slot index."""
    remaining = list(new_experts)
    out: list[int | None] = [None] * len(current)
    for i, e in enumerate(current):
        if e in remaining:
            out[i] = e
            remaining.remove(e)
    fill = iter(sorted(remaining))
    return [e if e is not None else next(fill) for e in out]
