"""Say what happened: a CP-SAT placement that was infeasible or stopped at its time limit, and a
global batch too small for the cluster, appear in the plan's notes and under ``planner solve``'s
table; ``planner launch`` without torch says what to install."""
from __future__ import annotations

import importlib.util
import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cost_models.training.step import estimate
from planner.cli.app import app
from planner.inputs.models import load_model
from planner.run.launch import TORCH_MISSING
from planner.training import placement
from planner.training.batch import PER_STEP_SHARE_MAX, batch_note, per_step_share
from planner.training.estimation import ClusterChoice, load_profile, make_workload, resolve_cluster
from planner.training.solve import solve
from solvers.mapping import InfeasibleMapping, MappingProblem, MappingTimeout, solve_mapping

ROOT = Path(__file__).resolve().parents[1]
MIXED = ["solve", "--cluster", str(ROOT / "examples" / "mixed-fabric.yaml"),
         "--model", "llama-3.1-8b", "--global-batch", "64"]
runner = CliRunner()


def _solve(args: list[str], out: Path) -> tuple[str, dict]:
    """The report text and the best plan's JSON of ``planner solve ARGS --out OUT``."""
    result = runner.invoke(app, [*args, "--out", str(out)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.output, json.loads(out.read_text())


# ---------------------------------------------------------------------------------------
# Placement: CP-SAT's outcome
# ---------------------------------------------------------------------------------------

def _placement_notes(plan: dict) -> list[str]:
    """The plan's notes about its placement (a small global batch adds a batch note)."""
    return [n for n in plan["notes"] if n.startswith("placement:")]


def _stopped_at_limit(monkeypatch, stages: int | None = None) -> None:
    """CP-SAT's answers as if the time limit stopped it at 3.0% from its bound (for every
    problem, or only those of ``stages`` stages)."""
    def solve_cut_short(problem: MappingProblem):
        found = solve_mapping(problem)
        if stages is not None and problem.num_stages != stages:
            return found
        return replace(found, optimal=False, bound=found.objective * 1.031)
    monkeypatch.setattr(placement, "solve_mapping", solve_cut_short)


def test_a_time_limited_placement_is_noted_in_the_plan_and_the_report(monkeypatch, tmp_path):
    _stopped_at_limit(monkeypatch)
    report, plan = _solve([*MIXED, "--tp", "8", "--pp", "2"], tmp_path / "plan.json")
    note = ("placement: CP-SAT hit its 10 s limit (deterministic time); best placement found, "
            "gap 3.0%")
    assert _placement_notes(plan) == [note]
    assert plan["pools"][0]["node_order"] == [0, 2, 1, 3]  # CP-SAT's placement is still used
    assert f"note: {note}\n" in report


def test_a_proven_placement_has_no_note(tmp_path):
    report, plan = _solve([*MIXED, "--tp", "8", "--pp", "2"], tmp_path / "plan.json")
    assert _placement_notes(plan) == [] and "note: placement" not in report
    assert plan["pools"][0]["node_order"] == [0, 2, 1, 3]


@pytest.mark.parametrize("error, expected", [
    (InfeasibleMapping("no set of units sums to exactly 16 GPUs"),
     "placement: CP-SAT found no feasible mapping of nodes to the 2 stages: no set of units "
     "sums to exactly 16 GPUs; listing order used"),
    (MappingTimeout("no mapping found within 10.0 s"),
     "placement: CP-SAT found no mapping within its 10 s limit (deterministic time); listing "
     "order used"),
])
def test_a_failed_placement_falls_back_to_listing_order_and_says_so(monkeypatch, tmp_path,
                                                                     error, expected):
    def fail(problem):
        raise error
    monkeypatch.setattr(placement, "solve_mapping", fail)
    report, plan = _solve([*MIXED, "--tp", "8", "--pp", "2"], tmp_path / "plan.json")
    assert _placement_notes(plan) == [expected]
    assert plan["pools"][0]["node_order"] == [0, 1, 2, 3]
    assert f"note: {expected}\n" in report


def test_the_report_names_the_plans_a_note_concerns(monkeypatch, tmp_path):
    """Only the 4-stage plans were cut short: the line names them, those plans carry it."""
    _stopped_at_limit(monkeypatch, stages=4)
    result = runner.invoke(app, [*MIXED, "--top-k", "5", "--format", "json"])
    assert result.exit_code == 0, result.output
    plans = json.loads(result.output)
    four = [i for i, p in enumerate(plans, start=1) if p["pools"][0]["degrees"]["pp"] == 4]
    assert four and len(four) < len(plans)
    for i, p in enumerate(plans, start=1):
        assert any("hit its 10 s limit" in n for n in p["notes"]) == (i in four)
    report = runner.invoke(app, [*MIXED, "--top-k", "5"], env={"COLUMNS": "400"}).output
    # a plan whose listing order beat CP-SAT's cut-short placement says so in its own note
    limited = [line for line in report.splitlines()
               if line.startswith("note (") and "placement: CP-SAT hit its 10 s limit" in line]
    named = {int(n) for line in limited
             for n in line[len("note ("):line.index(")")].replace("#", "").split(", ")}
    assert named == set(four)


def _hard_problem(time_limit_s: float) -> MappingProblem:
    """512 nodes of four speeds in random order, a leaf-span penalty: CP-SAT needs many
    seconds to prove the optimum (``test_mapping_solver``'s time-limit instance)."""
    rng = random.Random(5)
    speeds = [rng.choice((0.7, 1.0, 1.3, 1.9)) for _ in range(512)]
    return MappingProblem([8] * 512, speeds, [u // 16 for u in range(512)], 16, 64, 0.05,
                          time_limit_s=time_limit_s)


def test_a_time_limited_solve_is_deterministic_and_reports_its_gap(monkeypatch):
    """A real time limit on an instance CP-SAT cannot close quickly: the limit is CP-SAT's
    deterministic time, so two runs give the same mapping; the gap is that of the bound. (The
    wall-clock backstop is moved out of the way: on a loaded machine it could fire first.)"""
    from solvers.mapping import cpsat

    monkeypatch.setattr(cpsat, "WALL_CLOCK_FACTOR", 1000.0)
    p = _hard_problem(time_limit_s=0.3)
    first, second = solve_mapping(p), solve_mapping(p)
    assert not first.optimal and not first.wall_clock_stopped
    assert first == second
    assert first.objective < first.bound < 16 * 1.9  # CP-SAT's bound, not the trivial one
    assert 0 < first.gap < 0.1
    note = placement.mapping_note(p, first, listing_used=False)
    assert note == (f"placement: CP-SAT hit its 0.3 s limit (deterministic time); best "
                    f"placement found, gap {first.gap:.1%}")


def test_a_solve_stopped_by_the_wall_clock_says_a_rerun_may_differ(monkeypatch):
    """The backstop (here 1 ms) rather than the deterministic budget stops the solve."""
    from solvers.mapping import cpsat

    monkeypatch.setattr(cpsat, "WALL_CLOCK_FACTOR", 0.001)
    p = _hard_problem(time_limit_s=0.3)
    got = solve_mapping(p)
    assert got.wall_clock_stopped and not got.optimal
    note = placement.mapping_note(p, got, listing_used=True)
    assert note.endswith("; listing order kept (predicted faster); stopped by its wall-clock "
                         "backstop, so a rerun may place differently")


# ---------------------------------------------------------------------------------------
# Batch too small for the cluster
# ---------------------------------------------------------------------------------------

def _best(nodes: int, global_batch: int, progress=None):
    """Llama-3.1-8B on ``nodes`` nodes of 8 H100s: model, cluster, profile, top-3 solve."""
    spec = load_model("llama-3.1-8b")
    cluster = resolve_cluster(ClusterChoice(None, "H100", nodes, None))
    prof = load_profile(cluster.slowest_gpu.name, None)
    result = solve(spec, cluster, make_workload(4096, global_batch, "bf16", "adam"), prof,
                   top_k=3, progress=progress)
    return spec, cluster, prof, result


def test_a_batch_too_small_for_the_cluster_is_noted_with_the_batch_that_fixes_it(tmp_path):
    """Llama-3.1-8B on 256 H100s with a global batch of 32: one micro-batch per pipeline."""
    spec, cluster, prof, result = _best(32, 32)
    best = result.estimates[0]
    assert per_step_share(best.time) > PER_STEP_SHARE_MAX
    note = batch_note(spec, cluster, best, prof)
    assert note.startswith("batch: global batch 32 is too small for 256 GPUs: the best plan")
    assert all(p.notes[-1] == note for p in result.plans)  # on every plan
    # the batch it names is the smallest doubling that brings the share under the line
    named = int(note.split("; global batch ")[1].split(" ")[0].replace(",", ""))
    at = [estimate(spec, cluster, replace(best.workload, global_batch=b), best.config, prof,
                   best.node_order) for b in (named // 2, named)]
    assert per_step_share(at[0].time) > PER_STEP_SHARE_MAX >= per_step_share(at[1].time)
    assert f"MFU {best.mfu:.0%} -> {at[1].mfu:.0%}" in note
    report, plan = _solve(["solve", "--model", "llama-3.1-8b", "--gpu", "H100", "--nodes", "32",
                           "--global-batch", "32"], tmp_path / "plan.json")
    assert plan["notes"] == [note]
    assert f"note: {note}\n" in report


def test_a_batch_that_fills_the_pipelines_gets_no_note(tmp_path):
    _, _, _, result = _best(32, 1024)
    assert per_step_share(result.estimates[0].time) <= PER_STEP_SHARE_MAX
    assert all(p.notes == [] for p in result.plans)
    report, plan = _solve(["solve", "--model", "llama-3.1-8b", "--gpu", "H100", "--nodes", "32",
                           "--global-batch", "1024"], tmp_path / "plan.json")
    assert _placement_notes(plan) == [] and "note: placement" not in report


# ---------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------

def test_solve_reports_each_long_phase_and_draws_nothing_when_piped():
    seen: list[tuple[str, int, int]] = []
    _best(32, 1024, progress=lambda *call: seen.append(call))
    phases = list(dict.fromkeys(phase for phase, _, _ in seen))
    assert phases == ["searching", "placing", "building plans"]
    for phase in phases:  # each phase ends full
        done, total = [(d, t) for p, d, t in seen if p == phase][-1]
        assert done == total > 0
    result = runner.invoke(app, ["solve", "--model", "llama-3.1-8b", "--gpu", "H100"])
    assert result.output.startswith("llama-3.1-8b on ")  # no bar, no blank line before


# ---------------------------------------------------------------------------------------
# planner launch without torch
# ---------------------------------------------------------------------------------------

def test_launch_without_torch_says_what_to_install(monkeypatch, tmp_path):
    _, _ = _solve(["solve", "--model", "llama-3.1-8b", "--gpu", "H100", "--nodes", "1",
                   "--gpus-per-node", "4", "--global-batch", "8", "--seq-len", "1024"],
                  tmp_path / "plan.json")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))

    def no_run(*args, **kwargs):
        raise AssertionError("torchrun was started")
    monkeypatch.setattr("planner.run.launch.run_local", no_run)
    result = runner.invoke(app, ["launch", str(tmp_path / "plan.json")])
    assert result.exit_code == 2
    assert result.output == f"error: {TORCH_MISSING}\n"
    assert "pip install 'planner[torch]'" in TORCH_MISSING
    dry = runner.invoke(app, ["launch", str(tmp_path / "plan.json"), "--dry-run"])
    assert dry.exit_code == 0  # printing the command needs no torch

