"""A lower bound for two slots per GPU: the configuration LP of the bin covering of
:mod:`solvers.experts.groups` (its module docstring has the model).

:func:`covering_lp_bound` bisects on the busiest load ``T``; at each ``T`` the LP (the one
behind Csirik, Johnson and Kenyon, "Better approximation algorithms for bin covering", SODA
2001) is solved by column generation on GLOP with pricing by a knapsack DP, stopped early by
Farley's bound ("A note on bounding a class of linear programming problems, including cutting
stock problems", Oper. Res. 1990). Far tighter than the replica-count bound when most experts
are medium-sized; about a minute per layer at EP144, so only benchmarks use it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["covering_lp_bound"]


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
