"""The request-level simulator fed by the serving cost model agrees with the closed form."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cost_models.serving.config import ServingWorkload
from planner.cli.app import app
from planner.inputs.models import load_model
from planner.serving.estimate import Calibration, estimate
from planner.serving.search import search
from planner.serving.simulate import simulation_problem
from planner.training.estimation import ClusterChoice, resolve_cluster
from solvers.serving.simulator import simulate

GPU = "H100-SXM5-80GB"
WL = ServingWorkload(isl=1024, osl=256, ttft_ms=2000, tpot_ms=50)


@pytest.mark.parametrize("model,nodes", [("llama-3.1-70b", 1), ("qwen3-30b-a3b", 2)])
def test_closed_loop_throughput_matches_closed_form(model, nodes):
    spec = load_model(model)
    hw = resolve_cluster(ClusterChoice(None, GPU, nodes, None), GPU)
    g = hw.slowest_gpu
    cal = Calibration.defaults((g.name,))
    dep = search(spec, WL, hw, cal, modes=("colocated",)).colocated[0].deployment
    lay = dep.pool("colocated").layout
    closed = estimate(spec, dep, WL, hw, {g.name: g}, cal)  # full batch, no rate
    in_flight = lay.workers * lay.batch * lay.dp
    problem = simulation_problem(spec, dep, WL, hw, cal, requests=max(1500, 6 * in_flight))
    assert problem.concurrency == in_flight
    res = simulate(problem)
    assert res.preemptions == 0
    assert res.output_tokens_per_s == pytest.approx(closed.output_tokens_per_s, rel=0.05)


def test_cli_simulate_json(tmp_path):
    out = tmp_path / "plan.json"
    runner = CliRunner()
    r = runner.invoke(app, ["serve", "--model", "llama-3.1-70b", "--gpu", GPU, "--isl", "1024",
                            "--osl", "256", "--mode", "colocated", "--out", str(out),
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["serve", "simulate", str(out), "--requests", "1000",
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert {"mode", "gpus", "requests", "load", "simulated", "predicted",
            "relative_difference"} <= set(data)
    assert {"ttft_s", "tpot_s", "output_tokens_per_s_per_gpu", "slo_attainment"} <= set(
        data["simulated"])
    assert {"ttft_s", "ttft_p90_s", "tpot_s", "output_tokens_per_s_per_gpu"} <= set(
        data["relative_difference"])
    assert data["simulated"]["output_tokens_per_s_per_gpu"] > 0
    r = runner.invoke(app, ["serve", "simulate", str(out), "--requests", "1000"])
    assert r.exit_code == 0, r.output


def test_cli_simulate_rejects_training_plan_and_missing_file(tmp_path):
    runner = CliRunner()
    plan = tmp_path / "train.json"
    r = runner.invoke(app, ["solve", "--model", "llama-3.1-8b", "--gpu", GPU, "--out",
                            str(plan)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["serve", "simulate", str(plan)])
    assert r.exit_code == 2
    r = runner.invoke(app, ["serve", "simulate", str(tmp_path / "missing.json")])
    assert r.exit_code == 2
