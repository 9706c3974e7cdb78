"""Sequence slicing of micro-batches under 1F1B (SlimPipe): how many slices to use.

Source: Li et al. 2025, "SlimPipe: Memory-Thrifty and Efficient Pipeline Parallelism for
Long-Context LLM Training" (arXiv 2504.14519): each micro-batch is cut along the sequence
into ``k`` equal slices, the slices are pipelined with a one-forward-one-backward (1F1B)
schedule, and a workload-redistribution step evens out the unequal cost of the slices
under causal attention. That shrinks the activations stashed on the first stage from
several micro-batches to about one, and the pipeline bubble by a factor ``k``.

Cost of one slice (:func:`slice_costs`)
---------------------------------------
Linear work (GEMMs, norms, MLP) is proportional to tokens: ``linear_s / k`` per slice.
Cut the causal score matrix into ``k x k`` blocks; the causal kernel computes the lower
triangle, ``k^2 / 2`` blocks' worth, which is ``attention_s``. Slice ``j`` (0-based) attends
to the keys of slices ``0..j``: ``j`` full blocks and half a diagonal block, ``(2j + 1) / 2``
blocks, i.e. a share ``(2j + 1) / k^2`` of ``attention_s``. So slice ``j`` costs::

    linear_s / k + attention_s * (2j + 1) / k^2        (sum over j: linear_s + attention_s)

The schedule (:func:`slimpipe_orders`) and its step time (:func:`step_time_s`)
-----------------------------------------------------------------------------
Slice units ``u = mb * k + j`` run in 1F1B order. The backward of a micro-batch's slices
must go in *reverse* slice order (slice ``j``'s keys/values receive gradient from every
later slice), so a stage can start the first backward of micro-batch 0 only after the
forwards of all its ``k`` slices: stage ``s`` runs ``min(m k, k - 1 + p - s - 1)`` warm-up
forwards (1F1B's ``p - s - 1`` plus ``k - 1``), then alternates F and B, then drains.

SlimPipe's workload redistribution makes every slice unit cost the mean,
``unit = (linear_s + attention_s) / k + per_slice_overhead_s``; 1F1B over ``m k`` equal
units then takes (Narayanan et al. 2021 §2.2.1, 1F1B bubble ``(p - 1)`` units)::

    step_time_s(k) = (m k + p - 1) * ((linear_s + attention_s) / k + per_slice_overhead_s)

which for ``k = 1`` and no overhead is 1F1B's ``m (f + b) + (p - 1)(f + b)``. The tests
check it equals :func:`solvers.pipeline.sim.simulate_orders` on :func:`slimpipe_orders`
with equal units (and ``simulate`` of "1f1b" with ``m k`` micro-batches), and that the same
schedule *without* redistribution (slice ``j`` costing :func:`slice_costs`) is never
faster. ``forward_fraction`` only splits a unit into F and B for such simulations; the
bubble ``(p - 1) * (F + B)`` does not depend on the split. The overhead is charged per
slice unit (F and B of one slice together), so it also lengthens the ramp.

Note: an estimate ``m * sum(slice) + (p - 1) * max(slice)`` (unbalanced slices, the
largest slice setting the ramp) is neither SlimPipe's schedule nor a bound on the plain
sliced 1F1B: the simulator shows the unbalanced schedule is slower still, because each
steady-state step pairs the forward of a cheap slice with the backward of an expensive one.

Activation memory (:func:`peak_activation_bytes`)
-------------------------------------------------
A slice stashes ``activation_bytes / k`` (activations are proportional to tokens; the
FlashAttention-style core keeps Q, K, V and the output, also per token). The most loaded
stage is stage 0 with ``min(m k, k + p - 1)`` slice units in flight at the start of its
first backward (all ``k`` slices of micro-batch 0, whose K/V later slices need, plus the
``p - 1`` slices forwarded while that micro-batch's gradient comes back), so::

    peak_activation_bytes(k) = activation_bytes * min(m k, k + p - 1) / k

``k = 1`` gives 1F1B's ``min(m, p)`` micro-batches; as ``k`` grows it falls towards one
micro-batch -- the paper's "from several micro-batches to just one". A formula like
``activation_bytes * min(p, m k) / k`` would drop below one micro-batch for ``k > p``,
which the reverse-order backward of causal attention does not allow.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

TIE_RELATIVE = 1e-12

Op = tuple[str, int, int]  # (kind, slice unit mb * k + j, chunk 0) as in solvers.pipeline.schedules


@dataclass(frozen=True)
class SlicingProblem:
    linear_s: float  # fwd+bwd of a stage's non-attention work for one micro-batch
    attention_s: float  # fwd+bwd of its causal attention core for one micro-batch
    num_stages: int
    num_microbatches: int
    activation_bytes: float  # activations one stage stores for one whole micro-batch
    memory_budget_bytes: float  # what activations may use on the most loaded stage
    per_slice_overhead_s: float = 0.0  # kernel launch / p2p latency per slice unit
    max_slices: int = 32
    forward_fraction: float = 1 / 3

    def __post_init__(self) -> None:
        for name in ("linear_s", "attention_s", "activation_bytes", "memory_budget_bytes",
                     "per_slice_overhead_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        for name in ("num_stages", "num_microbatches", "max_slices"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not (0.0 <= self.forward_fraction <= 1.0):
            raise ValueError(f"forward_fraction must be in [0, 1], got {self.forward_fraction}")


@dataclass(frozen=True)
class SlicingChoice:
    slices: int
    step_s: float
    peak_activation_bytes: float
    slice_s: tuple[float, ...]  # per-slice cost before redistribution (slice_costs)
    options: tuple[tuple[int, float, float], ...]  # (k, step_s, peak bytes) for every k tried


def _check_k(k: int) -> None:
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"the number of slices must be an integer >= 1, got {k!r}")


def slice_costs(linear_s: float, attention_s: float, k: int) -> tuple[float, ...]:
    """Cost of each of ``k`` equal-length slices under causal attention (docstring)."""
    _check_k(k)
    return tuple(linear_s / k + attention_s * (2 * j + 1) / k ** 2 for j in range(k))


def slice_unit_s(problem: SlicingProblem, k: int) -> float:
    """One balanced slice unit (F + B) after redistribution, overhead included."""
    _check_k(k)
    return (problem.linear_s + problem.attention_s) / k + problem.per_slice_overhead_s


def step_time_s(problem: SlicingProblem, k: int) -> float:
    """``(m k + p - 1) * unit``: 1F1B over ``m k`` balanced slice units."""
    units = problem.num_microbatches * k + problem.num_stages - 1
    return units * slice_unit_s(problem, k)


def in_flight_slices(problem: SlicingProblem, k: int, stage: int = 0) -> int:
    """Slice units stage ``stage`` holds at its peak: ``min(m k, k + p - stage - 1)``."""
    _check_k(k)
    return min(problem.num_microbatches * k, k + problem.num_stages - stage - 1)


def peak_activation_bytes(problem: SlicingProblem, k: int) -> float:
    """Activations on the most loaded stage (stage 0): ``bytes * min(m k, k + p - 1) / k``."""
    return problem.activation_bytes * in_flight_slices(problem, k) / k


def slimpipe_orders(num_stages: int, num_microbatches: int, k: int) -> tuple[tuple[Op, ...], ...]:
    """Per-stage operation orders of the sliced 1F1B schedule, for ``pipeline_sim``.

    Unit ``u = mb * k + j``; forwards in unit order, backwards micro-batch by micro-batch
    with slices reversed; stage ``s`` warms up with ``min(m k, k + p - s - 2)`` forwards.
    """
    _check_k(k)
    p, m = num_stages, num_microbatches
    total = m * k
    forwards = [("F", u, 0) for u in range(total)]
    backwards = [("B", (u // k) * k + (k - 1 - u % k), 0) for u in range(total)]
    orders = []
    for s in range(p):
        warmup = min(total, k - 1 + p - s - 1)
        ops: list[Op] = forwards[:warmup]
        for i in range(total - warmup):
            ops += [forwards[warmup + i], backwards[i]]
        ops += backwards[total - warmup:]
        orders.append(tuple(ops))
    return tuple(orders)


def slicing_options(problem: SlicingProblem) -> tuple[tuple[int, float, float], ...]:
    """(k, step_s, peak bytes) for k = 1..max_slices."""
    return tuple((k, step_time_s(problem, k), peak_activation_bytes(problem, k))
                 for k in range(1, problem.max_slices + 1))


def choose_slices(problem: SlicingProblem) -> SlicingChoice:
    """The fastest ``k`` whose peak activations fit the budget; near-ties go to smaller ``k``.

    Steps within a relative ``1e-12`` of the fastest fitting one count as ties.
    Raises ValueError (needed vs budget) if no ``k <= max_slices`` fits.
    """
    options = slicing_options(problem)
    fitting = [o for o in options if o[2] <= problem.memory_budget_bytes]
    if not fitting:
        k_min, _, need = min(options, key=lambda o: (o[2], o[0]))
        raise ValueError(f"activations need at least {need:.6g} bytes on the first stage "
                         f"(with {k_min} slices, max_slices={problem.max_slices}) but "
                         f"memory_budget_bytes is {problem.memory_budget_bytes:.6g}")
    fastest = min(o[1] for o in fitting)
    k, step, peak = next(o for o in fitting if o[1] <= fastest * (1.0 + TIE_RELATIVE))
    return SlicingChoice(slices=k, step_s=step, peak_activation_bytes=peak,
                         slice_s=slice_costs(problem.linear_s, problem.attention_s, k),
                         options=options)
