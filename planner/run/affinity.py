"""Each local rank of a CPU (gloo) job on cores of its own (Linux only; nothing happens
elsewhere).

Unpinned, the scheduler moves a rank's threads (its main thread, gloo's transport threads)
between cores. A rank that leaves a collective while its transport thread still has bytes to
move, on the core where the rank computes again, holds the peer in the collective until the
next time that core is free: a whole compute segment. On the 2-vCPU Xeon (2026-11-28, two
ranks, two GEMMs of 384 then an all-reduce of 96 KiB, 550 rounds) one all-reduce in six took
1.8-1.9 ms instead of 0.3-0.4 ms (mean 0.93 ms); with each rank pinned to a core of its own
every round took 0.29-0.40 ms (mean 0.30 ms), and rounds of 10 ms of compute and 256 KiB went
from a mean of 1.37 ms to 0.51 ms a collective. Binding each rank to its cores is what
launchers do for CPU jobs (Slurm ``--cpu-bind``, ``taskset``, ``numactl``).

:func:`pin_local_rank` gives local rank ``r`` of ``n`` the ``r``-th of ``n`` equal blocks of
the cores the process may use (its affinity: ``taskset``, cgroup cpusets), every thread it has
and, by inheritance, every thread it starts later. It pins only where the ranks fit (``n`` at
most the cores) and not at all with ``PLANNER_PIN=0``; the calibration (``planner
calibrate``) and the jobs pin alike, and both record it.

Where the ranks outnumber the cores, a job that asks for it (``share=True``: the AFD
reference job) gets one core per rank, round-robin (:func:`shared_cores`: rank ``r`` on the
``r mod c``-th core). Left to the scheduler, such ranks lose whole cores: traced with ftrace
(2-vCPU box, 2026-11-28, 1 attention + 2 FFN ranks of the AFD job), a woken rank or transport
thread waited up to 1-3 ms on a busy core while the other core idled, both cores together
idle 58% of a 6.4 ms step. Pinned, each core runs its own ranks one after another, which
``solvers.serving.pinned_cores`` can predict, and the job ran faster so
(``benchmarks/afd_executor_prediction.py``: 1A+2F 5.3-5.5 ms a step pinned at 22:39 UTC
against 6.2-7.4 ms unpinned at 21:44 UTC; 2A+1F 7.2-7.3 against 7.6-8.3 ms).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Pinning", "core_blocks", "not_pinned", "pin_local_rank", "pin_rank_for",
           "shared_cores"]


@dataclass(frozen=True)
class Pinning:
    """What :func:`pin_local_rank` did: the cores the process could use before (``cores``),
    those it is pinned to now (``pinned``, empty when it was not pinned) and why not."""

    cores: tuple[int, ...]
    pinned: tuple[int, ...] = ()
    why_not: str = ""

    def record(self) -> dict:
        """The fields a run record or a calibration's conditions keep."""
        return {"cores": len(self.cores), "pinned": bool(self.pinned),
                **({"pinned_cores": list(self.pinned)} if self.pinned else {}),
                **({"not_pinned": self.why_not} if self.why_not else {})}


def core_blocks(cores: tuple[int, ...], ranks: int) -> list[tuple[int, ...]]:
    """``ranks`` disjoint blocks of ``len(cores) // ranks`` cores, in core order (the cores
    left over stay unused); [] where there are more ranks than cores."""
    if ranks < 1 or ranks > len(cores):
        return []
    per = len(cores) // ranks
    ordered = tuple(sorted(cores))
    return [ordered[r * per:(r + 1) * per] for r in range(ranks)]


def shared_cores(cores: tuple[int, ...], ranks: int) -> list[tuple[int, ...]]:
    """One core per rank for ``ranks`` ranks on fewer ``cores``: rank ``r`` on the
    ``r mod len(cores)``-th core in core order (several ranks share a core); [] without
    cores or ranks."""
    if ranks < 1 or not cores:
        return []
    ordered = tuple(sorted(cores))
    return [(ordered[r % len(ordered)],) for r in range(ranks)]


def _current_cores() -> tuple[int, ...]:
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return tuple(range(os.cpu_count() or 1))


def not_pinned(why: str) -> Pinning:
    """This process's cores, left as they are, and ``why``."""
    return Pinning(_current_cores(), why_not=why)


def pin_local_rank(env: Mapping[str, str] | None = None,
                   task_dir: str = "/proc/self/task", share: bool = False) -> Pinning:
    """Pin this process to its local rank's block of cores (:func:`core_blocks`, ``LOCAL_RANK``
    and ``LOCAL_WORLD_SIZE`` as torchrun sets them); call it before the process group starts
    its threads (they inherit the affinity), though threads already running are pinned too.
    ``share``: where the ranks outnumber the cores, pin to one shared core
    (:func:`shared_cores`) instead of leaving the process alone."""
    env = os.environ if env is None else env
    cores = _current_cores()
    if env.get("PLANNER_PIN", "1") == "0":
        return Pinning(cores, why_not="PLANNER_PIN=0")
    if not hasattr(os, "sched_setaffinity") or not os.path.isdir(task_dir):
        return Pinning(cores, why_not="no sched_setaffinity on this OS")
    try:
        rank = int(env.get("LOCAL_RANK", "0"))
        ranks = int(env.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return Pinning(cores, why_not="LOCAL_RANK or LOCAL_WORLD_SIZE is not a number")
    blocks = core_blocks(cores, ranks) or (shared_cores(cores, ranks) if share else [])
    if not blocks or not 0 <= rank < ranks:
        return Pinning(cores, why_not=f"{ranks} local ranks on {len(cores)} cores")
    mine = blocks[rank]
    for tid in os.listdir(task_dir):
        try:
            os.sched_setaffinity(int(tid), mine)
        except (OSError, ValueError):  # the thread ended, or the OS refused
            continue
    try:
        os.sched_setaffinity(0, mine)
    except OSError as exc:
        return Pinning(cores, why_not=f"sched_setaffinity refused: {exc.strerror}")
    return Pinning(cores, mine)


def pin_rank_for(backend: str, share: bool = False) -> Pinning:
    """:func:`pin_local_rank` for a gloo (CPU) rank; an NCCL rank's cores are left alone."""
    if backend != "gloo":
        return not_pinned(f"GPU ranks ({backend})")
    return pin_local_rank(share=share)
