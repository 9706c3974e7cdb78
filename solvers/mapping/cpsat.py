"""The CP-SAT stage-mapping model and :func:`solve_mapping`, the entry point.

The model
---------
Units are aggregated into classes of identical ``(gpus, speed, domain)`` (classes ordered by
their lowest unit index); the model decides *how many* units of each class a stage takes,
so its size depends on the number of classes, not of nodes (2048 nodes of 4 kinds are 4
classes):

* ``n[s,c]`` integer in ``[0, min(count_c, gpus_per_stage // gpus_c)]``, ``sum_s n[s,c] <= count_c``
  and ``sum_c gpus_c * n[s,c] == gpus_per_stage``;
* ``use[s,c]`` boolean, ``use[s,c] <=> n[s,c] >= 1``;
* stage speed in unary "threshold" form over the distinct speeds ``v_0 < ... < v_{m-1}``:
  ``ge[s,j]`` means "stage s runs at speed >= v_j", ``ge[s,j] => ge[s,j-1]``, and using a
  class of speed ``v_i`` forbids ``ge[s,i+1]`` (this is the big-M constraint
  ``speed_s <= speed_u + BIG*(1 - x[u,s])`` written without a big M, and its LP relaxation is
  tighter); ``speed_s = q_0 + sum_j (q_j - q_{j-1}) ge[s,j]``;
* ``dom[s,k] >= use[s,c]`` for every class c in domain k (only when the penalty is > 0);
* with several networks: ``net[s,k] >= use[s,c]`` for classes of network k,
  ``sum_k net[s,k] <= 1 + (K - 1) * mixed[s]``, and ``use[s,c] and mixed[s]`` forbids the
  levels above class c's socket speed (the levels include the socket speeds); with
  ``contain_networks`` instead ``sum_k net[s,k] <= 1`` (a stage never spans networks) and
  ``sum_s net[s,k] <= gpus_k // gpus_per_stage`` (redundant; it speeds up proofs);
* symmetry breaking: stages are ordered by non-increasing speed (``ge[s+1,j] => ge[s,j]``).

Speeds and the penalty enter as the scaled integers of :mod:`solvers.mapping.problem`;
``bound`` is the solver's bound divided by the scale. The tie-break of that module is applied
after the solve: Megatron's mapping when it attains the optimum, else a second CP-SAT phase
with the objective fixed finds the lexicographically greatest count matrix (solved in segments
with lexicographic weights below 2**52).

Determinism: one worker, a fixed seed and a limit on CP-SAT's *deterministic* time
(``max_deterministic_time``, a count of work whose unit CP-SAT means to be close to a second;
it does not depend on the machine's speed or load), so equal inputs give equal outputs even when
a solve is cut short: ``time_limit_s`` is that budget, shared by all the solves of one call.
A wall-clock backstop of :data:`WALL_CLOCK_FACTOR` times the budget (at least 1 s) stops a
solve on a machine far slower than that calibration; only then may two runs differ, and the
answer says so (``Mapping.wall_clock_stopped``). A time-limited solve is hinted with
Megatron's mapping (or a grouped first-fit start) and never returns anything worse than it;
its ``bound`` is CP-SAT's bound, or the trivial one (every stage at the fastest speed) when
CP-SAT found no solution.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Sequence

from ortools.sat.python import cp_model

from solvers.mapping.baselines import grouped_candidates, megatron_or_none
from solvers.mapping.problem import (Mapping, MappingProblem, MappingTimeout, StageUnits,
                                     UnitClass, check_gpu_supply, class_of_unit, expand_rows,
                                     make_mapping, network_gpus, no_disjoint_stages, scaled,
                                     scaled_objective,
                                     speed_scale, stage_speed, unit_classes)

__all__ = ["LEX_WEIGHT_LIMIT", "LEX_MAX_SOLVES", "RANDOM_SEED", "WALL_CLOCK_FACTOR",
           "solve_mapping"]

LEX_WEIGHT_LIMIT = 2 ** 52  # largest lexicographic weight product in one tie-break solve
LEX_MAX_SOLVES = 16  # larger models skip the lexicographic tie-break phase
RANDOM_SEED = 20240711
# The wall-clock backstop, in wall seconds per deterministic second of the budget (at least one
# such second, for presolve). Measured on a loaded 2-core machine: 4 to 10 wall seconds per
# deterministic second on a 512-node instance of four speeds, so there it can fire; it bounds
# one placement at 2x its budget in wall time (20 s for the default 10 s).
WALL_CLOCK_FACTOR = 2.0


@dataclass(frozen=True)
class _Model:
    model: cp_model.CpModel
    counts: tuple[tuple[cp_model.IntVar, ...], ...]  # [stage][class]
    caps: tuple[int, ...]  # upper bound of counts[s][c], per class
    uses: tuple[tuple[cp_model.IntVar, ...], ...]  # [stage][class]
    at_least: tuple[tuple[cp_model.IntVar, ...], ...]  # [stage][level]; level 0 omitted
    domains: tuple[tuple[cp_model.IntVar, ...], ...]  # [stage][domain]; empty if no penalty
    domain_ids: tuple[int, ...]
    objective: cp_model.LinearExpr
    nets: tuple[tuple[cp_model.IntVar, ...], ...] = ()  # [stage][network]; empty if one
    network_ids: tuple[int, ...] = ()
    mixed: tuple[cp_model.IntVar, ...] = ()  # [stage]: the stage spans networks


def _network_ids(classes: Sequence[UnitClass]) -> tuple[int, ...]:
    """The networks of the classes, or () when they share one (no network variables)."""
    ids = sorted({c.network for c in classes})
    return tuple(ids) if len(ids) > 1 else ()


def _levels(classes: Sequence[UnitClass], scale: float) -> list[int]:
    """Distinct scaled stage speeds q_0 < ... < q_{m-1}: the classes' speeds, and their
    socket speeds when the classes span networks."""
    speeds = {scaled(c.speed, scale) for c in classes}
    if _network_ids(classes):
        speeds |= {scaled(c.socket_speed, scale) for c in classes}
    return sorted(speeds)


def _build_model(problem: MappingProblem, classes: Sequence[UnitClass]) -> _Model:
    """The model of the module docstring: data, variables, constraints, objective."""
    # Step 1: data -- distinct scaled speed levels q_0 < ... < q_{m-1}, penalty, caps
    scale = speed_scale(problem)
    network_ids = _network_ids(classes)
    q = _levels(classes, scale)
    level_of = {v: j for j, v in enumerate(q)}
    penalty = scaled(problem.domain_span_penalty, scale)
    domain_ids = tuple(sorted({c.domain for c in classes})) if penalty > 0 else ()
    caps = tuple(min(len(cls.units), problem.gpus_per_stage // cls.gpus) for cls in classes)
    gpus = problem.gpus_per_stage
    m = cp_model.CpModel()

    # Step 2: variables, stage by stage: n[s,c], use[s,c], then ge[s,j] (j >= 1), dom[s,k]
    counts, uses, at_least, domains, nets, mixed = [], [], [], [], [], []
    for s in range(problem.num_stages):
        pairs = [(m.new_int_var(0, cap, f"n_{s}_{c}"), m.new_bool_var(f"use_{s}_{c}"))
                 for c, cap in enumerate(caps)]
        counts.append(tuple(n for n, _ in pairs))
        uses.append(tuple(use for _, use in pairs))
        at_least.append(tuple(m.new_bool_var(f"ge_{s}_{j}") for j in range(1, len(q))))
        domains.append(tuple(m.new_bool_var(f"dom_{s}_{k}") for k in domain_ids))
        nets.append(tuple(m.new_bool_var(f"net_{s}_{k}") for k in network_ids))
        mixed.append(m.new_bool_var(f"mixed_{s}"))

    # Step 3: constraints
    for n_s, use_s, ge, dom, net_s, mix in zip(counts, uses, at_least, domains, nets, mixed):
        # use[s,c] <=> n[s,c] >= 1
        for n, use, cap in zip(n_s, use_s, caps):
            m.add(n <= cap * use)
            m.add(n >= use)
        # every stage holds exactly gpus_per_stage GPUs
        m.add(sum(cls.gpus * n for cls, n in zip(classes, n_s)) == gpus)
        # the speed levels are a threshold code: ge[s,j] => ge[s,j-1]
        for lo, hi in zip(ge, ge[1:]):
            m.add_implication(hi, lo)
        # using a class of speed v_i forbids ge[s,i+1] (the stage runs at its slowest unit)
        for cls, use in zip(classes, use_s):
            above = level_of[scaled(cls.speed, scale)] + 1  # first level faster than the class
            if above < len(q):
                m.add_bool_or([use.Not(), ge[above - 1].Not()])
        # the same, aggregated (a tighter LP relaxation): ge[s,j] leaves no GPU slower than v_j
        for j, g in enumerate(ge, start=1):
            slow = [cls.gpus * n for cls, n in zip(classes, n_s) if scaled(cls.speed, scale) < q[j]]
            m.add(sum(slow) <= gpus * (1 - g))
        # a stage using classes of two networks runs on sockets: its speed is at most each
        # class's socket speed (use[s,c] => net[s,k_c]; two nets => mixed[s])
        if network_ids:
            for k, net in zip(network_ids, net_s):
                for cls, use in zip(classes, use_s):
                    if cls.network == k:
                        m.add_implication(use, net)
            m.add(sum(net_s) <= 1 + (len(network_ids) - 1) * mix)
            # containment as a hard rule: no stage spans networks
            if problem.contain_networks:
                m.add(mix == 0)
            for cls, use in zip(classes, use_s):
                above = level_of[scaled(cls.socket_speed, scale)] + 1
                if above < len(q):
                    m.add_bool_or([use.Not(), mix.Not(), ge[above - 1].Not()])
        # a stage using a class of domain k touches k: dom[s,k] >= use[s,c]
        for k, d in zip(domain_ids, dom):
            members = [(cls, n, use) for cls, n, use in zip(classes, n_s, use_s) if cls.domain == k]
            for _, _, use in members:
                m.add_implication(use, d)
            m.add(sum(cls.gpus * n for cls, n, _ in members) <= gpus * d)
    # with containment a stage lies on one network, so network k holds at most
    # (its GPUs // gpus_per_stage) stages (redundant, but it lets CP-SAT prove infeasibility)
    if network_ids and problem.contain_networks:
        held = network_gpus(problem)
        for j, k in enumerate(network_ids):
            m.add(sum(net_s[j] for net_s in nets) <= held[k] // gpus)
    # a class hands out at most its units: sum_s n[s,c] <= count_c
    for c, cls in enumerate(classes):
        m.add(sum(counts[s][c] for s in range(problem.num_stages)) <= len(cls.units))
    # symmetry breaking: stage speeds non-increasing, ge[s+1,j] => ge[s,j]
    for s in range(problem.num_stages - 1):
        for hi, lo in zip(at_least[s], at_least[s + 1]):
            m.add_implication(lo, hi)

    # Step 4: objective -- sum_s speed_s minus the penalty per extra domain
    steps = [b - a for a, b in zip(q, q[1:])]
    objective = (problem.num_stages * (q[0] + penalty)
                 + sum(w * g for ge in at_least for w, g in zip(steps, ge))
                 - penalty * sum(d for dom in domains for d in dom))
    return _Model(m, tuple(counts), caps, tuple(uses), tuple(at_least), tuple(domains), domain_ids,
                  objective, tuple(nets), network_ids, tuple(mixed))


def _hint(problem: MappingProblem, classes: Sequence[UnitClass], built: _Model,
          stage_units: StageUnits) -> None:
    """A complete hint for a known mapping, stages in the model's (speed-sorted) order."""
    scale = speed_scale(problem)
    levels = _levels(classes, scale)
    of = class_of_unit(classes)
    ordered = sorted(stage_units, key=lambda us: -scaled(stage_speed(problem, us), scale))
    built.model.clear_hints()
    for s, units in enumerate(ordered):
        per_class = Counter(of[u] for u in units)
        speed = scaled(stage_speed(problem, units), scale)
        for c in range(len(classes)):
            built.model.add_hint(built.counts[s][c], per_class[c])
            built.model.add_hint(built.uses[s][c], per_class[c] > 0)
        for j, ge in enumerate(built.at_least[s], start=1):
            built.model.add_hint(ge, speed >= levels[j])
        used = {problem.unit_domain[u] for u in units}
        for k, d in zip(built.domain_ids, built.domains[s]):
            built.model.add_hint(d, k in used)
        on = {classes[of[u]].network for u in units}
        for k, net in zip(built.network_ids, built.nets[s] if built.nets else ()):
            built.model.add_hint(net, k in on)
        if built.network_ids:
            built.model.add_hint(built.mixed[s], len(on) > 1)


class _Budget:
    """The deterministic seconds left to one ``solve_mapping`` call, and its wall backstop."""

    def __init__(self, deterministic_s: float) -> None:
        self.left_s = deterministic_s
        self.deadline = time.monotonic() + WALL_CLOCK_FACTOR * max(deterministic_s, 1.0)
        self.wall_clock_stopped = False

    def solver(self) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = RANDOM_SEED
        solver.parameters.max_deterministic_time = max(self.left_s, 1e-3)
        solver.parameters.max_time_in_seconds = max(self.deadline - time.monotonic(), 1e-3)
        return solver

    def spend(self, solver: cp_model.CpSolver, status: int) -> None:
        """Charge a finished solve; note when the backstop, not the budget, stopped it."""
        self.left_s -= solver.deterministic_time
        limit = solver.parameters.max_time_in_seconds
        unfinished = status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
        if unfinished and solver.wall_time >= 0.99 * limit:
            self.wall_clock_stopped = True

    @property
    def spent(self) -> bool:
        return self.left_s <= 0 or time.monotonic() >= self.deadline


def _solution_rows(solver: cp_model.CpSolver, built: _Model) -> list[list[int]]:
    return [[solver.value(n) for n in row] for row in built.counts]


def _lex_segments(built: _Model) -> list[list[tuple[cp_model.IntVar, int]]]:
    """Flattened count variables (stage-major) cut into runs whose weight product fits."""
    segments: list[list[tuple[cp_model.IntVar, int]]] = [[]]
    product = 1
    for row in built.counts:
        for n, cap in zip(row, built.caps):
            size = cap + 1
            if segments[-1] and product * size > LEX_WEIGHT_LIMIT:
                segments.append([])
                product = 1
            segments[-1].append((n, size))
            product *= size
    return segments


def _lex_max(built: _Model, rows: list[list[int]], optimum: int,
             budget: _Budget) -> tuple[list[list[int]], bool]:
    """Among mappings of integer objective ``optimum``, the lexicographically greatest rows,
    and whether every segment was settled (False: the budget ran out first; the rows are
    still optimal, and the same on every run)."""
    m = built.model
    m.add(built.objective == optimum)
    flat = [n for row in built.counts for n in row]
    values = {n.index: v for n, v in zip(flat, (v for row in rows for v in row))}
    complete = True
    for segment in _lex_segments(built):
        if all(size == 1 for _, size in segment):
            continue
        if budget.spent:
            complete = False
            break
        weights, w = [], 1
        for _, size in reversed(segment):
            weights.append(w)
            w *= size
        weights.reverse()
        m.clear_objective()
        m.maximize(sum(wt * n for wt, (n, _) in zip(weights, segment)))
        m.clear_hints()
        for n in flat:
            m.add_hint(n, values[n.index])
        solver = budget.solver()
        status = solver.solve(m)
        budget.spend(solver, status)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            complete = False
            break
        complete = complete and status == cp_model.OPTIMAL  # else this segment's is unproven
        values = {n.index: solver.value(n) for n in flat}
        for n, _ in segment:
            m.add(n == values[n.index])
    return [[values[n.index] for n in row] for row in built.counts], complete


def solve_mapping(problem: MappingProblem) -> Mapping:
    """Best mapping by CP-SAT over class counts; never worse than Megatron's order."""
    budget = _Budget(problem.time_limit_s)
    # Step 1: data -- feasibility, Megatron's mapping, the warm start
    check_gpu_supply(problem)
    scale = speed_scale(problem)
    megatron = megatron_or_none(problem)
    upper = problem.num_stages * scaled(max(problem.unit_speed), scale)
    if megatron is not None and scaled_objective(problem, megatron) == upper:
        return make_mapping(problem, megatron, None, optimal=True)  # homogeneous fast path
    starts = ([megatron] if megatron is not None else []) + grouped_candidates(problem)
    start = max(starts, key=lambda m: scaled_objective(problem, m), default=None)
    # Step 2: the model (variables, constraints, objective), hinted with the start
    classes = unit_classes(problem)
    built = _build_model(problem, classes)
    if start is not None:
        _hint(problem, classes, built, start)
    built.model.maximize(built.objective)
    # Step 3: solve
    solver = budget.solver()
    status = solver.solve(built.model)
    budget.spend(solver, status)
    # Step 4: extract, by status
    if status == cp_model.INFEASIBLE:
        raise no_disjoint_stages(problem)
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(f"invalid CP-SAT model: {built.model.validate()}")
    if status == cp_model.OPTIMAL:
        found = _extract_optimal(problem, classes, built, solver, megatron, budget)
    elif status == cp_model.FEASIBLE:
        found = _extract_feasible(problem, classes, built, solver, (megatron, start),
                                  solver.best_objective_bound / scale)
    elif start is None:  # no solution within the time limit, and nothing to fall back on
        raise MappingTimeout(f"no mapping found within {problem.time_limit_s} s")
    else:  # no solution yet, so no bound from CP-SAT either: the trivial one
        found = make_mapping(problem, start, upper / scale, optimal=False)
    return replace(found, wall_clock_stopped=budget.wall_clock_stopped)


def _extract_optimal(problem: MappingProblem, classes: Sequence[UnitClass], built: _Model,
                     solver: cp_model.CpSolver, megatron: StageUnits | None,
                     budget: _Budget) -> Mapping:
    """The optimum under the tie-break: Megatron's if it attains it, else the lex-max rows."""
    found = round(solver.objective_value)
    if megatron is not None and scaled_objective(problem, megatron) >= found:
        return make_mapping(problem, megatron, None, optimal=True)  # tie-break rule 2
    rows = _solution_rows(solver, built)
    complete = True
    if len(_lex_segments(built)) <= LEX_MAX_SOLVES:
        rows, complete = _lex_max(built, rows, found, budget)  # tie-break rule 3
    return replace(make_mapping(problem, expand_rows(classes, rows), None, optimal=True),
                   tie_break_complete=complete)


def _extract_feasible(problem: MappingProblem, classes: Sequence[UnitClass], built: _Model,
                      solver: cp_model.CpSolver, known: Sequence[StageUnits | None],
                      bound: float) -> Mapping:
    """A time-limited solution, replaced by Megatron's mapping or the start when as good."""
    found = round(solver.objective_value)
    megatron, start = known
    if megatron is not None and scaled_objective(problem, megatron) >= found:
        return make_mapping(problem, megatron, bound, optimal=False)
    if start is not None and scaled_objective(problem, start) > found:
        return make_mapping(problem, start, bound, optimal=False)
    return make_mapping(problem, expand_rows(classes, _solution_rows(solver, built)), bound,
                        optimal=False)
