"""Ping-pong rounds whose compute stages share a few CPU cores (processor sharing).

:func:`solvers.serving.pingpong.rounds_s` gives every stage a processor of its own. When the
stages' processes outnumber the cores they run on (an AFD job of ``A`` attention and ``F``
FFN processes on a machine with fewer than ``A + F`` cores), stages that run at the same time
slow each other down. This module runs the same event recursion (micro-batch ``j`` of round
``r`` starts stage ``i`` when it has left stage ``i - 1`` and stage ``i`` has finished the
micro-batch before it, rounds then micro-batches in order) as a discrete-event simulation in
which the running compute stages share the cores: ``p`` processes busy on ``c`` cores each
progress at ``min(1, c / p)`` of full speed (the processor-sharing discipline, the fluid
limit of a round-robin time-sharing scheduler such as Linux CFS; Kleinrock, "Queueing
Systems" vol. 2, 1976, sec. 4.4). A stage with ``procs[i] = 0`` (a link) takes its time
whatever the cores do. Processes that wait (blocked in a receive) take no core.

With at least as many cores as the processes that can ever run together the result equals
:func:`rounds_s` (a test checks it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from solvers.serving.pingpong import stood_idle

__all__ = ["SharedRun", "shared_rounds"]

_EPS = 0.0  # a stage of no work takes no time


@dataclass(frozen=True)
class SharedRun:
    """The finish time of the last micro-batch and each stage's wall time spent serving
    (from a micro-batch's start at the stage to its finish there, slowed-down time
    included)."""

    finish_s: float
    busy_s: tuple[float, ...]


def shared_rounds(rounds: Sequence[Sequence[float]], micro_batches: int,
                  procs: Sequence[int], cores: float,
                  resume_s: Sequence[float] | None = None,
                  late_s: Sequence[float] | None = None,
                  idle_links: bool = False) -> SharedRun:
    """Finish time of ``rounds`` (each a list of stage *work* times, seconds at full speed,
    one round per layer) for ``micro_batches`` micro-batches all ready at time 0, stage ``i``
    run by ``procs[i]`` processes (0: a link, no core) on ``cores`` shared cores.
    ``resume_s[i]``: work stage ``i`` adds to a micro-batch it starts after standing idle, and
    ``late_s[i]`` to one that arrived while it was busy, as in
    :func:`solvers.serving.pingpong.rounds_s`. ``idle_links``: a link advances only while a
    core is idle (the busy compute processes fewer than the cores), as messages do whose
    transport threads run at idle priority (``planner.run.transport_threads``); a model under
    evaluation (``benchmarks/afd_executor_prediction.py`` reports it beside the default)."""
    m = micro_batches
    if m < 1:
        raise ValueError(f"micro_batches must be >= 1, got {m}")
    if cores <= 0:
        raise ValueError(f"cores must be > 0, got {cores}")
    stages = max((len(r) for r in rounds), default=0)
    if len(procs) < stages:
        raise ValueError(f"procs gives {len(procs)} stages, the rounds have {stages}")
    work = [[list(r) + [0.0] * (stages - len(r)) for _ in range(m)] for r in rounds]
    order = [(r, j) for r in range(len(rounds)) for j in range(m)]  # every stage's order
    nxt = [0] * stages  # index in ``order`` of each stage's next task
    done_at: dict[tuple[int, int, int], float] = {}
    running: dict[tuple[int, int, int], float] = {}  # task -> work left
    started: dict[tuple[int, int, int], float] = {}
    busy = [0.0] * stages
    resume = list(resume_s or ()) + [0.0] * (stages - len(resume_s or ()))
    late = list(late_s or ()) + [0.0] * (stages - len(late_s or ()))
    last_done = [0.0] * stages  # when each stage finished its last task
    now = 0.0

    def ready(r: int, j: int, i: int) -> bool:
        if i > 0:
            return (r, j, i - 1) in done_at
        return r == 0 or (r - 1, j, stages - 1) in done_at

    def arrived(r: int, j: int, i: int) -> float | None:
        """When task (r, j, i)'s input came (None: the first round's first stage)."""
        if i > 0:
            return done_at[(r, j, i - 1)]
        return done_at[(r - 1, j, stages - 1)] if r > 0 else None

    while True:
        progress = True
        while progress:  # start what can start; zero-work tasks finish at once
            progress = False
            for i in range(stages):
                if nxt[i] >= len(order) or any(t[2] == i for t in running):
                    continue
                r, j = order[nxt[i]]
                if not ready(r, j, i):
                    continue
                nxt[i] += 1
                started[(r, j, i)] = now
                if work[r][j][i] <= _EPS:
                    done_at[(r, j, i)] = now
                    last_done[i] = now
                else:
                    came = arrived(r, j, i)
                    if stood_idle(now, last_done[i]):  # it resumes first
                        work[r][j][i] += resume[i]
                    elif came is not None and stood_idle(now, came):  # its input waited
                        work[r][j][i] += late[i]
                    running[(r, j, i)] = work[r][j][i]
                progress = True
        if not running:
            break
        load = sum(procs[t[2]] for t in running)
        share = min(1.0, cores / load) if load > 0 else 1.0
        link = 0.0 if idle_links and load >= cores else 1.0
        rates = {t: (share if procs[t[2]] > 0 else link) for t in running}
        moving = [t for t in running if rates[t] > 0]  # a stalled link waits for compute
        first = min(moving, key=lambda t: running[t] / rates[t])
        dt = running[first] / rates[first]
        now += dt
        for t in list(running):
            running[t] -= dt * rates[t]
            if t == first or running[t] <= 1e-12 * work[t[0]][t[1]][t[2]]:
                del running[t]
                done_at[t] = now
                last_done[t[2]] = now
                busy[t[2]] += now - started[t]
    finish = max((done_at[(len(rounds) - 1, j, stages - 1)] for j in range(m)), default=0.0) \
        if rounds and stages else 0.0
    return SharedRun(finish, tuple(busy))
