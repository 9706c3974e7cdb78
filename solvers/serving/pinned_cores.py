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
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
    padded = [tuple(r) + (0.0,) * (4 - len(r)) for r in rounds]
    _check_units(ranks, any(_full(r) for r in padded))
    return _Simulation(padded, micro_batches, tuple(ranks), resume_s, late_s).run()


def _check_units(ranks: Sequence[PinnedRank], experts: bool) -> None:
    """Every rank is an attention or FFN rank, every unit has an attention rank and, where
    rounds have experts, an FFN rank."""
    if any(k.role not in (ATTENTION, FFN) for k in ranks):
        raise ValueError("every rank's role must be 'attention' or 'ffn'")
    for u in {k.unit for k in ranks}:
        roles = {k.role for k in ranks if k.unit == u}
        if ATTENTION not in roles:
            raise ValueError(f"unit {u} has no attention rank")
        if experts and FFN not in roles:
            raise ValueError(f"unit {u} has no FFN rank, and rounds have experts")


class _Simulation:
    """The discrete-event run of :func:`pinned_rounds` (module docstring): each rank works
    through its program of (round, micro-batch) pairs; ``left`` holds the computing ranks'
    work left at full speed, ``arrivals`` the messages in flight, ``held`` per core the
    messages that came while it computed, ``read`` per (rank, round, micro-batch) the inputs
    read (count, last read time, read late)."""

    def __init__(self, rounds: list[tuple[float, ...]], m: int, ranks: tuple[PinnedRank, ...],
                 resume_s: tuple[float, float], late_s: tuple[float, float]) -> None:
        self.rounds, self.ranks = rounds, ranks
        self.resume_s, self.late_s = resume_s, late_s
        self.full = [_full(r) for r in rounds]
        n = len(ranks)
        self.peers = {i: [p for p in range(n) if ranks[p].unit == ranks[i].unit
                          and ranks[p].role != ranks[i].role] for i in range(n)}
        self.prog = {i: [(r, j) for r in range(len(rounds))
                         if ranks[i].role == ATTENTION or self.full[r] for j in range(m)]
                     for i in range(n)}
        self.pos = [0] * n
        self.read: dict[tuple[int, int, int], tuple[int, float, bool]] = {}
        self.held: dict[int, list[tuple[int, int, int]]] = {}
        self.left: dict[int, float] = {}
        self.started: dict[int, float] = {}
        self.last_run = [0.0] * n  # when the rank last finished work
        self.busy, self.work_done = [0.0] * n, [0.0] * n
        self.link_free: dict[tuple[int, int], float] = {}
        self.arrivals: list[tuple[float, int, int, int, int]] = []  # time, seq, rank, round, mb
        self.seq = 0
        self.now = self.finish = 0.0

    def needs(self, i: int, r: int) -> int:
        """Inputs rank ``i`` reads before round ``r``: every peer's dispatch (FFN) or, after
        a round with experts, every peer's results (attention)."""
        if self.ranks[i].role == FFN or (r > 0 and self.full[r - 1]):
            return len(self.peers[i])
        return 0

    def ready(self, i: int) -> bool:
        if self.pos[i] >= len(self.prog[i]):
            return False
        r, j = self.prog[i][self.pos[i]]
        n = self.needs(i, r)
        return n == 0 or self.read.get((i, r, j), (0, 0.0, False))[0] >= n

    def start(self, i: int) -> None:
        """Rank ``i`` starts its next work, with a late read or a resume where its input
        made it wait."""
        r, j = self.prog[i][self.pos[i]]
        side = 0 if self.ranks[i].role == ATTENTION else 1
        work = self.rounds[r][2 * side]
        if work > 0 and self.needs(i, r):
            _, came, late = self.read[(i, r, j)]
            if late:
                work += self.late_s[side]
            elif stood_idle(came, self.last_run[i]):
                work += self.resume_s[side]
        self.work_done[i] += work
        self.left[i] = work
        self.started[i] = self.now

    def take(self, t: float, i: int, r: int, j: int, late: bool) -> None:
        """Rank ``i``'s transport thread reads an input of its work (r, j) at ``t``; the
        last one read decides whether the work pays a late read."""
        n = self.read.get((i, r, j), (0, 0.0, False))[0]
        self.read[(i, r, j)] = (n + 1, t, late)

    def computing(self, core: int) -> bool:
        return any(self.ranks[i].core == core for i in self.left)

    def free_core(self, core: int, t: float) -> None:
        """Nothing computes on the core at ``t``: its transport threads read what waited,
        every rank whose work is ready starts."""
        for i, r, j in self.held.pop(core, []):
            self.take(t, i, r, j, True)
        for i, k in enumerate(self.ranks):
            if k.core == core and i not in self.left and self.ready(i):
                self.start(i)

    def advance(self) -> tuple[float, float]:
        """Run the computing ranks, a core's time shared evenly among its ranks, up to the
        next event: (its time, when the next work finishes)."""
        sharing: dict[int, int] = {}
        for i in self.left:
            sharing[self.ranks[i].core] = sharing.get(self.ranks[i].core, 0) + 1
        rate = {i: 1.0 / sharing[self.ranks[i].core] for i in self.left}
        done_at = min((self.now + self.left[i] / rate[i] for i in self.left),
                      default=float("inf"))
        t = min(done_at, self.arrivals[0][0]) if self.arrivals else done_at
        for i in self.left:
            self.left[i] -= (t - self.now) * rate[i]
        self.now = t
        return t, done_at

    def arrive(self, t: float) -> None:
        """The next message arrives: held while its receiver's core computes, else read."""
        _, _, p, r, j = heapq.heappop(self.arrivals)
        self.finish = t  # a last round's results count once they are back
        core = self.ranks[p].core
        if self.computing(core):
            self.held.setdefault(core, []).append((p, r, j))
        else:
            self.take(t, p, r, j, False)
            self.free_core(core, t)

    def send(self, i: int, r: int, j: int, t: float) -> None:
        """Rank ``i`` finished (r, j) at ``t``: its dispatch (attention) or results (FFN) to
        every peer, one message at a time on each link; results are round r + 1's input."""
        to_ffn = self.ranks[i].role == ATTENTION
        link_s = self.rounds[r][1] if to_ffn else self.rounds[r][3]
        for p in self.peers[i]:
            begin = max(t, self.link_free.get((i, p), 0.0))
            self.link_free[(i, p)] = begin + link_s
            self.seq += 1
            heapq.heappush(self.arrivals,
                           (begin + link_s, self.seq, p, r if to_ffn else r + 1, j))

    def complete(self, t: float) -> None:
        """The ranks whose work is done at ``t`` send and go on; freed cores read."""
        self.finish = t
        cores = set()
        for i in sorted(i for i in self.left if self.left[i] <= 1e-12 * max(t, 1e-9)):
            del self.left[i]
            self.busy[i] += t - self.started.pop(i)
            r, j = self.prog[i][self.pos[i]]
            self.pos[i] += 1
            self.last_run[i] = t
            if self.full[r]:
                self.send(i, r, j, t)
            if self.ready(i):  # its next work needs no unread message: it does not block
                self.start(i)
            cores.add(self.ranks[i].core)
        for core in sorted(cores):
            if not self.computing(core):
                self.free_core(core, t)

    def run(self) -> PinnedRun:
        for core in sorted({k.core for k in self.ranks}):
            self.free_core(core, 0.0)
        while self.left or self.arrivals:
            t, done_at = self.advance()
            if self.arrivals and self.arrivals[0][0] <= done_at:
                self.arrive(t)
            else:
                self.complete(t)
        return PinnedRun(self.finish, tuple(self.busy), tuple(self.work_done))
