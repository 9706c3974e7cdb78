"""gloo's transport threads at idle priority, so their polling never takes a core from the
ranks' compute (Linux only; nothing happens elsewhere).

Every gloo process group runs one transport thread (``gloo_tcp_loop``, gloo's
``tcp::Device`` loop) that reads and writes the group's sockets. When a socket is readable
but the main thread holds that pair's lock (posting a send or a receive on it), the thread
skips the event and polls again at once (``gloo/transport/tcp/pair.cc``,
``Pair::handleEvents``: ``try_lock``, then ``epoll_wait`` on a level-triggered ``EPOLLIN``).
On a box with as many busy ranks as cores, such a spin takes a core from a computing rank,
and the lock holder, preempted, may wait for a core while the spinner holds one: the AFD
job's FFN transport thread spun 82 ms a second in runs of up to 6 ms (``strace``, 2-vCPU
box, 1 attention + 1 FFN rank, 4 micro-batches).

Under ``SCHED_IDLE`` (sched(7): "for running very low priority background jobs"; any
process may lower its own threads to it) a transport thread runs only on a core no rank
wants: a rank that waits for a message leaves its core idle, so the message is read then,
and a rank that computes is not interrupted by polling. Same-moment A/B runs of that job
(three pairs): 11.2-12.0 ms a step at normal priority, 7.7-8.0 ms under ``SCHED_IDLE``.
"""
from __future__ import annotations

import os
import time

__all__ = ["TRANSPORT_THREAD", "idle_transport_threads"]

TRANSPORT_THREAD = "gloo_tcp_loop"  # the name gloo gives its tcp::Device loop thread


SETTLE_S = 0.05  # how long a call keeps looking for loop threads that are not named yet


def idle_transport_threads(task_dir: str = "/proc/self/task", settle_s: float = SETTLE_S) -> int:
    """Put every gloo transport thread of this process under ``SCHED_IDLE``; the number
    changed. Call once every process group exists (each group starts its own thread). A loop
    thread names itself once it runs, which can be after its group is returned (a clean-clone
    CI run found one still unnamed, so left at normal priority), so the threads are scanned
    again every 5 ms for ``settle_s``. 0 where Linux's ``sched_setscheduler`` or ``/proc`` is
    missing, or a thread refuses."""
    if not hasattr(os, "SCHED_IDLE") or not os.path.isdir(task_dir):
        return 0
    changed: set[int] = set()
    deadline = time.monotonic() + settle_s
    while True:
        changed |= _idle_named(task_dir)
        if time.monotonic() >= deadline:
            return len(changed)
        time.sleep(0.005)


def _idle_named(task_dir: str) -> set[int]:
    """The threads named :data:`TRANSPORT_THREAD` this scan put under ``SCHED_IDLE``."""
    changed = set()
    for tid in os.listdir(task_dir):
        try:
            with open(os.path.join(task_dir, tid, "comm")) as f:
                if f.read().strip() != TRANSPORT_THREAD:
                    continue
            if os.sched_getscheduler(int(tid)) == os.SCHED_IDLE:
                continue
            os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
            changed.add(int(tid))
        except (OSError, ValueError):  # the thread ended, or the OS refused
            continue
    return changed
