"""Stage mapping (``solvers.mapping``): CP-SAT against exhaustive search, Megatron and hand-made cases.

Every expected value here comes from the definitions in ``solvers.mapping.problem`` (stage speed =
slowest unit, objective = sum of stage speeds minus the penalty per extra domain, the
documented tie-break), never from a previous run of the solver.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import pytest

from solvers.mapping import cpsat
from solvers.mapping import (BRUTE_FORCE_MAX_UNITS, SPEED_SCALE, InfeasibleMapping, Mapping,
                             MappingProblem, brute_force_mapping, mapping_objective,
                             megatron_mapping, megatron_stage_units, solve_mapping, unit_classes,
                             validate_stage_units)


# ---------------------------------------------------------------------------------------
# Helpers: the definitions, written out independently of the module
# ---------------------------------------------------------------------------------------

def _scale(p: MappingProblem) -> float:
    return SPEED_SCALE / max(p.unit_speed)


def _int_objective(p: MappingProblem, stages) -> int:
    """The integer objective of the docstring: speeds and penalty scaled, then rounded."""
    scale = _scale(p)
    pen = int(round(p.domain_span_penalty * scale))
    return sum(int(round(min(p.unit_speed[u] for u in st) * scale))
               - pen * (len({p.unit_domain[u] for u in st}) - 1) for st in stages)


def _float_objective(p: MappingProblem, stages) -> float:
    return sum(min(p.unit_speed[u] for u in st)
               - p.domain_span_penalty * (len({p.unit_domain[u] for u in st}) - 1) for st in stages)


def _canonical(stages):
    return tuple(sorted(tuple(sorted(st)) for st in stages))


def _all_mappings(p: MappingProblem):
    """Every assignment of units to labelled stages (0 = unused) that fills each stage exactly."""
    S, target = p.num_stages, p.gpus_per_stage
    for labels in itertools.product(range(S + 1), repeat=p.num_units):
        fill = [0] * (S + 1)
        for u, s in enumerate(labels):
            fill[s] += p.unit_gpus[u]
        if all(f == target for f in fill[1:]):
            yield tuple(tuple(u for u, s in enumerate(labels) if s == k) for k in range(1, S + 1))


def _megatron_stages(p: MappingProblem):
    """Listing order cut into consecutive stages of exactly gpus_per_stage GPUs, or None."""
    stages, cur, filled = [], [], 0
    for u, g in enumerate(p.unit_gpus):
        if len(stages) == p.num_stages:
            break
        if filled + g > p.gpus_per_stage:
            return None
        cur.append(u)
        filled += g
        if filled == p.gpus_per_stage:
            stages.append(tuple(cur))
            cur, filled = [], 0
    return tuple(stages) if len(stages) == p.num_stages else None


def _spec_mapping(p: MappingProblem):
    """The documented optimum and tie-break, from full enumeration (tiny instances only)."""
    with_domain = int(round(p.domain_span_penalty * _scale(p))) > 0
    keys: list = []
    for u in range(p.num_units):
        key = (p.unit_gpus[u], p.unit_speed[u], p.unit_domain[u] if with_domain else -1)
        if key not in keys:
            keys.append(key)  # classes in order of their lowest unit
    cls = [keys.index((p.unit_gpus[u], p.unit_speed[u], p.unit_domain[u] if with_domain else -1))
           for u in range(p.num_units)]
    members = [[u for u in range(p.num_units) if cls[u] == c] for c in range(len(keys))]

    def rows(stages):
        out = []
        for st in stages:
            counts = [0] * len(keys)
            for u in st:
                counts[cls[u]] += 1
            out.append((int(round(min(p.unit_speed[u] for u in st) * _scale(p))), tuple(counts)))
        return tuple(c for _, c in sorted(out, reverse=True))

    candidates = list(_all_mappings(p))
    if not candidates:
        return None
    best = max(_int_objective(p, st) for st in candidates)
    megatron = _megatron_stages(p)
    if megatron is not None and _int_objective(p, megatron) == best:
        return _canonical(megatron)
    top = max(rows(st) for st in candidates if _int_objective(p, st) == best)
    taken = [0] * len(keys)
    stages = []
    for counts in top:
        st = []
        for c, k in enumerate(counts):
            st += members[c][taken[c]:taken[c] + k]
            taken[c] += k
        stages.append(st)
    return _canonical(stages)


def _check_well_formed(p: MappingProblem, m: Mapping) -> None:
    """Invariants of any returned Mapping, straight from the definitions."""
    validate_stage_units(p, m.stage_units)
    assert m.stage_units == _canonical(m.stage_units)  # units ascending, stages by smallest unit
    assert m.stage_speed == tuple(min(p.unit_speed[u] for u in st) for st in m.stage_units)
    assert m.objective == pytest.approx(_float_objective(p, m.stage_units), rel=1e-12, abs=1e-12)
    assert m.objective == pytest.approx(mapping_objective(p, m.stage_units), rel=1e-12, abs=1e-12)
    assert m.bound >= m.objective - 1e-9
    if m.optimal:
        assert m.bound == pytest.approx(m.objective, rel=1e-9, abs=1e-9)


def _random_small(rng: random.Random) -> MappingProblem:
    n = rng.randint(1, BRUTE_FORCE_MAX_UNITS)
    gpus = [rng.choice((4, 8)) for _ in range(n)]
    if rng.random() < 0.6:
        speeds = [rng.choice((1.0, 1.5, 2.0)) for _ in range(n)]
    else:
        speeds = [round(rng.uniform(0.2, 3.0), rng.choice((1, 3, 9))) for _ in range(n)]
    num_domains = rng.randint(1, 3)
    if rng.random() < 0.5:
        domains = [u * num_domains // n for u in range(n)]  # contiguous leaves
    else:
        domains = [rng.randrange(num_domains) for _ in range(n)]
    penalty = 0.0 if rng.random() < 0.4 else rng.choice((0.1, 0.25, 0.5, 1.0, rng.uniform(0, 2)))
    gps = rng.choice((4, 8, 8, 12, 16, 16, 24))
    if rng.random() < 0.85:  # feasible GPU count most of the time
        stages = max(1, min(4, sum(gpus) // gps))
    else:
        stages = rng.randint(1, 4)
    return MappingProblem(gpus, speeds, domains, stages, gps, penalty)


# ---------------------------------------------------------------------------------------
# 1. CP-SAT == exhaustive search (objective and the documented tie-break)
# ---------------------------------------------------------------------------------------

def test_solver_matches_brute_force_on_random_small_instances():
    rng = random.Random(20240711)
    seen = {"infeasible": 0, "megatron": 0, "regrouped": 0, "penalty": 0}
    for _ in range(150):
        p = _random_small(rng)
        try:
            ref = brute_force_mapping(p)
        except InfeasibleMapping:
            with pytest.raises(InfeasibleMapping):
                solve_mapping(p)
            assert not any(True for _ in _all_mappings(p)) if p.num_units <= 7 else True
            seen["infeasible"] += 1
            continue
        got = solve_mapping(p)
        _check_well_formed(p, ref)
        _check_well_formed(p, got)
        assert got.optimal and ref.optimal, p
        assert got.objective == pytest.approx(ref.objective, rel=1e-9, abs=1e-12), p
        assert got.stage_units == ref.stage_units, p
        assert got == ref, p
        megatron = _megatron_stages(p)
        if megatron is not None:
            assert got.objective >= _float_objective(p, megatron) - 1e-9
        seen["megatron" if megatron is not None and got.stage_units == _canonical(megatron)
             else "regrouped"] += 1
        seen["penalty"] += p.domain_span_penalty > 0
    # the generator exercises every branch
    assert seen["infeasible"] >= 10 and seen["megatron"] >= 10 and seen["regrouped"] >= 30
    assert seen["penalty"] >= 30


def test_brute_force_follows_documented_definition_on_tiny_instances():
    """Independent enumeration: optimum of the integer objective, then tie-break rules 2-4."""
    rng = random.Random(7)
    checked = 0
    while checked < 40:
        p = _random_small(rng)
        if p.num_units > 6 or p.num_stages > 3:
            continue
        expected = _spec_mapping(p)
        if expected is None:
            with pytest.raises(InfeasibleMapping):
                brute_force_mapping(p)
            with pytest.raises(InfeasibleMapping):
                solve_mapping(p)
        else:
            assert brute_force_mapping(p).stage_units == expected, p
            assert solve_mapping(p).stage_units == expected, p
        checked += 1


def test_a_tie_break_cut_short_is_optimal_and_says_so(monkeypatch):
    """When the budget runs out during the lexicographic tie-break, the mapping is still an
    optimum (same objective), and ``tie_break_complete`` is False, which the plan's note
    reports; run to its end it is True."""
    from planner.training import placement

    rng = random.Random(11)
    cut = 0
    for _ in range(400):
        p = _random_small(rng)
        try:
            full = solve_mapping(p)
        except InfeasibleMapping:
            continue
        assert full.tie_break_complete
        megatron = _megatron_stages(p)
        if megatron is not None and full.stage_units == _canonical(megatron):
            continue  # rule 2 settled it: no lexicographic phase
        with monkeypatch.context() as m:
            m.setattr(cpsat._Budget, "spent", property(lambda self: True))
            short = solve_mapping(p)
        assert short.optimal and short.objective == full.objective
        if not short.tie_break_complete:
            cut += 1
            note = placement.mapping_note(p, short, listing_used=False)
            assert note is not None and "tie-break" in note and "optimal" in note
        if cut >= 5:
            break
    assert cut >= 5


def test_brute_force_refuses_large_instances():
    n = BRUTE_FORCE_MAX_UNITS + 1
    p = MappingProblem([8] * n, [1.0] * n, [0] * n, 1, 8)
    with pytest.raises(ValueError, match="at most"):
        brute_force_mapping(p)


# ---------------------------------------------------------------------------------------
# 2. Never worse than Megatron, bound >= objective (sizes beyond brute force)
# ---------------------------------------------------------------------------------------

def test_never_worse_than_megatron_on_large_random_instances():
    rng = random.Random(99)
    compared = better = 0
    for _ in range(10):
        n = rng.choice((64, 128, 256, 512))
        levels = [round(rng.uniform(0.5, 2.0), 2) for _ in range(rng.randint(2, 4))]
        size = rng.choice((4, 8))
        gpus = [size] * n
        if rng.random() < 0.5:  # runs of like nodes, like node groups in a cluster spec
            block = rng.choice((1, 2, 8))
            speeds = [levels[(u // block) % len(levels)] for u in range(n)]
        else:
            speeds = [rng.choice(levels) for _ in range(n)]
        leaf = rng.choice((32, 64, n))
        penalty = rng.choice((0.0, 0.0, 0.05, 0.3))
        gps = size * rng.choice((2, 4, 8))
        stages = min(rng.choice((2, 4, 8, 16)), n * size // gps)
        p = MappingProblem(gpus, speeds, [u // leaf for u in range(n)], stages, gps, penalty,
                           time_limit_s=1.0)
        got = solve_mapping(p)
        _check_well_formed(p, got)
        base = megatron_mapping(p)
        assert got.objective >= base.objective - 1e-9
        assert got.objective >= mapping_objective(p, megatron_stage_units(p)) - 1e-9
        # no mapping can beat every stage running at the fastest speed in one domain
        assert got.objective <= stages * max(speeds) + 1e-9
        if got.optimal:
            assert got.bound == pytest.approx(got.objective)
        compared += 1
        better += got.objective > base.objective + 1e-9
    assert compared == 10 and better >= 1  # the instances are not all trivially Megatron's


def test_time_limited_solve_is_never_worse_than_megatron():
    """A solve cut short by the wall clock falls back to (at least) the hinted start."""
    rng = random.Random(5)
    n = 512
    speeds = [rng.choice((0.7, 1.0, 1.3, 1.9)) for _ in range(n)]
    p = MappingProblem([8] * n, speeds, [u // 16 for u in range(n)], 16, 64, 0.05,
                       time_limit_s=0.01)
    got = solve_mapping(p)
    _check_well_formed(p, got)
    assert got.objective >= megatron_mapping(p).objective - 1e-9


# ---------------------------------------------------------------------------------------
# 3. Strictly better than Megatron on alternating fast/slow nodes
# ---------------------------------------------------------------------------------------

def test_alternating_speeds_group_like_nodes():
    """4 nodes x 8 GPUs, 2 stages of 16 GPUs, speeds fast/slow/fast/slow in listing order.

    Megatron: {0,1} and {2,3}, each paced by its slow node: 1.0 + 1.0 = 2.0.
    Grouped:  {0,2} at 1.5 and {1,3} at 1.0: 2.5 (the optimum: some stage holds a slow node).
    """
    p = MappingProblem([8, 8, 8, 8], [1.5, 1.0, 1.5, 1.0], [0, 0, 0, 0], 2, 16)
    base = megatron_mapping(p)
    assert base.stage_units == ((0, 1), (2, 3))
    assert base.stage_speed == (1.0, 1.0)
    assert base.objective == pytest.approx(2.0)
    got = solve_mapping(p)
    assert got.stage_units == ((0, 2), (1, 3))
    assert got.stage_speed == (1.5, 1.0)
    assert got.objective == pytest.approx(2.5)
    assert got.optimal and got.bound == pytest.approx(2.5)
    assert got.objective > base.objective + 0.5 - 1e-9
    assert brute_force_mapping(p) == got


def test_alternating_speeds_with_unused_units_takes_the_fast_ones():
    """6 nodes, only 2 stages of 2 nodes: the two slow nodes stay idle, both stages run at 1.5."""
    p = MappingProblem([8] * 6, [1.5, 1.0, 1.5, 1.0, 1.5, 1.5], [0] * 6, 2, 16)
    assert megatron_mapping(p).objective == pytest.approx(2.0)  # {0,1}, {2,3}
    got = solve_mapping(p)
    assert got.objective == pytest.approx(3.0)
    assert all(p.unit_speed[u] == 1.5 for st in got.stage_units for u in st)
    # tie-break rule 4: the lowest-indexed fast units, handed out stage by stage
    assert got.stage_units == ((0, 2), (4, 5))


# ---------------------------------------------------------------------------------------
# 4. Homogeneous clusters: Megatron's mapping, optimal, no model built
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("gpus, domains, stages, gps, penalty", [
    ([8] * 16, [u // 4 for u in range(16)], 4, 32, 0.0),
    ([8] * 16, [u // 4 for u in range(16)], 4, 32, 0.5),  # leaves line up with stages
    ([8] * 6, [0] * 6, 2, 16, 0.0),  # more nodes than needed: the first four
    ([8, 4, 4, 8], [0, 0, 1, 1], 2, 12, 0.0),  # mixed node sizes, one speed
], ids=["16x8", "16x8-penalty", "spare-units", "mixed-sizes"])
def test_homogeneous_cluster_returns_megatron(monkeypatch, gpus, domains, stages, gps, penalty):
    p = MappingProblem(gpus, [1.25] * len(gpus), domains, stages, gps, penalty)

    def no_model(*args, **kwargs):
        raise AssertionError("the homogeneous fast path must not build a CP-SAT model")

    monkeypatch.setattr(cpsat, "_build_model", no_model)
    got = solve_mapping(p)
    expected = _megatron_stages(p)
    assert got.stage_units == _canonical(expected) == megatron_mapping(p).stage_units
    assert got.optimal and got.objective == pytest.approx(stages * 1.25)
    assert got.bound == got.objective
    assert got.stage_speed == (1.25,) * stages


def test_homogeneous_speeds_keep_megatron_when_it_ties():
    """Rule 2 beyond the fast path: a penalty forces a model, Megatron still attains the optimum.

    6 nodes on leaves of 3, 3 stages of 2 nodes: some stage must span both leaves whatever
    the mapping (3 odd), and Megatron spans exactly once, so it is optimal and returned.
    """
    p = MappingProblem([8] * 6, [1.0] * 6, [0, 0, 0, 1, 1, 1], 3, 16, 0.2)
    got = solve_mapping(p)
    assert got.stage_units == ((0, 1), (2, 3), (4, 5))
    assert got.objective == pytest.approx(3.0 - 0.2)
    assert got.optimal


# ---------------------------------------------------------------------------------------
# 5. Domain span penalty
# ---------------------------------------------------------------------------------------

def test_penalty_keeps_stage_inside_one_domain():
    """Leaves [0, 1, 1, 0]: Megatron's {0,1} and {2,3} both span two leaves (2 - 2p);
    {0,3} and {1,2} each sit in one leaf (2.0)."""
    p = MappingProblem([8] * 4, [1.0] * 4, [0, 1, 1, 0], 2, 16, 0.1)
    assert megatron_mapping(p).objective == pytest.approx(2.0 - 2 * 0.1)
    got = solve_mapping(p)
    assert got.stage_units == ((0, 3), (1, 2))
    assert got.objective == pytest.approx(2.0)
    assert all(len({p.unit_domain[u] for u in st}) == 1 for st in got.stage_units)
    # without the penalty every mapping is worth 2.0, so Megatron's order is kept (rule 2)
    free = MappingProblem([8] * 4, [1.0] * 4, [0, 1, 1, 0], 2, 16, 0.0)
    assert solve_mapping(free).stage_units == ((0, 1), (2, 3))


def test_penalty_single_stage_avoids_spanning():
    """One stage of two nodes from leaves [0, 1, 1]: Megatron's {0,1} spans (1 - p), {1,2} does not."""
    p = MappingProblem([8] * 3, [1.0] * 3, [0, 1, 1], 1, 16, 0.3)
    got = solve_mapping(p)
    assert got.stage_units == ((1, 2),)
    assert got.objective == pytest.approx(1.0)
    assert megatron_mapping(p).objective == pytest.approx(0.7)


@pytest.mark.parametrize("penalty, stages, value", [
    (0.25, ((0, 2), (1, 3)), 2.0 + 1.0 - 2 * 0.25),  # speed gain 1.0 > two spans 0.5
    (0.75, ((0, 1), (2, 3)), 2.0),  # two spans 1.5 > speed gain 1.0: stay in the leaves
])
def test_penalty_trades_against_speed(penalty, stages, value):
    """Leaves [0, 0, 1, 1], speeds [2, 1, 2, 1]. Grouping by speed ({0,2},{1,3}) gives
    2 + 1 but spans twice; grouping by leaf ({0,1},{2,3}) gives 1 + 1 without spans;
    the cross pairing {0,3},{1,2} gives 1 + 1 and spans twice (never better)."""
    p = MappingProblem([8] * 4, [2.0, 1.0, 2.0, 1.0], [0, 0, 1, 1], 2, 16, penalty)
    got = solve_mapping(p)
    assert got.stage_units == stages
    assert got.objective == pytest.approx(value)
    assert brute_force_mapping(p) == got


# ---------------------------------------------------------------------------------------
# 6. Determinism and input forms
# ---------------------------------------------------------------------------------------

def test_same_input_gives_identical_mapping():
    rng = random.Random(3)
    n = 96
    speeds = [rng.choice((1.0, 1.4, 2.0)) for _ in range(n)]
    gpus = [rng.choice((4, 8)) for _ in range(n)]
    domains = [u // 16 for u in range(n)]
    a = MappingProblem(gpus, speeds, domains, 4, 32, 0.1)
    b = MappingProblem(tuple(gpus), tuple(speeds), tuple(domains), 4, 32, 0.1)
    c = MappingProblem(list(gpus), list(speeds), iter(domains), 4, 32, 0.1)  # fresh objects
    assert a == b == c and isinstance(c.unit_domain, tuple)
    first = solve_mapping(a)
    assert first.optimal
    assert solve_mapping(a) == first
    assert solve_mapping(b) == first
    assert solve_mapping(c) == first
    assert hash(first) == hash(solve_mapping(b))


def test_problem_is_not_aliased_to_caller_lists():
    gpus, speeds, domains = [8] * 4, [1.5, 1.0, 1.5, 1.0], [0] * 4
    p = MappingProblem(gpus, speeds, domains, 2, 16)
    speeds[:] = [1.0] * 4  # mutating the caller's list must not change the problem
    assert p.unit_speed == (1.5, 1.0, 1.5, 1.0)
    assert solve_mapping(p).stage_units == ((0, 2), (1, 3))


def test_optimum_does_not_depend_on_unit_order():
    """Relabelling the units permutes the mappings, so the optimal objective is unchanged."""
    rng = random.Random(11)
    for _ in range(6):
        n = rng.choice((16, 24, 32))
        gpus = [rng.choice((4, 8)) for _ in range(n)]
        speeds = [rng.choice((1.0, 1.3, 1.8)) for _ in range(n)]
        domains = [rng.randrange(3) for _ in range(n)]
        penalty = rng.choice((0.0, 0.2))
        p = MappingProblem(gpus, speeds, domains, 3, 16, penalty)
        perm = list(range(n))
        rng.shuffle(perm)
        q = MappingProblem([gpus[i] for i in perm], [speeds[i] for i in perm],
                           [domains[i] for i in perm], 3, 16, penalty)
        a, b = solve_mapping(p), solve_mapping(q)
        assert a.optimal and b.optimal
        assert a.objective == pytest.approx(b.objective, rel=1e-9)
        assert sorted(a.stage_speed) == sorted(b.stage_speed)


# ---------------------------------------------------------------------------------------
# 7. Validation
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(unit_gpus=[8, 8], unit_speed=[1.0], unit_domain=[0, 0]), "differ in length"),
    (dict(unit_domain=[0]), "differ in length"),
    (dict(unit_speed=[1.0, 0.0]), "unit_speed must be finite and > 0"),
    (dict(unit_speed=[1.0, -2.0]), "unit_speed must be finite and > 0"),
    (dict(unit_speed=[1.0, math.nan]), "unit_speed must be finite and > 0"),
    (dict(unit_speed=[1.0, math.inf]), "unit_speed must be finite and > 0"),
    (dict(unit_gpus=[8, 0]), "unit_gpus must be positive integers"),
    (dict(unit_gpus=[8, 2.5]), "unit_gpus must be positive integers"),
    (dict(unit_domain=[0, 0.5]), "unit_domain must be integers"),
    (dict(num_stages=0), "must be >= 1"),
    (dict(gpus_per_stage=0), "must be >= 1"),
    (dict(domain_span_penalty=-0.1), "domain_span_penalty must be finite and >= 0"),
    (dict(domain_span_penalty=math.inf), "domain_span_penalty must be finite and >= 0"),
    (dict(time_limit_s=0), "time_limit_s must be > 0"),
])
def test_invalid_problem_is_rejected(kwargs, message):
    args = dict(unit_gpus=[8, 8], unit_speed=[1.0, 1.0], unit_domain=[0, 0], num_stages=1,
                gpus_per_stage=8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        MappingProblem(**args)


@pytest.mark.parametrize("gpus, stages, gps, message", [
    ([8, 8, 8], 1, 12, "no set of units sums to exactly 12 GPUs"),  # unreachable size
    ([8, 8], 3, 8, "need 24 GPUs, the units hold 16"),  # too few GPUs
    ([16, 4, 4], 2, 8, "cannot form 2 disjoint stages of exactly 8 GPUs"),  # 16 never fits
])
def test_infeasible_problems_raise_in_every_solver(gpus, stages, gps, message):
    p = MappingProblem(gpus, [1.0] * len(gpus), [0] * len(gpus), stages, gps)
    assert issubclass(InfeasibleMapping, ValueError)
    for solve in (solve_mapping, brute_force_mapping):
        with pytest.raises(InfeasibleMapping, match=message):
            solve(p)
    assert not any(True for _ in _all_mappings(p))


def test_megatron_straddle_is_infeasible_but_solver_finds_a_mapping():
    """Units of 4, 8, 4 GPUs into stages of 8: in listing order the 8-GPU unit would straddle
    stages 0 and 1; the solver pairs the two 4-GPU units instead."""
    p = MappingProblem([4, 8, 4], [1.0, 2.0, 1.0], [0, 0, 0], 2, 8)
    with pytest.raises(InfeasibleMapping, match="straddle"):
        megatron_mapping(p)
    got = solve_mapping(p)
    assert got.stage_units == ((0, 2), (1,))
    assert got.objective == pytest.approx(1.0 + 2.0)
    assert got.optimal and brute_force_mapping(p) == got


@pytest.mark.parametrize("stages, message", [
    ([(0, 1)], "1 stages given, 2 expected"),
    ([(0, 1), ()], "stage 1 is empty"),
    ([(0, 1), (2, 9)], "unit 9 out of range"),
    ([(0, 1), (1, 2)], "unit 1 is in more than one stage"),
    ([(0, 1), (2,)], "stage 1 holds 8 GPUs, 16 needed"),
])
def test_mapping_objective_rejects_invalid_stage_units(stages, message):
    p = MappingProblem([8] * 4, [1.0] * 4, [0] * 4, 2, 16)
    with pytest.raises(ValueError, match=message):
        mapping_objective(p, stages)


# ---------------------------------------------------------------------------------------
# 8. Large aggregated case
# ---------------------------------------------------------------------------------------

def test_large_cluster_of_four_classes_is_solved_optimally():
    """2048 nodes x 8 GPUs whose speeds cycle 1.0, 1.3, 1.6, 2.0 in listing order; 16 stages
    of 128 nodes. Megatron puts every speed in every stage (16 x 1.0); four stages of each kind
    give 4 x (1.0 + 1.3 + 1.6 + 2.0) = 23.6, the most possible since only 512 nodes (4 stages)
    of each speed exist and a stage is no faster than its slowest node."""
    levels = (1.0, 1.3, 1.6, 2.0)
    n = 2048
    p = MappingProblem([8] * n, [levels[u % 4] for u in range(n)], [u // 32 for u in range(n)],
                       16, 8 * 128, time_limit_s=10.0)
    assert len(unit_classes(p)) == 4  # no penalty: the domain is not part of a class
    base = megatron_mapping(p)
    assert base.objective == pytest.approx(16 * 1.0)
    got = solve_mapping(p)
    _check_well_formed(p, got)
    assert got.optimal
    assert got.objective >= base.objective - 1e-9
    assert got.objective == pytest.approx(4 * sum(levels))
    assert sorted(got.stage_speed) == sorted(levels * 4)
    for st in got.stage_units:  # every stage is made of one kind of node
        assert len({p.unit_speed[u] for u in st}) == 1


# ---------------------------------------------------------------------------------------
# Networks: a stage whose units cannot all do RDMA with each other runs on sockets
# ---------------------------------------------------------------------------------------

def _with_networks(p: MappingProblem, rng: random.Random) -> MappingProblem:
    n = p.num_units
    nets = [rng.randrange(rng.randint(1, 3)) for _ in range(n)]
    sockets = [v * rng.choice((0.2, 0.5, 0.9, 1.0)) for v in p.unit_speed]
    return MappingProblem(p.unit_gpus, p.unit_speed, p.unit_domain, p.num_stages,
                          p.gpus_per_stage, p.domain_span_penalty, unit_network=nets,
                          unit_socket_speed=sockets)


def test_network_aware_solver_matches_brute_force():
    """With networks, CP-SAT and exhaustive search agree (objective, mapping, tie-break), and
    a stage's speed is its slowest socket speed exactly when it spans networks."""
    rng = random.Random(7)
    mixed_optima = pure_optima = 0
    for _ in range(150):
        p = _with_networks(_random_small(rng), rng)
        try:
            ref = brute_force_mapping(p)
        except InfeasibleMapping:
            with pytest.raises(InfeasibleMapping):
                solve_mapping(p)
            continue
        got = solve_mapping(p)
        assert got.optimal and got.objective == pytest.approx(ref.objective, rel=1e-9), p
        assert got.stage_units == ref.stage_units, p
        for units, speed in zip(got.stage_units, got.stage_speed):
            spans = len({p.unit_network[u] for u in units}) > 1
            expected = min((p.unit_socket_speed if spans else p.unit_speed)[u] for u in units)
            assert speed == pytest.approx(expected)
            mixed_optima += spans
            pure_optima += not spans
    assert mixed_optima >= 5 and pure_optima >= 50  # both kinds of stage occur


def test_holmes_groups_each_stage_on_one_network():
    """Four IB and four RoCE nodes listed alternately, same GPUs and speed: Megatron's order
    puts one of each in every stage (its DP groups fall back to sockets); the solver keeps
    every stage on one network and runs at full speed."""
    n = 8
    p = MappingProblem([8] * n, [1.0] * n, [0] * n, num_stages=4, gpus_per_stage=16,
                       unit_network=[u % 2 for u in range(n)], unit_socket_speed=[0.3] * n)
    base = megatron_mapping(p)
    assert base.stage_speed == (0.3,) * 4
    got = solve_mapping(p)
    assert all(len({u % 2 for u in st}) == 1 for st in got.stage_units)
    assert got.objective == pytest.approx(4.0) and got.optimal
    assert brute_force_mapping(p).objective == pytest.approx(4.0)


def test_networks_validated():
    with pytest.raises(ValueError, match="together"):
        MappingProblem([8], [1.0], [0], 1, 8, unit_network=[0])
    with pytest.raises(ValueError, match="<= unit_speed"):
        MappingProblem([8], [1.0], [0], 1, 8, unit_network=[0], unit_socket_speed=[2.0])


# ---------------------------------------------------------------------------------------
# Containment as a hard rule: with contain_networks no stage spans networks
# ---------------------------------------------------------------------------------------

def _contained(p: MappingProblem) -> MappingProblem:
    return replace(p, contain_networks=True)


def _best_contained_by_enumeration(p: MappingProblem) -> float | None:
    """The optimum over every labelled assignment whose stages each sit on one network (the
    test's own enumeration, not the module's); None when there is none."""
    best = None
    for stages in _all_mappings(p):
        if any(len({p.unit_network[u] for u in st}) > 1 for st in stages):
            continue
        value = _int_objective(p, stages)
        best = value if best is None else max(best, value)
    return None if best is None else best / _scale(p)


def test_contained_solver_matches_brute_force():
    """With the hard rule, CP-SAT and exhaustive search agree (objective, mapping, tie-break, and
    infeasibility), no returned stage spans networks, and the optimum equals an independent
    enumeration restricted to contained stages; both feasible and infeasible cases occur, and
    some are infeasible only because of the rule."""
    rng = random.Random(11)
    feasible = infeasible_by_rule = 0
    for _ in range(200):
        loose = _with_networks(_random_small(rng), rng)
        if loose.num_units > 7:  # the independent enumeration is (stages + 1) ** units
            continue
        p = _contained(loose)
        expected = _best_contained_by_enumeration(p)
        try:
            ref = brute_force_mapping(p)
        except InfeasibleMapping:
            assert expected is None, p
            with pytest.raises(InfeasibleMapping):
                solve_mapping(p)
            try:
                brute_force_mapping(loose)
                infeasible_by_rule += 1
            except InfeasibleMapping:
                pass
            continue
        got = solve_mapping(p)
        validate_stage_units(p, got.stage_units)  # raises on a stage that spans networks
        assert all(len({p.unit_network[u] for u in st}) == 1 for st in got.stage_units)
        assert got.optimal and got.objective == pytest.approx(ref.objective, rel=1e-9), p
        assert got.objective == pytest.approx(expected, rel=1e-5), p  # 1e-6 of max speed
        assert got.stage_units == ref.stage_units, p
        assert got.stage_speed == tuple(min(p.unit_speed[u] for u in st)
                                        for st in got.stage_units)
        feasible += 1
    assert feasible >= 30 and infeasible_by_rule >= 5


@pytest.mark.parametrize("counts, nodes_per_stage, stages, feasible", [
    ((4, 4, 4), 4, 3, True),    # 4 IB + 4 RoCE + 4 TCP, stages of 4 nodes
    ((5, 3, 4), 4, 3, False),   # 5 IB nodes cannot hold whole stages of 4 nodes
    ((5, 3, 4), 2, 6, False),   # 5 IB and 3 RoCE: odd counts, stages of 2 nodes
    ((5, 3, 4), 1, 12, True),   # one node per stage: always contained
    ((6, 6), 4, 3, False),      # two islands of 6, stages of 4
    ((6, 6), 6, 2, True),       # ... of 6
    ((6, 6), 3, 4, True),       # ... of 3
])
def test_holmes_counts_contained_feasibility(counts, nodes_per_stage, stages, feasible):
    """Whole stages on one network exist exactly when every network's node count is a
    multiple of the stage's nodes (every node used); otherwise both solvers say infeasible,
    while the loose problem (mixed stages priced at socket speed) is always feasible."""
    nets = [k for k, c in enumerate(counts) for _ in range(c)]
    interleaved = sorted(range(len(nets)), key=lambda u: (u % len(counts), u))
    net = [nets[u] for u in interleaved]
    n = len(net)
    p = MappingProblem([8] * n, [1.0] * n, [0] * n, stages, 8 * nodes_per_stage,
                       unit_network=net, unit_socket_speed=[0.3] * n, contain_networks=True)
    assert solve_mapping(replace(p, contain_networks=False)).objective > 0
    solvers = [solve_mapping] + ([brute_force_mapping] if n <= BRUTE_FORCE_MAX_UNITS else [])
    for solver in solvers:
        if not feasible:
            with pytest.raises(InfeasibleMapping, match="each on one network"):
                solver(p)
            continue
        got = solver(p)
        assert all(len({net[u] for u in st}) == 1 for st in got.stage_units)
        assert got.objective == pytest.approx(stages * 1.0)


def test_contained_rule_refuses_mixed_listing_order():
    """Megatron's order mixes networks here: under the rule it is not a mapping at all, and
    the validator refuses a stage that spans networks."""
    p = MappingProblem([8] * 4, [1.0] * 4, [0] * 4, 2, 16, unit_network=[0, 1, 0, 1],
                       unit_socket_speed=[0.5] * 4, contain_networks=True)
    with pytest.raises(InfeasibleMapping, match="spans networks"):
        megatron_stage_units(p)
    with pytest.raises(ValueError, match="spans networks"):
        validate_stage_units(p, ((0, 1), (2, 3)))
    assert solve_mapping(p).stage_units == ((0, 2), (1, 3))
