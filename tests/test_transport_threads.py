"""planner.run.transport_threads: gloo's transport threads go to SCHED_IDLE, nothing else
does, and a real gloo process group's threads are found by name."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from planner.run.transport_threads import TRANSPORT_THREAD, idle_transport_threads

ROOT = Path(__file__).resolve().parents[1]
linux_only = pytest.mark.skipif(
    not hasattr(os, "SCHED_IDLE") or not os.path.isdir("/proc/self/task"),
    reason="SCHED_IDLE and /proc are Linux's")


def _named_thread(name: str):
    """A thread that renames itself (its /proc comm, as gloo does) and waits; its TID."""
    ready, done, tid = threading.Event(), threading.Event(), []

    def body() -> None:
        tid.append(threading.get_native_id())
        with open(f"/proc/self/task/{tid[0]}/comm", "w") as f:
            f.write(name)
        ready.set()
        done.wait(10)
    t = threading.Thread(target=body, daemon=True)
    t.start()
    ready.wait(10)
    return tid[0], done, t


@linux_only
def test_only_threads_named_like_gloos_transport_go_idle():
    gloo_tid, stop_gloo, t1 = _named_thread(TRANSPORT_THREAD)
    other_tid, stop_other, t2 = _named_thread("worker")
    try:
        assert idle_transport_threads() == 1
        assert os.sched_getscheduler(gloo_tid) == os.SCHED_IDLE
        assert os.sched_getscheduler(other_tid) == os.SCHED_OTHER
        assert os.sched_getscheduler(threading.get_native_id()) == os.SCHED_OTHER
    finally:
        stop_gloo.set(), stop_other.set()
        t1.join(), t2.join()


@linux_only
def test_a_thread_that_names_itself_late_is_still_found():
    """gloo's loop thread names itself once it runs, possibly after its group is returned:
    a thread renamed 20 ms after the call starts still goes idle."""
    ready, done, tid = threading.Event(), threading.Event(), []

    def body() -> None:
        tid.append(threading.get_native_id())
        ready.set()
        time.sleep(0.02)
        with open(f"/proc/self/task/{tid[0]}/comm", "w") as f:
            f.write(TRANSPORT_THREAD)
        done.wait(10)
    t = threading.Thread(target=body, daemon=True)
    t.start()
    ready.wait(10)
    try:
        assert idle_transport_threads() == 1
        assert os.sched_getscheduler(tid[0]) == os.SCHED_IDLE
    finally:
        done.set()
        t.join()


def test_no_proc_no_change(tmp_path):
    assert idle_transport_threads(str(tmp_path / "missing")) == 0


@linux_only
def test_a_gloo_group_s_transport_threads_are_found():
    pytest.importorskip("torch")
    code = (
        "import os, torch.distributed as dist\n"
        "from planner.run.transport_threads import idle_transport_threads, TRANSPORT_THREAD\n"
        "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:0', rank=0, world_size=1)\n"
        "g = dist.new_group([0])\n"
        "n = idle_transport_threads()\n"
        "tids = [t for t in os.listdir('/proc/self/task')\n"
        "        if open(f'/proc/self/task/{t}/comm').read().strip() == TRANSPORT_THREAD]\n"
        "assert all(os.sched_getscheduler(int(t)) == os.SCHED_IDLE for t in tids), tids\n"
        "print(n, len(tids))\n"
        "dist.destroy_process_group()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    changed, found = map(int, out.stdout.split())
    assert changed == found >= 1
