"""Heterogeneity-aware mapping of cluster nodes ("units") onto pipeline stages.

The problem
-----------
Each of ``num_stages`` pipeline stages needs exactly ``gpus_per_stage`` GPUs, made of whole
units (nodes); units may stay unused when the cluster holds more GPUs than the stages need.
The tensor/context/data-parallel collectives of a stage run in lockstep, so a stage runs at
the speed of its *slowest* unit. The caller re-partitions the layers by speed afterwards
(slow stages get fewer layers), so with a perfect partition the pipeline's step time is
``total work / sum_s speed_s``: throughput is proportional to the *sum* of stage speeds.
Spreading one stage over several leaf switches ("domains") costs cross-leaf traffic, so the
objective (in speed units) is::

    maximise  sum_s speed_s  -  domain_span_penalty * sum_s (domains touched by s - 1)

The baseline is Megatron-LM's default rank order (tp-cp-ep-dp-pp with pp outermost): the
listing order of the nodes is cut into consecutive stages (:func:`megatron_mapping`). On a
mixed cluster that can pair every fast node with a slow one and waste the fast ones. The
heterogeneity-aware idea follows Metis (Um et al., USENIX ATC'24) and Holmes (Yang et al.,
2023): group like devices into the same stage and give the slow stages fewer layers.

The CP-SAT model (:func:`solve_mapping`)
----------------------------------------
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
* symmetry breaking: stages are ordered by non-increasing speed (``ge[s+1,j] => ge[s,j]``).

CP-SAT needs integer coefficients: speeds and the penalty are scaled by
``SPEED_SCALE / max(speed)`` and rounded (``q_j = round(v_j * scale)``), i.e. a resolution of
1e-6 of the fastest unit. Mappings are *ranked* by that integer objective (brute force
ranks identically); the reported ``objective`` is recomputed in floats by
:func:`mapping_objective` and ``bound`` is the solver's bound divided by the scale.

Tie-break (identical in :func:`solve_mapping` and :func:`brute_force_mapping`)
-------------------------------------------------------------------------------
1. maximise the integer objective;
2. if Megatron's listing-order mapping attains it, return Megatron's mapping (the layout
   users expect; this is also the fast path for homogeneous clusters, where no model is built);
3. otherwise take the optimum whose class-count matrix, stages sorted by speed (descending)
   then by count vector (descending), is lexicographically greatest (a second CP-SAT phase
   with the objective fixed, solved in segments with lexicographic weights below 2**52);
4. units of a class are handed out lowest index first, stage by stage in that order; the
   output lists each stage's units ascending and orders stages by their smallest unit.

Determinism: one worker and a fixed seed, so equal inputs give equal outputs as long as no
solve hits ``time_limit_s`` (a wall-clock limit). A time-limited solve is hinted with
Megatron's mapping and never returns anything worse than it.
"""
from __future__ import annotations

import itertools
import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from ortools.sat.python import cp_model

SPEED_SCALE = 1_000_000  # the fastest unit's speed maps to this integer
LEX_WEIGHT_LIMIT = 2 ** 52  # largest lexicographic weight product in one tie-break solve
LEX_MAX_SOLVES = 16  # larger models skip the lexicographic tie-break phase
BRUTE_FORCE_MAX_UNITS = 10
RANDOM_SEED = 20240711

StageUnits = tuple[tuple[int, ...], ...]


class InfeasibleMapping(ValueError):
    """No assignment of whole units gives every stage exactly ``gpus_per_stage`` GPUs."""


class MappingTimeout(RuntimeError):
    """CP-SAT found no mapping within the time limit and Megatron's order is infeasible."""


@dataclass(frozen=True)
class MappingProblem:
    """Units (nodes) with their GPUs, speed and leaf-switch domain; the stages to fill."""

    unit_gpus: tuple[int, ...]
    unit_speed: tuple[float, ...]
    unit_domain: tuple[int, ...]
    num_stages: int
    gpus_per_stage: int
    domain_span_penalty: float = 0.0
    time_limit_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("unit_gpus", "unit_speed", "unit_domain"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        n = len(self.unit_gpus)
        if len(self.unit_speed) != n or len(self.unit_domain) != n:
            raise ValueError(f"unit_gpus, unit_speed and unit_domain differ in length: "
                             f"{n}, {len(self.unit_speed)}, {len(self.unit_domain)}")
        if any(int(g) != g or g < 1 for g in self.unit_gpus):
            raise ValueError(f"unit_gpus must be positive integers: {self.unit_gpus}")
        if any(not (math.isfinite(v) and v > 0) for v in self.unit_speed):
            raise ValueError(f"unit_speed must be finite and > 0: {self.unit_speed}")
        if any(int(k) != k for k in self.unit_domain):
            raise ValueError(f"unit_domain must be integers: {self.unit_domain}")
        if self.num_stages < 1 or self.gpus_per_stage < 1:
            raise ValueError(f"num_stages ({self.num_stages}) and gpus_per_stage "
                             f"({self.gpus_per_stage}) must be >= 1")
        if not (math.isfinite(self.domain_span_penalty) and self.domain_span_penalty >= 0):
            raise ValueError(f"domain_span_penalty must be finite and >= 0: "
                             f"{self.domain_span_penalty}")
        if not self.time_limit_s > 0:
            raise ValueError(f"time_limit_s must be > 0: {self.time_limit_s}")

    @property
    def num_units(self) -> int:
        return len(self.unit_gpus)


@dataclass(frozen=True)
class Mapping:
    """Units per stage (ascending; stages ordered by smallest unit) and their value."""

    stage_units: StageUnits
    stage_speed: tuple[float, ...]
    objective: float
    bound: float  # best bound on the objective (== objective when optimal)
    optimal: bool


@dataclass(frozen=True)
class _UnitClass:
    """Units that are interchangeable: same GPUs, speed and domain (indices ascending)."""

    gpus: int
    speed: float
    domain: int
    units: tuple[int, ...]


# ---------------------------------------------------------------------------------------
# Small pure helpers shared by every solver
# ---------------------------------------------------------------------------------------

def unit_classes(problem: MappingProblem) -> tuple[_UnitClass, ...]:
    """Group units by (gpus, speed, domain); classes ordered by their lowest unit index.

    Without a (scaled) domain penalty the domain is irrelevant and is left out of the key
    (``domain`` is then -1), which keeps the model small on many-leaf clusters.
    """
    with_domain = scaled(problem.domain_span_penalty, speed_scale(problem)) > 0
    members: dict[tuple[int, float, int], list[int]] = {}
    for u, (g, v, k) in enumerate(zip(problem.unit_gpus, problem.unit_speed, problem.unit_domain)):
        members.setdefault((g, v, k if with_domain else -1), []).append(u)
    return tuple(_UnitClass(g, v, k, tuple(us)) for (g, v, k), us in members.items())


def speed_scale(problem: MappingProblem) -> float:
    """Factor turning speeds (and the penalty) into CP-SAT integers."""
    return SPEED_SCALE / max(problem.unit_speed)


def scaled(value: float, scale: float) -> int:
    return int(round(value * scale))


def stage_domains(problem: MappingProblem, units: Iterable[int]) -> int:
    return len({problem.unit_domain[u] for u in units})


def validate_stage_units(problem: MappingProblem, stage_units: Sequence[Sequence[int]]) -> None:
    """Raise ValueError unless every stage holds exactly ``gpus_per_stage`` GPUs of distinct units."""
    if len(stage_units) != problem.num_stages:
        raise ValueError(f"{len(stage_units)} stages given, {problem.num_stages} expected")
    seen: set[int] = set()
    for s, units in enumerate(stage_units):
        if not units:
            raise ValueError(f"stage {s} is empty")
        for u in units:
            if not 0 <= u < problem.num_units:
                raise ValueError(f"stage {s}: unit {u} out of range")
            if u in seen:
                raise ValueError(f"unit {u} is in more than one stage")
            seen.add(u)
        gpus = sum(problem.unit_gpus[u] for u in units)
        if gpus != problem.gpus_per_stage:
            raise ValueError(f"stage {s} holds {gpus} GPUs, {problem.gpus_per_stage} needed")


def stage_speed(problem: MappingProblem, units: Iterable[int]) -> float:
    """A stage runs at the speed of its slowest unit."""
    return min(problem.unit_speed[u] for u in units)


def mapping_objective(problem: MappingProblem, stage_units: Sequence[Sequence[int]]) -> float:
    """Sum of stage speeds minus the penalty per extra domain a stage spans (floats)."""
    validate_stage_units(problem, stage_units)
    return sum(stage_speed(problem, us) - problem.domain_span_penalty
               * (stage_domains(problem, us) - 1) for us in stage_units)


def scaled_objective(problem: MappingProblem, stage_units: Sequence[Sequence[int]]) -> int:
    """The integer objective CP-SAT maximises; brute force ranks mappings by it too."""
    scale = speed_scale(problem)
    penalty = scaled(problem.domain_span_penalty, scale)
    return sum(scaled(stage_speed(problem, us), scale) - penalty * (stage_domains(problem, us) - 1)
               for us in stage_units)


def canonical(stage_units: Iterable[Iterable[int]]) -> StageUnits:
    """Units ascending within a stage, stages ordered by their smallest unit."""
    return tuple(sorted(tuple(sorted(us)) for us in stage_units))


def _mapping(problem: MappingProblem, stage_units: Iterable[Iterable[int]],
             bound: float | None, optimal: bool) -> Mapping:
    units = canonical(stage_units)
    objective = mapping_objective(problem, units)
    return Mapping(units, tuple(stage_speed(problem, us) for us in units), objective,
                   objective if optimal or bound is None else max(bound, objective), optimal)


# ---------------------------------------------------------------------------------------
# Feasibility
# ---------------------------------------------------------------------------------------

def _check_gpu_supply(problem: MappingProblem) -> None:
    """Raise InfeasibleMapping when the GPUs cannot add up; cheap necessary conditions."""
    need = problem.num_stages * problem.gpus_per_stage
    have = sum(problem.unit_gpus)
    if have < need:
        raise InfeasibleMapping(f"{problem.num_stages} stages × {problem.gpus_per_stage} GPUs "
                                f"need {need} GPUs, the units hold {have}")
    if not _subset_sum_reaches(problem.unit_gpus, problem.gpus_per_stage):
        sizes = ", ".join(f"{c}×{g}" for g, c in sorted(Counter(problem.unit_gpus).items()))
        raise InfeasibleMapping(f"no set of units sums to exactly {problem.gpus_per_stage} GPUs "
                                f"(units: {sizes} GPUs)")


def _subset_sum_reaches(sizes: Sequence[int], target: int) -> bool:
    reachable = 1  # bit i set <=> some subset sums to i
    mask = (1 << (target + 1)) - 1
    for g, count in Counter(sizes).items():
        for _ in range(min(count, target // g)):
            reachable = (reachable | (reachable << g)) & mask
    return bool(reachable >> target & 1)


def _no_disjoint_stages(problem: MappingProblem) -> InfeasibleMapping:
    sizes = ", ".join(f"{c}×{g}" for g, c in sorted(Counter(problem.unit_gpus).items()))
    return InfeasibleMapping(f"cannot form {problem.num_stages} disjoint stages of exactly "
                             f"{problem.gpus_per_stage} GPUs from units of {sizes} GPUs")


# ---------------------------------------------------------------------------------------
# Megatron baseline
# ---------------------------------------------------------------------------------------

def megatron_stage_units(problem: MappingProblem) -> StageUnits:
    """Listing order cut into consecutive stages; raises if a unit would straddle two."""
    _check_gpu_supply(problem)
    stages: list[tuple[int, ...]] = []
    current: list[int] = []
    filled = 0
    for u, g in enumerate(problem.unit_gpus):
        if len(stages) == problem.num_stages:
            break
        if filled + g > problem.gpus_per_stage:
            raise InfeasibleMapping(
                f"Megatron order: unit {u} ({g} GPUs) would straddle stages {len(stages)} and "
                f"{len(stages) + 1} (stage {len(stages)} already holds {filled} of "
                f"{problem.gpus_per_stage} GPUs)")
        current.append(u)
        filled += g
        if filled == problem.gpus_per_stage:
            stages.append(tuple(current))
            current, filled = [], 0
    return tuple(stages)


def megatron_mapping(problem: MappingProblem) -> Mapping:
    """Megatron-LM's default placement: fill stage 0 with units 0, 1, ... then stage 1, ..."""
    return _mapping(problem, megatron_stage_units(problem), None, optimal=False)


def _megatron_or_none(problem: MappingProblem) -> StageUnits | None:
    try:
        return megatron_stage_units(problem)
    except InfeasibleMapping:
        return None


def _first_fit(problem: MappingProblem, order: Sequence[int]) -> StageUnits | None:
    """Fill stages one after another with the first units (in ``order``) that still fit."""
    left = list(order)
    stages = []
    for _ in range(problem.num_stages):
        units, filled, rest = [], 0, []
        for u in left:
            if filled + problem.unit_gpus[u] <= problem.gpus_per_stage:
                units.append(u)
                filled += problem.unit_gpus[u]
            else:
                rest.append(u)
        if filled != problem.gpus_per_stage:
            return None
        stages.append(tuple(units))
        left = rest
    return tuple(stages)


def _grouped_candidates(problem: MappingProblem) -> list[StageUnits]:
    """Metis/Holmes-style starts: like devices together (by speed, then leaf; or the reverse)."""
    speed, domain = problem.unit_speed, problem.unit_domain
    orders = (sorted(range(problem.num_units), key=lambda u: (-speed[u], domain[u], u)),
              sorted(range(problem.num_units), key=lambda u: (domain[u], -speed[u], u)))
    return [m for m in (_first_fit(problem, o) for o in orders) if m is not None]


# ---------------------------------------------------------------------------------------
# Count matrices: the aggregated representation and the tie-break
# ---------------------------------------------------------------------------------------

def _class_of_unit(classes: Sequence[_UnitClass]) -> dict[int, int]:
    return {u: c for c, cls in enumerate(classes) for u in cls.units}


def _sorted_rows(rows: Iterable[tuple[int, tuple[int, ...]]]) -> tuple[tuple[int, ...], ...]:
    """Count rows sorted by scaled speed, then counts, both descending (the tie-break order)."""
    return tuple(counts for _, counts in sorted(rows, reverse=True))


def _count_rows(problem: MappingProblem, classes: Sequence[_UnitClass],
                stage_units: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    of = _class_of_unit(classes)
    scale = speed_scale(problem)
    rows = []
    for units in stage_units:
        counts = [0] * len(classes)
        for u in units:
            counts[of[u]] += 1
        rows.append((scaled(stage_speed(problem, units), scale), tuple(counts)))
    return _sorted_rows(rows)


def _expand(classes: Sequence[_UnitClass], rows: Iterable[Sequence[int]]) -> StageUnits:
    """Concrete units for count rows: lowest indices of each class first, row by row."""
    taken = [0] * len(classes)
    stages = []
    for counts in rows:
        units: list[int] = []
        for c, k in enumerate(counts):
            units.extend(classes[c].units[taken[c]:taken[c] + k])
            taken[c] += k
        stages.append(tuple(units))
    return canonical(stages)


# ---------------------------------------------------------------------------------------
# Exhaustive reference
# ---------------------------------------------------------------------------------------

def _partitions(problem: MappingProblem) -> Iterable[list[list[int]]]:
    """All ways to pick num_stages disjoint full stages (stage labels in order of opening)."""
    gpus, target, stages = problem.unit_gpus, problem.gpus_per_stage, problem.num_stages
    open_stages: list[list[int]] = []
    fill: list[int] = []

    def place(u: int) -> Iterable[list[list[int]]]:
        if u == len(gpus):
            if len(open_stages) == stages and all(f == target for f in fill):
                yield open_stages
            return
        yield from place(u + 1)  # leave unit u unused
        for s in range(len(open_stages)):
            if fill[s] + gpus[u] <= target:
                open_stages[s].append(u)
                fill[s] += gpus[u]
                yield from place(u + 1)
                fill[s] -= gpus[u]
                open_stages[s].pop()
        if len(open_stages) < stages and gpus[u] <= target:
            open_stages.append([u])
            fill.append(gpus[u])
            yield from place(u + 1)
            fill.pop()
            open_stages.pop()

    return place(0)


def brute_force_mapping(problem: MappingProblem) -> Mapping:
    """Exhaustive search over unit-to-stage assignments (small instances), same tie-break."""
    if problem.num_units > BRUTE_FORCE_MAX_UNITS:
        raise ValueError(f"brute force is for at most {BRUTE_FORCE_MAX_UNITS} units, "
                         f"got {problem.num_units}")
    _check_gpu_supply(problem)
    classes = unit_classes(problem)
    best: tuple[int, tuple[tuple[int, ...], ...]] | None = None
    for stages in _partitions(problem):
        key = (scaled_objective(problem, stages), _count_rows(problem, classes, stages))
        if best is None or key > best:
            best = key
    if best is None:
        raise _no_disjoint_stages(problem)
    megatron = _megatron_or_none(problem)
    if megatron is not None and scaled_objective(problem, megatron) == best[0]:
        return _mapping(problem, megatron, None, optimal=True)
    return _mapping(problem, _expand(classes, best[1]), None, optimal=True)


# ---------------------------------------------------------------------------------------
# CP-SAT
# ---------------------------------------------------------------------------------------

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


def _build_model(problem: MappingProblem, classes: Sequence[_UnitClass]) -> _Model:
    scale = speed_scale(problem)
    q = sorted({scaled(c.speed, scale) for c in classes})  # distinct speed levels
    level_of = {v: j for j, v in enumerate(q)}
    penalty = scaled(problem.domain_span_penalty, scale)
    domain_ids = tuple(sorted({c.domain for c in classes})) if penalty > 0 else ()
    caps = tuple(min(len(cls.units), problem.gpus_per_stage // cls.gpus) for cls in classes)
    m = cp_model.CpModel()
    counts, uses, at_least, domains = [], [], [], []
    for s in range(problem.num_stages):
        n_s, use_s = [], []
        for c, cap in enumerate(caps):
            n = m.new_int_var(0, cap, f"n_{s}_{c}")
            use = m.new_bool_var(f"use_{s}_{c}")
            m.add(n <= cap * use)
            m.add(n >= use)
            n_s.append(n)
            use_s.append(use)
        m.add(sum(cls.gpus * n for cls, n in zip(classes, n_s)) == problem.gpus_per_stage)
        ge = [m.new_bool_var(f"ge_{s}_{j}") for j in range(1, len(q))]
        for lo, hi in zip(ge, ge[1:]):
            m.add_implication(hi, lo)
        for cls, use in zip(classes, use_s):
            above = level_of[scaled(cls.speed, scale)] + 1  # first level faster than the class
            if above < len(q):
                m.add_bool_or([use.Not(), ge[above - 1].Not()])
        for j, g in enumerate(ge, start=1):  # aggregated form: tighter LP relaxation
            slow = [cls.gpus * n for cls, n in zip(classes, n_s) if scaled(cls.speed, scale) < q[j]]
            m.add(sum(slow) <= problem.gpus_per_stage * (1 - g))
        dom = [m.new_bool_var(f"dom_{s}_{k}") for k in domain_ids]
        for k, d in zip(domain_ids, dom):
            members = [(cls, n, use) for cls, n, use in zip(classes, n_s, use_s) if cls.domain == k]
            for _, _, use in members:
                m.add_implication(use, d)
            m.add(sum(cls.gpus * n for cls, n, _ in members) <= problem.gpus_per_stage * d)
        counts.append(tuple(n_s))
        uses.append(tuple(use_s))
        at_least.append(tuple(ge))
        domains.append(tuple(dom))
    for c, cls in enumerate(classes):
        m.add(sum(counts[s][c] for s in range(problem.num_stages)) <= len(cls.units))
    for s in range(problem.num_stages - 1):  # symmetry breaking: speeds non-increasing
        for hi, lo in zip(at_least[s], at_least[s + 1]):
            m.add_implication(lo, hi)
    steps = [b - a for a, b in zip(q, q[1:])]
    objective = (problem.num_stages * (q[0] + penalty)
                 + sum(w * g for ge in at_least for w, g in zip(steps, ge))
                 - penalty * sum(d for dom in domains for d in dom))
    return _Model(m, tuple(counts), caps, tuple(uses), tuple(at_least), tuple(domains), domain_ids,
                  objective)


def _hint(problem: MappingProblem, classes: Sequence[_UnitClass], built: _Model,
          stage_units: StageUnits) -> None:
    """A complete hint for a known mapping, stages in the model's (speed-sorted) order."""
    scale = speed_scale(problem)
    levels = sorted({scaled(c.speed, scale) for c in classes})
    of = _class_of_unit(classes)
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


def _solver(time_limit_s: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = RANDOM_SEED
    solver.parameters.max_time_in_seconds = max(time_limit_s, 1e-3)
    return solver


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


def _lex_max(built: _Model, rows: list[list[int]], optimum: int, deadline: float) -> list[list[int]]:
    """Among mappings of integer objective ``optimum``, the lexicographically greatest rows."""
    m = built.model
    m.add(built.objective == optimum)
    flat = [n for row in built.counts for n in row]
    values = {n.index: v for n, v in zip(flat, (v for row in rows for v in row))}
    for segment in _lex_segments(built):
        if all(size == 1 for _, size in segment):
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
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
        solver = _solver(remaining)
        status = solver.solve(m)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        values = {n.index: solver.value(n) for n in flat}
        for n, _ in segment:
            m.add(n == values[n.index])
    return [[values[n.index] for n in row] for row in built.counts]


def solve_mapping(problem: MappingProblem) -> Mapping:
    """Best mapping by CP-SAT over class counts; never worse than Megatron's order."""
    deadline = time.monotonic() + problem.time_limit_s
    _check_gpu_supply(problem)
    scale = speed_scale(problem)
    megatron = _megatron_or_none(problem)
    upper = problem.num_stages * scaled(max(problem.unit_speed), scale)
    if megatron is not None and scaled_objective(problem, megatron) == upper:
        return _mapping(problem, megatron, None, optimal=True)  # homogeneous fast path
    starts = ([megatron] if megatron is not None else []) + _grouped_candidates(problem)
    start = max(starts, key=lambda m: scaled_objective(problem, m), default=None)
    classes = unit_classes(problem)
    built = _build_model(problem, classes)
    if start is not None:
        _hint(problem, classes, built, start)
    built.model.maximize(built.objective)
    solver = _solver(deadline - time.monotonic())
    status = solver.solve(built.model)
    if status == cp_model.INFEASIBLE:
        raise _no_disjoint_stages(problem)
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(f"invalid CP-SAT model: {built.model.validate()}")
    bound = solver.best_objective_bound / scale
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if start is None:
            raise MappingTimeout(f"no mapping found within {problem.time_limit_s} s")
        return _mapping(problem, start, bound, optimal=False)
    optimal = status == cp_model.OPTIMAL
    found = round(solver.objective_value)
    if megatron is not None and scaled_objective(problem, megatron) >= found:
        return _mapping(problem, megatron, bound, optimal)  # tie-break rule 2
    if not optimal and scaled_objective(problem, start) > found:
        return _mapping(problem, start, bound, optimal)
    rows = _solution_rows(solver, built)
    if optimal and len(_lex_segments(built)) <= LEX_MAX_SOLVES:
        rows = _lex_max(built, rows, found, deadline)
    return _mapping(problem, _expand(classes, rows), bound, optimal)
