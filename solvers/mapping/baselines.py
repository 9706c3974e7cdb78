"""Stage mappings without a model: Megatron's listing order, grouped starts and brute force.

The baseline is Megatron-LM's default rank order (tp-cp-ep-dp-pp with pp outermost): the
listing order of the nodes is cut into consecutive stages (:func:`megatron_mapping`). On a
mixed cluster that can pair every fast node with a slow one and waste the fast ones. The
heterogeneity-aware idea follows Metis (Um et al., USENIX ATC'24) and Holmes (Yang et al.,
2023): group like devices into the same stage and give the slow stages fewer layers;
:func:`grouped_candidates` builds such mappings first-fit, as warm starts for CP-SAT.

:func:`brute_force_mapping` is the exhaustive reference for small instances: it ranks every
partition by the integer objective and applies the tie-break of :mod:`solvers.mapping.problem`.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from solvers.mapping.problem import (InfeasibleMapping, Mapping, MappingProblem, StageUnits,
                                     admissible, check_gpu_supply, count_rows, expand_rows,
                                     make_mapping, no_disjoint_stages, scaled_objective,
                                     unit_classes)

__all__ = ["BRUTE_FORCE_MAX_UNITS", "megatron_stage_units", "megatron_mapping",
           "megatron_or_none", "grouped_candidates", "brute_force_mapping"]

BRUTE_FORCE_MAX_UNITS = 10


# ---------------------------------------------------------------------------------------
# Megatron baseline
# ---------------------------------------------------------------------------------------

def megatron_stage_units(problem: MappingProblem) -> StageUnits:
    """Listing order cut into consecutive stages; raises if a unit would straddle two (or, with
    ``contain_networks``, a stage would span networks)."""
    check_gpu_supply(problem)
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
    if not admissible(problem, stages):
        raise InfeasibleMapping("Megatron order: a stage spans networks, which "
                                "contain_networks forbids")
    return tuple(stages)


def megatron_mapping(problem: MappingProblem) -> Mapping:
    """Megatron-LM's default placement: fill stage 0 with units 0, 1, ... then stage 1, ..."""
    return make_mapping(problem, megatron_stage_units(problem), None, optimal=False)


def megatron_or_none(problem: MappingProblem) -> StageUnits | None:
    """Megatron's stages, or None where a unit would straddle two stages or, with
    ``contain_networks``, a stage would span networks."""
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


def grouped_candidates(problem: MappingProblem) -> list[StageUnits]:
    """Metis/Holmes-style starts: like devices together (by speed, then leaf; or the reverse;
    or by network first, as Holmes keeps each group on one NIC type); only those obeying the
    containment rule."""
    speed, domain = problem.unit_speed, problem.unit_domain
    net = problem.unit_network or (0,) * problem.num_units
    orders = (sorted(range(problem.num_units), key=lambda u: (-speed[u], domain[u], u)),
              sorted(range(problem.num_units), key=lambda u: (domain[u], -speed[u], u)),
              sorted(range(problem.num_units), key=lambda u: (net[u], -speed[u], domain[u], u)))
    return [m for m in (_first_fit(problem, o) for o in orders)
            if m is not None and admissible(problem, m)]


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
    """Exhaustive search over unit-to-stage assignments (small instances), same tie-break;
    with ``contain_networks`` only partitions whose every stage is on one network count."""
    if problem.num_units > BRUTE_FORCE_MAX_UNITS:
        raise ValueError(f"brute force is for at most {BRUTE_FORCE_MAX_UNITS} units, "
                         f"got {problem.num_units}")
    check_gpu_supply(problem)
    classes = unit_classes(problem)
    best: tuple[int, tuple[tuple[int, ...], ...]] | None = None
    for stages in _partitions(problem):
        if not admissible(problem, stages):
            continue  # a stage spans networks, which the problem forbids
        key = (scaled_objective(problem, stages), count_rows(problem, classes, stages))
        if best is None or key > best:
            best = key
    if best is None:
        raise no_disjoint_stages(problem)
    megatron = megatron_or_none(problem)
    if megatron is not None and scaled_objective(problem, megatron) == best[0]:
        return make_mapping(problem, megatron, None, optimal=True)
    return make_mapping(problem, expand_rows(classes, best[1]), None, optimal=True)
