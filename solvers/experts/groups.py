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

:func:`search_groups` is a tabu search over the partition (relocate, pull and swap moves on
the total excess ``sum_g max(0, L_g - (n_g - 1) T)``), driven down in ``T`` while it reaches
zero excess. :func:`covering_lp_bound` is the configuration LP of the bin covering (the LP
behind Csirik, Johnson and Kenyon, "Better approximation algorithms for bin covering", SODA
2001; column generation, pricing by a knapsack DP, and Farley's bound, "A note on bounding a
class of linear programming problems, including cutting stock problems", Oper. Res. 1990,
to stop early), a lower
bound on ``T*`` far tighter than the replica-count bound when most experts are medium-sized.
Arrays in, arrays out.
"""

from __future__ import annotations

import numpy as np

__all__ = ["covering_lp_bound", "group_ratio", "groups_of_placement", "search_groups", "tree_gpus"]

# Tabu tenure: not tuned on our traces; 7 is the classic short-term list size (Glover,
# "Tabu Search - Part I", ORSA J. Computing 1(3), 1989). _tabu adds 0-2 random steps to break
# cycles.
_TABU_TENURE = 7
# search_groups lowers its target by this fraction of the best ratio while the tabu search
# reaches it, halving the step on each failure until it is below _TARGET_STEP_MIN. Reason: a
# failed target costs a full ``iters``-step tabu run, so the first steps are coarse; 0.05 % is
# below the gaps to the covering-LP bound that benchmarks/expert_placement_bound.py reports.
_TARGET_STEP = 0.02
_TARGET_STEP_MIN = 5e-4
# Float tolerance on excesses and ratios (loads are scaled to a mean group capacity of 1).
_EPS = 1e-12


def group_ratio(x: np.ndarray, labels: np.ndarray, num_groups: int) -> float:
    """``max_g L_g / (n_g - 1)``: the busiest load the grouping allows (inf if a group has one expert)."""
    load = np.bincount(labels, weights=x, minlength=num_groups)
    size = np.bincount(labels, minlength=num_groups)
    return float(np.max(np.where(size > 1, load / np.maximum(size - 1, 1), np.inf)))


def _initial(x: np.ndarray, num_groups: int, cap: float) -> np.ndarray:
    """The ``num_groups`` heaviest experts found the groups; the rest, heaviest first, join the
    group left with the least excess (a group with one expert first)."""
    order = np.argsort(-x, kind="stable")
    labels = np.empty(x.shape[0], dtype=np.int64)
    load = np.zeros(num_groups)
    size = np.zeros(num_groups, dtype=np.int64)
    labels[order[:num_groups]] = np.arange(num_groups)
    load[:] = x[order[:num_groups]]
    size[:] = 1
    for e in order[num_groups:]:
        # Big-M bonus: a group of one expert (not yet a tree) is always filled first.
        excess = load + x[e] - size * cap - np.where(size == 1, 1e18, 0.0)
        g = int(np.argmin(excess))
        labels[e], load[g], size[g] = g, load[g] + x[e], size[g] + 1
    return labels


def _excess(load, size, cap):
    return np.maximum(0.0, load - (size - 1) * cap)


def _tabu(x: np.ndarray, labels: np.ndarray, num_groups: int, cap: float, iters: int,
          rng: np.random.Generator, tenure: int = _TABU_TENURE) -> tuple[np.ndarray, float]:
    """Lowest total excess at ``cap`` reached in ``iters`` tabu steps from ``labels``.

    Each step picks a group with excess at random and applies the best non-tabu move that
    involves one of its experts: relocate it to another group, swap it with an expert of
    another group, or pull an expert of another group (of 3+ experts) into it. Moved experts
    stay put for ``tenure`` steps unless the move lowers the excess."""
    labels = labels.copy()
    E = x.shape[0]
    load = np.bincount(labels, weights=x, minlength=num_groups)
    size = np.bincount(labels, minlength=num_groups)
    until = np.zeros(E, dtype=np.int64)
    best, best_d = labels.copy(), np.inf
    for it in range(iters):
        exc = _excess(load, size, cap)
        total = float(exc.sum())
        if total < best_d - _EPS:
            best, best_d = labels.copy(), total
            if total <= _EPS:
                return best, 0.0
        bad = np.flatnonzero(exc > _EPS)
        g = int(bad[rng.integers(bad.size)])
        free = until <= it
        moves = []
        for i in np.flatnonzero(labels == g):
            if size[g] >= 3:
                d = _excess(load + x[i], size + 1, cap) - exc + (_excess(load[g] - x[i], size[g] - 1, cap) - exc[g])
                d[g] = np.inf
                h = int(np.argmin(d))
                moves.append((float(d[h]), 0, int(i), h))
            dx = x - x[i]
            d = (_excess(load[g] + dx, size[g], cap) - exc[g]
                 + _excess(load[labels] - dx, size[labels], cap) - exc[labels])
            d[(labels == g) | ~free] = np.inf
            j = int(np.argmin(d))
            moves.append((float(d[j]), 1, int(i), j))
        d = (_excess(load[g] + x, size[g] + 1, cap) - exc[g]
             + _excess(load[labels] - x, size[labels] - 1, cap) - exc[labels])
        d[(labels == g) | (size[labels] < 3) | ~free] = np.inf
        j = int(np.argmin(d))
        moves.append((float(d[j]), 2, j, g))
        moves = [m for m in moves if np.isfinite(m[0]) and (m[0] < -_EPS or free[m[2]])]
        if not moves:
            continue
        low = min(m[0] for m in moves)
        ties = [m for m in moves if m[0] <= low + _EPS]
        _, kind, i, t = ties[int(rng.integers(len(ties)))]
        if kind == 1:
            j, a, h = t, labels[i], labels[t]
            labels[i], labels[j] = h, a
            load[a] += x[j] - x[i]
            load[h] += x[i] - x[j]
            until[i] = until[j] = it + tenure + int(rng.integers(3))
        else:
            a, h = labels[i], t
            labels[i] = h
            load[a] -= x[i]
            size[a] -= 1
            load[h] += x[i]
            size[h] += 1
            until[i] = it + tenure + int(rng.integers(3))
    return best, best_d


def search_groups(x: np.ndarray, num_groups: int, *, iters: int = 300, seed: int = 0,
                  start: np.ndarray | None = None) -> np.ndarray:
    """Group labels ``[E]`` (``num_groups`` groups of 2+ experts) with a low :func:`group_ratio`.

    From ``start`` (default :func:`_initial`), the target busiest load is lowered by 2 % of the
    best ratio found while :func:`_tabu` reaches zero excess within ``iters`` steps; on a
    failure the step halves, down to 0.05 %. ``iters``: tabu steps per target (300 by default,
    as in :mod:`solvers.experts.placement`; not measured)."""
    x = np.asarray(x, dtype=np.float64)
    if not 1 <= num_groups <= x.shape[0] // 2:
        raise ValueError(f"need 1 <= groups <= E/2, got {num_groups} groups of {x.shape[0]} experts")
    rng = np.random.default_rng(seed)
    scale = max(float(x.sum()), 1e-300) / (x.shape[0] - num_groups)
    y = x / scale
    best = _initial(y, num_groups, 1.0) if start is None else np.asarray(start, dtype=np.int64).copy()
    best_r = group_ratio(y, best, num_groups)
    step = _TARGET_STEP
    while step > _TARGET_STEP_MIN and best_r > 1.0 + 1e-9:  # 1.0: every group at its mean, optimal
        trial, excess = _tabu(y, best, num_groups, best_r * (1 - step), iters, rng)
        if excess == 0.0:
            best, best_r = trial, group_ratio(y, trial, num_groups)
        else:
            step /= 2
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


# ----------------------------------------------------------------------------------------
# Lower bound: the configuration LP of the bin covering
# ----------------------------------------------------------------------------------------

# Surplus grid of the pricing knapsack: 0.1 % of a bin. Rounded up, so the bound stays valid at
# any grid; a finer one is tighter but the DP is O(E * scale).
_PRICE_SCALE = 1000
# Seed columns of the covering LP: each expert with its 4 tightest partners. Speed only: the
# LP's value does not depend on the seed columns.
_SEED_PAIRS = 4


def _cheapest_cover(units: np.ndarray, price: np.ndarray) -> tuple[float, list[int]]:
    """``min sum(price[S])`` over sets ``S`` with ``sum(units[S]) >= _PRICE_SCALE`` (0/1 knapsack
    DP over the surplus, negative-unit experts first, sums above the target clipped to it)."""
    top = _PRICE_SCALE
    order = np.argsort(units, kind="stable")
    neg = int(-units[units < 0].sum())
    size = neg + top + 1
    best = np.full(size, np.inf)
    best[neg] = 0.0
    took = np.zeros((order.size, size), dtype=bool)
    clip_from: dict[int, int] = {}
    for k, e in enumerate(order):
        u, c = int(units[e]), float(price[e])
        new = best.copy()
        if u < 0:
            cand, tgt, sl = best[-u:] + c, new[:size + u], slice(0, size + u)
        else:
            cand, tgt, sl = best[:size - u] + c, new[u:], slice(u, size)
        better = cand < tgt
        tgt[better] = cand[better]
        took[k, sl] = better
        if u > 0:  # every state within u of the top reaches the (clipped) top
            tail = best[size - 1 - u:] + c
            j = int(np.argmin(tail))
            if tail[j] < new[-1]:
                new[-1] = tail[j]
                took[k, -1] = True
                clip_from[k] = size - 1 - u + j
            elif better[-1]:
                clip_from[k] = size - 1 - u
        best = new
    state, chosen = size - 1, []
    if not np.isfinite(best[-1]):
        return np.inf, chosen
    for k in range(order.size - 1, -1, -1):
        if took[k, state]:
            chosen.append(int(order[k]))
            state = clip_from[k] if state == size - 1 and k in clip_from else state - int(units[order[k]])
    return float(best[-1]), sorted(chosen)


def _lp_rules_out(y: np.ndarray, num_groups: int, cap: float, max_iter: int) -> bool:
    """True when the covering LP at ``cap`` is proven below ``num_groups`` bins, i.e. no
    partition reaches ``cap``. Column generation on GLOP; stops as soon as the restricted LP
    reaches ``num_groups`` (not ruled out) or Farley's bound ``sum(duals) / min reduced price``
    drops below it (ruled out). Undecided after ``max_iter`` columns counts as not ruled out."""
    from ortools.linear_solver import pywraplp

    E = y.shape[0]
    u = 1.0 - y / cap
    units = np.ceil(u * _PRICE_SCALE - 1e-9).astype(np.int64)
    hot = u < 0
    solver = pywraplp.Solver.CreateSolver("GLOP")
    rows = [solver.Constraint(1.0 if hot[e] else -solver.infinity(), 1.0) for e in range(E)]
    objective = solver.Objective()
    objective.SetMaximization()
    for e in np.flatnonzero(hot):  # artificial columns keep the master feasible
        v = solver.NumVar(0.0, solver.infinity(), "")
        rows[e].SetCoefficient(v, 1.0)
        objective.SetCoefficient(v, -float(E))  # costlier than any cover count: used only when needed

    def add(cover) -> None:
        v = solver.NumVar(0.0, solver.infinity(), "")
        for e in cover:
            rows[e].SetCoefficient(v, 1.0)
        objective.SetCoefficient(v, 1.0)

    order = np.argsort(-u, kind="stable")
    for e in range(E):  # each expert completed by the lightest others
        cover, total = [e], units[e]
        for f in order:
            if total >= _PRICE_SCALE:
                break
            if f != e:
                cover.append(int(f))
                total += units[f]
        if total >= _PRICE_SCALE:
            add(cover)
    pair = units[:, None] + units[None, :]
    pair = np.where(pair >= _PRICE_SCALE, pair, np.iinfo(np.int64).max)
    np.fill_diagonal(pair, np.iinfo(np.int64).max)
    for e in range(E):  # tightest pairs
        for f in np.argsort(pair[e], kind="stable")[:_SEED_PAIRS]:
            if pair[e, f] < np.iinfo(np.int64).max and e < f:
                add((e, int(f)))
    for _ in range(max_iter):
        if solver.Solve() != pywraplp.Solver.OPTIMAL:
            return False
        value = objective.Value()
        if value >= num_groups - 1e-6:
            return False
        duals = np.array([r.dual_value() for r in rows])
        price, cover = _cheapest_cover(units, duals)
        if not np.isfinite(price):
            return True  # no set covers a bin at all
        if price > 1e-9 and duals.sum() / price < num_groups - 1e-6:
            return True
        if price >= 1.0 - 1e-9:  # LP optimal below num_groups
            return True
        add(cover)
    return False


def covering_lp_bound(x: np.ndarray, num_groups: int, lo: float, hi: float, *,
                      tol: float = 0.002, max_iter: int = 400) -> float:
    """Lower bound on ``T*`` (in units of ``x``): bisection between a known lower bound ``lo``
    and a known achievable ``hi`` on whether the configuration LP rules ``T`` out
    (:func:`_lp_rules_out`). Returns the largest ``T`` ruled out, or ``lo``.

    ``tol``: the bisection stops when the bracket is within this fraction of ``lo``, so the
    bound is at most 0.2 % below the LP's own threshold (each step is a column generation).
    ``max_iter``: columns per step; an undecided step counts as not ruled out, which keeps
    the bound valid and only loosens it."""
    x = np.asarray(x, dtype=np.float64)
    scale = max(float(x.sum()), 1e-300) / (x.shape[0] - num_groups)
    y, a, b = x / scale, lo / scale, hi / scale
    while b - a > tol * a:
        mid = (a + b) / 2
        if _lp_rules_out(y, num_groups, mid, max_iter):
            a = mid
        else:
            b = mid
    return a * scale


def groups_of_placement(x: np.ndarray, phy2log: np.ndarray, num_groups: int) -> np.ndarray:
    """Group labels from a two-slot placement: its connected components (GPUs as edges),
    merged down to ``num_groups`` groups of 2+ experts.

    A component of ``n`` experts on ``k`` GPUs has ``e = k - (n - 1) >= 0`` GPUs beyond a tree,
    and the excesses sum to the number of components minus ``num_groups``. Each merge joins a
    component with ``e >= 1`` to the partner that gives the lowest ``L / k`` and spends one
    unit of excess, so a merged group keeps exactly its components' GPUs and its ``L / k``
    never exceeds theirs. The result's :func:`group_ratio` is therefore at most the
    placement's flow optimum, and :func:`search_groups` started here ends at or below it."""
    E = x.shape[0]
    parent = np.arange(E)

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    pairs = np.asarray(phy2log, dtype=np.int64).reshape(-1, 2)
    for a, b in pairs:
        ra, rb = find(int(a)), find(int(b))
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    roots = np.array([find(e) for e in range(E)])
    gpus = np.bincount(roots[pairs[:, 0]], minlength=E)
    blocks = [[float(x[roots == r].sum()), int(gpus[r]), list(np.flatnonzero(roots == r))]
              for r in np.unique(roots)]
    while len(blocks) > num_groups:
        spare = [i for i, (_, k, m) in enumerate(blocks) if k > len(m) - 1]
        if not spare:
            break
        i, j = min(((i, j) for i in spare for j in range(len(blocks)) if j != i),
                   key=lambda p: ((blocks[p[0]][0] + blocks[p[1]][0]) / (blocks[p[0]][1] + blocks[p[1]][1]), p))
        merged = [blocks[i][0] + blocks[j][0], blocks[i][1] + blocks[j][1], blocks[i][2] + blocks[j][2]]
        blocks = [b for k, b in enumerate(blocks) if k not in (i, j)] + [merged]
    labels = np.empty(E, dtype=np.int64)
    for g, (_, _, m) in enumerate(sorted(blocks, key=lambda b: min(b[2]))):
        labels[m] = g
    return labels
