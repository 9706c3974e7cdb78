"""``planner launch``: run a plan on this machine with torchrun, and leave nothing behind.

One node: ``python -m torch.distributed.run --standalone --nproc-per-node=<the plan's GPUs>``
running the user's script, or the reference job (:mod:`planner.run.reference_job`) by default.
torchrun runs in a session (process group) of its own; whatever happens - workers fail,
torchrun exits, the user presses Ctrl-C - the whole group gets SIGTERM, then SIGKILL after a
grace period, so no worker outlives the command. Logs stream to the terminal as they come.
The exit status is torchrun's (non-zero when a worker failed), 130 after Ctrl-C.

Several nodes: the per-node commands of ``planner emit torchrun`` (to run on each host).
Without torch installed nothing is started: :data:`TORCH_MISSING` says what to install.

An AFD serving plan (``planner serve --mode afd``): its decode pools, attention GPUs then FFN
GPUs, as one torchrun world on this machine (:func:`afd_local`), running the AFD decode job
(:mod:`planner.run.afd_job`) by default, whatever nodes the plan's pools span; the prefill
pool is not run. At most :data:`MAX_LOCAL_PROCESSES` processes.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from planner.files import write_atomic
from planner.plan.document import Plan, plan_to_dict
from planner.run.proctree import (GRACE_S, Ending, become_subreaper, descendants, disown,
                                  end_tree, new_below, own)
from planner.run.runtime import afd_world, degrees_of

MAX_LOCAL_PROCESSES = 16  # an AFD plan's decode world on one machine: refused beyond this
TORCH_MISSING = ("planner launch runs the job under torchrun, which needs PyTorch: "
                 "pip install 'planner[torch]'")


@dataclass(frozen=True)
class LaunchResult:
    exit_code: int
    wall_s: float
    interrupted: bool
    signal: int | None = None  # what stopped planner: SIGINT, SIGTERM or SIGHUP
    ending: Ending = Ending()  # the processes ended after the job (pids by signal)

    def ended_text(self) -> str:
        """'ended 5 processes (2 did not stop within 5 s of SIGTERM and were killed)'."""
        e = self.ending
        text = f"ended {e.count} process{'es' * (e.count != 1)}"
        if e.killed:
            text += (f" ({len(e.killed)} did not stop within {GRACE_S:g} s of SIGTERM and "
                     f"{'was' if len(e.killed) == 1 else 'were'} killed: PID "
                     f"{', '.join(map(str, e.killed))})")
        if e.left:
            text += f"; still running: PID {', '.join(map(str, e.left))}"
        return text


def local_command(plan: Plan, plan_path: Path, script: str | None, script_args: list[str],
                  record: Path | None, master_port: int | None = None) -> list[str]:
    """The torchrun command line for a one-node plan, or for an AFD plan's decode pools
    (:func:`afd_local`)."""
    afd = afd_local(plan)
    nproc = sum(afd) if afd is not None else plan.nodes[0]["gpus"]
    job = "planner.run.afd_job" if afd is not None else "planner.run.reference_job"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    if master_port is not None:
        cmd.append(f"--master-port={master_port}")
    if script is None:
        cmd += ["-m", job, str(plan_path)]
        if record is not None:
            cmd += ["--out", str(record)]
        return cmd + list(script_args)
    return cmd + [script, *script_args]


def torch_installed() -> bool:
    """Whether this interpreter (the one torchrun runs under) can import torch."""
    return importlib.util.find_spec("torch") is not None


def afd_local(plan: Plan) -> tuple[int, int] | None:
    """``(attention GPUs, FFN GPUs)`` of an AFD serving plan, the processes ``planner
    launch`` runs here; ``None`` for any other plan."""
    if plan.kind != "serving" or (plan.serving or {}).get("mode") != "afd":
        return None
    return afd_world(plan)


class Stop(Exception):
    """A signal asked planner to stop (SIGTERM, SIGHUP; SIGINT is KeyboardInterrupt)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _handling(signals: tuple[int, ...], handler):
    """Inside: ``handler`` for ``signals``, the previous handlers back on exit. Only in the
    main thread (elsewhere Python cannot set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def _raise_stop(signum, _frame):
    raise Stop(signum)


def stop_on_signals():
    """Inside: SIGTERM and SIGHUP raise :class:`Stop` (as Ctrl-C raises KeyboardInterrupt), so
    what ``timeout``, Slurm, CI cancellation or a closed terminal send ends the job cleanly."""
    return _handling(STOP_SIGNALS, _raise_stop)


def signals_deferred():
    """Inside: SIGINT, SIGTERM and SIGHUP are ignored, so teardown runs to its end (a second
    Ctrl-C must not leave orphans); the caller is already stopping."""
    return _handling((signal.SIGINT, *STOP_SIGNALS), lambda *_: None)


def start_job(cmd: list[str], **popen_kw) -> tuple[subprocess.Popen, set]:
    """Start ``cmd`` in a session of its own, with this process as the subreaper of all it
    starts; returns the Popen and the processes below us before it (for :func:`end_job`)."""
    become_subreaper()
    before = set(descendants(os.getpid()))
    proc = subprocess.Popen(cmd, start_new_session=True, **popen_kw)
    own(proc.pid)
    return proc, before


def end_job(proc: subprocess.Popen, before: set, grace_s: float = GRACE_S) -> Ending:
    """End ``proc`` and every process that appeared below us since :func:`start_job`
    (SIGTERM, SIGKILL after ``grace_s``: :func:`planner.run.proctree.end_tree`), signals
    deferred meanwhile; ``proc`` is waited for."""
    with signals_deferred():
        ending = end_tree(new_below(before), grace_s)  # proc is one of them: our child
        if proc.poll() is None:
            proc.wait()
        disown(proc.pid)
    return ending


def run_local(cmd: list[str], env: dict[str, str] | None = None,
              grace_s: float = GRACE_S) -> LaunchResult:
    """Run ``cmd`` in its own session; on its exit, a failure, Ctrl-C, SIGTERM or SIGHUP end
    every process that appeared below us (:mod:`planner.run.proctree`: we are their subreaper,
    so torchrun's workers in sessions of their own are found even after torchrun died)."""
    start = time.monotonic()
    stopped_by: int | None = None
    with stop_on_signals():
        proc, before = start_job(cmd, env=env)
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            stopped_by, code = signal.SIGINT, 128 + signal.SIGINT
        except Stop as stop:
            stopped_by, code = stop.signum, 128 + stop.signum
        finally:
            ending = end_job(proc, before, grace_s)
    return LaunchResult(code, time.monotonic() - start, stopped_by is not None, stopped_by,
                        ending)


def write_run_record(path: Path, plan: Plan, fields: dict, environment: dict | None = None) -> None:
    """A run record (``planner.run-record/v1``): the plan's hash and world, the whole plan
    (``plan``, :func:`planner.plan.document.plan_to_dict`: predictions can be recomputed from the record
    alone), the machine, and ``fields`` (what the run measured), written atomically."""
    if len(plan.pools) == 1:
        degrees = degrees_of(plan)
        config = {k: degrees[k] for k in ("tp", "pp", "dp", "cp", "ep")}
    else:  # a serving plan of several pools: each pool's degrees
        config = {pool.name: dict(pool.degrees) for pool in plan.pools}
    afd = afd_local(plan)
    record = {"schema": "planner.run-record/v1", "plan_inputs_hash": plan.inputs_hash,
              "world_size": sum(afd) if afd is not None else plan.num_gpus,
              "config": config,
              "plan": plan_to_dict(plan),
              "environment": {"python": platform.python_version(), "host": platform.node(),
                              **(environment or {})},
              **fields}
    write_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


def add_run_conditions(path: Path, conditions: dict) -> None:
    """Add what only the launcher saw (``other_load_cores``: other processes' CPU load during
    the run) to the ``environment`` of the run record a job wrote at ``path``."""
    record = json.loads(path.read_text())
    record.setdefault("environment", {}).update(conditions)
    write_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


def write_launch_record(path: Path, plan: Plan, cmd: list[str], result: LaunchResult) -> None:
    """The launcher's run record of a user script (the reference job writes a richer one)."""
    write_run_record(path, plan, {"command": cmd, "exit_code": result.exit_code,
                                  "interrupted": result.interrupted, "wall_s": result.wall_s})
