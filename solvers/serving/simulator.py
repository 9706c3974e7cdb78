"""Request-level discrete-event simulator of LLM serving: colocated or prefill/decode disaggregated.

The model
---------
A pool is ``instances`` identical engine instances. An instance runs one *step* at a time and
the simulator advances a whole step at once (every running request of the instance together),
never one token event at a time; a heap holds the times at which instances finish their steps.

Colocated instance (vLLM/SGLang continuous batching with prefill priority, no mixed batches):

* When requests wait and there is room (``running < max_batch`` and the request's prompt fits
  in the free KV cache) it runs one **prefill step**, admitting waiting requests first come,
  first served up to ``max_prefill_tokens`` prompt tokens (at least one request, even a longer
  one: a prompt is never split into chunks). Admission stops at the first request that does
  not fit (head-of-line blocking, no skipping). The step's time is
  ``latency.prefill_time_s(prompt lengths)`` and it produces each admitted request's next
  token (the first one for a fresh request).
* Otherwise, when requests run, it runs one **decode step**: every running request gains one
  token and its KV one slot; the time is ``latency.decode_step_s(batch, context tokens)``, the
  context being the KV tokens held when the step starts.
* KV accounting: a request holds ``input + generated - 1`` tokens of KV (the prompt after its
  prefill, one more per decode step). When a decode step would exceed ``kv_capacity_tokens``
  the most recently admitted request is **preempted by recompute**: it frees its KV and goes
  back to the front of the waiting queue; its generated tokens are kept and re-prefilled with
  the prompt (prompt ``input + generated``), and that prefill produces its next token.

Disaggregated (``mode="disagg"``): prefill instances run the same FCFS prefill steps (the pool's
``max_batch`` caps a prefill batch's requests, ``kv_capacity_tokens`` its tokens; the KV leaves
the instance when the step ends). The request's KV then moves to the decode instance with the
least outstanding requests, chosen when its prefill ends, after ``kv_transfer_s(input_len)``
seconds. The transfer is a pure delay: transfers overlap freely and share no link. A decode
instance admits arrived requests FCFS when ``running < max_batch`` and their KV fits; a
request it preempts is recomputed there (a prefill step with the decode pool's
``latency.prefill_time_s``). A one-token request finishes at its prefill and is not moved.

Routing: an arriving request goes to the instance with the fewest outstanding (assigned and
unfinished) requests, ties to the lowest index. Simultaneous events are applied in the order
they were scheduled, so the result is a deterministic function of the problem and its seed.

Metrics (per request):

* TTFT = end of the request's first prefill step - arrival.
* TPOT = (finish - first token) / (output_len - 1), the "excluding the first token" TPOT of
  vLLM's ``benchmarks/benchmark_serving.py``; 0 for a one-token request (left out of the TPOT
  percentiles). In disagg the KV transfer and the decode queue come after the first token, so
  they count in TPOT, not TTFT: this is how DistServe measures (LLMServe/DistServe,
  ``simdistserve/base/organize_data.py::calculate_per_request_latency``: the first-token
  latency ends at the first ``wait_decode`` event, logged by ``Request.finish_prefill`` when the
  prefill ends; the decoding latency runs from there to the exit; DistServe divides it by
  ``output_len``, we by ``output_len - 1``).
* e2e = finish - arrival.

Steady state: requests are numbered in arrival order (issue order in a closed loop); the first
``warmup_fraction`` and the last ``cooldown_fraction`` of them are left out of the latency
statistics. The measured window runs from the first measured request's arrival to the last
measured request's finish; throughputs count every token and completion inside it.
"""
from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = ["MODES", "LatencyModel", "PoolSim", "SimProblem", "LatencyStats", "SimResult",
           "poisson_arrivals_s", "simulate"]

MODES = ("colocated", "disagg")

# Event kinds of the simulator's heap: (time_s, sequence number, kind, payload).
_ARRIVE, _STEP_END, _KV_READY, _WAKE = 0, 1, 2, 3


@dataclass(frozen=True)
class LatencyModel:
    """Step times of one engine instance.

    ``prefill_time_s(lens)``: seconds of one prefill step over prompts of ``lens`` tokens
    (uncached tokens). ``decode_step_s(batch, context_tokens)``: seconds of one decode step of
    ``batch`` running requests holding ``context_tokens`` KV tokens in all.
    """

    prefill_time_s: Callable[[tuple[int, ...]], float]
    decode_step_s: Callable[[int, int], float]

    @classmethod
    def from_affine(cls, *, prefill_base_s: float = 0.0, prefill_per_token_s: float = 0.0,
                    decode_base_s: float = 0.0, decode_per_seq_s: float = 0.0,
                    decode_per_token_s: float = 0.0) -> LatencyModel:
        """``prefill = base + per_token * sum(lens)``;
        ``decode = base + per_seq * batch + per_token * context_tokens``."""
        def prefill(lens: tuple[int, ...]) -> float:
            return prefill_base_s + prefill_per_token_s * sum(lens)

        def decode(batch: int, context_tokens: int) -> float:
            return decode_base_s + decode_per_seq_s * batch + decode_per_token_s * context_tokens

        return cls(prefill, decode)


@dataclass(frozen=True)
class PoolSim:
    """One pool of identical engine instances (per instance: batch limit, KV cache, prefill
    token budget)."""

    instances: int
    max_batch: int
    kv_capacity_tokens: int
    max_prefill_tokens: int

    def __post_init__(self) -> None:
        for name in ("instances", "max_batch", "kv_capacity_tokens", "max_prefill_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PoolSim.{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class SimProblem:
    """A serving system and a workload. Exactly one of ``arrival_rate_per_s`` (Poisson,
    seeded), ``concurrency`` (closed loop: that many clients, each sending its next request
    when the previous finishes) or ``arrival_times_s`` (a trace) sets the arrivals.

    ``pool`` is the colocated pool, or the decode pool in disagg; ``latency`` is its model.
    Disagg also needs ``prefill_pool`` and ``prefill_latency``; ``kv_transfer_s(context
    tokens)`` is the KV move's delay (none means zero).
    """

    mode: str
    latency: LatencyModel
    pool: PoolSim
    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    arrival_rate_per_s: float | None = None
    concurrency: int | None = None
    arrival_times_s: tuple[float, ...] | None = None
    prefill_pool: PoolSim | None = None
    prefill_latency: LatencyModel | None = None
    kv_transfer_s: Callable[[int], float] | None = None
    seed: int = 0
    warmup_fraction: float = 0.1
    cooldown_fraction: float = 0.1

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        for name in ("input_lens", "output_lens"):
            object.__setattr__(self, name, tuple(int(x) for x in getattr(self, name)))
        n_in, n_out = len(self.input_lens), len(self.output_lens)
        if n_in != n_out or n_in == 0:
            raise ValueError(f"input_lens ({n_in}) and output_lens ({n_out}) must be equally "
                             f"long and non-empty")
        if min(self.input_lens) < 1 or min(self.output_lens) < 1:
            raise ValueError(f"lengths must be >= 1: min input {min(self.input_lens)}, "
                             f"min output {min(self.output_lens)}")
        self._check_arrivals()
        self._check_pools()
        if not (0.0 <= self.warmup_fraction and 0.0 <= self.cooldown_fraction
                and self.warmup_fraction + self.cooldown_fraction < 1.0):
            raise ValueError(f"warmup_fraction ({self.warmup_fraction}) and cooldown_fraction "
                             f"({self.cooldown_fraction}) must be >= 0 and sum to < 1")

    def _check_arrivals(self) -> None:
        given = [name for name in ("arrival_rate_per_s", "concurrency", "arrival_times_s")
                 if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of arrival_rate_per_s, concurrency, "
                             f"arrival_times_s; got {given or 'none'}")
        rate, clients = self.arrival_rate_per_s, self.concurrency
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"arrival_rate_per_s must be finite and > 0, got {rate!r}")
        if clients is not None and (isinstance(clients, bool) or not isinstance(clients, int)
                                    or clients < 1):
            raise ValueError(f"concurrency must be an integer >= 1, got {clients!r}")
        if self.arrival_times_s is not None:
            times = tuple(float(t) for t in self.arrival_times_s)
            object.__setattr__(self, "arrival_times_s", times)
            if len(times) != len(self.input_lens):
                raise ValueError(f"arrival_times_s has {len(times)} entries, there are "
                                 f"{len(self.input_lens)} requests")
            if any(not (math.isfinite(t) and t >= 0) for t in times) or any(
                    b < a for a, b in zip(times, times[1:])):
                raise ValueError("arrival_times_s must be finite, >= 0 and non-decreasing")

    def _check_pools(self) -> None:
        longest = max(i + o - 1 for i, o in zip(self.input_lens, self.output_lens))
        if longest > self.pool.kv_capacity_tokens:
            raise ValueError(f"a request needs {longest} KV tokens (input + output - 1), the "
                             f"pool holds {self.pool.kv_capacity_tokens} per instance")
        disagg_parts = (self.prefill_pool, self.prefill_latency)
        if self.mode == "colocated":
            if any(p is not None for p in (*disagg_parts, self.kv_transfer_s)):
                raise ValueError("prefill_pool, prefill_latency and kv_transfer_s are for "
                                 "mode='disagg' only")
            return
        if any(p is None for p in disagg_parts):
            raise ValueError("mode='disagg' needs prefill_pool and prefill_latency")
        if max(self.input_lens) > self.prefill_pool.kv_capacity_tokens:
            raise ValueError(f"a prompt of {max(self.input_lens)} tokens does not fit the "
                             f"prefill pool's {self.prefill_pool.kv_capacity_tokens} KV tokens")


@dataclass(frozen=True)
class LatencyStats:
    """Mean and percentiles of one latency, seconds."""

    mean_s: float
    p50_s: float
    p90_s: float
    p99_s: float

    @classmethod
    def from_samples(cls, samples_s: Sequence[float]) -> LatencyStats:
        """Stats of ``samples_s`` (linear-interpolated percentiles); zeros when empty."""
        x = np.asarray(samples_s, dtype=float)
        if x.size == 0:
            return cls(0.0, 0.0, 0.0, 0.0)
        p50, p90, p99 = np.percentile(x, [50.0, 90.0, 99.0])
        return cls(float(x.mean()), float(p50), float(p90), float(p99))


@dataclass(frozen=True)
class SimResult:
    """What one simulation gives.

    Per-request tuples are indexed by request (arrival order) and cover every request;
    ``measured = (first, stop)`` is the steady-state slice the stats use. Throughputs count all
    tokens and completions inside the measured window (``window_s`` long); ``preemptions``
    counts the whole run; ``mean_decode_batch`` averages decode steps started in the window
    (over every decode instance).
    """

    ttft: LatencyStats
    tpot: LatencyStats
    e2e: LatencyStats
    output_tokens_per_s: float
    request_rate_per_s: float
    window_s: float
    preemptions: int
    mean_decode_batch: float
    measured: tuple[int, int]
    arrival_s: tuple[float, ...]
    ttft_s: tuple[float, ...]
    tpot_s: tuple[float, ...]
    e2e_s: tuple[float, ...]

    def slo_attainment(self, ttft_s: float, tpot_s: float) -> float:
        """Fraction of measured requests with TTFT <= ``ttft_s`` and TPOT <= ``tpot_s``."""
        first, stop = self.measured
        ttft = np.asarray(self.ttft_s[first:stop])
        tpot = np.asarray(self.tpot_s[first:stop])
        return float(np.mean((ttft <= ttft_s) & (tpot <= tpot_s)))

    def goodput_per_s(self, ttft_s: float, tpot_s: float) -> float:
        """Completed requests per second that meet both SLOs (request rate x attainment).
        DistServe's goodput is instead the highest arrival rate whose attainment reaches a
        target (e.g. 90%): sweep the rate and call :meth:`slo_attainment` for that."""
        return self.request_rate_per_s * self.slo_attainment(ttft_s, tpot_s)


def poisson_arrivals_s(count: int, rate_per_s: float, seed: int) -> tuple[float, ...]:
    """``count`` Poisson arrival times (exponential gaps of mean ``1 / rate_per_s``), the first
    one gap after 0, from ``random.Random(seed)``."""
    rng = random.Random(seed)
    t, times = 0.0, []
    for _ in range(count):
        t += rng.expovariate(rate_per_s)
        times.append(t)
    return tuple(times)


class _Instance:
    """Mutable state of one engine instance while a simulation runs."""

    __slots__ = ("pool", "latency", "prefill_only", "waiting", "running", "finish_heap",
                 "steps", "kv_used", "busy", "wake_pending", "outstanding", "batch", "decode_n")

    def __init__(self, pool: PoolSim, latency: LatencyModel, prefill_only: bool) -> None:
        self.pool, self.latency, self.prefill_only = pool, latency, prefill_only
        self.waiting: deque[int] = deque()
        # running: request -> decode-step count at which it finishes; insertion order is
        # admission order, so popitem() takes the most recently admitted request.
        self.running: dict[int, int] = {}
        self.finish_heap: list[tuple[int, int]] = []  # (finish step, request), stale entries kept
        self.steps = 0  # decode steps run so far
        self.kv_used = 0
        self.busy = False
        self.wake_pending = False
        self.outstanding = 0
        self.batch: list[int] = []  # the prefill batch in flight (empty during a decode step)
        self.decode_n = 0  # batch of the decode step in flight


class _Sim:
    """One run of the event loop over a :class:`SimProblem`."""

    def __init__(self, problem: SimProblem) -> None:
        p = problem
        self.problem = p
        self.n = n = len(p.input_lens)
        self.input, self.output = p.input_lens, p.output_lens
        self.gen = [0] * n           # tokens generated (kept current except while running)
        self.has_kv = [False] * n    # waiting with its KV already in place (disagg decode)
        self.arrival = [0.0] * n
        self.first = [-1.0] * n
        self.finish = [-1.0] * n
        self.events: list = []
        self.seq = 0
        self.preemptions = 0
        self.done = 0
        self.token_t: list[float] = []   # end time of every step that produced tokens
        self.token_n: list[int] = []     # tokens it produced
        self.decode_t: list[float] = []  # start time of every decode step
        self.decode_n: list[int] = []    # its batch
        self.serving = [_Instance(p.pool, p.latency, False) for _ in range(p.pool.instances)]
        self.prefill = ([_Instance(p.prefill_pool, p.prefill_latency, True)
                         for _ in range(p.prefill_pool.instances)] if p.mode == "disagg" else [])
        self.next_issue = 0

    # -- events -----------------------------------------------------------------------------

    def push(self, time_s: float, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (time_s, self.seq, kind, payload))

    def run(self) -> None:
        p = self.problem
        if p.concurrency is not None:
            for _ in range(min(p.concurrency, self.n)):
                self.issue(0.0)
        else:
            times = (p.arrival_times_s if p.arrival_times_s is not None
                     else poisson_arrivals_s(self.n, p.arrival_rate_per_s, p.seed))
            self.arrival = list(times)
            self.push(self.arrival[0], _ARRIVE, 0)
        while self.events:
            t, _, kind, x = heapq.heappop(self.events)
            if kind == _STEP_END:
                self.end_step(x, t)
            elif kind == _ARRIVE:
                self.arrive(x, t)
                if p.concurrency is None and x + 1 < self.n:
                    self.push(self.arrival[x + 1], _ARRIVE, x + 1)
            elif kind == _KV_READY:
                r, inst = x
                self.has_kv[r] = True
                inst.waiting.append(r)
                self.wake(inst, t)
            else:
                x.wake_pending = False
                self.decide(x, t)
        if self.done != self.n:
            raise RuntimeError(f"simulation stalled: {self.done} of {self.n} requests finished")

    def issue(self, now: float) -> None:
        """Closed loop: a client sends the next request now."""
        r = self.next_issue
        self.next_issue += 1
        self.arrival[r] = now
        self.push(now, _ARRIVE, r)

    def arrive(self, r: int, now: float) -> None:
        inst = _least_outstanding(self.prefill or self.serving)
        inst.outstanding += 1
        inst.waiting.append(r)
        self.wake(inst, now)

    def wake(self, inst: _Instance, now: float) -> None:
        """Let an idle instance pick a step once every event of this instant is applied."""
        if not inst.busy and not inst.wake_pending:
            inst.wake_pending = True
            self.push(now, _WAKE, inst)

    def complete(self, r: int, now: float) -> None:
        self.finish[r] = now
        self.done += 1
        if self.problem.concurrency is not None and self.next_issue < self.n:
            self.issue(now)

    # -- steps ------------------------------------------------------------------------------

    def decide(self, inst: _Instance, now: float) -> None:
        """Start the instance's next step: prefill if it can admit, else decode, else idle."""
        if inst.busy:
            return
        batch = self.admit(inst)
        if batch:
            prompts = tuple(self.input[r] + self.gen[r] for r in batch)
            inst.batch = batch
            inst.busy = True
            self.push(now + inst.latency.prefill_time_s(prompts), _STEP_END, inst)
        elif inst.running:
            n = self.make_room(inst)
            inst.decode_n = n
            inst.busy = True
            self.decode_t.append(now)
            self.decode_n.append(n)
            self.push(now + inst.latency.decode_step_s(n, inst.kv_used), _STEP_END, inst)

    def admit(self, inst: _Instance) -> list[int]:
        """Take waiting requests FCFS while they fit; return the ones that need a prefill
        (requests whose KV is already here join the running batch directly)."""
        waiting = inst.waiting
        if not waiting:
            return []
        pool = inst.pool
        room = pool.max_batch - len(inst.running)
        free = pool.kv_capacity_tokens - inst.kv_used
        budget = pool.max_prefill_tokens
        batch: list[int] = []
        tokens = 0
        while waiting and room > 0:
            r = waiting[0]
            if self.has_kv[r]:
                need = self.input[r] + self.gen[r] - 1
                if need > free:
                    break
                waiting.popleft()
                self.has_kv[r] = False
                self.join(inst, r)
            else:
                need = self.input[r] + self.gen[r]
                if need > free or (batch and tokens + need > budget):
                    break
                waiting.popleft()
                batch.append(r)
                tokens += need
            free -= need
            room -= 1
        inst.kv_used = pool.kv_capacity_tokens - free
        return batch

    def join(self, inst: _Instance, r: int) -> None:
        finish_step = inst.steps + self.output[r] - self.gen[r]
        inst.running[r] = finish_step
        heapq.heappush(inst.finish_heap, (finish_step, r))

    def make_room(self, inst: _Instance) -> int:
        """Preempt (recompute) the most recently admitted requests until every running one can
        grow by a token; return the decode batch."""
        running = inst.running
        n = len(running)
        capacity = inst.pool.kv_capacity_tokens
        while inst.kv_used + n > capacity:
            r, finish_step = running.popitem()
            g = self.output[r] - (finish_step - inst.steps)
            inst.kv_used -= self.input[r] + g - 1
            self.gen[r] = g
            inst.waiting.appendleft(r)
            self.preemptions += 1
            n -= 1
        return n

    def end_step(self, inst: _Instance, now: float) -> None:
        if inst.batch:
            self.end_prefill(inst, now)
        else:
            self.end_decode(inst, now)
        inst.busy = False
        self.decide(inst, now)

    def end_prefill(self, inst: _Instance, now: float) -> None:
        batch, inst.batch = inst.batch, []
        self.token_t.append(now)
        self.token_n.append(len(batch))
        for r in batch:
            prompt = self.input[r] + self.gen[r]
            self.gen[r] += 1
            if self.first[r] < 0:
                self.first[r] = now
            if inst.prefill_only or self.gen[r] == self.output[r]:
                inst.kv_used -= prompt
                inst.outstanding -= 1
                if self.gen[r] == self.output[r]:
                    self.complete(r, now)
                else:
                    self.hand_off(r, now)
            else:
                self.join(inst, r)

    def hand_off(self, r: int, now: float) -> None:
        """Disagg: move the request's KV to the least-loaded decode instance."""
        dest = _least_outstanding(self.serving)
        dest.outstanding += 1
        transfer = self.problem.kv_transfer_s
        delay = transfer(self.input[r]) if transfer is not None else 0.0
        self.push(now + delay, _KV_READY, (r, dest))

    def end_decode(self, inst: _Instance, now: float) -> None:
        n = inst.decode_n
        inst.steps += 1
        inst.kv_used += n
        self.token_t.append(now)
        self.token_n.append(n)
        heap, running, steps = inst.finish_heap, inst.running, inst.steps
        while heap and heap[0][0] <= steps:
            finish_step, r = heapq.heappop(heap)
            if running.get(r) != finish_step:
                continue  # stale: the request was preempted after this entry was pushed
            del running[r]
            inst.kv_used -= self.input[r] + self.output[r] - 1
            self.gen[r] = self.output[r]
            inst.outstanding -= 1
            self.complete(r, now)


def _least_outstanding(instances: list[_Instance]) -> _Instance:
    """The instance with the fewest outstanding requests, ties to the lowest index."""
    return min(instances, key=lambda inst: inst.outstanding)


def _summarize(problem: SimProblem, sim: _Sim) -> SimResult:
    """Per-request latencies and steady-state stats of a finished run."""
    n = sim.n
    arrival = np.asarray(sim.arrival)
    first = np.asarray(sim.first)
    finish = np.asarray(sim.finish)
    output = np.asarray(problem.output_lens)
    # Step 1: per-request latencies.
    ttft = first - arrival
    e2e = finish - arrival
    tpot = np.where(output > 1, (finish - first) / np.maximum(output - 1, 1), 0.0)
    # Step 2: the measured requests and window.
    start = int(math.floor(problem.warmup_fraction * n))
    stop = n - int(math.floor(problem.cooldown_fraction * n))
    window_start_s = float(arrival[start])
    window_end_s = float(finish[start:stop].max())
    window_s = window_end_s - window_start_s
    # Step 3: throughputs and decode batch inside the window.
    token_t = np.asarray(sim.token_t)
    inside = (token_t > window_start_s) & (token_t <= window_end_s)
    tokens = int(np.asarray(sim.token_n)[inside].sum())
    completed = int(np.count_nonzero((finish > window_start_s) & (finish <= window_end_s)))
    decode_t = np.asarray(sim.decode_t)
    in_window = (decode_t >= window_start_s) & (decode_t < window_end_s)
    batches = np.asarray(sim.decode_n)[in_window]
    measured = slice(start, stop)
    has_tpot = output[measured] > 1
    return SimResult(
        ttft=LatencyStats.from_samples(ttft[measured]),
        tpot=LatencyStats.from_samples(tpot[measured][has_tpot]),
        e2e=LatencyStats.from_samples(e2e[measured]),
        output_tokens_per_s=tokens / window_s if window_s > 0 else 0.0,
        request_rate_per_s=completed / window_s if window_s > 0 else 0.0,
        window_s=window_s,
        preemptions=sim.preemptions,
        mean_decode_batch=float(batches.mean()) if batches.size else 0.0,
        measured=(start, stop),
        arrival_s=tuple(arrival.tolist()),
        ttft_s=tuple(ttft.tolist()),
        tpot_s=tuple(tpot.tolist()),
        e2e_s=tuple(e2e.tolist()),
    )


def simulate(problem: SimProblem) -> SimResult:
    """Simulate every request of ``problem`` to completion and summarize the steady state.

    Deterministic: the same problem (and seed) gives the same result.
    """
    # Step 1: run the event loop.
    sim = _Sim(problem)
    sim.run()
    # Step 2: latencies, throughputs and the measured window.
    return _summarize(problem, sim)
