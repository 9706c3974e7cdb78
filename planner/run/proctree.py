"""Ending a job's whole process tree, whatever its processes do (Linux ``/proc``; no root).

Why a tree and not a process group: torchrun (torch >= 2.x) starts each worker in a session of
its own, so ``killpg`` on torchrun's group misses the workers, and torchrun's own teardown
waits up to 30 s for them. So:

* :func:`become_subreaper` makes this process a child subreaper (``prctl(2)``,
  ``PR_SET_CHILD_SUBREAPER``, Linux >= 3.4, no privilege needed): a descendant orphaned by its
  parent's death (torchrun killed, a double fork) is re-parented to us, not to init, so it stays
  in our tree and :func:`descendants` still finds it.
* Processes are named by ``(pid, start time)`` (:class:`Proc`, field 22 of
  ``/proc/PID/stat``), so a PID reused by an unrelated process after ours exited is never
  signalled.
* :func:`end_tree` sends SIGCONT and SIGTERM to every descendant (a stopped process acts on
  SIGTERM only once continued), waits ``grace_s`` (:data:`GRACE_S`) for them to exit, then
  SIGKILLs whatever is left (SIGKILL ends stopped processes and those that ignore SIGTERM),
  re-scanning the tree each round, and reaps the zombies re-parented to us. It returns who was
  ended by which signal (:class:`Ending`), for the report.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import dataclass

__all__ = ["GRACE_S", "KILL_WAIT_S", "Ending", "Proc", "alive", "become_subreaper",
           "descendants", "disown", "end_tree", "new_below", "own", "proc_of"]

GRACE_S = 5.0  # SIGTERM -> SIGKILL deadline (documented in docs/runtime.md)
KILL_WAIT_S = 5.0  # after SIGKILL, how long to wait for the kernel to end them
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
POLL_S = 0.05


@dataclass(frozen=True)
class Proc:
    """One process, named so that a reused PID is not mistaken for it."""

    pid: int
    start_ticks: int


@dataclass(frozen=True)
class Ending:
    """What :func:`end_tree` did: PIDs that exited after SIGTERM, PIDs SIGKILLed, and PIDs
    still there at the end (should be empty; a process in uninterruptible sleep can linger)."""

    terminated: tuple[int, ...] = ()
    killed: tuple[int, ...] = ()
    left: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        return len(self.terminated) + len(self.killed)


def become_subreaper() -> bool:
    """Make this process a child subreaper; False where the OS does not support it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[int, int, str] | None:
    """``(ppid, start ticks, state)`` of ``pid`` from ``/proc/PID/stat``; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    fields = text[text.rfind(")") + 2:].split()  # the name may hold spaces and parentheses
    return int(fields[1]), int(fields[19]), fields[0]


def proc_of(pid: int) -> Proc | None:
    """The :class:`Proc` running as ``pid`` now, None if there is none."""
    st = _stat(pid)
    return None if st is None else Proc(pid, st[1])


def alive(p: Proc) -> bool:
    """Whether ``p`` still runs: its PID exists with the same start time and is no zombie."""
    st = _stat(p.pid)
    return st is not None and st[1] == p.start_ticks and st[2] not in ("Z", "X")


def _processes() -> dict[int, tuple[int, int, str]]:
    """Every process now: PID -> ``(ppid, start ticks, state)`` (one scan of ``/proc``)."""
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return {}
    return {pid: st for pid in pids if (st := _stat(pid)) is not None}


def descendants(root: int) -> list[Proc]:
    """Every live process below ``root`` (children, their children, ...), by scanning
    ``/proc``; parents before children."""
    children: dict[int, list[tuple[int, int]]] = {}
    for pid, (ppid, start, state) in _processes().items():
        if state not in ("Z", "X"):
            children.setdefault(ppid, []).append((pid, start))
    out, queue = [], [root]
    while queue:
        for pid, start in sorted(children.get(queue.pop(0), [])):
            out.append(Proc(pid, start))
            queue.append(pid)
    return out


def _signal(p: Proc, sig: int) -> None:
    if alive(p):
        try:
            os.kill(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap() -> None:
    """Collect our exited children (workers re-parented to us leave zombies otherwise), except
    those a :class:`subprocess.Popen` still owns: only PIDs in zombie state are waited for."""
    me = os.getpid()
    for pid, (ppid, _start, state) in _processes().items():
        if ppid == me and state == "Z" and pid not in _OWNED:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


_OWNED: set[int] = set()  # children whose exit status a Popen object collects


def own(pid: int) -> None:
    """Leave ``pid``'s exit status to its owner (a Popen): :func:`_reap` skips it."""
    _OWNED.add(pid)


def disown(pid: int) -> None:
    _OWNED.discard(pid)


def _wait_gone(procs: dict[int, Proc], scope, seconds: float) -> None:
    """Wait up to ``seconds`` for every process of ``procs`` (and any new one of ``scope()``,
    added to it) to exit."""
    deadline = time.monotonic() + seconds
    while True:
        _reap()
        for p in scope():
            procs.setdefault(p.pid, p)
        if not any(alive(p) for p in procs.values()) or time.monotonic() >= deadline:
            return
        time.sleep(POLL_S)


def new_below(before: set[Proc], root: int | None = None):
    """A scope for :func:`end_tree`: the descendants of ``root`` (default: this process) that
    were not in ``before`` (the job's processes: what appeared below us since it started)."""
    root = os.getpid() if root is None else root
    return lambda: [p for p in descendants(root) if p not in before]


def end_tree(scope, grace_s: float = GRACE_S) -> Ending:
    """End every process of ``scope()`` (re-evaluated each round, e.g. :func:`new_below`):
    SIGCONT and SIGTERM, ``grace_s`` to exit, then SIGKILL. See the module docstring."""
    procs = {p.pid: p for p in scope()}
    for p in list(procs.values()):
        _signal(p, signal.SIGCONT)
        _signal(p, signal.SIGTERM)
    _wait_gone(procs, scope, grace_s)
    stubborn = [p for p in procs.values() if alive(p)]
    for p in stubborn:
        _signal(p, signal.SIGCONT)
        _signal(p, signal.SIGKILL)
    _wait_gone(procs, scope, KILL_WAIT_S if stubborn else 0.0)
    left = tuple(sorted(p.pid for p in procs.values() if alive(p)))
    killed = tuple(sorted(p.pid for p in stubborn if p.pid not in left))
    terminated = tuple(sorted(pid for pid in procs if pid not in killed and pid not in left))
    return Ending(terminated, killed, left)
