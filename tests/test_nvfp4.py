"""NVFP4 training (Blackwell's 4-bit GEMMs, TransformerEngine's NVFP4BlockScaling recipe):
GEMMs at the GPU's fp4 rate, the recipe's quantisation passes, 4-bit weights, and a clear
refusal where the GPU has no fp4 tensor cores (``cost_models.compute``,
``Workload.param_bytes``)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from cost_models.compute import Gemm, gemm_time_s, layer_work, nvfp4_quant_elems
from cost_models.parallel import Degrees
from cost_models.profile import default_profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.context import config_shard, gpu_rates
from cost_models.training.step import estimate
from planner.cli.app import app
from planner.inputs.models import load_model
from topologies.catalog import gpu_catalog
from topologies.standard import homogeneous_cluster


@pytest.mark.parametrize("gpu,ratio", [("GB200", 2.0), ("B200", 2.0), ("GB300", 3.0),
                                       ("B300", 3.0)])
def test_nvfp4_gemms_run_at_the_fp4_over_fp8_peak(gpu, ratio):
    """A compute-bound GEMM is the fp8 one divided by the catalog's fp4/fp8 dense peaks
    (NVIDIA's figures: 2x on Blackwell, 3x on Blackwell Ultra)."""
    spec, prof = gpu_catalog()[gpu], default_profile(gpu)
    g = Gemm(16384, 16384, 16384)
    fp8 = gemm_time_s(g, gpu_rates(spec, Workload(4096, 64, "fp8")), prof)
    fp4 = gemm_time_s(g, gpu_rates(spec, Workload(4096, 64, "nvfp4")), prof)
    assert fp8 / fp4 == pytest.approx(ratio, rel=1e-9)


def _layer_s(model: str, precision: str, gpu: str = "GB300") -> float:
    m = load_model(model)
    cfg = TrainingConfig(degrees=Degrees(dp=8), micro_batch=1)
    est = estimate(m, homogeneous_cluster(gpu, 2, 4), Workload(8192, 64, precision), cfg,
                   default_profile(gpu))
    return est.stages[0].compute_s


def test_quantisation_keeps_the_gain_below_the_peak_ratio_and_thin_gemms_gain_least():
    """The 4-bit passes are memory bound: on GB300 (3x the fp8 peak) a step's compute gains
    less than 3x, and a narrow model (8B, h = 4,096) gains less than a wide one (405B,
    h = 16,384), whose GEMMs do more work per quantised value."""
    gains = {m: _layer_s(m, "fp8") / _layer_s(m, "nvfp4")
             for m in ("llama-3.1-8b", "llama-3.1-405b")}
    assert all(1.2 < g < 3.0 for g in gains.values()), gains
    assert gains["llama-3.1-8b"] < gains["llama-3.1-405b"]


def test_quantised_values_leave_the_router_out():
    """The router is not a TransformerEngine Linear: the values a MoE layer quantises do not
    change with the number of experts when top-k and the widths stay (the routed GEMMs' m
    shares the same tokens x top-k among more experts)."""
    base = load_model("qwen3-30b-a3b")
    more = replace(base, moe=replace(base.moe, num_experts=2 * base.moe.num_experts))
    sh = config_shard(TrainingConfig(degrees=Degrees(dp=8, ep=8)), Workload(4096, 64, "nvfp4"))
    layer = next(i for i in range(base.num_layers) if base.is_moe_layer(i))
    assert nvfp4_quant_elems(base, layer, sh) == pytest.approx(nvfp4_quant_elems(more, layer, sh))
    fp8 = config_shard(TrainingConfig(degrees=Degrees(dp=8, ep=8)), Workload(4096, 64, "fp8"))
    assert (layer_work(base, layer, sh).elementwise_bytes
            > layer_work(base, layer, fp8).elementwise_bytes)


def test_4bit_weights_let_the_published_70b_layout_fit():
    """Megatron-Bridge 26.02.01 ran Llama 3 70B in NVFP4 on 64 GB300 without model
    parallelism (TP1 PP1, micro-batch 2, 8k tokens; recompute not published, full the only
    one that fits): it fits because the weights stay in 4 bits (``--fp4-param-gather``, 71 of
    its 257 GiB would be 141 in 16 bits); the same layout in fp8 does not."""
    m, cluster = load_model("llama-3.1-70b"), homogeneous_cluster("GB300", 16, 4)
    cfg = TrainingConfig(degrees=Degrees(dp=64), micro_batch=2, zero=1, recompute="full",
                         grad_reduce_in_fp32=False)

    def fits(precision: str) -> bool:
        est = estimate(m, cluster, Workload(8192, 256, precision), cfg, default_profile("GB300"))
        return est.memory.fits
    assert fits("nvfp4") and not fits("fp8")


def test_nvfp4_needs_fp4_tensor_cores():
    result = CliRunner().invoke(app, ["estimate", "--gpu", "H100", "--precision", "nvfp4"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "--precision" in result.stderr and "nvfp4" in result.stderr
    assert "bf16, fp16, fp8" in result.stderr and "Traceback" not in result.stderr
    assert gpu_catalog()["GB300"].supports("nvfp4")


def _tp_s(gpu: str, precision: str, sequence_parallel: bool) -> float:
    m = load_model("llama-3.1-70b")
    cfg = TrainingConfig(degrees=Degrees(tp=8), micro_batch=1,
                         sequence_parallel=sequence_parallel)
    est = estimate(m, homogeneous_cluster(gpu, 1, 8), Workload(8192, 8, precision), cfg,
                   default_profile(gpu))
    return est.time.tp_comm_s


def test_sequence_parallel_gathers_move_quantised_values():
    """TransformerEngine quantises a sequence-parallel Linear's input before gathering it, so
    the all-gather half of each TP exchange moves 1-byte fp8 (0.56-byte NVFP4) values, the
    reduce-scatter half bf16; without sequence parallelism the exchange is an all-reduce of
    the bf16 output whatever the GEMMs' precision."""
    bf16, fp8 = _tp_s("H100", "bf16", True), _tp_s("H100", "fp8", True)
    assert 0.6 * bf16 < fp8 < 0.9 * bf16
    assert _tp_s("H100", "fp8", False) == pytest.approx(_tp_s("H100", "bf16", False))
    assert _tp_s("GB300", "nvfp4", True) < _tp_s("GB300", "fp8", True)
