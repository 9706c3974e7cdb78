"""The stage-mapping problem: its types, the validator, the objective and the tie-break order.

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

Networks (optional ``unit_network``, ``unit_socket_speed``): units that cannot do RDMA with
each other (different NIC class or RDMA island) are on different networks; a stage whose units
span networks runs its collectives over NCCL's socket transport (one transport per
communicator), so its speed is the slowest of its units' *socket* speeds (Holmes, Yang et al.
2023: keep each group on one NIC type). The caller prices both speeds. With
``contain_networks`` a stage whose units span networks is not allowed at all (a hard rule, not a
cost): every stage, and so every group inside it, stays on one network, and a problem whose
networks cannot each be cut into whole stages is infeasible.

CP-SAT needs integer coefficients: speeds and the penalty are scaled by
``SPEED_SCALE / max(speed)`` and rounded (``q_j = round(v_j * scale)``), i.e. a resolution of
1e-6 of the fastest unit. Mappings are *ranked* by that integer objective
(:func:`scaled_objective`; CP-SAT and brute force rank identically); the reported
``objective`` is recomputed in floats by :func:`mapping_objective`.

Tie-break (identical in ``solve_mapping`` and ``brute_force_mapping``)
-----------------------------------------------------------------------
1. maximise the integer objective;
2. if Megatron's listing-order mapping attains it, return Megatron's mapping (the layout
   users expect; this is also the fast path for homogeneous clusters, where no model is built);
3. otherwise take the optimum whose class-count matrix, stages sorted by speed (descending)
   then by count vector (descending), is lexicographically greatest (:func:`count_rows`;
   classes from :func:`unit_classes`);
4. units of a class are handed out lowest index first, stage by stage in that order
   (:func:`expand_rows`); the output lists each stage's units ascending and orders stages by
   their smallest unit (:func:`canonical`).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = ["SPEED_SCALE", "StageUnits", "InfeasibleMapping", "MappingTimeout", "MappingProblem",
           "Mapping", "UnitClass", "unit_classes", "speed_scale", "scaled", "stage_domains",
           "validate_stage_units", "stage_speed", "mapping_objective", "scaled_objective",
           "canonical", "make_mapping", "check_gpu_supply", "no_disjoint_stages",
           "class_of_unit", "count_rows", "expand_rows", "unit_network_of", "networks",
           "spans_networks", "admissible", "network_gpus"]

SPEED_SCALE = 1_000_000  # the fastest unit's speed maps to this integer

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
    time_limit_s: float = 10.0  # CP-SAT deterministic seconds, shared by the whole solve
    # The network a unit's collectives use (its RDMA network; units that cannot do RDMA
    # with each other differ) and its speed when a stage mixes networks and so runs its
    # collectives over sockets (<= its speed). None: one network, speeds as given.
    unit_network: tuple[int, ...] | None = None
    unit_socket_speed: tuple[float, ...] | None = None
    # forbid stages whose units span networks (needs unit_network to matter)
    contain_networks: bool = False

    def __post_init__(self) -> None:
        for name in ("unit_gpus", "unit_speed", "unit_domain"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("unit_network", "unit_socket_speed"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if (self.unit_network is None) != (self.unit_socket_speed is None):
            raise ValueError("unit_network and unit_socket_speed go together")
        n = len(self.unit_gpus)
        if self.unit_network is not None:
            if len(self.unit_network) != n or len(self.unit_socket_speed) != n:
                raise ValueError(f"unit_network and unit_socket_speed need {n} entries")
            if any(int(k) != k for k in self.unit_network):
                raise ValueError(f"unit_network must be integers: {self.unit_network}")
            if any(not (math.isfinite(w) and 0 < w <= v + 1e-12)
                   for w, v in zip(self.unit_socket_speed, self.unit_speed)):
                raise ValueError("unit_socket_speed must be finite, > 0 and <= unit_speed")
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
    # a solve was stopped by the wall-clock backstop, not the deterministic budget: another
    # run may answer differently (``solvers.mapping.cpsat``)
    wall_clock_stopped: bool = False
    # the lexicographic tie-break among optimal mappings ran to its end (False: the budget
    # ran out first, so the mapping is optimal but not the tie-break's pick). True too where
    # the tie-break is skipped by design: models of more than ``cpsat.LEX_MAX_SOLVES``
    # segments keep CP-SAT's optimum (``solvers.mapping.cpsat`` module docstring)
    tie_break_complete: bool = True

    @property
    def gap(self) -> float:
        """(bound - objective) / bound: how far from optimal the answer may be (0: optimal)."""
        if self.optimal or self.bound <= 0:
            return 0.0
        return (self.bound - self.objective) / self.bound


@dataclass(frozen=True)
class UnitClass:
    """Units that are interchangeable: same GPUs, speed, domain, network and socket speed
    (indices ascending)."""

    gpus: int
    speed: float
    domain: int
    units: tuple[int, ...]
    network: int = 0
    socket_speed: float = 0.0  # the class's speed in a stage that mixes networks


# ---------------------------------------------------------------------------------------
# Small pure helpers shared by every solver
# ---------------------------------------------------------------------------------------

def unit_classes(problem: MappingProblem) -> tuple[UnitClass, ...]:
    """Group units by (gpus, speed, domain); classes ordered by their lowest unit index.

    Without a (scaled) domain penalty the domain is irrelevant and is left out of the key
    (``domain`` is then -1), which keeps the model small on many-leaf clusters.
    """
    with_domain = scaled(problem.domain_span_penalty, speed_scale(problem)) > 0
    members: dict[tuple[int, float, int, int, float], list[int]] = {}
    for u, (g, v, k) in enumerate(zip(problem.unit_gpus, problem.unit_speed, problem.unit_domain)):
        net, sock = unit_network_of(problem, u)
        members.setdefault((g, v, k if with_domain else -1, net, sock), []).append(u)
    return tuple(UnitClass(g, v, k, tuple(us), net, sock)
                 for (g, v, k, net, sock), us in members.items())


def unit_network_of(problem: MappingProblem, u: int) -> tuple[int, float]:
    """(network, socket speed) of unit ``u``; one network at its own speed when not given."""
    if problem.unit_network is None:
        return 0, problem.unit_speed[u]
    return problem.unit_network[u], problem.unit_socket_speed[u]


def networks(problem: MappingProblem) -> int:
    """How many networks the units are on (1 when not given)."""
    return len(set(problem.unit_network)) if problem.unit_network is not None else 1


def spans_networks(problem: MappingProblem, units: Iterable[int]) -> bool:
    """Whether a stage of these units mixes networks (never without ``unit_network``)."""
    return problem.unit_network is not None and len({problem.unit_network[u] for u in units}) > 1


def admissible(problem: MappingProblem, stage_units: Iterable[Iterable[int]]) -> bool:
    """Whether the stages obey the problem's containment rule (always true without it)."""
    return not problem.contain_networks or not any(spans_networks(problem, us)
                                                   for us in stage_units)


def network_gpus(problem: MappingProblem) -> dict[int, int]:
    """GPUs per network (one network 0 when not given)."""
    out: dict[int, int] = {}
    for u, g in enumerate(problem.unit_gpus):
        net = problem.unit_network[u] if problem.unit_network is not None else 0
        out[net] = out.get(net, 0) + g
    return out


def speed_scale(problem: MappingProblem) -> float:
    """Factor turning speeds (and the penalty) into CP-SAT integers."""
    return SPEED_SCALE / max(problem.unit_speed)


def scaled(value: float, scale: float) -> int:
    return int(round(value * scale))


def stage_domains(problem: MappingProblem, units: Iterable[int]) -> int:
    return len({problem.unit_domain[u] for u in units})


def validate_stage_units(problem: MappingProblem, stage_units: Sequence[Sequence[int]]) -> None:
    """Raise ValueError unless every stage holds exactly ``gpus_per_stage`` GPUs of distinct units
    (and, with ``contain_networks``, units of one network)."""
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
        if problem.contain_networks and spans_networks(problem, units):
            raise ValueError(f"stage {s} spans networks "
                             f"{sorted({problem.unit_network[u] for u in units})}, which "
                             f"contain_networks forbids")


def stage_speed(problem: MappingProblem, units: Iterable[int]) -> float:
    """A stage runs at the speed of its slowest unit; a stage whose units are on different
    networks runs its collectives over sockets, at its slowest unit's socket speed (NCCL
    picks one transport per communicator: IB/RoCE only when every member can use it)."""
    units = tuple(units)
    if spans_networks(problem, units):
        return min(problem.unit_socket_speed[u] for u in units)
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


def make_mapping(problem: MappingProblem, stage_units: Iterable[Iterable[int]],
                 bound: float | None, optimal: bool) -> Mapping:
    """The :class:`Mapping` of ``stage_units`` (canonical order), objective in floats."""
    units = canonical(stage_units)
    objective = mapping_objective(problem, units)
    return Mapping(units, tuple(stage_speed(problem, us) for us in units), objective,
                   objective if optimal or bound is None else max(bound, objective), optimal)


# ---------------------------------------------------------------------------------------
# Feasibility
# ---------------------------------------------------------------------------------------

def check_gpu_supply(problem: MappingProblem) -> None:
    """Raise InfeasibleMapping when the GPUs cannot add up; cheap necessary conditions."""
    need = problem.num_stages * problem.gpus_per_stage
    have = sum(problem.unit_gpus)
    if have < need:
        raise InfeasibleMapping(f"{problem.num_stages} stages × {problem.gpus_per_stage} GPUs "
                                f"need {need} GPUs, the units hold {have}")
    if problem.contain_networks and networks(problem) > 1 and sum(
            held // problem.gpus_per_stage for held in network_gpus(problem).values()
    ) < problem.num_stages:
        raise no_disjoint_stages(problem)  # each network holds at most its GPUs // stage GPUs
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


def no_disjoint_stages(problem: MappingProblem) -> InfeasibleMapping:
    """The error for a problem whose GPUs add up but cannot form the stages."""
    sizes = ", ".join(f"{c}×{g}" for g, c in sorted(Counter(problem.unit_gpus).items()))
    if problem.contain_networks and networks(problem) > 1:
        per_net = "; ".join(
            f"network {k}: " + ", ".join(f"{c}×{g}" for g, c in sorted(Counter(
                g for g, n in zip(problem.unit_gpus, problem.unit_network) if n == k).items()))
            for k in sorted(set(problem.unit_network)))
        return InfeasibleMapping(f"cannot form {problem.num_stages} disjoint stages of exactly "
                                 f"{problem.gpus_per_stage} GPUs, each on one network, from "
                                 f"units of ({per_net}) GPUs")
    return InfeasibleMapping(f"cannot form {problem.num_stages} disjoint stages of exactly "
                             f"{problem.gpus_per_stage} GPUs from units of {sizes} GPUs")


# ---------------------------------------------------------------------------------------
# Count matrices: the aggregated representation and the tie-break
# ---------------------------------------------------------------------------------------

def class_of_unit(classes: Sequence[UnitClass]) -> dict[int, int]:
    return {u: c for c, cls in enumerate(classes) for u in cls.units}


def _sorted_rows(rows: Iterable[tuple[int, tuple[int, ...]]]) -> tuple[tuple[int, ...], ...]:
    """Count rows sorted by scaled speed, then counts, both descending (the tie-break order)."""
    return tuple(counts for _, counts in sorted(rows, reverse=True))


def count_rows(problem: MappingProblem, classes: Sequence[UnitClass],
               stage_units: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    """Units per class of every stage, rows in the tie-break order (rule 3)."""
    of = class_of_unit(classes)
    scale = speed_scale(problem)
    rows = []
    for units in stage_units:
        counts = [0] * len(classes)
        for u in units:
            counts[of[u]] += 1
        rows.append((scaled(stage_speed(problem, units), scale), tuple(counts)))
    return _sorted_rows(rows)


def expand_rows(classes: Sequence[UnitClass], rows: Iterable[Sequence[int]]) -> StageUnits:
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
