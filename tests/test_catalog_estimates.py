"""Every GPU in the catalog can be estimated, in a precision it computes in; fp16 works end to
end (issue 22, scope 4).

fp16 is mixed precision with dynamic loss scaling (Micikevicius et al. 2018, "Mixed Precision
Training", sec. 3.2): the memory of bf16 mixed precision (fp32 master weights and main
gradients, as Megatron keeps them) plus one fused unscale-and-check pass over the fp32 main
gradients per step (8 bytes per parameter on top of the fused Adam step's 30).
"""
from __future__ import annotations

import json
import math
import re

import pytest
from typer.testing import CliRunner

from cost_models.profile import default_profile
from cost_models.training.config import Workload
from planner.cli.app import app
from planner.inputs.models import load_model
from planner.training.estimation import ParallelChoice, auto_estimate
from topologies.catalog import gpu_catalog
from topologies.standard import homogeneous_cluster

runner = CliRunner()
ENV = {"COLUMNS": "200"}


def invoke(*args: str):
    return runner.invoke(app, list(args), env=ENV)


def listed_gpus() -> list[str]:
    """The GPU names ``planner presets gpus`` prints (first column)."""
    result = invoke("presets", "gpus")
    assert result.exit_code == 0, result.stderr
    names = set(re.findall(r"^[│|]\s*(\S+)\s*[│|]", result.stdout, flags=re.MULTILINE))
    return sorted(name for name in gpu_catalog() if name in names)


def test_presets_gpus_lists_the_whole_catalog():
    assert listed_gpus() == sorted(gpu_catalog())


@pytest.mark.parametrize("gpu", sorted(gpu_catalog()))
def test_every_catalog_gpu_estimates_a_small_model(gpu):
    precision = "bf16" if gpu_catalog()[gpu].supports("bf16") else "fp16"
    result = invoke("estimate", "--model", "llama-3.1-8b", "--gpu", gpu, "--nodes", "2",
                    "--tp", "2", "--global-batch", "64", "--seq-len", "2048", "--precision",
                    precision, "--recompute", "auto", "--format", "json")
    assert result.exit_code == 0, f"{gpu}: {result.stderr}"
    out = json.loads(result.stdout)
    assert math.isfinite(out["step_time_s"]) and out["step_time_s"] > 0
    assert 0 < out["mfu"] < 1, (gpu, out["mfu"])


def test_v100_has_no_bf16_and_says_use_fp16():
    for gpu in ("V100-SXM2-32GB", "V100-SXM3-32GB"):
        assert not gpu_catalog()[gpu].supports("bf16") and gpu_catalog()[gpu].supports("fp16")
    result = invoke("estimate", "--model", "llama-3.1-8b", "--gpu", "V100", "--nodes", "2")
    assert result.exit_code == 2
    assert "--precision" in result.stderr and "fp16" in result.stderr


def test_fp8_needs_hardware_fp8():
    result = invoke("estimate", "--gpu", "A100", "--tp", "8", "--pp", "2", "--precision", "fp8")
    assert result.exit_code == 2 and "--precision" in result.stderr
    assert gpu_catalog()["H100-SXM5-80GB"].supports("fp8")


@pytest.mark.parametrize("gpu", ["B200", "B300", "GB200", "GB300"])
def test_blackwell_has_fp8_mxfp8_and_its_nvlink_domain(gpu):
    spec = gpu_catalog()[gpu]
    assert spec.supports("fp8") and spec.supports("mxfp8")
    assert spec.peak_flops["fp8"] == 2 * spec.peak_flops["bf16"]
    assert spec.nvlink_domain_gpus == (72 if gpu.startswith("GB") else 8)
    assert not gpu_catalog()["H100-SXM5-80GB"].supports("mxfp8")


def test_fp16_costs_bf16_plus_loss_scaling():
    """Same memory as bf16; the step is longer by the loss-scaling pass only (a small part)."""
    model, cluster = load_model("llama-3.1-8b"), homogeneous_cluster("A100-SXM4-80GB", 1)
    choice = ParallelChoice(tp=2, sequence_parallel=True)
    bf16, fp16 = (auto_estimate(model, cluster, Workload(4096, 64, precision), choice,
                                default_profile("A100-SXM4-80GB")).estimate
                  for precision in ("bf16", "fp16"))
    assert fp16.memory == bf16.memory
    assert fp16.time.compute_s == bf16.time.compute_s
    assert math.isclose(fp16.time.optimizer_s, bf16.time.optimizer_s * 38 / 30, rel_tol=1e-9)
    assert bf16.step_time_s < fp16.step_time_s < 1.01 * bf16.step_time_s
    assert Workload(1, 1, "fp16").optimizer_bytes_per_param == 38


def test_fp16_solve_on_v100():
    result = invoke("solve", "--model", "llama-3.1-8b", "--gpu", "V100", "--nodes", "2",
                    "--precision", "fp16", "--global-batch", "64", "--seq-len", "2048",
                    "--top-k", "1", "--format", "json")
    assert result.exit_code == 0, result.stderr
    plans = json.loads(result.stdout)
    assert plans and plans[0]["inputs"]["workload"]["precision"] == "fp16"
    assert plans[0]["prediction"]["workload"]["precision"] == "fp16"
