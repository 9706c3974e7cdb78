"""Property tests of the three pipeline solvers, each checked against an independent reference.

* ``solvers.pipeline.dp``: the min-max layer partition DP against an exhaustive enumeration
  written here from the module docstring's definitions (and against the module's own brute
  force, whose tie-break must match exactly), on seeded random instances with extras,
  slowdowns, memory limits and minimum layer counts; plus hand-checked cases.
* ``solvers.pipeline.sim``: the event simulator, run on the orders of
  ``solvers.pipeline.schedules``, against ``solvers.pipeline.closed_form`` on a grid of
  ``p, m, v, f, b``, and the events against the scheduling rules (every operation once,
  dependencies, no overlap on a device, earliest start).
* ``solvers.pipeline.slimpipe``: slice costs from the causal-attention block count, the step time
  against ``sim.simulate_orders`` on ``slimpipe_orders``, and ``choose_slices``
  against a plain loop over the allowed slice counts.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from solvers.pipeline import dp
from solvers.pipeline import closed_form, schedules, sim
from solvers.pipeline import slimpipe as sp

REL = 1e-9


# =========================================================================================
# pipeline_dp
# =========================================================================================

def _compositions(total: int, parts: int, minimum: int):
    """All ``parts``-tuples of integers >= ``minimum`` summing to ``total`` (any order)."""
    if parts == 1:
        if total >= minimum:
            yield (total,)
        return
    for first in range(minimum, total - minimum * (parts - 1) + 1):
        for rest in _compositions(total - first, parts - 1, minimum):
            yield (first,) + rest


def _ref_stage_time(pr: dp.PartitionProblem, s: int, a: int, b: int) -> float:
    """Stage time straight from the module docstring's definition."""
    S = pr.num_stages
    t = math.fsum(pr.layer_time_s[a:b])
    if s == 0:
        t = t + pr.first_extra_s
    if s == S - 1:
        t = t + pr.last_extra_s
    slow = 1.0 if pr.stage_slowdown is None else pr.stage_slowdown[s]
    link = 0.0 if pr.stage_link_s is None else pr.stage_link_s[s]
    return t * slow + link


def _ref_stage_bytes(pr: dp.PartitionProblem, s: int, a: int, b: int) -> float:
    S = pr.num_stages
    state = 0.0 if pr.layer_state_bytes is None else math.fsum(pr.layer_state_bytes[a:b])
    act = 0.0 if pr.layer_activation_bytes is None else math.fsum(pr.layer_activation_bytes[a:b])
    in_flight = S - s if pr.in_flight is None else pr.in_flight[s]  # 1F1B default
    total = state + in_flight * act
    if s == 0:
        total += pr.first_extra_bytes
    if s == S - 1:
        total += pr.last_extra_bytes
    return total


def _ref_feasible(pr: dp.PartitionProblem, counts) -> bool:
    start = 0
    for s, c in enumerate(counts):
        if c < pr.min_layers_per_stage:
            return False
        if (pr.stage_memory_limit_bytes is not None
                and _ref_stage_bytes(pr, s, start, start + c) > pr.stage_memory_limit_bytes[s]):
            return False
        start += c
    return start == pr.num_layers


def _ref_bottleneck(pr: dp.PartitionProblem, counts) -> float:
    start, worst = 0, 0.0
    for s, c in enumerate(counts):
        worst = max(worst, _ref_stage_time(pr, s, start, start + c))
        start += c
    return worst


def _ref_solve(pr: dp.PartitionProblem):
    """(optimum, lexicographically smallest counts within 1e-9 of it) or None if infeasible."""
    feasible = [c for c in _compositions(pr.num_layers, pr.num_stages, pr.min_layers_per_stage)
                if _ref_feasible(pr, c)]
    if not feasible:
        return None
    scored = [(_ref_bottleneck(pr, c), c) for c in feasible]
    optimum = min(t for t, _ in scored)
    chosen = min(c for t, c in scored if t <= optimum * (1 + dp.TIE_RELATIVE))
    return optimum, chosen


def _random_partition_problem(rng: np.random.Generator) -> dp.PartitionProblem:
    L = int(rng.integers(2, 11))
    S = int(rng.integers(1, 5))
    integer_times = rng.random() < 0.4  # integer layer times produce genuine ties
    if integer_times:
        layer_time = [float(x) for x in rng.integers(1, 4, L)]
    else:
        layer_time = [float(x) for x in rng.uniform(0.1, 2.0, L)]
    kw = dict(layer_time_s=layer_time, num_stages=S,
              min_layers_per_stage=int(rng.integers(1, 3)),
              first_extra_s=float(rng.choice([0.0, rng.uniform(0, 3)])),
              last_extra_s=float(rng.choice([0.0, rng.uniform(0, 3)])))
    if rng.random() < 0.5:
        kw["stage_slowdown"] = ([float(x) for x in rng.choice([1.0, 1.5, 2.0], S)]
                                if integer_times else [float(x) for x in rng.uniform(0.5, 2, S)])
    if rng.random() < 0.4:
        kw["stage_link_s"] = ([float(x) for x in rng.choice([0.0, 1.0], S)]
                              if integer_times else [float(x) for x in rng.uniform(0, 1.5, S)])
    if rng.random() < 0.6:
        state = rng.uniform(1, 3, L)
        act = rng.uniform(0, 1, L)
        kw.update(layer_state_bytes=[float(x) for x in state],
                  layer_activation_bytes=[float(x) for x in act],
                  first_extra_bytes=float(rng.uniform(0, 1)),
                  last_extra_bytes=float(rng.uniform(0, 1)))
        if rng.random() < 0.3:
            kw["in_flight"] = [int(x) for x in rng.integers(1, 5, S)]
        mean = (state.sum() + S * act.sum()) / S
        kw["stage_memory_limit_bytes"] = [float(x) for x in rng.uniform(0.6, 2.0, S) * mean]
    return dp.PartitionProblem(**kw)


def _check_infeasible_message(pr: dp.PartitionProblem, message: str) -> None:
    L, S, k = pr.num_layers, pr.num_stages, pr.min_layers_per_stage
    if S * k > L:
        assert f"at least {k} layer" in message and str(L) in message
        return
    assert pr.stage_memory_limit_bytes is not None
    assert "limit" in message
    if message.startswith("stage ") and "smallest layer block" in message:
        # "stage s needs at least X ..., limit Y": stage s cannot hold any block it could get
        s = int(message.split()[1])
        limit = pr.stage_memory_limit_bytes[s]
        assert f"{limit:.6g}" in message
        if S == 1:
            blocks = [(0, L)]
        elif s == 0:
            blocks = [(0, a) for a in range(k, L - (S - 1) * k + 1)]
        elif s == S - 1:
            blocks = [(a, L) for a in range((S - 1) * k, L - k + 1)]
        else:
            blocks = [(a, b) for a in range(s * k, L) for b in range(a + k, L - (S - s - 1) * k + 1)]
        assert blocks and all(_ref_stage_bytes(pr, s, a, b) > limit for a, b in blocks)


def test_dp_matches_exhaustive_search_on_random_instances():
    rng = np.random.default_rng(20240607)
    outcomes = {"feasible": 0, "count-infeasible": 0, "memory-infeasible": 0,
                "memory-binding": 0}
    for _ in range(200):
        pr = _random_partition_problem(rng)
        reference = _ref_solve(pr)
        if reference is None:
            with pytest.raises(dp.InfeasiblePartition) as dp_err:
                dp.partition_layers(pr)
            with pytest.raises(dp.InfeasiblePartition) as bf_err:
                dp.brute_force_partition(pr)
            assert str(dp_err.value) == str(bf_err.value)
            _check_infeasible_message(pr, str(dp_err.value))
            kind = ("count-infeasible" if pr.num_stages * pr.min_layers_per_stage > pr.num_layers
                    else "memory-infeasible")
            outcomes[kind] += 1
            continue
        optimum, lexmin = reference
        got = dp.partition_layers(pr)
        brute = dp.brute_force_partition(pr)
        outcomes["feasible"] += 1
        assert got.bottleneck_s == pytest.approx(optimum, rel=REL)
        assert brute.bottleneck_s == pytest.approx(optimum, rel=REL)
        assert got.layers_per_stage == brute.layers_per_stage == lexmin
        assert _ref_feasible(pr, got.layers_per_stage)
        assert dp.is_feasible(pr, got.layers_per_stage)
        assert len(got.stage_time_s) == pr.num_stages
        start = 0
        for s, c in enumerate(got.layers_per_stage):
            assert got.stage_time_s[s] == pytest.approx(_ref_stage_time(pr, s, start, start + c),
                                                        rel=1e-12)
            start += c
        assert got.bottleneck_s == max(got.stage_time_s)
        if pr.stage_memory_limit_bytes is not None:
            free = dp.partition_layers(dp.PartitionProblem(
                **{**pr.__dict__, "stage_memory_limit_bytes": None}))
            assert free.bottleneck_s <= got.bottleneck_s * (1 + REL)  # limits never help
            if free.bottleneck_s < got.bottleneck_s * (1 - REL):
                outcomes["memory-binding"] += 1
    # the random mix really exercised every branch
    assert all(n >= 5 for n in outcomes.values()), outcomes


def test_dp_matches_exhaustive_search_on_medium_instances():
    rng = np.random.default_rng(7)
    for _ in range(6):
        L, S = int(rng.integers(14, 19)), int(rng.integers(3, 5))
        pr = dp.PartitionProblem(layer_time_s=[float(x) for x in rng.uniform(0.5, 1.5, L)],
                                 num_stages=S, first_extra_s=float(rng.uniform(0, 2)),
                                 last_extra_s=float(rng.uniform(0, 4)),
                                 stage_slowdown=[float(x) for x in rng.uniform(0.8, 1.3, S)])
        optimum, lexmin = _ref_solve(pr)
        got = dp.partition_layers(pr)
        assert got.bottleneck_s == pytest.approx(optimum, rel=REL)
        assert got.layers_per_stage == lexmin


def test_dp_hand_checked_two_stage_split():
    # layers 1,2,3,4 on two stages: splits give max(1,9)=9, max(3,7)=7, max(6,4)=6 -> (3, 1)
    got = dp.partition_layers(dp.PartitionProblem(layer_time_s=(1.0, 2.0, 3.0, 4.0),
                                                  num_stages=2))
    assert got.layers_per_stage == (3, 1)
    assert got.stage_time_s == (6.0, 4.0) and got.bottleneck_s == 6.0
    # an embedding of 3 s on stage 0: max(4,9)=9, max(6,7)=7, max(9,4)=9 -> (2, 2)
    got = dp.partition_layers(dp.PartitionProblem(layer_time_s=(1.0, 2.0, 3.0, 4.0),
                                                  num_stages=2, first_extra_s=3.0))
    assert got.layers_per_stage == (2, 2) and got.bottleneck_s == 7.0
    # stage 1 twice as slow: max(1,18)=18, max(3,14)=14, max(6,8)=8 -> still (3, 1)
    got = dp.partition_layers(dp.PartitionProblem(layer_time_s=(1.0, 2.0, 3.0, 4.0),
                                                  num_stages=2, stage_slowdown=(1.0, 2.0)))
    assert got.layers_per_stage == (3, 1) and got.stage_time_s == (6.0, 8.0)


def test_dp_tie_break_is_lexicographically_smallest_counts():
    # three equal layers on two stages: (1, 2) and (2, 1) both have bottleneck 2
    got = dp.partition_layers(dp.PartitionProblem(layer_time_s=(1.0, 1.0, 1.0), num_stages=2))
    assert got.layers_per_stage == (1, 2) and got.bottleneck_s == 2.0
    # 7 unit layers on 3 stages: bottleneck 3, smallest counts (1, 3, 3)
    got = dp.partition_layers(dp.PartitionProblem(layer_time_s=(1.0,) * 7, num_stages=3))
    assert got.layers_per_stage == (1, 3, 3) and got.bottleneck_s == 3.0


def test_dp_memory_limit_moves_layers_off_a_small_stage():
    # unit layers, 1 byte of state each; stage 0 may hold only one layer
    pr = dp.PartitionProblem(layer_time_s=(1.0,) * 4, num_stages=2,
                             layer_state_bytes=(1.0,) * 4, stage_memory_limit_bytes=(1.0, 10.0))
    got = dp.partition_layers(pr)
    assert got.layers_per_stage == (1, 3) and got.bottleneck_s == 3.0
    # activations count S - s times by default: stage 0 of 2 holds 2 copies
    pr = dp.PartitionProblem(layer_time_s=(1.0,) * 4, num_stages=2,
                             layer_activation_bytes=(1.0,) * 4,
                             stage_memory_limit_bytes=(2.0, 10.0))
    assert dp.partition_layers(pr).layers_per_stage == (1, 3)


def test_dp_large_vocabulary_last_stage_gets_fewer_layers():
    # 32 unit layers, 4 stages, the output layer + loss worth 4 layers on the last stage:
    # x + 4 = (32 - x) / 3 gives x = 5 layers there and 9 on each other stage, bottleneck 9
    pr = dp.PartitionProblem(layer_time_s=(1.0,) * 32, num_stages=4, last_extra_s=4.0)
    got = dp.partition_layers(pr)
    assert got.layers_per_stage == (9, 9, 9, 5)
    assert got.bottleneck_s == 9.0
    even = dp.evaluate(pr, (8, 8, 8, 8))
    assert even.bottleneck_s == 12.0 > got.bottleneck_s
    # the same on the first stage (embedding) mirrors the split
    mirrored = dp.partition_layers(dp.PartitionProblem(layer_time_s=(1.0,) * 32, num_stages=4,
                                                       first_extra_s=4.0))
    assert mirrored.layers_per_stage == (5, 9, 9, 9)


def test_dp_infeasible_cases_name_the_limit():
    with pytest.raises(dp.InfeasiblePartition, match="at least 2 layers"):
        dp.partition_layers(dp.PartitionProblem(layer_time_s=(1.0,) * 5, num_stages=3,
                                                min_layers_per_stage=2))
    # stage 1 cannot hold even one layer
    pr = dp.PartitionProblem(layer_time_s=(1.0,) * 4, num_stages=2,
                             layer_state_bytes=(2.0,) * 4, stage_memory_limit_bytes=(100.0, 1.0))
    for solver in (dp.partition_layers, dp.brute_force_partition):
        with pytest.raises(dp.InfeasiblePartition, match=r"stage 1 .*limit 1 bytes"):
            solver(pr)
    # each stage fits 1 layer but there are 3
    pr = dp.PartitionProblem(layer_time_s=(1.0,) * 3, num_stages=2,
                             layer_state_bytes=(1.0,) * 3, stage_memory_limit_bytes=(1.0, 1.0))
    for solver in (dp.partition_layers, dp.brute_force_partition):
        with pytest.raises(dp.InfeasiblePartition, match="limit"):
            solver(pr)


def test_dp_evaluate_sums_layer_times_per_stage():
    pr = dp.PartitionProblem(layer_time_s=(0.5, 1.5, 2.0, 1.0, 3.0), num_stages=3,
                             first_extra_s=1.0, last_extra_s=0.25, stage_slowdown=(1.0, 2.0, 1.0))
    got = dp.evaluate(pr, (2, 1, 2))
    assert got.stage_time_s == (0.5 + 1.5 + 1.0, 2.0 * 2.0, 1.0 + 3.0 + 0.25)
    assert got.bottleneck_s == 4.25


def test_dp_rejects_malformed_input():
    with pytest.raises(ValueError):
        dp.PartitionProblem(layer_time_s=(), num_stages=1)
    with pytest.raises(ValueError):
        dp.PartitionProblem(layer_time_s=(1.0, -1.0), num_stages=1)
    with pytest.raises(ValueError):
        dp.PartitionProblem(layer_time_s=(1.0, 1.0), num_stages=2, stage_slowdown=(1.0,))
    with pytest.raises(ValueError):
        dp.PartitionProblem(layer_time_s=(1.0, 1.0), num_stages=2, stage_slowdown=(1.0, 0.0))


# =========================================================================================
# pipeline_sim
# =========================================================================================

def _grid():
    """(schedule, p, m, v) covering m < p, m == p and m > p (interleaved: m multiple of p)."""
    for p in range(1, 7):
        for schedule in schedules.SCHEDULES:
            if schedule == "interleaved-1f1b":
                for v in (2, 3, 4):
                    for m in (p, 2 * p, 3 * p):
                        yield schedule, p, m, v
                continue
            ms = {1, 2, p - 1, p, p + 1, 2 * p, 3 * p + 1} - {0}
            for m in sorted(ms):
                if schedule == "zb-h1" and m < p:
                    continue  # no closed form there (tested against 1f1b below)
                yield schedule, p, m, 1


TIMES = ((1.0, 2.0, 0.5), (1.0, 1.0, 0.5), (0.3, 1.7, 0.2), (2.0, 0.5, 0.9), (1.0, 3.0, 1 / 3))


def _expected_ops(problem: sim.PipelineProblem) -> set:
    kinds = ("F", "B", "W") if problem.schedule == "zb-h1" else ("F", "B")
    return {(kind, mb, c) for kind in kinds for mb in range(problem.num_microbatches)
            for c in range(problem.num_chunks)}


def _check_events(problem: sim.PipelineProblem, result: sim.PipelineResult) -> None:
    """Every op once per device; durations; no overlap; dependencies; earliest start."""
    p, v = problem.num_stages, problem.num_chunks
    by_stage = {s: [e for e in result.events if e.stage == s] for s in range(p)}
    end = {(e.stage, e.kind, e.microbatch, e.chunk): e.end_s for e in result.events}
    expected = _expected_ops(problem)
    for s, events in by_stage.items():
        ops = [(e.kind, e.microbatch, e.chunk) for e in events]
        assert len(ops) == len(set(ops)) == len(expected) and set(ops) == expected
        events = sorted(events, key=lambda e: e.start_s)
        device_free = 0.0
        for e in events:
            assert e.end_s - e.start_s == pytest.approx(sim.op_duration_s(problem, s, e.kind),
                                                        rel=1e-12, abs=1e-15)
            assert e.start_s >= device_free - 1e-12  # one operation at a time
            q = e.chunk * p + s  # virtual stage
            ready = device_free
            if e.kind == "F" and q > 0:
                prev = ((q - 1) % p, "F", e.microbatch, (q - 1) // p)
                delay = problem.p2p_s if prev[0] != s else 0.0
                ready = max(ready, end[prev] + delay)
            if e.kind == "B":
                ready = max(ready, end[(s, "F", e.microbatch, e.chunk)])
                if q < p * v - 1:
                    nxt = ((q + 1) % p, "B", e.microbatch, (q + 1) // p)
                    delay = problem.p2p_s if nxt[0] != s else 0.0
                    ready = max(ready, end[nxt] + delay)
            if e.kind == "W":
                ready = max(ready, end[(s, "B", e.microbatch, e.chunk)])
            assert e.start_s >= ready - 1e-12  # dependencies respected
            assert e.start_s == pytest.approx(ready, rel=1e-12, abs=1e-12)  # and no idling
            device_free = e.end_s
        # peak in flight, counted over time from the events
        alive = peak = 0
        for e in events:
            alive += {"F": 1, "B": -1, "W": 0}[e.kind]
            peak = max(peak, alive)
        assert result.peak_in_flight[s] == peak
        assert result.stage_finish_s[s] == pytest.approx(events[-1].end_s, rel=1e-12)
    assert result.step_s == max(e.end_s for e in result.events)


@pytest.mark.parametrize("schedule", schedules.SCHEDULES)
def test_simulator_matches_closed_forms_on_uniform_stages(schedule):
    checked = 0
    for sched, p, m, v in _grid():
        if sched != schedule:
            continue
        for f, b, wf in TIMES:
            problem = sim.PipelineProblem(schedule, p, m, f, b, num_chunks=v,
                                          weight_grad_fraction=wf)
            result = sim.simulate(problem)
            assert result.step_s == pytest.approx(closed_form.step_closed_form_s(problem), rel=REL)
            assert result.bubble_s == pytest.approx(closed_form.bubble_closed_form_s(problem),
                                                    rel=REL, abs=1e-12)
            assert result.peak_in_flight == closed_form.peak_in_flight_closed_form(problem)
            # the step is one device's work plus the bubble
            assert result.step_s == pytest.approx(v * m * (f + b) + result.bubble_s, rel=REL)
            checked += 1
    assert checked >= 60


@pytest.mark.parametrize("schedule", schedules.SCHEDULES)
def test_simulator_events_obey_the_scheduling_rules(schedule):
    rng = np.random.default_rng(11)
    for p in (1, 2, 3, 5):
        for m in (1, p, 2 * p + 1) if schedule != "interleaved-1f1b" else (p, 2 * p):
            v = 3 if schedule == "interleaved-1f1b" else 1
            f = tuple(float(x) for x in rng.uniform(0.2, 2.0, p))
            b = tuple(float(x) for x in rng.uniform(0.2, 3.0, p))
            for p2p in (0.0, 0.15):
                problem = sim.PipelineProblem(schedule, p, m, f, b, num_chunks=v,
                                              weight_grad_fraction=0.4, p2p_s=p2p)
                _check_events(problem, sim.simulate(problem))


def test_simulator_closed_form_bubble_textbook_values():
    # GPipe / 1F1B: (p - 1)(f + b); ZB-H1 with T_F = T_B = T_W: a third of 1F1B's
    for p in (2, 4, 8):
        one = sim.simulate(sim.PipelineProblem("1f1b", p, 2 * p, 1.0, 2.0))
        zb = sim.simulate(sim.PipelineProblem("zb-h1", p, 2 * p, 1.0, 2.0,
                                              weight_grad_fraction=0.5))
        assert one.bubble_s == pytest.approx(3.0 * (p - 1), rel=REL)
        assert zb.bubble_s == pytest.approx(1.0 * (p - 1), rel=REL)
        assert one.step_s == pytest.approx((2 * p + p - 1) * 3.0, rel=REL)


def test_zb_h1_never_slower_than_1f1b_and_same_peak_memory():
    rng = np.random.default_rng(3)
    for _ in range(60):
        p, m = int(rng.integers(1, 7)), int(rng.integers(1, 13))
        f, b = float(rng.uniform(0.1, 2)), float(rng.uniform(0.1, 3))
        wf = float(rng.uniform(0, 1))
        one = sim.simulate(sim.PipelineProblem("1f1b", p, m, f, b))
        zb = sim.simulate(sim.PipelineProblem("zb-h1", p, m, f, b, weight_grad_fraction=wf))
        assert zb.step_s <= one.step_s * (1 + REL)
        assert zb.peak_in_flight == one.peak_in_flight


def test_interleaving_shrinks_the_bubble_for_the_same_device_work():
    for p in (2, 3, 4, 6):
        for v in (2, 3, 4):
            for m in (p, 2 * p):
                f, b = 1.2, 2.1  # per device and micro-batch
                one = sim.simulate(sim.PipelineProblem("1f1b", p, m, f, b))
                inter = sim.simulate(sim.PipelineProblem("interleaved-1f1b", p, m, f / v, b / v,
                                                         num_chunks=v))
                assert inter.bubble_s < one.bubble_s
                assert inter.bubble_s == pytest.approx(one.bubble_s / v, rel=REL)
                assert inter.step_s < one.step_s
                # same total work per device
                assert inter.step_s - inter.bubble_s == pytest.approx(
                    one.step_s - one.bubble_s, rel=REL)


def test_interleaved_m_equal_p_matches_megatron_all_warmup_order():
    # Megatron runs all forwards first when m == p; the general warm-up gives the same step
    for p in range(1, 6):
        for v in (2, 3, 4):
            problem = sim.PipelineProblem("interleaved-1f1b", p, p, 0.7, 1.9, num_chunks=v)
            op = schedules.interleaved_op
            orders = [tuple(("F",) + op(p, v, k, True) for k in range(v * p))
                      + tuple(("B",) + op(p, v, k, False) for k in range(v * p))
                      for _ in range(p)]
            all_warmup = sim.simulate_orders(
                orders, lambda s, kind, mb, c: sim.op_duration_s(problem, s, kind), num_chunks=v)
            general = sim.simulate(problem)
            assert general.step_s == pytest.approx(all_warmup.step_s, rel=REL)
            assert max(general.peak_in_flight) <= max(all_warmup.peak_in_flight)


def test_nonuniform_stages_respect_lower_bounds():
    rng = np.random.default_rng(5)
    for schedule in schedules.SCHEDULES:
        for _ in range(15):
            p = int(rng.integers(1, 6))
            v = int(rng.integers(2, 4)) if schedule == "interleaved-1f1b" else 1
            m = p * int(rng.integers(1, 4)) if schedule == "interleaved-1f1b" else int(
                rng.integers(1, 10))
            f = tuple(float(x) for x in rng.uniform(0.1, 2.0, p))
            b = tuple(float(x) for x in rng.uniform(0.1, 3.0, p))
            problem = sim.PipelineProblem(schedule, p, m, f, b, num_chunks=v)
            result = sim.simulate(problem)
            device_work = max(v * m * (f[s] + b[s]) for s in range(p))
            one_microbatch_path = v * (sum(f) + sum(b))
            assert result.step_s >= device_work * (1 - REL)
            assert result.step_s >= one_microbatch_path * (1 - REL)
            assert result.bubble_s >= -1e-12
            assert result.bubble_s == pytest.approx(result.step_s - device_work, rel=REL,
                                                    abs=1e-12)


def test_p2p_latency_lengthens_the_step_only_across_devices():
    for schedule in schedules.SCHEDULES:
        v = 2 if schedule == "interleaved-1f1b" else 1
        for p in (2, 4):
            base = sim.PipelineProblem(schedule, p, 2 * p, 1.0, 2.0, num_chunks=v)
            slow = sim.PipelineProblem(schedule, p, 2 * p, 1.0, 2.0, num_chunks=v, p2p_s=0.1)
            # one micro-batch crosses 2 (p v - 1) device boundaries on its critical path
            assert sim.simulate(slow).step_s >= (sim.simulate(base).step_s
                                                 + 2 * (p * v - 1) * 0.1 * (1 - REL))
        local = sim.PipelineProblem(schedule, 1, 3, 1.0, 2.0, num_chunks=v, p2p_s=0.5)
        assert sim.simulate(local).step_s == pytest.approx(v * 3 * 3.0, rel=REL)
        with pytest.raises(ValueError):
            closed_form.step_closed_form_s(sim.PipelineProblem(schedule, 2, 2, 1.0, 2.0,
                                                               num_chunks=v, p2p_s=0.1))


def test_simulation_is_deterministic():
    for schedule in schedules.SCHEDULES:
        v = 3 if schedule == "interleaved-1f1b" else 1
        problem = sim.PipelineProblem(schedule, 4, 8, (1.0, 1.3, 0.9, 1.1),
                                      (2.0, 2.2, 1.8, 2.5), num_chunks=v, p2p_s=0.05)
        assert sim.simulate(problem) == sim.simulate(problem)


def test_simulator_rejects_bad_orders_and_bad_problems():
    def unit(s, kind, mb, c):
        return 1.0

    with pytest.raises(ValueError, match="twice"):
        sim.simulate_orders([(("F", 0, 0), ("F", 0, 0))], unit)
    with pytest.raises(ValueError, match="deadlock"):  # B before its own F
        sim.simulate_orders([(("B", 0, 0), ("F", 0, 0)), (("F", 0, 0), ("B", 0, 0))], unit)
    with pytest.raises(ValueError, match="multiple"):
        sim.PipelineProblem("interleaved-1f1b", 4, 6, 1.0, 1.0, num_chunks=2)
    with pytest.raises(ValueError):
        sim.PipelineProblem("1f1b", 4, 6, 1.0, 1.0, num_chunks=2)
    with pytest.raises(ValueError):
        sim.PipelineProblem("pipedream", 4, 6, 1.0, 1.0)
    with pytest.raises(ValueError, match="num_microbatches >= num_stages"):
        closed_form.bubble_closed_form_s(sim.PipelineProblem("zb-h1", 4, 3, 1.0, 1.0))
    with pytest.raises(ValueError, match="uniform"):
        closed_form.bubble_closed_form_s(sim.PipelineProblem("1f1b", 2, 3, (1.0, 2.0), 1.0))


# =========================================================================================
# slimpipe
# =========================================================================================

@pytest.mark.parametrize("k", [1, 2, 3, 4, 7, 16])
def test_slice_costs_follow_causal_attention_blocks(k):
    linear, attention = 3.0, 5.0
    costs = sp.slice_costs(linear, attention, k)
    assert len(costs) == k
    # the causal kernel computes k^2 / 2 blocks of (L/k)^2 scores; slice j needs j full
    # blocks and half of its diagonal block
    block_s = attention / (k * k / 2)
    for j, c in enumerate(costs):
        assert c == pytest.approx(linear / k + (j + 0.5) * block_s, rel=1e-12)
    assert sum(Fraction(2 * j + 1, k * k) for j in range(k)) == 1
    assert math.fsum(costs) == pytest.approx(linear + attention, rel=1e-12)
    assert all(a < b for a, b in zip(costs, costs[1:]))  # later slices attend to more keys
    assert sp.slice_costs(linear, 0.0, k) == pytest.approx((linear / k,) * k, rel=1e-12)


def test_one_slice_is_the_unsliced_micro_batch():
    assert sp.slice_costs(3.0, 5.0, 1) == (8.0,)
    for p in (1, 2, 4):
        for m in (1, 3, 8):
            pr = sp.SlicingProblem(linear_s=3.0, attention_s=5.0, num_stages=p,
                                   num_microbatches=m, activation_bytes=10.0,
                                   memory_budget_bytes=1e9)
            one = sim.PipelineProblem("1f1b", p, m, 8.0 / 3, 16.0 / 3)
            assert sp.step_time_s(pr, 1) == pytest.approx(closed_form.step_closed_form_s(one),
                                                          rel=REL)
            assert sp.step_time_s(pr, 1) == pytest.approx(sim.simulate(one).step_s, rel=REL)
            assert sp.peak_activation_bytes(pr, 1) == 10.0 * min(m, p)


def _check_slimpipe_orders(p: int, m: int, k: int) -> None:
    orders = sp.slimpipe_orders(p, m, k)
    assert len(orders) == p
    for ops in orders:
        fwd = [u for kind, u, _ in ops if kind == "F"]
        bwd = [u for kind, u, _ in ops if kind == "B"]
        assert fwd == list(range(m * k))
        # backwards micro-batch by micro-batch, slices in reverse order
        assert bwd == [mb * k + j for mb in range(m) for j in reversed(range(k))]


def test_step_time_matches_simulation_of_slimpipe_orders():
    rng = np.random.default_rng(17)
    for p in range(1, 6):
        for m in range(1, 5):
            for k in (1, 2, 3, 5, 8):
                linear, attention = float(rng.uniform(0.5, 3)), float(rng.uniform(0, 3))
                overhead, ff = float(rng.choice([0.0, 0.05])), float(rng.uniform(0.2, 0.6))
                pr = sp.SlicingProblem(linear, attention, p, m, activation_bytes=6.0,
                                       memory_budget_bytes=1e9, per_slice_overhead_s=overhead,
                                       forward_fraction=ff)
                _check_slimpipe_orders(p, m, k)
                orders = sp.slimpipe_orders(p, m, k)
                unit = (linear + attention) / k + overhead  # redistributed: all slices equal

                def balanced(s, kind, u, c):
                    return (ff if kind == "F" else 1 - ff) * unit

                result = sim.simulate_orders(orders, balanced)
                assert result.step_s == pytest.approx(sp.step_time_s(pr, k), rel=REL)
                # 1F1B over m k equal micro-batches has the same step
                flat = sim.simulate(sim.PipelineProblem("1f1b", p, m * k, ff * unit,
                                                        (1 - ff) * unit))
                assert flat.step_s == pytest.approx(result.step_s, rel=REL)
                # in flight per stage, and stage 0 is the most loaded
                assert result.peak_in_flight == tuple(sp.in_flight_slices(pr, k, s)
                                                      for s in range(p))
                assert max(result.peak_in_flight) == result.peak_in_flight[0]
                assert sp.peak_activation_bytes(pr, k) == pytest.approx(
                    6.0 * result.peak_in_flight[0] / k, rel=1e-12)
                # without redistribution (slice j costs slice_costs[j]) it is never faster
                costs = sp.slice_costs(linear, attention, k)

                def unbalanced(s, kind, u, c):
                    return (ff if kind == "F" else 1 - ff) * (costs[u % k] + overhead)

                raw = sim.simulate_orders(orders, unbalanced)
                assert raw.step_s >= result.step_s * (1 - REL)


def test_peak_activation_falls_with_slices_but_never_below_one_microbatch():
    for p in (1, 2, 4, 8):
        for m in (1, 2, 4, 16):
            pr = sp.SlicingProblem(1.0, 1.0, p, m, activation_bytes=100.0,
                                   memory_budget_bytes=1e9, max_slices=40)
            peaks = [sp.peak_activation_bytes(pr, k) for k in range(1, 41)]
            assert peaks[0] == 100.0 * min(m, p)
            for k, (a, b) in enumerate(zip(peaks, peaks[1:]), start=1):
                assert b <= a * (1 + 1e-12)
                if p > 1 and a < 100.0 * m:  # (k + p - 1) / k, below the m plateau, falls
                    assert b < a
            assert min(peaks) >= 100.0 * (1 - 1e-12)
            if m > 1:  # (k + p - 1) / k -> 1
                assert peaks[-1] == pytest.approx(100.0 * (40 + p - 1) / 40, rel=1e-12)


def _brute_choice(pr: sp.SlicingProblem):
    rows = []
    for k in range(1, pr.max_slices + 1):
        m, p = pr.num_microbatches, pr.num_stages
        unit = (pr.linear_s + pr.attention_s) / k + pr.per_slice_overhead_s
        step = (m * k + p - 1) * unit
        peak = pr.activation_bytes * min(m * k, k + p - 1) / k
        rows.append((k, step, peak))
    fitting = [r for r in rows if r[2] <= pr.memory_budget_bytes]
    if not fitting:
        return None
    best = min(r[1] for r in fitting)
    return next(r for r in fitting if r[1] <= best * (1 + sp.TIE_RELATIVE))


def test_choose_slices_is_the_fastest_fitting_option():
    rng = np.random.default_rng(29)
    seen_binding = seen_infeasible = 0
    for _ in range(300):
        p, m = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        act = float(rng.uniform(1, 10))
        pr = sp.SlicingProblem(linear_s=float(rng.uniform(0.1, 5)),
                               attention_s=float(rng.uniform(0, 5)), num_stages=p,
                               num_microbatches=m, activation_bytes=act,
                               memory_budget_bytes=float(act * rng.uniform(0.8, 1.0 + min(m, p))),
                               per_slice_overhead_s=float(rng.choice([0.0, rng.uniform(0, 0.2)])),
                               max_slices=int(rng.integers(1, 33)))
        expected = _brute_choice(pr)
        if expected is None:
            seen_infeasible += 1
            with pytest.raises(ValueError, match="memory_budget_bytes"):
                sp.choose_slices(pr)
            continue
        got = sp.choose_slices(pr)
        assert (got.slices, got.step_s, got.peak_activation_bytes) == pytest.approx(expected,
                                                                                   rel=1e-12)
        assert got.slices == expected[0]
        assert got.peak_activation_bytes <= pr.memory_budget_bytes
        assert got.step_s == sp.step_time_s(pr, got.slices)
        assert got.slice_s == sp.slice_costs(pr.linear_s, pr.attention_s, got.slices)
        assert [o[0] for o in got.options] == list(range(1, pr.max_slices + 1))
        unconstrained = min(o[1] for o in got.options)
        if got.step_s > unconstrained * (1 + 1e-9):
            seen_binding += 1
    assert seen_binding >= 5 and seen_infeasible >= 5


def test_choose_slices_trades_bubble_against_per_slice_overhead():
    # no overhead: more slices only shrink the bubble -> max_slices
    pr = sp.SlicingProblem(2.0, 2.0, 4, 8, activation_bytes=1.0, memory_budget_bytes=1e9,
                           max_slices=16)
    assert sp.choose_slices(pr).slices == 16
    # one stage has no bubble: every k ties and the smallest wins
    pr = sp.SlicingProblem(2.0, 2.0, 1, 8, activation_bytes=1.0, memory_budget_bytes=1e9,
                           max_slices=16)
    assert sp.choose_slices(pr).slices == 1
    # with overhead c, (m k + p - 1)(T / k + c) is minimal near k* = sqrt((p - 1) T / (m c))
    T, c, p, m = 4.0, 0.01, 8, 4
    pr = sp.SlicingProblem(2.0, 2.0, p, m, activation_bytes=1.0, memory_budget_bytes=1e9,
                           per_slice_overhead_s=c, max_slices=64)
    k_star = math.sqrt((p - 1) * T / (m * c))
    assert math.floor(k_star) <= sp.choose_slices(pr).slices <= math.ceil(k_star)


def test_choose_slices_reports_the_memory_shortfall():
    # the fewest bytes any k reaches is (k + p - 1) / k micro-batches at the largest k
    pr = sp.SlicingProblem(1.0, 1.0, 4, 8, activation_bytes=8.0, memory_budget_bytes=8.0,
                           max_slices=8)
    with pytest.raises(ValueError, match=r"memory_budget_bytes is 8\b") as err:
        sp.choose_slices(pr)
    assert "11" in str(err.value)  # 8 * (8 + 3) / 8 = 11 bytes with 8 slices
    assert "8 slices" in str(err.value)
    # a budget of one full micro-batch fits from k = 1 when m = 1
    ok = sp.SlicingProblem(1.0, 1.0, 4, 1, activation_bytes=8.0, memory_budget_bytes=8.0)
    assert sp.choose_slices(ok).peak_activation_bytes == 8.0


def test_slimpipe_rejects_bad_inputs():
    with pytest.raises(ValueError):
        sp.slice_costs(1.0, 1.0, 0)
    with pytest.raises(ValueError):
        sp.SlicingProblem(-1.0, 1.0, 2, 2, 1.0, 1.0)
    with pytest.raises(ValueError):
        sp.SlicingProblem(1.0, 1.0, 0, 2, 1.0, 1.0)
