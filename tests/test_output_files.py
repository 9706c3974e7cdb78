"""Output files a team can share, written all or nothing (issue 21).

Every file planner writes gets the permissions of the user's umask (0644 under the usual 022,
0755 for scripts), not mkstemp's 0600; a command that writes several files writes all of them
or none: ``experts plan --out --sglang --heatmap``, ``solve --out --out-dir`` and ``emit``.
Unwritable targets are paths under a regular file (``file/x.png``) or an existing directory
where a file should go, since this test may run as root (for whom read-only folders are
writable) and ``/proc`` differs between sandboxes.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.app import app
from planner.errors import SpecError
from planner.files import write_all_atomic, write_atomic

runner = CliRunner()
SMALL_SOLVE = ["solve", "--model", "llama-3.1-8b", "--gpu", "H100", "--nodes", "1",
               "--gpus-per-node", "4", "--global-batch", "8", "--seq-len", "1024"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "100"})


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask():
    """Set the process umask for one test (``umask(0o077)``), restored afterwards."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    result = invoke(*SMALL_SOLVE, "--top-k", "1", "--out", out)
    assert result.exit_code == 0, result.output
    return out


# --- permissions ------------------------------------------------------------------------------


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_get_the_umask_permissions(tmp_path, umask, mask, expected):
    umask(mask)
    write_atomic(tmp_path / "a.json", "{}\n")
    write_all_atomic({tmp_path / "b.txt": "b", tmp_path / "run.sh": "#!/bin/sh\n"},
                     executable={tmp_path / "run.sh"})
    assert mode_of(tmp_path / "a.json") == expected
    assert mode_of(tmp_path / "b.txt") == expected
    assert mode_of(tmp_path / "run.sh") == expected | (0o111 & ~mask)


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o077, 0o600)])
def test_a_solved_plan_and_emitted_files_follow_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    plan = tmp_path / "plan.json"
    assert invoke(*SMALL_SOLVE, "--top-k", "1", "--out", plan).exit_code == 0
    assert mode_of(plan) == expected
    assert invoke("emit", "slurm", plan, "--out-dir", tmp_path / "launch").exit_code == 0
    assert invoke("emit", "kubeflow", plan, "--out-dir", tmp_path / "launch").exit_code == 0
    assert mode_of(tmp_path / "launch" / "pytorchjob.yaml") == expected
    assert mode_of(tmp_path / "launch" / "planner.sbatch") == expected | (0o111 & ~mask)


def test_an_existing_file_is_replaced_with_the_umask_permissions(tmp_path, umask):
    umask(0o022)
    target = tmp_path / "plan.json"
    target.write_text("old")
    target.chmod(0o600)
    write_atomic(target, "new")
    assert target.read_text() == "new" and mode_of(target) == 0o644


def test_an_explicit_mode_wins(tmp_path, umask):
    umask(0o022)
    write_atomic(tmp_path / "x", "x", 0o640)
    assert mode_of(tmp_path / "x") == 0o640


# --- all or nothing ---------------------------------------------------------------------------


def test_write_all_atomic_leaves_nothing_when_one_file_cannot_be_staged(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a regular file")
    files = {tmp_path / "new" / "deep" / "a.json": "a", tmp_path / "b.json": b"b",
             blocker / "c.json": "c"}
    with pytest.raises(SpecError, match="file/c.json: expected a writable location"):
        write_all_atomic(files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # folders made are gone too


def test_write_all_atomic_refuses_a_directory_target(tmp_path):
    (tmp_path / "b.json").mkdir()
    with pytest.raises(SpecError, match="b.json: expected a writable file path, not a directory"):
        write_all_atomic({tmp_path / "a.json": "a", tmp_path / "b.json": "b"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


def test_experts_plan_writes_no_file_when_the_heatmap_cannot_be_written(tmp_path):
    (tmp_path / "file").write_text("")
    result = invoke("experts", "plan", "--gpus", "8", "--out", tmp_path / "ok.json",
                    "--sglang", tmp_path / "sg.json", "--vllm", tmp_path / "vl.json",
                    "--heatmap", tmp_path / "file" / "x.png")
    assert "x.png" in one_error_line(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_solve_writes_no_best_plan_when_the_out_dir_cannot_be_made(tmp_path):
    (tmp_path / "file").write_text("")
    result = invoke(*SMALL_SOLVE, "--top-k", "2", "--out", tmp_path / "best.json",
                    "--out-dir", tmp_path / "file" / "nope")
    one_error_line(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_solve_writes_no_plan_when_one_of_the_out_dir_files_is_a_directory(tmp_path):
    (tmp_path / "od" / "plan-02.json").mkdir(parents=True)
    result = invoke(*SMALL_SOLVE, "--top-k", "2", "--out-dir", tmp_path / "od")
    assert "plan-02.json: expected a writable file path, not a directory" in one_error_line(result)
    assert [p.name for p in (tmp_path / "od").iterdir()] == ["plan-02.json"]


def test_solve_writes_every_file_when_it_can(tmp_path):
    result = invoke(*SMALL_SOLVE, "--top-k", "2", "--out", tmp_path / "best.json",
                    "--out-dir", tmp_path / "od")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "best.json").is_file()
    assert sorted(p.name for p in (tmp_path / "od").iterdir()) == ["plan-01.json", "plan-02.json"]


def test_emit_writes_no_file_when_one_target_is_a_directory(tmp_path, plan_file):
    (tmp_path / "launch" / "torchrun_commands.txt").mkdir(parents=True)
    result = invoke("emit", "torchrun", plan_file, "--out-dir", tmp_path / "launch")
    one_error_line(result)
    assert [p.name for p in (tmp_path / "launch").iterdir()] == ["torchrun_commands.txt"]
    assert not list((tmp_path / "launch").glob(".*.tmp"))


def test_solve_out_dir_removes_plan_files_an_earlier_run_left_beyond_its_plans(tmp_path):
    out = tmp_path / "plans"
    assert invoke(*SMALL_SOLVE, "--top-k", "3", "--out-dir", out).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["plan-01.json", "plan-02.json",
                                                      "plan-03.json"]
    (out / "notes.txt").write_text("mine")
    (out / "plan-1.json").write_text("not of the plan-NN pattern")
    assert invoke(*SMALL_SOLVE, "--top-k", "1", "--out-dir", out).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "plan-01.json", "plan-1.json"]
    assert (out / "notes.txt").read_text() == "mine"


def test_emitted_scripts_name_the_plan_by_its_absolute_path(tmp_path, plan_file, monkeypatch):
    """A launch script may start from another folder (Slurm: the submit folder), so
    PLANNER_PLAN is absolute even when the plan was given relative to the current one."""
    monkeypatch.chdir(plan_file.parent)
    assert invoke("emit", "torchrun", plan_file.name, "--out-dir", tmp_path / "l").exit_code == 0
    text = (tmp_path / "l" / "launch_torchrun.sh").read_text()
    assert f"PLANNER_PLAN={plan_file.resolve()}" in text
