"""``planner launch``: a failed worker or Ctrl-C ends the whole job, with a clear message."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.app import app
from plan_helpers import solve_to

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).parent / "workers" / "crash_worker.py"


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    return solve_to(tmp_path_factory.mktemp("plan") / "plan.json", "--pp", "2", "--schedule", "1f1b")


def _survivors(marker: str) -> list[str]:
    if shutil.which("pgrep") is None:
        pytest.skip("pgrep not available")
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [p for p in found if int(p) != os.getpid()]


def _launch(plan: Path, marker: str, mode: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "planner", "launch", str(plan), "--script",
                             str(WORKER), "--script-arg", marker, "--script-arg", mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw)


def _wait_gone(marker: str, seconds: float = 10.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and _survivors(marker):
        time.sleep(0.2)
    return _survivors(marker)


def test_a_killed_worker_fails_the_launch_and_leaves_no_process(plan_path):
    marker = f"planner-test-{uuid.uuid4().hex}"
    proc = _launch(plan_path, marker, "crash")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "error: the job failed (torchrun exit code" in err
    assert _wait_gone(marker) == []


def test_ctrl_c_ends_every_process(plan_path):
    marker = f"planner-test-{uuid.uuid4().hex}"
    proc = _launch(plan_path, marker, "sleep")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_survivors(marker)) < 5:  # torchrun + 4 workers
        time.sleep(0.2)
    assert len(_survivors(marker)) >= 5
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted" in err
    assert _wait_gone(marker) == []


def test_dry_run_prints_the_command_and_runs_nothing(plan_path):
    result = CliRunner().invoke(app, ["launch", str(plan_path), "--dry-run"])
    assert result.exit_code == 0
    assert "--nproc-per-node=4" in result.output and "planner.run.reference_job" in result.output


def test_a_plan_of_several_nodes_prints_each_nodes_command(tmp_path):
    out = tmp_path / "two.json"
    result = CliRunner().invoke(app, ["solve", "--model", "llama-3.1-8b", "--gpu", "H100", "--nodes", "2",
                                      "--gpus-per-node", "2", "--global-batch", "8", "--seq-len", "1024",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["launch", str(out), "--script", "train.py"])
    assert result.exit_code == 0
    assert result.output.count("--node-rank") + result.output.count("--node_rank") >= 2


@pytest.mark.parametrize("args, needle", [
    (["--script", "no-such-script.py"], "--script: expected a script file"),
    (["--record", "/proc/no-such-folder/run.json"], "--record: expected a path in a writable"),
])
def test_bad_launch_paths_are_refused_before_any_process_starts(plan_path, args, needle):
    """A missing script or an unwritable record folder: one line and exit 2 before torchrun
    starts (it had run the job first and then failed with the workers' tracebacks)."""
    result = CliRunner().invoke(app, ["launch", str(plan_path), *args])
    assert result.exit_code == 2
    assert needle in result.output and "Traceback" not in result.output
    assert "planner launch:" not in result.output  # printed just before torchrun starts
