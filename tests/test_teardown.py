"""``planner launch`` leaves no process behind, whatever happens (checked by PID and start
time, not by name): a worker SIGKILLed, a worker SIGSTOPped then Ctrl-C, SIGTERM or SIGHUP to
planner, a worker that ignores SIGTERM. Unit tests of :mod:`planner.run.proctree` first."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.run.proctree import Proc, alive, descendants, end_tree, new_below, proc_of

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).parent / "workers" / "teardown_worker.py"
NPROC = 4  # the plan's processes (plan_helpers: one node of 4)

SLEEPER = ("import pathlib, signal, sys, time\n"
           "if len(sys.argv) > 1: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "if len(sys.argv) > 1: pathlib.Path(sys.argv[1]).write_text('ready')\n"
           "time.sleep(300)\n")  # with an argument: ignores SIGTERM, then writes that file


def _gone(procs: list[Proc], seconds: float = 3.0) -> list[Proc]:
    """The processes of ``procs`` still alive after ``seconds`` (zombies count as gone)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in procs):
        time.sleep(0.05)
    return [p for p in procs if alive(p)]


# --- proctree, no torch needed -------------------------------------------------------------

def test_descendants_and_end_tree_end_children_and_grandchildren(tmp_path):
    before = set(descendants(os.getpid()))
    ready = tmp_path / "ready"
    code = ("import subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, '-c', {SLEEPER!r}, {str(ready)!r}])\n"
            "time.sleep(300)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not ready.exists():
            time.sleep(0.05)
        procs = new_below(before)()
        assert len(procs) == 2 and procs[0].pid == parent.pid
        ending = end_tree(new_below(before), grace_s=0.5)
        assert _gone(procs) == []
        # the grandchild ignores SIGTERM: it needed SIGKILL; the parent stopped on SIGTERM
        assert ending.killed == (procs[1].pid,)
        assert ending.terminated == (parent.pid,)
        assert ending.left == ()
    finally:
        parent.kill()
        parent.wait()


def test_a_reused_pid_is_not_the_same_process():
    me = proc_of(os.getpid())
    assert me is not None and alive(me)
    assert not alive(Proc(me.pid, me.start_ticks + 1))
    assert proc_of(2**22 + 12345) is None  # above pid_max: no such process


def test_a_stopped_process_is_ended():
    before = set(descendants(os.getpid()))
    child = subprocess.Popen([sys.executable, "-c", SLEEPER])
    try:
        time.sleep(0.3)
        os.kill(child.pid, signal.SIGSTOP)
        ending = end_tree(new_below(before), grace_s=2.0)
        assert child.wait(timeout=5) is not None
        assert ending.count == 1 and ending.left == ()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# --- planner launch under torchrun ---------------------------------------------------------

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    from plan_helpers import solve_to
    return solve_to(tmp_path_factory.mktemp("plan") / "plan.json", "--pp", "2",
                    "--schedule", "1f1b")


def _launch(plan: Path, out: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "planner", "launch", str(plan), "--script",
                             str(WORKER), "--script-arg", str(out), "--script-arg", mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _job(proc: subprocess.Popen, out: Path) -> list[Proc]:
    """Wait until every rank wrote its PID; the workers and torchrun's agent(s), by PID and
    start time (read while they run)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(list(out.glob("rank*.pid"))) < NPROC:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    pids: set[int] = set()
    for f in out.glob("rank*.pid"):
        pid, ppid = map(int, f.read_text().split())
        pids |= {pid, ppid}
    procs = [p for p in map(proc_of, sorted(pids)) if p is not None]
    assert len(procs) >= NPROC + 1, procs  # 4 workers and their agent
    return procs


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_a_sigkilled_worker_ends_the_job_and_leaves_nothing(plan_path, tmp_path):
    proc = _launch(plan_path, tmp_path, "kill-one")
    procs = _job(proc, tmp_path)
    (tmp_path / "go").touch()  # rank 1 kills itself now
    code, err = _finish(proc)
    assert code != 0 and "the job failed" in err and "ended" in err
    assert _gone(procs, 1.0) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_to_planner_ends_every_process(plan_path, tmp_path, sig):
    """What timeout, Slurm and CI cancellation send (SIGTERM), and a closed terminal
    (SIGHUP)."""
    proc = _launch(plan_path, tmp_path, "sleep")
    procs = _job(proc, tmp_path)
    proc.send_signal(sig)
    code, err = _finish(proc)
    assert code == 128 + sig
    assert f"interrupted by {signal.Signals(sig).name}: ended" in err
    assert _gone(procs, 1.0) == []


def test_a_stopped_worker_then_ctrl_c_leaves_nothing(plan_path, tmp_path):
    proc = _launch(plan_path, tmp_path, "sleep")
    procs = _job(proc, tmp_path)
    worker = int((tmp_path / "rank2.pid").read_text().split()[0])
    os.kill(worker, signal.SIGSTOP)
    proc.send_signal(signal.SIGINT)
    code, err = _finish(proc)
    assert code == 130 and "interrupted by SIGINT" in err
    assert _gone(procs, 1.0) == []


def test_a_worker_ignoring_sigterm_is_killed_and_reported(plan_path, tmp_path):
    proc = _launch(plan_path, tmp_path, "ignore-term")
    procs = _job(proc, tmp_path)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, err = _finish(proc)
    assert code == 128 + signal.SIGTERM
    assert "did not stop within 5 s of SIGTERM" in err and "killed" in err
    assert time.monotonic() - start < 15  # 5 s grace, then SIGKILL; not torchrun's 30 s
    assert _gone(procs, 1.0) == []
