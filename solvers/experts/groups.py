"""Two slots per GPU: expert placement as a partition of the experts into groups.

The model (``S = 2``, ``E`` experts with loads ``x_e``, ``G < E`` GPUs)
----------------------------------------------------------------------
Read a placement as a multigraph: experts are vertices and each GPU is an edge between the
two experts in its slots (a loop when both slots hold one expert). Quotas only move load
inside a connected component, so a component with ``n`` experts, ``k`` GPUs and load ``L``
needs ``L <= k * T`` at busiest load ``T``, and it is connected only if ``k >= n - 1``.
Conversely a group with ``L <= (n - 1) * T`` can always be laid out as a tree of ``n - 1``
GPUs that carries it at ``T`` (:func:`tree_gpus`: the smallest remaining expert goes whole
onto a new GPU, which the largest remaining expert fills up to ``T``; a step spends one full
GPU and retires one expert, so the invariant ``L <= (n - 1) T`` holds, or, when the largest
runs out first, it retires two experts on one GPU, and all that remain then fit one GPU each).
Merging a group with ``k >= n`` GPUs into a tree group never needs more GPUs, so an optimal
placement is a partition into exactly ``E - G`` groups, each a tree, and

    T* = min over partitions into E - G groups of max_g L_g / (n_g - 1).

This is the splittable-items bin packing with cardinality two of Chung, Graham, Mao and
Varghese ("Parallelism versus memory allocation in pipelined router forwarding engines",
2006) and Epstein and van Stee ("Improved results for a memory allocation problem", 2007),
seen from the groups. In surplus terms ``u_e = 1 - x_e / T`` each group needs
``sum u >= 1``: a bin covering problem with ``E - G`` bins.

:func:`search_groups` runs a short tabu search over the partition (swap, relocate and pull
moves on the total excess ``sum_g max(0, L_g - (n_g - 1) T)``, driven down in ``T`` while it
reaches zero excess) from a few cheap starts (EPLB's replica counts paired largest with
smallest, perturbed copies, and for nearly balanced layers a bin-covering greedy), then an
exhaustive two-group descent on the busiest group, and keeps the best. Measured at EP144
(256 experts, 144 GPUs): about 25 ms per layer in pure Python, and 0.0006 below the previous
search's mean ratio (two tabu runs of 300 steps per target, about 1 s per layer).
:func:`solvers.experts.covering.covering_lp_bound` is the lower bound of this model (the
configuration LP of the bin covering).
Arrays in, arrays out.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math

import numpy as np

__all__ = ["group_ratio", "groups_of_placement", "search_groups", "tree_gpus"]

# Measured at EP144 (256 experts, G=144, S=2) on all 348 layers of the six SGLang traces in
# benchmarks/data/moe_traces/sglang, changing one value at a time from the values below: the
# change in the mean busiest/mean ratio against the previous search (mean 1.10969), and the
# search's time per layer. Seed-to-seed noise of that mean is about 0.0001.
#
# Tabu tenure: 7 is the classic short-term list size (Glover, "Tabu Search - Part I", ORSA J.
# Computing 1(3), 1989); 4 / 7 / 12 gave -0.00054 / -0.00062 / -0.00066. _tabu adds 0-2 random
# steps to break cycles.
_TABU_TENURE = 7
# _tabu lowers its target to _TARGET_STEP below the best ratio found whenever it reaches zero
# excess, and halves the step after _PATIENCE steps without reaching it, until the step is below
# _TARGET_STEP_MIN. A run reaches its first target within 3-50 steps and then mostly sits in
# failure windows. Step 0.01 / 0.02: -0.00050 / -0.00062; patience 20 / 40 / 60: -0.00058 /
# -0.00062 / -0.00046; the minimum step (1e-4 or 5e-4) is rarely reached in _SEARCH_STEPS.
_TARGET_STEP = 0.02
_TARGET_STEP_MIN = 5e-4
_PATIENCE = 40
# Swap partners of an expert: its _SWAP_WINDOW nearest experts by load on each side. 90 % of the
# swaps an exhaustive tabu search chose were within 4 ranks, 99 % within 15. Window 4 / 6 / 8:
# -0.00044 / -0.00062 / -0.00069 (seeds 1 and 2: 6 gives -0.00059 / -0.00070, 8 -0.00058 /
# -0.00061), 8 at 1.1x the tabu time of 6.
_SWAP_WINDOW = 6
# Pull moves take an expert whose load is within _PULL_BAND ranks of the target: pulling it out
# of a group changes that group's capacity by one GPU and its load by about as much, so only
# such experts can move without raising the donor's excess (95 % of the pulls an exhaustive
# search chose took an expert at 0.95-1.07 of the target). Band 5 / 10 / 20: -0.00055 /
# -0.00062 / -0.00064.
_PULL_BAND = 10
# search_groups: tabu steps per start, and the relative noise of the perturbed paired starts
# (after the unperturbed one). Steps 150 / 220 / 300: -0.00037 / -0.00062 / -0.00071 in 19 / 24
# / 31 ms. Noise (0.05,) / (0.05, 0.1) / (0.05, 0.1, 0.03): -0.00024 / -0.00062 / -0.00069, each
# start about 7 ms. One start, tabu alone, 600 steps: +0.0005 (so many short runs, not one long).
_SEARCH_STEPS = 220
_START_NOISE = (0.05, 0.1)
# _regroup_pairs: largest union of two groups it splits exhaustively (2^(n-1) subsets). At most
# 8 / 10 / 12 experts: -0.00043 / -0.00062 / -0.00064. Without the descent (tabu alone, two
# starts of 600 steps): +0.0001.
_REGROUP_MAX = 10
# _covering_start: run only when the paired starts end below 1 + _COVER_BELOW (a nearly balanced
# layer, where the tabu search from the paired starts misses the exact fit most: those 43
# layers were 0.0008 above the previous search on average). Threshold 0 / 0.02 / 0.03 / 0.06 /
# 0.1: -0.00048 / -0.00057 / -0.00062 / -0.00063 / -0.00064; a covering run costs about 23 ms
# (its descent is long: every group of the start sits near the target).
_COVER_BELOW = 0.03
# Its bisection stops at _COVER_TOL (relative; the tabu search refines the start anyway), and its
# upper end is raised by _COVER_WIDEN_STEP at most _COVER_WIDEN times while the greedy closes
# too few groups there (not measured: feasibility guards).
_COVER_TOL = 1e-3
_COVER_WIDEN, _COVER_WIDEN_STEP = 8, 0.1
# Float tolerance on excesses and ratios (loads are scaled to a mean group capacity of 1).
_EPS = 1e-12


def group_ratio(x: np.ndarray, labels: np.ndarray, num_groups: int) -> float:
    """``max_g L_g / (n_g - 1)``: the busiest load the grouping allows (inf if a group has one expert)."""
    load = np.bincount(labels, weights=x, minlength=num_groups)
    size = np.bincount(labels, minlength=num_groups)
    return float(np.max(np.where(size > 1, load / np.maximum(size - 1, 1), np.inf)))


def _merge_components(x: np.ndarray, pairs: np.ndarray, num_groups: int) -> np.ndarray:
    """Group labels from GPUs given as expert pairs ``[k, 2]`` (a loop holds one expert twice):
    the connected components, merged down to ``num_groups`` groups as
    :func:`groups_of_placement` describes. Labels are numbered by each group's smallest expert."""
    E = x.shape[0]
    parent = list(range(E))
    for a, b in pairs.tolist():  # union by the smaller root; components are small trees
        while parent[a] != a:
            a = parent[a]
        while parent[b] != b:
            b = parent[b]
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b
    for e in range(E):
        parent[e] = parent[parent[e]]  # roots are smaller, so they are final by now
    _, comp = np.unique(np.array(parent), return_inverse=True)  # numbered by the smallest expert
    count = int(comp.max()) + 1
    load = np.bincount(comp, weights=x, minlength=count)
    size = np.bincount(comp, minlength=count)
    gpus = np.bincount(comp[pairs[:, 0]], minlength=count)
    alive = np.ones(count, dtype=bool)
    while alive.sum() > num_groups:
        spare = np.flatnonzero(alive & (gpus > size - 1))
        if spare.size == 0:
            break
        # Every (spare block, partner) pair at once; lowest L / k first, then the lowest indices.
        ratio = (load[spare, None] + load[None, :]) / (gpus[spare, None] + gpus[None, :])
        ratio[:, ~alive] = np.inf
        ratio[np.arange(spare.size), spare] = np.inf
        k = int(np.argmin(ratio))  # row-major: ties go to the lowest (spare, partner) indices
        i, j = int(spare[k // count]), k % count
        comp[comp == j] = i
        load[i] += load[j]
        size[i] += size[j]
        gpus[i] += gpus[j]
        alive[j] = False
    first = np.full(count, E)
    np.minimum.at(first, comp, np.arange(E))
    _, labels = np.unique(first[comp], return_inverse=True)
    return labels.astype(np.int64)


def _paired_replicas(y: np.ndarray, num_groups: int) -> np.ndarray:
    """Start of :func:`search_groups`: the two-slot placement of EPLB's replica counts (each of
    the ``2G - E`` redundant slots to the expert with the highest load per replica, as
    :func:`solvers.experts.construction.greedy_counts`) with the even pieces paired largest with
    smallest on ``G = E - num_groups`` GPUs, read as groups (:func:`_merge_components`).

    Pairing the largest with the smallest minimises the busiest pair sum (the two-per-machine
    case of P||Cmax, Dell'Amico and Martello, "Bounds for the cardinality constrained P||Cmax
    problem", J. Scheduling 4(3), 2001). A GPU that would hold two pieces of one expert swaps
    partners with the nearest GPU that avoids it."""
    E = y.shape[0]
    G = E - num_groups
    counts = [1] * E
    heap = [(-v, e) for e, v in enumerate(y.tolist())]  # ties to the lowest index, as argmax
    heapq.heapify(heap)
    for _ in range(2 * G - E):
        _, e = heapq.heappop(heap)
        counts[e] += 1
        heapq.heappush(heap, (-float(y[e]) / counts[e], e))
    counts = np.array(counts, dtype=np.int64)
    pieces = np.repeat(np.arange(E), counts)
    order = pieces[np.argsort(-(y / counts)[pieces], kind="stable")]
    top, low = order[:G].tolist(), order[2 * G - 1:G - 1:-1].tolist()
    for k in range(G):
        if top[k] == low[k]:
            for q in sorted(range(G), key=lambda q: (abs(q - k), q)):
                if low[q] != top[k] and top[q] != low[k]:
                    low[k], low[q] = low[q], low[k]
                    break
    return _merge_components(y, np.array([top, low], dtype=np.int64).T, num_groups)


def _cover_groups(ys: list[float], cap: float, num_groups: int,
                  build: bool = False) -> list[list[int]] | int:
    """Greedy bin covering of the loads ``ys`` (ascending) at busiest load ``cap``: each group
    starts with the heaviest expert left and is closed once ``L <= (n - 1) cap`` by adding, for
    each of the ``k`` partners it still needs (``k`` = its seed's load in GPUs, rounded up), the
    heaviest expert that covers an even share of the remaining need, else the lightest.

    Returns the number of groups closed (stopping early once ``num_groups`` are and only
    experts lighter than ``cap`` are left), or with ``build`` the groups themselves (indices
    into ``ys``), the unclosed rest merged into the last closed group."""
    left, idx = list(ys), list(range(len(ys)))
    groups: list[list[int]] = []
    closed = 0
    while left:
        if not build and closed >= num_groups and left[-1] <= cap:
            return closed
        if not build and closed + len(left) // 2 < num_groups:
            return closed
        need = left.pop() / cap  # surplus 1 - y / cap the partners must bring
        group = [idx.pop()]
        slots = max(1, math.ceil(need - 1e-12))
        while (need > 1e-12 or len(group) < 2) and left:
            j = bisect.bisect_right(left, cap * (1 - need / slots)) - 1
            j = max(j, 0)
            need -= 1 - left.pop(j) / cap
            group.append(idx.pop(j))
            slots = max(slots - 1, 1)
        if need <= 1e-12 and len(group) >= 2:
            closed += 1
            groups.append(group)
        elif groups:
            groups[-1] += group
        else:
            return [] if build else 0
    return groups if build else closed


def _covering_start(y: np.ndarray, num_groups: int, hi: float) -> np.ndarray | None:
    """Start of :func:`search_groups` from bin covering: the lowest target (bisection from the
    mean, 1, to 0.1 %) at which :func:`_cover_groups` closes ``num_groups`` groups, its groups
    (surplus ones merged, lightest into the next lightest), or None. The bisection's upper end
    is ``hi`` (the paired start's ratio), raised by 10 % up to 8 times while the greedy closes
    too few groups there.

    Bin covering view of the module docstring; the rule is a best-fit variant of the
    decreasing-order covering heuristics of Assmann, Johnson, Kleitman and Leung ("On a dual
    version of the one-dimensional bin packing problem", J. Algorithms 5(4), 1984). Its groups
    differ from :func:`_paired_replicas`': heavy experts take partners of similar size, and
    nearly-balanced layers start closer to their optimum."""
    order = np.argsort(y, kind="stable")
    ys = y[order].tolist()
    lo = 1.0
    for _ in range(_COVER_WIDEN):
        if _cover_groups(ys, hi, num_groups) >= num_groups:
            break
        lo, hi = hi, hi * (1 + _COVER_WIDEN_STEP)
    else:
        return None
    while hi - lo > _COVER_TOL * lo:
        mid = (lo + hi) / 2
        if _cover_groups(ys, mid, num_groups) >= num_groups:
            hi = mid
        else:
            lo = mid
    groups = _cover_groups(ys, hi, num_groups, build=True)
    if len(groups) < num_groups:
        return None
    while len(groups) > num_groups:
        last = groups.pop()
        groups[-1] += last
    labels = np.empty(y.shape[0], dtype=np.int64)
    for g, members in enumerate(groups):
        labels[order[members]] = g
    return labels


def _neighbours(y: np.ndarray) -> tuple[list[int], list[list[int]], list[list[int]], list[float]]:
    """What :func:`_tabu` needs of the loads alone (shared by its starts): the experts by
    decreasing load, each expert's :data:`_SWAP_WINDOW` next lighter and heavier ones, and the
    negated loads ascending (to find the target's rank)."""
    order = np.argsort(-y, kind="stable").tolist()
    lighter = [[] for _ in order]
    heavier = [[] for _ in order]
    for r, e in enumerate(order):
        lighter[e] = order[r + 1:r + 1 + _SWAP_WINDOW]
        heavier[e] = order[max(0, r - _SWAP_WINDOW):r]
    return order, lighter, heavier, sorted(-v for v in y.tolist())


def _tabu(y: np.ndarray, labels: np.ndarray, num_groups: int, steps: int,
          rng: np.random.Generator, tenure: int = _TABU_TENURE,
          neighbours: tuple | None = None) -> tuple[np.ndarray, float]:
    """Lowest-ratio labels reached in ``steps`` tabu steps from ``labels`` (loads ``y``), and
    their ratio.

    The target busiest load starts :data:`_TARGET_STEP` below the start's ratio; the search
    minimises the total excess ``sum_g max(0, L_g - (n_g - 1) T)`` at the target and, each time
    it reaches zero, records the labels and lowers the target below their ratio. After
    :data:`_PATIENCE` steps without reaching it, the step is halved (the search continues from
    where it is) until it drops below :data:`_TARGET_STEP_MIN`.

    Each step picks a group ``g`` with excess at random and applies the best non-tabu move that
    involves it: swap one of its experts with one of the :data:`_SWAP_WINDOW` nearest experts by
    load on either side in another group, relocate one of its experts (when ``g`` keeps 2+) to a
    group with excess or to the group with the most room, or pull into ``g`` an expert of a group
    of 3+ whose load is within :data:`_PULL_BAND` ranks of the target. Moved experts stay put for
    ``tenure`` steps unless the move lowers the excess; ties are broken at random. Moves that
    cannot lower the excess (a swap with a heavier expert, relocating an expert lighter than the
    target, a pull below its bound) are skipped once one that does is found, which leaves the
    choice unchanged. ``neighbours``: :func:`_neighbours` of ``y``, shared by the starts.

    Pure Python on lists: a step touches a handful of experts, where numpy's per-call cost would
    dominate (about 25 us per step at EP144, against 250 us for a numpy step over all experts)."""
    E = y.shape[0]
    yl = y.tolist()
    order, lighter, heavier, neg_sorted = neighbours or _neighbours(y)
    inf, eps, neps = float("inf"), _EPS, -_EPS
    lab = [int(v) for v in labels]
    mem: list[list[int]] = [[] for _ in range(num_groups)]
    load = [0.0] * num_groups
    for e, g in enumerate(lab):
        mem[g].append(e)
        load[g] += yl[e]
    size = [len(m) for m in mem]
    until = [0] * E
    rand = rng.random

    def ratio() -> float:
        return max(load[h] / (size[h] - 1) if size[h] > 1 else inf for h in range(num_groups))

    best, best_r = list(lab), ratio()
    if not np.isfinite(best_r) or best_r <= 0.0:
        return np.array(best, dtype=np.int64), best_r
    step, last = _TARGET_STEP, 0
    cap = best_r * (1 - step)
    room = [(size[h] - 1) * cap - load[h] for h in range(num_groups)]
    bad = [h for h in range(num_groups) if room[h] < -_EPS]
    band: list[int] = []
    band_cap = None
    for it in range(steps):
        if not bad or it - last > _PATIENCE:
            if bad:  # failure window over
                step /= 2
                if step < _TARGET_STEP_MIN:
                    break
            else:
                best, best_r = list(lab), ratio()
            cap, last = best_r * (1 - step), it
            room = [(size[h] - 1) * cap - load[h] for h in range(num_groups)]
            bad = [h for h in range(num_groups) if room[h] < -_EPS]
            if not bad:
                continue
        if band_cap != cap:
            band_cap = cap
            pos = bisect.bisect_left(neg_sorted, -cap)
            band = order[max(0, pos - _PULL_BAND):pos + _PULL_BAND]
        g = bad[int(rand() * len(bad))]
        members, n_g = mem[g], size[g]
        exc_g = -room[g]
        # Best moves so far: value ``low``; ``lo``/``hi`` bound a tie.
        low = lo = hi = inf
        moves = []
        # Swaps with the nearest lighter experts by load: the only swaps that can lower the
        # excess (a heavier partner adds its difference to g and removes at most as much).
        for i in members:
            yi, locked = yl[i], until[i] > it
            for j in lighter[i]:
                h = lab[j]
                if h == g or until[j] > it:
                    continue
                dx = yi - yl[j]
                r_h = room[h]
                d = -(exc_g if exc_g < dx else dx)
                if dx > r_h:
                    d += dx - r_h
                if r_h < 0.0:
                    d += r_h
                if d < lo:
                    if locked and d >= neps:
                        continue
                    low, lo, hi, moves = d, d - eps, d + eps, [(0, i, j)]
                elif d <= hi and not (locked and d >= neps):
                    moves.append((0, i, j))
        # Pulls into g of an expert near the target from a group of 3+. Lower bound of a pull
        # from a group with room r >= 0: -min(excess of g, r); from a group with excess: 0.
        for j in band:
            h = lab[j]
            if h == g or size[h] < 3 or until[j] > it:
                continue
            r_h = room[h]
            if low < neps and (r_h < 0.0 or low < -(exc_g if exc_g < r_h else r_h) - eps):
                continue
            yj = yl[j]
            a = exc_g + yj - cap
            d = (a if a > 0.0 else 0.0) - exc_g
            b = cap - yj - r_h
            if b > 0.0:
                d += b
            if r_h < 0.0:
                d += r_h
            if d < lo:
                low, lo, hi, moves = d, d - eps, d + eps, [(2, j, g)]
            elif d <= hi:
                moves.append((2, j, g))
        # Relocations out of g to a group with excess or to the roomiest group. Moving an expert
        # lighter than the target out of g never lowers the excess.
        if n_g >= 3:
            room[g] = -inf
            targets = [h for h in bad if h != g]
            targets.append(room.index(max(room)))
            room[g] = -exc_g
            for i in members:
                yi, locked = yl[i], until[i] > it
                if yi <= cap and low < neps:
                    continue
                a = cap - yi + exc_g
                d_g = (a if a > 0.0 else 0.0) - exc_g
                for h in targets:
                    r_h = room[h]
                    b = yi - cap - r_h
                    d = d_g + (b if b > 0.0 else 0.0) + (r_h if r_h < 0.0 else 0.0)
                    if locked and d >= neps:
                        continue
                    if d < lo:
                        low, lo, hi, moves = d, d - eps, d + eps, [(1, i, h)]
                    elif d <= hi:
                        moves.append((1, i, h))
        # Swaps with heavier experts (never below zero), only while nothing lowers the excess.
        if low >= neps:
            for i in members:
                if until[i] > it:
                    continue
                yi = yl[i]
                for j in heavier[i]:
                    h = lab[j]
                    if h == g or until[j] > it:
                        continue
                    dx = yl[j] - yi
                    r_h = room[h]
                    d = dx + (r_h if r_h > -dx else -dx) if r_h < 0.0 else dx
                    if d < lo:
                        low, lo, hi, moves = d, d - eps, d + eps, [(0, i, j)]
                    elif d <= hi:
                        moves.append((0, i, j))
        if not moves:
            continue
        kind, i, t = moves[int(rand() * len(moves))]
        free_at = it + tenure + int(rand() * 3)
        if kind == 0:  # swap i (in g) with t
            h = lab[t]
            lab[i], lab[t] = h, g
            members.remove(i)
            members.append(t)
            mem[h].remove(t)
            mem[h].append(i)
            load[g] += yl[t] - yl[i]
            load[h] += yl[i] - yl[t]
            until[i] = until[t] = free_at
            touched = (g, h)
        else:  # relocate i from its group to t (kind 1), or pull i into g (kind 2)
            src, dst = lab[i], t
            lab[i] = dst
            mem[src].remove(i)
            mem[dst].append(i)
            load[src] -= yl[i]
            load[dst] += yl[i]
            size[src] -= 1
            size[dst] += 1
            until[i] = free_at
            touched = (src, dst)
        for q in touched:
            room[q] = (size[q] - 1) * cap - load[q]
            if room[q] < -_EPS:
                if q not in bad:
                    bad.append(q)
            elif q in bad:
                bad.remove(q)
    if not bad:
        final = ratio()
        if final < best_r:
            best, best_r = list(lab), final
    return np.array(best, dtype=np.int64), best_r


_SPLITS: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def _split_masks(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The splits of ``size`` experts into two parts of 2+: membership ``[size, M]`` of the
    first part (the last expert always in it, so each split appears once) and each part's size
    minus one ``[M]``."""
    if size not in _SPLITS:
        m = np.arange(2 ** (size - 1)) | (1 << (size - 1))
        bits = ((m[:, None] >> np.arange(size)) & 1).astype(np.float64)
        first = bits.sum(1)
        ok = (first >= 2) & (size - first >= 2)
        _SPLITS[size] = (np.ascontiguousarray(bits[ok].T), first[ok] - 1, size - first[ok] - 1)
    return _SPLITS[size]


def _regroup_pairs(y: np.ndarray, labels: np.ndarray, num_groups: int) -> np.ndarray:
    """Steepest descent on the busiest group ``g``: for every other group ``h`` with at most
    :data:`_REGROUP_MAX` experts in ``g`` and ``h`` together, the best split of the two into
    two groups of 2+ (every subset, batched by the size of ``h``); the best split is applied
    when both new groups end below ``g``'s ratio, until none does.

    This exhaustive two-group neighbourhood contains every swap, relocation and pull between
    ``g`` and ``h`` and the multi-expert exchanges the tabu search would need several steps
    (through a worse state) for: a very large-scale neighbourhood in the sense of Ahuja, Ergun,
    Orlin and Punnen ("A survey of very large-scale neighborhood search techniques", Discrete
    Applied Mathematics 123, 2002). Groups whose union cannot beat ``g`` even perfectly split
    (``(L_g + L_h) / (n_g + n_h - 2)``) are skipped."""
    labels = labels.copy()
    load = np.bincount(labels, weights=y, minlength=num_groups)
    size = np.bincount(labels, minlength=num_groups)
    while True:
        ratio = load / (size - 1)
        g = int(np.argmax(ratio))
        target = ratio[g] * (1 - _EPS)
        order = np.argsort(labels, kind="stable")
        first = np.cumsum(size) - size
        n_g = int(size[g])
        own = order[first[g]:first[g] + n_g]
        partners = (size + n_g <= _REGROUP_MAX) & (load[g] + load < target * (size + n_g - 2))
        partners[g] = False
        partners = np.flatnonzero(partners)
        best, move = target, None
        for n in np.unique(size[partners]).tolist():
            hs = partners[size[partners] == n]
            union = np.empty((hs.size, n_g + n), dtype=np.int64)
            union[:, :n_g] = own
            union[:, n_g:] = order[first[hs][:, None] + np.arange(n)]
            bits, k_a, k_b = _split_masks(n_g + n)
            load_a = y[union] @ bits
            worst = np.maximum(load_a / k_a, ((load[g] + load[hs])[:, None] - load_a) / k_b)
            r, c = divmod(int(np.argmin(worst)), worst.shape[1])
            if worst[r, c] < best:
                best, move = worst[r, c], (union[r], bits[:, c] > 0, int(hs[r]))
        if move is None:
            return labels
        union, in_a, h = move
        labels[union[in_a]], labels[union[~in_a]] = g, h
        load[g], load[h] = y[union[in_a]].sum(), y[union[~in_a]].sum()
        size[g], size[h] = int(in_a.sum()), int((~in_a).sum())


def search_groups(x: np.ndarray, num_groups: int, *, iters: int = _SEARCH_STEPS, seed: int = 0,
                  start: np.ndarray | None = None) -> np.ndarray:
    """Group labels ``[E]`` (``num_groups`` groups of 2+ experts) with a low :func:`group_ratio`.

    From each start, :func:`_tabu` runs ``iters`` steps and :func:`_regroup_pairs` finishes;
    the lowest ratio is kept (ties to the earlier start). The starts are ``start`` alone when
    given (the result is then never worse than it), else :func:`_paired_replicas` of the loads
    and of :data:`_START_NOISE`-perturbed copies of them (uniform relative noise, seeded by
    ``seed``: other replica counts give other group sizes, which the tabu search mostly keeps),
    and, when those end below ``1 + _COVER_BELOW`` times the mean (a nearly balanced layer),
    :func:`_covering_start`. Deterministic for a given ``seed``."""
    x = np.asarray(x, dtype=np.float64)
    if not 1 <= num_groups <= x.shape[0] // 2:
        raise ValueError(f"need 1 <= groups <= E/2, got {num_groups} groups of {x.shape[0]} experts")
    rng = np.random.default_rng(seed)
    scale = max(float(x.sum()), 1e-300) / (x.shape[0] - num_groups)
    y = x / scale
    if start is not None:
        starts = [np.asarray(start, dtype=np.int64).copy()]
    else:
        starts = [_paired_replicas(y, num_groups)]
        for noise in _START_NOISE:
            noisy = y * rng.uniform(1 - noise, 1 + noise, y.shape[0])
            starts.append(_paired_replicas(noisy, num_groups))
    neighbours = _neighbours(y)
    first_r = group_ratio(y, starts[0], num_groups)
    best, best_r = starts[0], first_r
    for k in itertools.count():
        if k == len(starts):
            # A nearly balanced layer: one more start, of another kind.
            if (start is not None or not 0 < best_r < 1 + _COVER_BELOW
                    or len(starts) > 1 + len(_START_NOISE)):
                break
            cover = _covering_start(y, num_groups, first_r)
            if cover is None:
                break
            starts.append(cover)
        found, _ = _tabu(y, starts[k], num_groups, iters, rng, neighbours=neighbours)
        if np.bincount(found, minlength=num_groups).min() >= 2:  # a given start may not be
            found = _regroup_pairs(y, found, num_groups)
        r = group_ratio(y, found, num_groups)
        if r < best_r * (1 - _EPS):
            best, best_r = found, r
    return best


def tree_gpus(x: np.ndarray, items, cap: float) -> list[list[int]]:
    """The GPUs (1 or 2 experts each) of a group laid out as a tree that carries it at ``cap``.

    Needs ``sum(x[items]) <= (len(items) - 1) * cap``; returns ``len(items) - 1`` GPUs (one
    GPU for a single expert). Each step puts the smallest remaining expert whole onto a new
    GPU, topped up by the largest remaining one."""
    rem = {int(i): float(x[i]) for i in items}
    budget = max(len(rem) - 1, 1)
    gpus: list[list[int]] = []
    while len(rem) > 2:
        small = min(rem, key=lambda e: (rem[e], e))
        large = max(rem, key=lambda e: (rem[e], -e))
        gpus.append(sorted((small, large)))
        left = rem[large] - (cap - rem.pop(small))
        if left <= _EPS * max(cap, 1e-300):  # spent, up to rounding
            del rem[large]
        else:
            rem[large] = left
    if rem:
        gpus.append(sorted(rem))
    largest = max((int(i) for i in items), key=lambda e: (x[e], -e))
    while len(gpus) < budget:  # a fully spent expert left a GPU over: a loop of the largest
        gpus.append([largest])
    return gpus


def groups_of_placement(x: np.ndarray, phy2log: np.ndarray, num_groups: int) -> np.ndarray:
    """Group labels from a two-slot placement: its connected components (GPUs as edges),
    merged down to ``num_groups`` groups of 2+ experts.

    A component of ``n`` experts on ``k`` GPUs has ``e = k - (n - 1) >= 0`` GPUs beyond a tree,
    and the excesses sum to the number of components minus ``num_groups``. Each merge joins a
    component with ``e >= 1`` to the partner that gives the lowest ``L / k`` and spends one
    unit of excess, so a merged group keeps exactly its components' GPUs and its ``L / k``
    never exceeds theirs. The result's :func:`group_ratio` is therefore at most the
    placement's flow optimum, and :func:`search_groups` started here ends at or below it."""
    pairs = np.asarray(phy2log, dtype=np.int64).reshape(-1, 2)
    return _merge_components(np.asarray(x, dtype=np.float64), pairs, num_groups)
