"""``planner estimate`` fills settings left to auto (issue 22, scope 3).

``--recompute auto``, ``--micro-batch auto`` and an unset ``--etp`` (MoE models) take the fastest
value that fits. Each test enumerates the explicit choices itself (not through
``candidate_choices``) and checks that auto picked the fastest fitting one, and that the table
and the JSON name what was chosen.
"""
from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from cost_models.profile import default_profile
from cost_models.training.config import Workload
from planner.cli.app import app
from planner.errors import SpecError
from planner.inputs.models import load_model
from planner.training.estimation import (AUTO, ParallelChoice, auto_estimate, checked_estimate,
                                         make_config)
from topologies.standard import homogeneous_cluster

runner = CliRunner()
ENV = {"COLUMNS": "120"}


def invoke(*args: str):
    return runner.invoke(app, list(args), env=ENV)


def estimate_json(*args: str) -> dict:
    result = invoke("estimate", "--format", "json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def fastest_explicit(model, cluster, workload, base: ParallelChoice, recomputes, micro_batches,
                     etps):
    """(step time, choice) of the fastest fitting explicit choice, by brute force."""
    best = None
    for recompute in recomputes:
        for micro_batch in micro_batches:
            for etp in etps:
                choice = ParallelChoice(**{**base.__dict__, "recompute": recompute,
                                           "micro_batch": micro_batch, "etp": etp})
                try:
                    est = checked_estimate(model, cluster, workload,
                                           make_config(choice, cluster.num_gpus),
                                           default_profile(cluster.slowest_gpu.name))
                except SpecError:
                    continue
                if est.memory.fits and (best is None or est.step_time_s < best[0]):
                    best = (est.step_time_s, recompute, micro_batch, est.config.degrees.expert_tp)
    return best


# Llama-3.1-8B on 8 H100 with tp 2: without recompute micro-batch 4 does not fit, with
# selective recompute it does and is the fastest (memory decides); Llama-3.1-70B on 32 H100;
# Mixtral 8x7B on 16 H100 with ep 8, tp 2: expert TP 1 or 2.
CASES = [
    ("llama-3.1-8b", 1, dict(tp=2, sequence_parallel=True), 4096, 64, [None]),
    ("llama-3.1-70b", 4, dict(tp=8, pp=4, sequence_parallel=True), 4096, 64, [None]),
    ("mixtral-8x7b", 2, dict(tp=2, pp=1, ep=8, sequence_parallel=True), 4096, 64, [1, 2]),
]


@pytest.mark.parametrize("preset, nodes, degrees, seq_len, global_batch, etps", CASES)
def test_auto_is_the_fastest_fitting_explicit_choice(preset, nodes, degrees, seq_len,
                                                     global_batch, etps):
    model, cluster = load_model(preset), homogeneous_cluster("H100-SXM5-80GB", nodes)
    workload = Workload(seq_len, global_batch)
    base = ParallelChoice(**degrees)
    dp = cluster.num_gpus // (base.tp * base.pp)
    micro_batches = [m for m in range(1, global_batch // dp + 1) if (global_batch // dp) % m == 0]
    expected = fastest_explicit(model, cluster, workload, base, ("none", "selective", "full"),
                                micro_batches, etps)
    assert expected is not None
    auto = auto_estimate(model, cluster, workload,
                         ParallelChoice(**{**base.__dict__, "recompute": AUTO,
                                           "micro_batch": AUTO, "etp": AUTO}),
                         default_profile("H100-SXM5-80GB"))
    assert auto.estimate.memory.fits
    assert math.isclose(auto.estimate.step_time_s, expected[0], rel_tol=1e-12)
    picked = (auto.chosen["recompute"], auto.chosen["micro_batch"])
    assert picked == expected[1:3]
    if model.moe is not None:
        assert auto.chosen["etp"] == expected[3]
    else:
        assert "etp" not in auto.chosen


def test_auto_on_the_command_line_matches_the_explicit_run():
    args = ("--model", "llama-3.1-8b", "--nodes", "1", "--tp", "2", "--global-batch", "64")
    auto = estimate_json(*args, "--recompute", "auto", "--micro-batch", "auto")
    chosen = auto["chosen"]
    assert chosen == {"recompute": "selective", "micro_batch": 4}  # see CASES
    assert (auto["config"]["recompute"], auto["config"]["micro_batch"]) == (
        chosen["recompute"], chosen["micro_batch"])
    explicit = estimate_json(*args, "--recompute", chosen["recompute"], "--micro-batch",
                             str(chosen["micro_batch"]))
    assert explicit["chosen"] == {}
    assert explicit["step_time_s"] == auto["step_time_s"]
    table = invoke("estimate", *args, "--recompute", "auto", "--micro-batch", "auto")
    assert table.exit_code == 0, table.stderr
    assert (f"chosen (auto, fastest that fits): recompute {chosen['recompute']}, micro-batch "
            f"{chosen['micro_batch']}") in table.stdout


def test_ep32_tp2_on_a_32_gpu_stage_gets_expert_tp_1():
    """Megatron-Bridge runs DeepSeek-V3 with EP 32 and TP 2 on 32-GPU pipeline stages, expert
    TP 1; with --etp left out that is what estimate picks (etp = tp = 2 needs 64 GPUs)."""
    args = ("--model", "deepseek-v3", "--nodes", "32", "--tp", "2", "--pp", "8", "--ep", "32",
            "--global-batch", "1024")
    out = estimate_json(*args)
    assert out["chosen"] == {"etp": 1}
    assert out["config"]["expert_tp"] == 1
    rejected = invoke("estimate", *args, "--etp", "2")
    assert rejected.exit_code != 0 and "--ep/--etp" in rejected.stderr
    table = invoke("estimate", *args)
    assert "chosen (auto, fastest that fits): etp 1" in table.stdout


def test_dense_model_reports_nothing_chosen_without_auto_options():
    out = estimate_json("--model", "llama-3.1-8b", "--nodes", "1")
    assert out["chosen"] == {}
    assert "chosen" not in invoke("estimate", "--model", "llama-3.1-8b", "--nodes", "1").stdout


def test_nothing_fits_reports_the_least_memory_candidate():
    model, cluster = load_model("llama-3.1-405b"), homogeneous_cluster("H100-SXM5-80GB", 1)
    workload = Workload(8192, 16)
    auto = auto_estimate(model, cluster, workload,
                         ParallelChoice(tp=8, recompute=AUTO, micro_batch=AUTO),
                         default_profile("H100-SXM5-80GB"))
    assert not auto.estimate.memory.fits
    assert auto.chosen == {"recompute": "full", "micro_batch": 1}


@pytest.mark.parametrize("args, field", [
    (("--micro-batch", "0"), "--micro-batch"),
    (("--micro-batch", "two"), "--micro-batch"),
    (("--recompute", "auto", "--recompute-layers", "4"), "--recompute-layers"),
])
def test_bad_auto_options_name_the_option(args, field):
    result = invoke("estimate", "--model", "llama-3.1-8b", "--nodes", "1", *args)
    assert result.exit_code == 2 and field in result.stderr
