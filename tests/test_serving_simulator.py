"""The serving simulator (solvers.serving) against queueing closed forms and exact traces."""
from __future__ import annotations

import math
import random

import pytest

from solvers.serving import (LatencyModel, PoolSim, SimProblem, closed_loop_throughput_per_s,
                             decode_throughput_tokens_per_s, md1_mean_wait_s, mg1_mean_response_s,
                             mg1_mean_wait_s, simulate, utilisation)
from solvers.serving.simulator import _Sim

BIG = 10 ** 9


def _constant(prefill_s: float, decode_s: float) -> LatencyModel:
    return LatencyModel(lambda lens: prefill_s, lambda batch, context: decode_s)


# ---------------------------------------------------------------------------------------
# Closed forms
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("rate, service_s, second_moment, expected_wait_s", [
    (0.5, 1.0, 1.0, 0.5),          # M/D/1, rho 0.5: rho D / (2 (1 - rho)) = 0.5
    (0.8, 1.0, 1.0, 2.0),          # M/D/1, rho 0.8
    (0.5, 1.0, 2.0, 1.0),          # M/M/1 (E[S^2] = 2/mu^2): rho / (mu - lambda) = 1
    (2.0, 0.25, 0.125, 0.25),      # M/M/1, mu 4, lambda 2: 0.5 / 2
    (1.0, 1.0, 1.0, math.inf),     # rho = 1: unstable
])
def test_pollaczek_khinchine_table(rate, service_s, second_moment, expected_wait_s):
    assert mg1_mean_wait_s(rate, service_s, second_moment) == pytest.approx(expected_wait_s)


def test_closed_form_helpers():
    assert md1_mean_wait_s(0.5, 1.0) == pytest.approx(0.5)
    assert mg1_mean_response_s(0.5, 1.0, 2.0) == pytest.approx(2.0)  # M/M/1: 1 / (mu - lambda)
    assert utilisation(6.0, 0.5, servers=4) == pytest.approx(0.75)
    assert decode_throughput_tokens_per_s(64, 0.032) == pytest.approx(2000.0)
    assert closed_loop_throughput_per_s(10, 1.5, 0.5) == pytest.approx(5.0)
    with pytest.raises(ValueError):
        mg1_mean_wait_s(0.5, 1.0, 0.5)  # E[S^2] < E[S]^2


# ---------------------------------------------------------------------------------------
# Colocated: one request per prefill, no decode -> an M/G/1 queue in front of the prefill
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("rho, requests", [(0.5, 40_000), (0.8, 100_000)])
def test_ttft_matches_md1(rho, requests):
    """Deterministic prefill D, Poisson arrivals, one request per prefill step, one output
    token: TTFT = wait + D, and the mean wait is M/D/1's rho D / (2 (1 - rho))."""
    service_s = 0.1
    rate = rho / service_s
    problem = SimProblem(mode="colocated", latency=_constant(service_s, 1.0),
                         pool=PoolSim(instances=1, max_batch=BIG, kv_capacity_tokens=BIG,
                                      max_prefill_tokens=100),
                         input_lens=(100,) * requests, output_lens=(1,) * requests,
                         arrival_rate_per_s=rate, seed=7)
    result = simulate(problem)
    expected_s = service_s + md1_mean_wait_s(rate, service_s)
    assert result.ttft.mean_s == pytest.approx(expected_s, rel=0.05)
    assert result.request_rate_per_s == pytest.approx(rate, rel=0.03)


def test_ttft_matches_mg1_with_variable_prompts():
    """Prefill time affine in the prompt length, prompts uniform on [64, 2048]; a one-token
    budget forces one request per prefill: mean TTFT is M/G/1's E[S] + W (Pollaczek-Khinchine
    with the prompts' own first two moments)."""
    requests = 60_000
    rng = random.Random(3)
    lens = tuple(rng.randint(64, 2048) for _ in range(requests))
    base_s, per_token_s = 0.01, 5e-5
    service = [base_s + per_token_s * n for n in lens]
    mean_s = sum(service) / requests
    second_s2 = sum(s * s for s in service) / requests
    rate = 0.7 / mean_s
    problem = SimProblem(mode="colocated",
                         latency=LatencyModel.from_affine(prefill_base_s=base_s,
                                                          prefill_per_token_s=per_token_s),
                         pool=PoolSim(1, BIG, BIG, 1), input_lens=lens,
                         output_lens=(1,) * requests, arrival_rate_per_s=rate, seed=11)
    result = simulate(problem)
    assert result.ttft.mean_s == pytest.approx(mg1_mean_response_s(rate, mean_s, second_s2),
                                               rel=0.05)
    # Deterministic service at the same mean would wait clearly less: the variance matters.
    assert result.ttft.mean_s > 1.1 * (mean_s + md1_mean_wait_s(rate, mean_s))


# ---------------------------------------------------------------------------------------
# Colocated: full-batch decode throughput, closed loop
# ---------------------------------------------------------------------------------------

def test_closed_loop_throughput_is_batch_over_step_time():
    """Concurrency = max_batch, decode step affine in the batch, negligible prefill: the batch
    stays full and output tokens/s is batch / step (plus the one token each prefill makes:
    osl tokens per osl - 1 decode steps)."""
    batch, requests = 32, 4_000
    rng = random.Random(5)
    outputs = tuple(rng.randint(128, 384) for _ in range(requests))
    latency = LatencyModel.from_affine(prefill_base_s=1e-6, decode_base_s=0.02,
                                       decode_per_seq_s=2e-4)
    step_s = latency.decode_step_s(batch, 0)
    problem = SimProblem(mode="colocated", latency=latency,
                         pool=PoolSim(1, batch, BIG, 1 << 20), input_lens=(128,) * requests,
                         output_lens=outputs, concurrency=batch)
    result = simulate(problem)
    mean_osl = sum(outputs) / requests
    expected = decode_throughput_tokens_per_s(batch, step_s) * mean_osl / (mean_osl - 1)
    assert result.output_tokens_per_s == pytest.approx(expected, rel=0.02)
    assert result.mean_decode_batch > 0.99 * batch
    # Little's law on the closed loop: completions/s = N / mean e2e.
    assert result.request_rate_per_s == pytest.approx(
        closed_loop_throughput_per_s(batch, result.e2e.mean_s), rel=0.02)


# ---------------------------------------------------------------------------------------
# Disaggregated prefill/decode
# ---------------------------------------------------------------------------------------

def _disagg(transfer_s: float, *, arrivals: dict, decode_instances: int = 1,
            requests: int = 50, osl: int = 20, batch: int = 16) -> SimProblem:
    return SimProblem(mode="disagg", latency=_constant(0.5, 0.05),
                      pool=PoolSim(decode_instances, batch, BIG, 4096),
                      prefill_pool=PoolSim(4, 8, BIG, 4096),
                      prefill_latency=LatencyModel.from_affine(prefill_base_s=0.1,
                                                               prefill_per_token_s=1e-4),
                      kv_transfer_s=lambda context: transfer_s,
                      input_lens=(1000,) * requests, output_lens=(osl,) * requests,
                      **arrivals)


def test_disagg_light_load_exact_latencies():
    """Requests 10 s apart never meet: TTFT is the prefill time alone, and the KV transfer
    delays the second token, so it appears in TPOT and e2e but not in TTFT."""
    prefill_s, decode_s, osl = 0.1 + 1e-4 * 1000, 0.05, 20
    trace = {"arrival_times_s": tuple(10.0 * i for i in range(50))}
    fast = simulate(_disagg(0.0, arrivals=trace))
    slow = simulate(_disagg(0.7, arrivals=trace))
    for result, transfer_s in ((fast, 0.0), (slow, 0.7)):
        assert result.ttft.p50_s == pytest.approx(prefill_s)
        assert result.ttft.p99_s == pytest.approx(prefill_s)
        assert result.e2e.mean_s == pytest.approx(prefill_s + transfer_s + (osl - 1) * decode_s)
        assert result.tpot.mean_s == pytest.approx(transfer_s / (osl - 1) + decode_s)
    assert slow.slo_attainment(ttft_s=prefill_s + 1e-9, tpot_s=1.0) == 1.0
    assert slow.slo_attainment(ttft_s=prefill_s + 1e-9, tpot_s=decode_s + 1e-3) == 0.0
    assert fast.slo_attainment(ttft_s=prefill_s + 1e-9, tpot_s=decode_s + 1e-3) == 1.0


def test_disagg_throughput_bounded_by_decode_pool():
    """Overload with an ample prefill pool: the decode pool is the bottleneck, output tokens/s
    sits at its full-batch capacity, and doubles with two decode instances."""
    batch, osl, decode_s = 16, 64, 0.05
    capacity = decode_throughput_tokens_per_s(batch, decode_s) * osl / (osl - 1)
    overload = {"arrival_rate_per_s": 20.0}  # ~4x what one decode instance can serve
    one = simulate(_disagg(0.2, arrivals=overload, requests=3_000, osl=osl, batch=batch))
    two = simulate(_disagg(0.2, arrivals=overload, requests=3_000, osl=osl, batch=batch,
                           decode_instances=2))
    assert one.output_tokens_per_s <= capacity * 1.001
    assert one.output_tokens_per_s == pytest.approx(capacity, rel=0.03)
    assert two.output_tokens_per_s == pytest.approx(2 * capacity, rel=0.03)
    assert one.mean_decode_batch == pytest.approx(batch, rel=0.01)


def test_least_outstanding_routing_spreads_simultaneous_requests():
    """Two requests at once on two colocated instances: one each, so both see the bare
    prefill time (FCFS on one instance would make the second wait)."""
    problem = SimProblem(mode="colocated", latency=_constant(0.3, 0.01),
                         pool=PoolSim(2, 1, BIG, 1), input_lens=(10, 10),
                         output_lens=(5, 5), arrival_times_s=(0.0, 0.0),
                         warmup_fraction=0.0, cooldown_fraction=0.0)
    result = simulate(problem)
    assert result.ttft_s == pytest.approx((0.3, 0.3))
    one = simulate(SimProblem(mode="colocated", latency=_constant(0.3, 0.01),
                              pool=PoolSim(1, 1, BIG, 1), input_lens=(10, 10),
                              output_lens=(5, 5), arrival_times_s=(0.0, 0.0),
                              warmup_fraction=0.0, cooldown_fraction=0.0))
    assert one.ttft_s == pytest.approx((0.3, 0.3 + 4 * 0.01 + 0.3))


# ---------------------------------------------------------------------------------------
# KV capacity, preemption, determinism
# ---------------------------------------------------------------------------------------

def _kv_problem(kv_capacity_tokens: int, seed: int = 0) -> SimProblem:
    rng = random.Random(2)
    requests = 2_000
    return SimProblem(mode="colocated",
                      latency=LatencyModel.from_affine(prefill_base_s=0.01,
                                                       prefill_per_token_s=2e-5,
                                                       decode_base_s=0.02,
                                                       decode_per_seq_s=1e-4),
                      pool=PoolSim(2, 32, kv_capacity_tokens, 4096),
                      input_lens=tuple(rng.randint(50, 400) for _ in range(requests)),
                      output_lens=tuple(rng.randint(1, 400) for _ in range(requests)),
                      arrival_rate_per_s=12.0, seed=seed)


def test_kv_capacity_causes_preemption_only_when_small():
    roomy = simulate(_kv_problem(32 * 800))  # holds a full batch of the longest requests
    tight = simulate(_kv_problem(6_000))
    assert roomy.preemptions == 0
    assert tight.preemptions > 0
    assert tight.tpot.mean_s > roomy.tpot.mean_s


def test_preemption_keeps_every_token_and_frees_all_kv():
    """Under heavy recompute every request still makes exactly output_len tokens, and every
    instance ends with no KV held and nothing running."""
    problem = _kv_problem(1_200)
    sim = _Sim(problem)
    sim.run()
    assert sim.preemptions > 100
    assert sum(sim.token_n) == sum(problem.output_lens)
    assert all(inst.kv_used == 0 and not inst.running and not inst.waiting
               for inst in sim.serving)
    assert all(f >= a for f, a in zip(sim.finish, sim.arrival))


def test_preempted_request_goes_back_to_the_front():
    """Two requests fill a 30-token KV cache and the younger one is preempted; it goes back
    ahead of a third, later request, which therefore waits (head-of-line) until the older
    request finishes and frees its KV, although it alone would fit."""
    problem = SimProblem(mode="colocated", latency=_constant(0.1, 0.01),
                         pool=PoolSim(1, 2, 30, 1_000), input_lens=(10, 10, 10),
                         output_lens=(20, 20, 2), arrival_times_s=(0.0, 0.0, 0.001),
                         warmup_fraction=0.0, cooldown_fraction=0.0)
    result = simulate(problem)
    assert result.preemptions >= 1
    first_token_s = [a + t for a, t in zip(result.arrival_s, result.ttft_s)]
    assert first_token_s[2] > result.e2e_s[0]  # request 0 finished before request 2 started


def test_deterministic_for_a_seed_and_different_across_seeds():
    first, again = simulate(_kv_problem(6_000, seed=1)), simulate(_kv_problem(6_000, seed=1))
    other = simulate(_kv_problem(6_000, seed=2))
    assert first == again
    assert first.ttft_s != other.ttft_s


# ---------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    ({"concurrency": 4}, "exactly one"),
    ({"output_lens": (10,)}, "equally"),
    ({"pool": PoolSim(1, 8, 100, 64)}, "KV tokens"),
    ({"mode": "disagg"}, "prefill_pool"),
    ({"warmup_fraction": 0.6, "cooldown_fraction": 0.5}, "sum to"),
])
def test_problem_validation(change, message):
    base = dict(mode="colocated", latency=_constant(0.1, 0.01), pool=PoolSim(1, 8, 10_000, 64),
                input_lens=(100, 100), output_lens=(10, 10), arrival_rate_per_s=1.0)
    with pytest.raises(ValueError, match=message):
        SimProblem(**{**base, **change})
