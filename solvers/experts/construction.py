"""Greedy construction of placements (``phy2log [G*S]``) for one layer: the "light pack + heavy
chain" of :mod:`solvers.experts.placement` (steps 1-3 there), the two-slot group layout, and
EPLB-like replication with even-split packing.

Every builder is pure: loads ``w [E]`` and a :class:`~solvers.experts.layout.ExpertLayout` in,
a new ``phy2log`` out (or None when the construction does not fit the slots). Quotas and
scores are computed by the caller.
"""

from __future__ import annotations

import heapq

import numpy as np

from solvers.experts.groups import groups_of_placement, search_groups, tree_gpus
from solvers.experts.layout import ExpertLayout

__all__ = ["chain_placement", "greedy_counts", "group_placement", "replication_placement"]

# Float guard: a heavy whose load ends exactly on a chain-GPU boundary (up to rounding) must not
# claim a slot on the next GPU.
_BOUNDARY_EPS = 1e-9


def _heavy_chain(w: np.ndarray, heavy: np.ndarray, chain_len: int, slots: int) -> list[list[int]] | None:
    """Expert lists of the chain GPUs for the heavies, or None if a GPU needs > ``slots``."""
    top = w[heavy].sum() / chain_len
    chain: list[list[int]] = [[] for _ in range(chain_len)]
    start = 0.0
    for e in heavy:
        end = start + (w[e] / top if top > 0 else 0.0)
        first = min(int(np.floor(start + _BOUNDARY_EPS)), chain_len - 1)
        last = min(max(first, int(np.ceil(end - _BOUNDARY_EPS)) - 1), chain_len - 1)
        for i in range(first, last + 1):
            chain[i].append(int(e))
        start = end
    if any(len(c) > slots for c in chain):
        return None
    return chain


def _pack_lights(w: np.ndarray, light: np.ndarray, per_gpu: list[list[int]], target: np.ndarray,
                 slots: int) -> list[list[int]] | None:
    """``per_gpu`` with the lights added (a new list; the argument is not modified), heaviest
    light first onto the GPU with the largest remaining target per free slot; None when the
    lights do not fit the free slots."""
    packed = [list(c) for c in per_gpu]
    free = np.array([slots - len(c) for c in packed])
    load = np.zeros(len(packed))
    heap = [(-target[g] / free[g], g) for g in range(len(packed)) if free[g] > 0]
    heapq.heapify(heap)
    for e in light:
        if not heap:
            return None
        _, g = heapq.heappop(heap)
        packed[g].append(int(e))
        load[g] += w[e]
        free[g] -= 1
        if free[g] > 0:
            heapq.heappush(heap, (-(target[g] - load[g]) / free[g], g))
    return packed


def _fill_spare(w: np.ndarray, per_gpu: list[list[int]], slots: int) -> list[list[int]]:
    """``per_gpu`` with every GPU filled to ``slots`` (a new list; the argument is not modified):
    each spare slot holds an extra replica of the highest load-per-replica expert not yet on
    that GPU."""
    filled = [list(c) for c in per_gpu]
    counts = np.bincount([e for c in filled for e in c], minlength=w.shape[0]).astype(float)
    for c in filled:
        while len(c) < slots:
            score = w / np.maximum(counts, 1)
            score[c] = -1.0
            e = int(np.argmax(score))
            c.append(e)
            counts[e] += 1
    return filled


def _to_phy2log(w: np.ndarray, per_gpu: list[list[int]], slots: int, gpu_order: np.ndarray) -> np.ndarray:
    """Spare slots filled (:func:`_fill_spare`), the ``i``-th GPU list put on GPU ``gpu_order[i]``."""
    filled = _fill_spare(w, per_gpu, slots)
    phy2log = np.empty(len(filled) * slots, dtype=np.int64)
    for i, experts in enumerate(filled):
        g = int(gpu_order[i])
        phy2log[g * slots:(g + 1) * slots] = sorted(experts)
    return phy2log


def chain_placement(w: np.ndarray, layout: ExpertLayout, heavy_count: int, gpu_order: np.ndarray) -> np.ndarray | None:
    """Steps 1-3 of :mod:`solvers.experts.placement` for one ``H``; ``phy2log [G*S]`` or None."""
    G, S, E = layout.num_gpus, layout.slots_per_gpu, layout.num_experts
    order = np.argsort(-w, kind="stable")
    heavy, light = order[:heavy_count], order[heavy_count:]
    chain_len = min(G, G * S - E + 1)
    chain = _heavy_chain(w, heavy, chain_len, S) if heavy_count else [[] for _ in range(chain_len)]
    if chain is None:
        return None
    top = w[heavy].sum() / chain_len if heavy_count else 0.0
    target = np.full(G, w.sum() / G)
    target[:chain_len] -= top
    per_gpu = _pack_lights(w, light, chain + [[] for _ in range(G - chain_len)], target, S)
    if per_gpu is None:
        return None
    return _to_phy2log(w, per_gpu, S, gpu_order)


def group_placement(w: np.ndarray, layout: ExpertLayout, gpu_order: np.ndarray,
                    iters: int | None = None, start: np.ndarray | None = None) -> np.ndarray | None:
    """Two slots per GPU: the experts partitioned into ``E - G`` groups by
    :func:`solvers.experts.groups.search_groups` (``iters`` tabu steps per start, default its
    own; from the components of the placement ``start`` when given, which it then never does
    worse than), each laid out as a tree (:func:`solvers.experts.groups.tree_gpus`) at its own
    load per GPU; spare slots as in :func:`_fill_spare`. None when ``S != 2`` or ``E <= G``
    (the model needs both)."""
    G, S, E = layout.num_gpus, layout.slots_per_gpu, layout.num_experts
    groups = E - G
    if S != 2 or groups < 1 or w.sum() <= 0:
        return None
    first = None if start is None else groups_of_placement(w, start, groups)
    labels = (search_groups(w, groups, start=first) if iters is None
              else search_groups(w, groups, iters=iters, start=first))
    per_gpu: list[list[int]] = []
    members = np.argsort(labels, kind="stable")  # each group's experts in increasing order
    ends = np.cumsum(np.bincount(labels, minlength=groups)).tolist()
    for g in range(groups):
        items = members[(ends[g - 1] if g else 0):ends[g]]
        if items.size == 2:  # a pair is one GPU (what tree_gpus returns for it)
            per_gpu.append(items.tolist())
            continue
        # The group's own load per GPU; the 1e-12 keeps tree_gpus' precondition
        # sum <= (n - 1) * cap true after rounding.
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
