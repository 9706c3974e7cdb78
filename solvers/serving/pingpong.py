"""Ping-pong pipelines: ``m`` micro-batches cycling through single-server stages.

In attention/FFN disaggregation every decode micro-batch crosses, per layer, the attention GPU,
the link to the expert GPUs (dispatch), the expert GPUs and the link back (combine), then the
attention GPU again for the next layer (MegaScale-Infer, Zhu et al. 2025, sec. 4: "ping-pong
pipeline parallelism"). Each stage serves one micro-batch at a time, in order.

This is a timed event graph (a marked graph): every stage is a place with one token (it serves
one micro-batch at a time) and the ring of stages holds ``m`` tokens (the micro-batches). Its
cycle time is the largest ratio, over its circuits, of the circuit's time to the tokens on it
(Baccelli, Cohen, Olsder, Quadrat, "Synchronization and Linearity", 1992, thm. 2.14, the
max-plus eigenvalue of the event graph). The circuits are the ring (all stage times, ``m``
tokens) and each stage's own loop (its time, one token), so one round (every micro-batch
through every stage once) takes, in steady state::

    round_s = max(sum(stage_s), m * max(stage_s))

The second term says the bottleneck stage is never idle; the first that one micro-batch's full
trip bounds a round when micro-batches are too few to hide the others' stages. MegaScale-Infer's
condition for full overlap, ``m >= 2 * (1 + T_c / T_f)`` with equal attention and expert times
``T_f`` and one-way transfer ``T_c`` (their sec. 4.2), is the case where the two terms meet.

:func:`rounds_s` runs the recursion itself (every start the later of the micro-batch's previous
stage and the stage's previous micro-batch), exact for any sequence of rounds and used to check
the closed form and its start-up term (:func:`pipeline_s`).
"""
from __future__ import annotations

import math
from typing import Sequence

__all__ = ["round_s", "min_micro_batches", "pipeline_s", "rounds_s", "stood_idle"]


def stood_idle(arrival_s: float, free_s: float) -> bool:
    """Whether a stage free since ``free_s`` waited for work arriving at ``arrival_s`` (beyond
    rounding: a start at the very time the stage came free is no wait)."""
    return arrival_s - free_s > 1e-12 * max(abs(arrival_s), 1e-9)


def round_s(stage_s: Sequence[float], micro_batches: int) -> float:
    """Steady-state time of one round of ``micro_batches`` through ``stage_s`` (module
    docstring)."""
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
    return max(sum(stage_s), micro_batches * max(stage_s, default=0.0))


def min_micro_batches(stage_s: Sequence[float]) -> int:
    """Fewest micro-batches that keep the slowest stage busy: ``ceil(sum / max)``."""
    top = max(stage_s, default=0.0)
    if top <= 0:
        return 1
    return max(1, math.ceil(sum(stage_s) / top - 1e-12))


def pipeline_s(rounds: Sequence[tuple[Sequence[float], int]], micro_batches: int) -> float:
    """Time of a sequence of rounds ``(stage_s, count)`` (``count`` identical rounds, e.g. the
    layers of one kind) from an empty pipeline until the last micro-batch leaves: the
    steady-state rounds plus the start-up, ``min(sum - max, (m - 1) * max)`` of the first
    kind. All micro-batches are ready at once, so the last one leaves its first round
    ``(m - 1) * max`` late when the ring binds, and behind a busy bottleneck its trip adds the
    stages other than the bottleneck. For identical rounds this equals :func:`rounds_s` (a
    test checks it on random instances); where kinds differ it is checked within a bound."""
    total = sum(count * round_s(stages, micro_batches) for stages, count in rounds if count)
    first = next((stages for stages, count in rounds if count), None)
    if first is None:
        return 0.0
    top = max(first)
    return total + min(sum(first) - top, (micro_batches - 1) * top)


def rounds_s(rounds: Sequence[Sequence[float]], micro_batches: int,
             resume_s: Sequence[float] | None = None,
             late_s: Sequence[float] | None = None) -> float:
    """Exact finish time of ``rounds`` (each a list of stage times, one round per layer) by the
    event recursion, all micro-batches starting at time 0 at the first stage.

    ``resume_s[i]`` (default 0): what stage ``i`` adds to a micro-batch it starts after
    standing idle (the micro-batch arrived after the stage had finished the one before): a
    process that blocked in a receive resumes on cold caches and a woken core
    (``Profile.resume_s``, measured by ``planner calibrate``). A stage's first micro-batch
    at time 0 finds it busy from before (the previous step) and pays nothing.

    ``late_s[i]`` (default 0): what stage ``i`` adds to a micro-batch that arrived while it
    was still busy with the one before (the message waited for it; ``Profile.late_read_s``:
    where transport threads run only on an idle core, the message is read once the process
    blocks for it). Not paid by the first round's first stage, whose micro-batches are no
    message."""
    m = micro_batches
    stages = max((len(r) for r in rounds), default=0)
    resume = list(resume_s or ()) + [0.0] * (stages - len(resume_s or ()))
    late = list(late_s or ()) + [0.0] * (stages - len(late_s or ()))
    free = [0.0] * stages  # when each stage finished its last micro-batch
    ready = [0.0] * m  # when each micro-batch finished its last stage
    for n, r in enumerate(rounds):
        for j in range(m):
            t = ready[j]
            for i, dur in enumerate(r):
                extra = 0.0
                if dur > 0 and stood_idle(t, free[i]):
                    extra = resume[i]
                elif dur > 0 and (n > 0 or i > 0) and stood_idle(free[i], t):
                    extra = late[i]
                t = max(t, free[i]) + dur + extra
                free[i] = t
            ready[j] = t
    return max(ready, default=0.0)
