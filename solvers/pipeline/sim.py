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

The schedules' per-device orders are built by :mod:`solvers.pipeline.schedules`
(:func:`schedule_orders` picks one by name); :mod:`solvers.pipeline.closed_form` gives the
uniform-stage closed forms this simulator is checked against.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from solvers.pipeline.schedules import (SCHEDULES, Op, gpipe_order, interleaved_order,
                                        one_f_one_b_order, zb_h1_order)

__all__ = ["PipelineProblem", "Event", "PipelineResult", "per_stage", "op_duration_s",
           "schedule_orders", "simulate_orders", "peak_in_flight_of_order", "simulate"]


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
# The problem's schedule as per-device orders
# ---------------------------------------------------------------------------------------

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
