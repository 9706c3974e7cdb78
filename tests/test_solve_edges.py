"""Edge cases of ``planner solve`` found in review: partial recompute memory, the ZB-H1 bubble
against the simulator, sequence parallelism on odd sequences, SlimPipe on mixed clusters, and
clean errors for bad output paths, truncated plans, impossible schedules and missing targets."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cost_models.parallel import Degrees

from cost_models.training.config import TrainingConfig, Workload
from cost_models.profile import default_profile
from cost_models.training.pipeline import bubble_s
from cost_models.training.stage import StageCost
from cost_models.training.step import estimate
from planner.cli.app import app
from planner.inputs.models import load_model
from solvers.pipeline.closed_form import bubble_closed_form_s
from solvers.pipeline.sim import PipelineProblem
from topologies.standard import homogeneous_cluster

runner = CliRunner()
ENV = {"COLUMNS": "160"}
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mixed-fabric.yaml"
GPU = "H100-SXM5-80GB"


def test_partial_full_recompute_keeps_the_other_layers_activations():
    """recompute_layers=n recomputes n layers per stage; the rest store everything, so memory
    falls as n grows, between no recompute and full recompute of every layer."""
    model, cluster, prof = load_model("llama-3.1-70b"), homogeneous_cluster(GPU, 8), \
        default_profile(GPU)
    work = Workload(4096, 64)
    base = TrainingConfig(degrees=Degrees(tp=8, pp=4, dp=2), sequence_parallel=True)

    def acts(**kw):
        return estimate(model, cluster, work, replace(base, **kw), prof).memory.activations_bytes

    none, every = acts(recompute="none"), acts(recompute="full")
    partial = [acts(recompute="full", recompute_layers=n) for n in (1, 5, 10, 19)]
    assert none > partial[0] > partial[1] > partial[2] > partial[3] > every


@pytest.mark.parametrize("p,t,w", [(4, 3.0, 1.0), (8, 3.0, 0.5), (2, 2.0, 1.5)])
def test_zb_h1_bubble_matches_the_simulators_closed_form(p, t, w):
    """Uniform stages of time t with weight-gradient part w: the cost model's ZB-H1 bubble is
    Qi et al.'s (p-1)(T_F + T_B - min(T_W, T_F, T_B)) with T_F = T_B = (t - w)/2."""
    stages = tuple(StageCost(stage=s, layers=1, compute_s=t, recompute_s=0.0, tp_comm_s=0.0,
                             cp_comm_s=0.0, ep_comm_s=0.0, pp_comm_s=0.0, weight_grad_s=w)
                   for s in range(p))
    cfg = TrainingConfig(degrees=Degrees(pp=p), zero_bubble=True)
    f = (t - w) / 2
    problem = PipelineProblem(schedule="zb-h1", num_stages=p, num_microbatches=2 * p,
                              forward_s=f, backward_s=t - f, weight_grad_fraction=w / (t - f))
    assert bubble_s(cfg, stages) == pytest.approx(bubble_closed_form_s(problem), rel=1e-12)


def test_odd_sequence_lengths_turn_sequence_parallelism_off(tmp_path):
    out = tmp_path / "p.json"
    result = runner.invoke(app, ["solve", "--model", "llama-3.1-8b", "--nodes", "1", "--tp", "2",
                                 "--seq-len", "1001", "--top-k", "3", "--out", str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    plan = json.loads(out.read_text())
    assert plan["pools"][0]["degrees"]["tp"] == 2  # 1001 tokens do not split over 2 TP ranks
    assert plan["training"]["options"]["sequence_parallel"] is False


def test_slimpipe_plans_place_on_mixed_clusters():
    result = runner.invoke(app, ["solve", "--cluster", str(EXAMPLE), "--model", "llama-3.1-8b",
                                 "--seq-len", "32768", "--global-batch", "64", "--top-k", "5",
                                 "--schedule", "slimpipe", "--schedule", "1f1b"], env=ENV)
    assert result.exit_code == 0, result.output
    assert "slimpipe" in result.output


def test_solve_out_onto_a_directory_is_a_clean_error(tmp_path):
    result = runner.invoke(app, ["solve", "--out", str(tmp_path)], env=ENV)
    assert result.exit_code == 2
    assert "writable file path" in result.output and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_explain_rejects_a_plan_without_its_prediction(tmp_path):
    plan = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", "--model", "llama-3.1-8b", "--nodes", "1", "--top-k",
                               "1", "--out", str(plan)], env=ENV).exit_code == 0
    data = json.loads(plan.read_text())
    del data["prediction"]["time"]
    plan.write_text(json.dumps(data))
    result = runner.invoke(app, ["explain", str(plan)], env=ENV)
    assert result.exit_code == 2 and "prediction lacks" in result.output


def test_schedules_no_configuration_can_use_are_named():
    result = runner.invoke(app, ["solve", "--schedule", "slimpipe"], env=ENV)
    assert result.exit_code == 3
    assert "allowed schedules slimpipe" in result.output and "GiB" not in result.output


def test_min_gpus_needs_a_target():
    result = runner.invoke(app, ["solve", "--objective", "min-gpus"], env=ENV)
    assert result.exit_code == 2 and "--target-tokens-per-s" in result.output


def test_a_target_without_min_gpus_is_refused_not_ignored():
    result = runner.invoke(app, ["solve", "--target-tokens-per-s", "20000"], env=ENV)
    assert result.exit_code == 2
    assert "--target-tokens-per-s" in result.output and "only with --objective min-gpus" in (
        result.output)
    nan = runner.invoke(app, ["solve", "--objective", "min-gpus", "--target-tokens-per-s",
                              "nan"], env=ENV)
    assert nan.exit_code == 2 and "--target-tokens-per-s" in nan.output
