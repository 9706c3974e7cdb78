"""Ping-pong rounds whose ranks are pinned to cores they may share, a message read only once
its receiver's core is free.

:func:`solvers.serving.pingpong.rounds_s` gives every stage a processor of its own and
:mod:`solvers.serving.shared_cores` lets the busy stages share all the cores evenly (processor
sharing). Neither is what a CPU job with more ranks than cores does when each rank is pinned
to one core and its messages are read by transport threads at idle priority (the AFD
reference job on gloo: ``planner.run.affinity`` pins the ranks round-robin,
``planner.run.transport_threads`` lowers gloo's threads to ``SCHED_IDLE``). Traced with
ftrace's ``sched_switch`` / ``sched_wakeup`` on the 2-vCPU box (2026-11-28, 1 attention + 2 FFN
ranks, 2 micro-batches):

* a message to a rank whose core computes (for that rank or another) stays unread in its
  socket until the core frees: pinned to one core, the two FFN ranks ran strictly in turn
  (unpinned, the second one's tokens waited up to 1.9 ms after they had been sent);
* once the core frees, the message is read and its rank runs;
* two ranks with work on one core (two attention ranks at a step's start) take turns of about
  0.5 ms.

This module runs that as a discrete-event simulation. Each attention rank runs, in order,
every round's work for every micro-batch (rounds then micro-batches, as ``rounds_s``); after a
round with experts it sends a dispatch to every FFN rank of its unit. Each FFN rank runs a
micro-batch of a round once every attention rank of its unit's dispatch is read, then sends
the results (combine) back. A message takes its link time on its own (sender, receiver) link,
one message at a time. A core shares its time evenly among its ranks that compute (the fluid
limit of the turns); a rank whose next work needs no unread message goes on at once (it does
not block). Messages that arrive while any rank computes on their receiver's core wait; when
none does, they are read and every rank whose work is then ready starts.

The same two costs as ``rounds_s`` price what waiting does to a rank's next work: ``resume_s``
when it stood idle until its input arrived on a free core (it resumes on cold caches), and
``late_s`` when its input arrived while its core was busy, so was read only when the core
freed (``Profile.late_read_s``: read once the rank, or the ranks holding the core, block).

With every rank on a core of its own and symmetric ranks the result equals ``rounds_s`` with
the attention stage's costs at index 0 and the FFN stage's at index 2 (a test checks it).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

from solvers.serving.pingpong import stood_idle

__all__ = ["PinnedRank", "PinnedRun", "pinned_rounds"]

ATTENTION, FFN = "attention", "ffn"


@dataclass(frozen=True)
class PinnedRank:
    """One process: its role (``"attention"`` or ``"ffn"``), its unit (attention ranks talk
    to the FFN ranks of their unit only) and the core it is pinned to."""

    role: str
    unit: int
    core: int


@dataclass(frozen=True)
class PinnedRun:
    """The finish time of the last work, and per rank (in the order given) its wall time in
    its own work (from each work's start to its finish, time a shared core gave to the other
    ranks included) and the work itself (resumes and late reads included)."""

    finish_s: float
    busy_s: tuple[float, ...]
    work_s: tuple[float, ...]


def _full(rnd: Sequence[float]) -> bool:
    """Whether a round has a dispatch, experts and combine (else it is attention work only)."""
    return any(x > 0 for x in rnd[1:4])


def pinned_rounds(rounds: Sequence[Sequence[float]], micro_batches: int,
                  ranks: Sequence[PinnedRank],
                  resume_s: tuple[float, float] = (0.0, 0.0),
                  late_s: tuple[float, float] = (0.0, 0.0)) -> PinnedRun:
    """Finish time of ``rounds`` (each ``(attention work, dispatch link, experts work,
    combine link)`` in seconds; a round whose last three are 0 is attention work only) for
    ``micro_batches`` micro-batches of every attention rank, all ready at time 0 on idle
    ranks, on ``ranks`` pinned to their cores (module docstring). ``resume_s`` and
    ``late_s``: the (attention, FFN) ranks' cost of resuming after standing idle and of a
    late read."""
    m = micro_batches
    if m < 1:
        raise ValueError(f"micro_batches must be >= 1, got {m}")
    rounds = [tuple(r) + (0.0,) * (4 - len(r)) for r in rounds]
    full = [_full(r) for r in rounds]
    att = [i for i, k in enumerate(ranks) if k.role == ATTENTION]
    ffn = [i for i, k in enumerate(ranks) if k.role == FFN]
    if len(att) + len(ffn) != len(ranks):
        raise ValueError("every rank's role must be 'attention' or 'ffn'")
    for u in {k.unit for k in ranks}:
        if not any(ranks[i].unit == u for i in att):
            raise ValueError(f"unit {u} has no attention rank")
        if any(full) and not any(ranks[i].unit == u for i in ffn):
            raise ValueError(f"unit {u} has no FFN rank, and rounds have experts")
    n_ranks = len(ranks)
    peers = {i: [p for p in (ffn if ranks[i].role == ATTENTION else att)
                 if ranks[p].unit == ranks[i].unit] for i in range(n_ranks)}
    # each rank's program: (round, micro-batch), rounds then micro-batches
    prog = {i: [(r, j) for r in range(len(rounds)) for j in range(m)] for i in att}
    prog.update({i: [(r, j) for r in range(len(rounds)) if full[r] for j in range(m)]
                 for i in ffn})
    pos = {i: 0 for i in range(n_ranks)}
    # inputs read per (rank, round, micro-batch): count, last read time, read late
    read: dict[tuple[int, int, int], tuple[int, float, bool]] = {}
    held: dict[int, list[tuple[int, int, int]]] = {}  # core -> messages waiting for it
    left: dict[int, float] = {}  # rank computing -> its work left (seconds at full speed)
    last_run = {i: 0.0 for i in range(n_ranks)}  # when the rank last finished work
    busy = [0.0] * n_ranks
    work_done = [0.0] * n_ranks
    started: dict[int, float] = {}
    link_free: dict[tuple[int, int], float] = {}
    arrivals: list[tuple[float, int, int, int, int]] = []  # (time, seq, rank, round, mb)
    seq = 0
    now = finish = 0.0

    def needs(i: int, r: int) -> int:
        if ranks[i].role == FFN:
            return len(peers[i])
        return len(peers[i]) if r > 0 and full[r - 1] else 0

    def ready(i: int) -> bool:
        if pos[i] >= len(prog[i]):
            return False
        r, j = prog[i][pos[i]]
        n = needs(i, r)
        return n == 0 or read.get((i, r, j), (0, 0.0, False))[0] >= n

    def start(i: int) -> None:
        r, j = prog[i][pos[i]]
        side = 0 if ranks[i].role == ATTENTION else 1
        work = rounds[r][0] if side == 0 else rounds[r][2]
        if work > 0 and needs(i, r):
            _, came, late = read[(i, r, j)]
            if late:
                work += late_s[side]
            elif stood_idle(came, last_run[i]):
                work += resume_s[side]
        work_done[i] += work
        left[i] = work
        started[i] = now

    def take(t: float, i: int, r: int, j: int, late: bool) -> None:
        """Rank ``i``'s transport thread reads an input of its work (r, j) at ``t``; the
        last one read decides whether the work pays a late read."""
        n = read.get((i, r, j), (0, 0.0, False))[0]
        read[(i, r, j)] = (n + 1, t, late)

    def computing(core: int) -> bool:
        return any(ranks[i].core == core for i in left)

    def free_core(core: int, t: float) -> None:
        """Nothing computes on the core at ``t``: its transport threads read what waited,
        every rank whose work is ready starts."""
        for i, r, j in held.pop(core, []):
            take(t, i, r, j, True)
        for i in range(n_ranks):
            if ranks[i].core == core and i not in left and ready(i):
                start(i)

    for core in sorted({k.core for k in ranks}):
        free_core(core, 0.0)
    while left or arrivals:
        sharing: dict[int, int] = {}
        for i in left:  # ranks computing on one core share it evenly
            sharing[ranks[i].core] = sharing.get(ranks[i].core, 0) + 1
        rate = {i: 1.0 / sharing[ranks[i].core] for i in left}
        done_at = min((now + left[i] / rate[i] for i in left), default=float("inf"))
        t = min(done_at, arrivals[0][0]) if arrivals else done_at
        for i in left:
            left[i] -= (t - now) * rate[i]
        now = t
        if arrivals and arrivals[0][0] <= done_at:
            _, _, p, r, j = heapq.heappop(arrivals)
            finish = t  # a last round's results count once they are back
            if computing(ranks[p].core):
                held.setdefault(ranks[p].core, []).append((p, r, j))
            else:
                take(t, p, r, j, False)
                free_core(ranks[p].core, t)
            continue
        finish = t
        cores = set()
        for i in sorted(i for i in left if left[i] <= 1e-12 * max(t, 1e-9)):
            del left[i]
            busy[i] += t - started.pop(i)
            r, j = prog[i][pos[i]]
            pos[i] += 1
            last_run[i] = t
            if full[r]:
                to_ffn = ranks[i].role == ATTENTION
                link_s = rounds[r][1] if to_ffn else rounds[r][3]
                for p in peers[i]:  # the results of round r are the input of round r + 1
                    begin = max(t, link_free.get((i, p), 0.0))
                    link_free[(i, p)] = begin + link_s
                    seq += 1
                    heapq.heappush(arrivals, (begin + link_s, seq, p, r if to_ffn else r + 1, j))
            if ready(i):  # its next work needs no unread message: it does not block
                start(i)
            cores.add(ranks[i].core)
        for core in sorted(cores):
            if not computing(core):
                free_core(core, t)
    return PinnedRun(finish, tuple(busy), tuple(work_done))
