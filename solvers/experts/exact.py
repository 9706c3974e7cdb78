"""Exact references for small expert-placement instances: the CP-SAT model of one layer
(:func:`solve_layer_milp`, with its bound and gap when time-limited) and exhaustive
enumeration (:func:`brute_force_layer`, for tests). Both score a placement by its exact flow
quotas, like the heuristic of :mod:`solvers.experts.placement`, so their optima compare
directly with it.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from solvers.experts.layout import ExpertLayout, layout_quotas

__all__ = ["MilpResult", "WALL_CLOCK_FACTOR", "brute_force_layer", "solve_layer_milp"]

# Wall seconds allowed per deterministic second of the budget (at least 1 s) before the solve is
# stopped anyway, as for the mapping solver (``solvers.mapping.cpsat.WALL_CLOCK_FACTOR``).
WALL_CLOCK_FACTOR = 2.0


@dataclass(frozen=True)
class MilpResult:
    """Exact model result: ``max_load`` of the best placement found and the solver ``bound``."""

    phy2log: np.ndarray
    max_load: float
    bound: float
    optimal: bool
    # the wall-clock backstop, not the deterministic budget, stopped the solve: only then may
    # two runs of the same instance differ
    wall_clock_stopped: bool = False

    @property
    def gap(self) -> float:
        return 0.0 if self.max_load <= 0 else max(0.0, (self.max_load - self.bound) / self.max_load)


def solve_layer_milp(w: np.ndarray, layout: ExpertLayout, time_limit_s: float = 30.0,
                     hint: np.ndarray | None = None) -> MilpResult:
    """CP-SAT: integer replica counts ``n[e,g]``, integer tokens ``x[e,g]``, min max GPU load.

    Loads must be integers (token counts); the optimum is then the integer min-max, equal to
    the flow optimum of the best placement. ``hint`` (a ``phy2log``, e.g. the heuristic's)
    seeds the search, so a time-limited solve returns at least that placement, with the
    solver's bound and gap (medium sizes). ``time_limit_s`` is a budget of CP-SAT's
    deterministic time (its unit meant to be close to a second), so equal inputs give equal
    results whatever the machine's load; it defaults to 30: the tiny test
    instances (E <= 5, G <= 3) prove optimality far inside it (the whole test file runs in
    about a minute); larger ones return the hint or better.
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
    # one worker, a fixed seed and a budget of deterministic time (CP-SAT's count of work,
    # independent of the machine's load): the same result every run, even when cut short;
    # the wall-clock backstop fires only on a machine far slower than CP-SAT's unit
    backstop_s = max(1.0, WALL_CLOCK_FACTOR * time_limit_s)
    solver.parameters.max_deterministic_time = time_limit_s
    solver.parameters.max_time_in_seconds = backstop_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    started = time.monotonic()
    status = solver.solve(model)
    wall_s = time.monotonic() - started
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"CP-SAT found no placement within its budget of {time_limit_s} "
                           f"deterministic s (status {solver.status_name(status)})")
    phy2log = np.concatenate([np.repeat(np.arange(E), [solver.value(n[e, g]) for e in range(E)]) for g in range(G)])
    optimal = status == cp_model.OPTIMAL
    return MilpResult(phy2log.astype(np.int64), float(solver.objective_value),
                      float(solver.best_objective_bound), optimal,
                      wall_clock_stopped=not optimal and wall_s >= 0.99 * backstop_s)


def _add_hint(model, n, x, w_int, hint: np.ndarray, layout: ExpertLayout) -> None:
    """Hint replica counts and flow quotas of ``hint``, GPUs sorted by load (the symmetry).
    Adds hints to ``model`` (the CP-SAT builder API works by mutation)."""
    S = layout.slots_per_gpu
    sol = layout_quotas(w_int.astype(np.float64), hint, layout)
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
        value = layout_quotas(np.asarray(w, dtype=np.float64), phy2log, layout).max_load
        if best is None or value < best[0]:
            best = (value, phy2log)
    assert best is not None
    return best
