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

import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from planner.files import write_atomic
from planner.plan.document import Plan, plan_to_dict
from planner.run.runtime import afd_world, degrees_of

GRACE_S = 5.0
MAX_LOCAL_PROCESSES = 16  # an AFD plan's decode world on one machine: refused beyond this
TORCH_MISSING = ("planner launch runs the job under torchrun, which needs PyTorch: "
                 "pip install 'planner[torch]'")


@dataclass(frozen=True)
class LaunchResult:
    exit_code: int
    wall_s: float
    interrupted: bool


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


def kill_group(pgid: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM every process of the group, SIGKILL whatever is left after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def run_local(cmd: list[str], env: dict[str, str] | None = None) -> LaunchResult:
    """Run ``cmd`` in its own session; always end the whole session before returning."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, start_new_session=True, env=env)
    interrupted = False
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        interrupted = True
        code = 130
    finally:
        kill_group(proc.pid)
        if proc.poll() is None:
            proc.wait()
    return LaunchResult(code, time.monotonic() - start, interrupted)


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


def write_launch_record(path: Path, plan: Plan, cmd: list[str], result: LaunchResult) -> None:
    """The launcher's run record of a user script (the reference job writes a richer one)."""
    write_run_record(path, plan, {"command": cmd, "exit_code": result.exit_code,
                                  "interrupted": result.interrupted, "wall_s": result.wall_s})
