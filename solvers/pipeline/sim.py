"""Event-driven simulator of pipeline-parallel schedules (one training step).

The model
---------
``p`` devices ("stages") hold ``v`` model chunks each (``v = 1`` except for the interleaved
schedule). Virtual stage ``q = c * p + s`` is chunk ``c`` of device ``s`` (Megatron-LM's
interleaved layout: device ``s`` holds layers of virtual stages ``s, s + p, s + 2p, ...``).
Every device runs a fixed, ordered list of operations, one at a time; an operation is

* ``F`` forward of one micro-batch through one chunk,
* ``B`` backward of it (the full backward, or only the input-gradient part for ZB-H1),
* ``W`` the weight-gradient part of the backward (ZB-H1 only),

and it starts as soon as the device is free *and* its inputs are there:

* ``F(q, mb)`` needs ``F(q - 1, mb)`` (plus ``p2p_s`` when ``q - 1`` lives on another device);
* ``B(q, mb)`` needs ``B(q + 1, mb)`` (plus ``p2p_s`` across devices) and ``F(q, mb)``;
* ``W(q, mb)`` needs ``B(q, mb)``.

With every device's order fixed, start times follow from these rules alone (a longest path
in a DAG), so the result does not depend on the order in which the simulator visits devices.
``p2p_s`` is only paid between different devices (with ``p = 1`` all chunks are local).

Schedules (per-device operation orders, :func:`schedule_orders`)
-----------------------------------------------------------------
* ``gpipe`` -- Huang et al. 2019, "GPipe": all ``m`` forwards, then all ``m`` backwards.
* ``1f1b`` -- PipeDream-Flush (Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel
  DNN Training", and Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
  on GPU Clusters Using Megatron-LM" §2.2.1): device ``s`` runs ``w = min(p - s - 1, m)``
  warm-up forwards, then alternates one forward and one backward, then drains the ``w``
  remaining backwards.
* ``interleaved-1f1b`` -- Narayanan et al. 2021 (Megatron-LM) §2.2.2, with Megatron-LM's
  ordering (``forward_backward_pipelining_with_interleaving``): the ``k``-th forward of a
  device runs chunk ``(k mod p*v) // p`` on micro-batch ``(k // (p*v)) * p + k mod p``; the
  ``k``-th backward runs chunk ``v - 1 - (k mod p*v) // p`` on the same micro-batch
  formula. Warm-up: ``w = min(v*m, 2*(p - s - 1) + (v - 1)*p)`` forwards, then alternate
  F/B, then drain. ``m`` must be a multiple of ``p`` (ValueError otherwise). Megatron
  special-cases ``m == p`` as "all warm-up" (``w = v*m``); we keep the general formula, which
  gives the same step time in the uniform case (checked in the tests) with less memory.
* ``zb-h1`` -- Qi et al. 2023, "Zero Bubble Pipeline Parallelism" (ICLR 2024), handcrafted
  schedule ZB-H1 (Fig. 3, Table 2): the
  1F1B order with each backward split into ``B`` (input gradient, critical path, duration
  ``(1 - weight_grad_fraction) * backward``) and ``W`` (weight gradient, duration
  ``weight_grad_fraction * backward``). Device ``s`` postpones its ``W`` passes so that up
  to ``s`` of them are pending (``W`` of micro-batch ``i`` runs right after ``B`` of
  micro-batch ``i + s``; the last ``s`` run after the last ``B``). This keeps the number of
  micro-batches whose ``B`` is outstanding equal to 1F1B's ``min(p - s, m)`` (the paper's
  "same peak memory as 1F1B": device ``s`` additionally holds ``s`` W-only activations,
  ``M_W < M_B``, Qi et al. Table 2) and fills the 1F1B cool-down bubble with ``W`` passes.

Closed forms (uniform stages, ``p2p_s = 0``; f, b per chunk and micro-batch)
----------------------------------------------------------------------------
Step time = ``v * m * (f + b)`` (one device's work) + bubble, with bubble
(:func:`bubble_closed_form_s`):

* gpipe, 1f1b: ``(p - 1) * (f + b)`` (Huang et al. 2019; Narayanan et al. 2021 §2.2.1:
  bubble fraction ``(p - 1) / m`` of the ideal time ``m * (f + b)``);
* interleaved-1f1b: ``(p - 1) * (f + b)`` with *per-chunk* ``f, b``; Narayanan et al.
  2021 §2.2.2 writes it as ``(p - 1) * (t_f + t_b) / v`` with *per-device* times
  ``t_f = v f``, ``t_b = v b``, i.e. a bubble fraction ``(p - 1) / (v m)``;
* zb-h1 (needs ``m >= p``): ``(p - 1) * (f + b_in - min(w, f, b_in))`` with
  ``b_in = (1 - weight_grad_fraction) * b`` and ``w = weight_grad_fraction * b``. When
  ``w <= min(f, b_in)`` this is Qi et al. 2023 Table 2's ``(p-1)(T_F + T_B - T_W)``
  (``T_B`` = input-gradient pass, ``T_W`` = weight-gradient pass): each postponed ``W``
  fills a cool-down gap, and the gap of the warm-up shrinks by ``w``. A ``W`` longer than
  ``f`` or ``b_in`` no longer fits and only ``min(w, f, b_in)`` is saved per stage. The
  min-form was found by, and is checked against, this simulator (thousands of random
  ``f, b, w``, ``m >= p``); for ``m < p`` no closed form is given (ValueError), and the
  simulated bubble is never above 1F1B's. The paper's setting ``T_F = T_B = T_W`` gives
  ``(p - 1) f``, a third of 1F1B's ``3 (p - 1) f``.

Peak in-flight activations (:func:`peak_in_flight_closed_form`, micro-batch-chunks whose
``F`` has run and whose ``B`` has not): gpipe ``m``; 1f1b and zb-h1 ``min(p - s, m)``;
interleaved ``min(v*m, 2*(p - s - 1) + (v - 1)*p + 1)`` (Megatron's warm-up count plus the
one forward that precedes the first backward). All verified against :func:`simulate`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1")
KINDS = ("F", "B", "W")

Op = tuple[str, int, int]  # (kind, micro-batch, chunk)


@dataclass(frozen=True)
class PipelineProblem:
    """A schedule on ``num_stages`` devices with per-chunk forward/backward times."""

    schedule: str
    num_stages: int
    num_microbatches: int
    forward_s: float | tuple[float, ...]
    backward_s: float | tuple[float, ...]
    num_chunks: int = 1
    weight_grad_fraction: float = 0.5
    p2p_s: float = 0.0

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; expected one of {SCHEDULES}")
        for name in ("num_stages", "num_microbatches", "num_chunks"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("forward_s", "backward_s"):
            value = getattr(self, name)
            if isinstance(value, (tuple, list)):
                value = tuple(float(x) for x in value)
                object.__setattr__(self, name, value)
                if len(value) != self.num_stages:
                    raise ValueError(f"{name} has {len(value)} entries, num_stages is "
                                     f"{self.num_stages}")
                values = value
            else:
                values = (float(value),)
            if any(not (math.isfinite(x) and x >= 0) for x in values):
                raise ValueError(f"{name} must be finite and >= 0: {value!r}")
        if self.schedule != "interleaved-1f1b" and self.num_chunks != 1:
            raise ValueError(f"num_chunks must be 1 for schedule {self.schedule!r}, "
                             f"got {self.num_chunks}")
        if self.schedule == "interleaved-1f1b" and self.num_microbatches % self.num_stages:
            raise ValueError(f"interleaved-1f1b needs num_microbatches "
                             f"({self.num_microbatches}) to be a multiple of num_stages "
                             f"({self.num_stages})")
        if not (0.0 <= self.weight_grad_fraction <= 1.0):
            raise ValueError(f"weight_grad_fraction must be in [0, 1], got "
                             f"{self.weight_grad_fraction}")
        if not (math.isfinite(self.p2p_s) and self.p2p_s >= 0):
            raise ValueError(f"p2p_s must be finite and >= 0, got {self.p2p_s}")


@dataclass(frozen=True)
class Event:
    stage: int
    kind: str  # "F", "B" or "W"
    microbatch: int
    chunk: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class PipelineResult:
    step_s: float
    stage_finish_s: tuple[float, ...]
    peak_in_flight: tuple[int, ...]  # per stage: max chunk-micro-batches with F done, B not
    bubble_s: float  # step_s minus the busiest stage's compute time
    events: tuple[Event, ...]  # ordered by stage, then start time


# ---------------------------------------------------------------------------------------
# Per-stage times
# ---------------------------------------------------------------------------------------

def per_stage(value: float | tuple[float, ...], num_stages: int) -> tuple[float, ...]:
    """A scalar or per-stage tuple as a per-stage tuple."""
    if isinstance(value, tuple):
        return value
    return (float(value),) * num_stages


def op_duration_s(problem: PipelineProblem, stage: int, kind: str) -> float:
    """Duration of one operation of ``kind`` on ``stage`` (any micro-batch, any chunk)."""
    f = per_stage(problem.forward_s, problem.num_stages)[stage]
    b = per_stage(problem.backward_s, problem.num_stages)[stage]
    if kind == "F":
        return f
    if problem.schedule != "zb-h1":
        if kind == "W":
            raise ValueError(f"W operations exist only in zb-h1, not {problem.schedule!r}")
        return b
    w_fraction = problem.weight_grad_fraction
    return (1.0 - w_fraction) * b if kind == "B" else w_fraction * b


# ---------------------------------------------------------------------------------------
# Schedules as per-stage operation orders
# ---------------------------------------------------------------------------------------

def gpipe_order(num_stages: int, num_microbatches: int, stage: int) -> tuple[Op, ...]:
    m = num_microbatches
    return tuple(("F", i, 0) for i in range(m)) + tuple(("B", i, 0) for i in range(m))


def one_f_one_b_order(num_stages: int, num_microbatches: int, stage: int) -> tuple[Op, ...]:
    p, m, s = num_stages, num_microbatches, stage
    warmup = min(p - s - 1, m)
    ops: list[Op] = [("F", i, 0) for i in range(warmup)]
    for i in range(m - warmup):
        ops += [("F", warmup + i, 0), ("B", i, 0)]
    ops += [("B", i, 0) for i in range(m - warmup, m)]
    return tuple(ops)


def interleaved_warmup(num_stages: int, num_microbatches: int, num_chunks: int,
                       stage: int) -> int:
    """Megatron-LM's warm-up forward count of the interleaved schedule (general formula)."""
    p, m, v, s = num_stages, num_microbatches, num_chunks, stage
    return min(v * m, 2 * (p - s - 1) + (v - 1) * p)


def interleaved_op(num_stages: int, num_chunks: int, k: int, forward: bool) -> tuple[int, int]:
    """(micro-batch, chunk) of a device's ``k``-th forward or backward (Megatron's order)."""
    p, v = num_stages, num_chunks
    group, in_group = divmod(k, p * v)
    chunk = in_group // p
    if not forward:
        chunk = v - 1 - chunk
    return group * p + in_group % p, chunk


def interleaved_order(num_stages: int, num_microbatches: int, num_chunks: int,
                      stage: int) -> tuple[Op, ...]:
    p, m, v = num_stages, num_microbatches, num_chunks
    total = v * m
    warmup = interleaved_warmup(p, m, v, stage)

    def fwd(k: int) -> Op:
        return ("F",) + interleaved_op(p, v, k, True)

    def bwd(k: int) -> Op:
        return ("B",) + interleaved_op(p, v, k, False)

    ops: list[Op] = [fwd(k) for k in range(warmup)]
    for k in range(total - warmup):
        ops += [fwd(warmup + k), bwd(k)]
    ops += [bwd(k) for k in range(total - warmup, total)]
    return tuple(ops)


def zb_h1_order(num_stages: int, num_microbatches: int, stage: int) -> tuple[Op, ...]:
    """1F1B with ``W`` of micro-batch ``i`` placed right after ``B`` of ``i + stage``."""
    ops: list[Op] = []
    for op in one_f_one_b_order(num_stages, num_microbatches, stage):
        ops.append(op)
        kind, mb, _ = op
        if kind == "B" and mb - stage >= 0:
            ops.append(("W", mb - stage, 0))
    done = max(0, num_microbatches - stage)
    ops += [("W", i, 0) for i in range(done, num_microbatches)]
    return tuple(ops)


def schedule_orders(problem: PipelineProblem) -> tuple[tuple[Op, ...], ...]:
    """Every device's ordered operations for ``problem.schedule``."""
    p, m = problem.num_stages, problem.num_microbatches
    if problem.schedule == "gpipe":
        return tuple(gpipe_order(p, m, s) for s in range(p))
    if problem.schedule == "1f1b":
        return tuple(one_f_one_b_order(p, m, s) for s in range(p))
    if problem.schedule == "interleaved-1f1b":
        return tuple(interleaved_order(p, m, problem.num_chunks, s) for s in range(p))
    return tuple(zb_h1_order(p, m, s) for s in range(p))


# ---------------------------------------------------------------------------------------
# The simulator
# ---------------------------------------------------------------------------------------

def _dependencies(op: Op, stage: int, num_stages: int, num_chunks: int,
                  p2p_s: float) -> list[tuple[int, Op, float]]:
    """(device, operation, extra delay) that must finish before ``op`` on ``stage`` starts."""
    kind, mb, chunk = op
    p = num_stages
    q = chunk * p + stage  # virtual stage
    if kind == "F":
        if q == 0:
            return []
        prev_stage, prev_chunk = (q - 1) % p, (q - 1) // p
        delay = p2p_s if prev_stage != stage else 0.0
        return [(prev_stage, ("F", mb, prev_chunk), delay)]
    if kind == "B":
        deps = [(stage, ("F", mb, chunk), 0.0)]
        if q < p * num_chunks - 1:
            next_stage, next_chunk = (q + 1) % p, (q + 1) // p
            delay = p2p_s if next_stage != stage else 0.0
            deps.append((next_stage, ("B", mb, next_chunk), delay))
        return deps
    return [(stage, ("B", mb, chunk), 0.0)]


def simulate_orders(orders: Sequence[Sequence[Op]],
                    duration_s: Callable[[int, str, int, int], float],
                    num_chunks: int = 1, p2p_s: float = 0.0) -> PipelineResult:
    """Simulate explicit per-device orders; ``duration_s(stage, kind, mb, chunk)``.

    Raises ValueError if an order names an operation twice, or if the orders deadlock
    (some device waits for an operation that never runs before it).
    """
    p = len(orders)
    for s, ops in enumerate(orders):
        if len(set(ops)) != len(ops):
            raise ValueError(f"stage {s} lists an operation twice")
    end: list[dict[Op, float]] = [dict() for _ in range(p)]
    free_s = [0.0] * p
    pos = [0] * p
    events: list[list[Event]] = [[] for _ in range(p)]
    remaining = sum(len(ops) for ops in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                op = orders[s][pos[s]]
                ready = free_s[s]
                blocked = False
                for dep_stage, dep_op, delay in _dependencies(op, s, p, num_chunks, p2p_s):
                    t = end[dep_stage].get(dep_op)
                    if t is None:
                        blocked = True
                        break
                    ready = max(ready, t + delay)
                if blocked:
                    break
                kind, mb, chunk = op
                finish = ready + duration_s(s, kind, mb, chunk)
                end[s][op] = finish
                free_s[s] = finish
                events[s].append(Event(s, kind, mb, chunk, ready, finish))
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {s: orders[s][pos[s]] for s in range(p) if pos[s] < len(orders[s])}
            raise ValueError(f"schedule deadlocks; next operation per stage: {stuck}")
    busy = [sum(e.end_s - e.start_s for e in evs) for evs in events]
    finish = tuple(evs[-1].end_s if evs else 0.0 for evs in events)
    step = max(finish) if finish else 0.0
    return PipelineResult(step_s=step, stage_finish_s=finish,
                          peak_in_flight=tuple(peak_in_flight_of_order(ops) for ops in orders),
                          bubble_s=step - max(busy, default=0.0),
                          events=tuple(e for evs in events for e in evs))


def peak_in_flight_of_order(ops: Sequence[Op]) -> int:
    """Most (micro-batch, chunk) pairs with F run and B not yet run along one device's order.

    A device runs its operations one at a time in order, so counting along the order is the
    same as counting over time.
    """
    alive = peak = 0
    for kind, _, _ in ops:
        if kind == "F":
            alive += 1
            peak = max(peak, alive)
        elif kind == "B":
            alive -= 1
    return peak


def simulate(problem: PipelineProblem) -> PipelineResult:
    """Simulate one step of ``problem`` (see the module docstring for the rules)."""
    return simulate_orders(schedule_orders(problem),
                           lambda s, kind, mb, chunk: op_duration_s(problem, s, kind),
                           num_chunks=problem.num_chunks, p2p_s=problem.p2p_s)


# ---------------------------------------------------------------------------------------
# Closed forms
# ---------------------------------------------------------------------------------------

def _uniform_times(problem: PipelineProblem) -> tuple[float, float]:
    fs = set(per_stage(problem.forward_s, problem.num_stages))
    bs = set(per_stage(problem.backward_s, problem.num_stages))
    if len(fs) != 1 or len(bs) != 1:
        raise ValueError("closed forms need uniform stages (one forward and one backward time)")
    if problem.p2p_s != 0:
        raise ValueError("closed forms assume p2p_s == 0")
    return fs.pop(), bs.pop()


def bubble_closed_form_s(problem: PipelineProblem) -> float:
    """Idle time of the busiest device, uniform stages and ``p2p_s = 0`` (module docstring).

    gpipe / 1f1b / interleaved-1f1b: ``(p - 1) * (f + b)`` with per-chunk ``f, b``
    (Narayanan et al. 2021 §2.2); zb-h1 (``m >= p``): ``(p - 1) * (f + b_in - min(w, f,
    b_in))``, Qi et al. 2023's ``(p - 1)(T_F + T_B - T_W)`` when ``w <= min(f, b_in)``.
    """
    f, b = _uniform_times(problem)
    p = problem.num_stages
    if problem.schedule == "zb-h1":
        if problem.num_microbatches < p:
            raise ValueError(f"the zb-h1 closed form needs num_microbatches >= num_stages, "
                             f"got {problem.num_microbatches} < {p}")
        w = problem.weight_grad_fraction * b
        b_in = b - w
        return (p - 1) * (f + b_in - min(w, f, b_in))
    return (p - 1) * (f + b)


def step_closed_form_s(problem: PipelineProblem) -> float:
    """``v * m * (f + b)`` plus :func:`bubble_closed_form_s`."""
    f, b = _uniform_times(problem)
    return problem.num_chunks * problem.num_microbatches * (f + b) + bubble_closed_form_s(problem)


def peak_in_flight_closed_form(problem: PipelineProblem) -> tuple[int, ...]:
    """Per-device peak of chunk-micro-batches with F done and B not (module docstring)."""
    p, m, v = problem.num_stages, problem.num_microbatches, problem.num_chunks
    if problem.schedule == "gpipe":
        return (m,) * p
    if problem.schedule == "interleaved-1f1b":
        return tuple(min(v * m, 2 * (p - s - 1) + (v - 1) * p + 1) for s in range(p))
    return tuple(min(p - s, m) for s in range(p))
