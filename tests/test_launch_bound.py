"""Launch-bound layers: the CPU issues every kernel that no CUDA graph captures, and a layer
whose GPU work is shorter than those launches takes the launches' time
(``cost_models.compute.layer_launches``, ``LayerTime.total_s``)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models.compute import (CUDA_GRAPHS, GpuRates, Shard, backward_time_s,
                                 layer_forward_time, layer_launches, layer_work)
from cost_models.parallel import ConfigError, Degrees
from cost_models.profile import Profile, default_profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.step import estimate
from planner.inputs.models import load_model
from topologies.standard import homogeneous_cluster

RATES = GpuRates(peak_flops=2.25e15, hbm_bytes_per_s=7.7e12)
PROF = Profile(gemm_efficiency=0.75, attention_efficiency=0.5, kernel_overhead_s=5e-6,
               host_launch_s=30e-6)


def _shard(tokens: int, ep: int = 8, graphs: str = "none", fp8: bool = False,
           flex: bool = False) -> Shard:
    return Shard(batch=1, seq_len=tokens, tp=1, cp=1, ep=ep, etp=1, sequence_parallel=False,
                 unfused_attention=False, dropout=False, cuda_graphs=graphs, fp8=fp8,
                 flex_dispatch=flex)


def test_a_short_layer_takes_its_launches_and_a_faster_gpu_does_not_help():
    """Qwen3-30B-A3B at 256 tokens: 16 local experts of a few tokens each; the layer's time is
    the CPU's, forward and backward, whatever the GPU's speed."""
    model = load_model("qwen3-30b-a3b")
    work = layer_work(model, 0, _shard(256))
    t = layer_forward_time(work, RATES, PROF)
    assert t.gpu_s < t.host_s
    assert t.total_s == pytest.approx(work.launches.host_fwd * PROF.host_launch_s)
    assert backward_time_s(t) == pytest.approx(work.launches.host_bwd * PROF.host_launch_s)
    faster = layer_forward_time(work, replace(RATES, peak_flops=2 * RATES.peak_flops,
                                              hbm_bytes_per_s=2 * RATES.hbm_bytes_per_s), PROF)
    assert faster.total_s == t.total_s and faster.gpu_s < t.gpu_s


def test_a_long_layer_is_the_gpus_work_whatever_the_launch_cost():
    model = load_model("qwen3-30b-a3b")
    work = layer_work(model, 0, replace(_shard(4096), batch=8))
    with_host = layer_forward_time(work, RATES, PROF)
    without = layer_forward_time(work, RATES, replace(PROF, host_launch_s=0.0))
    assert with_host.host_s < with_host.gpu_s
    assert with_host.total_s == without.total_s
    assert backward_time_s(with_host) == backward_time_s(without)


@pytest.mark.parametrize("name,layer", [("qwen3-30b-a3b", 0), ("deepseek-v3", 5),
                                        ("llama-3.1-8b", 0)])
@pytest.mark.parametrize("fp8", [False, True])
def test_cuda_graphs_take_launches_from_the_cpu_not_kernels_from_the_gpu(name, layer, fp8):
    """Wider capture never leaves the CPU more to launch; the GPU runs the same kernels."""
    model = load_model(name)
    counts = [layer_launches(model, layer, _shard(4096, graphs=g, fp8=fp8)) for g in CUDA_GRAPHS]
    assert len({(c.fwd, c.bwd) for c in counts}) == 1
    host = [(c.host_fwd, c.host_bwd) for c in counts]  # none, moe_router, attn+moe_router, full
    assert host[0] == (counts[0].fwd, counts[0].bwd)
    assert host[0] >= host[1] >= host[2] > host[3] == (0, 0)
    if model.is_moe_layer(layer):
        assert host[0] > host[1] > host[2]


def test_each_local_expert_costs_the_cpu_its_gemm_launches():
    """TransformerEngine's GroupedLinear runs one cuBLAS GEMM per local expert (FC1 and FC2
    forward, their data and weight gradients backward); fp8 also quantises each input."""
    model = load_model("qwen3-30b-a3b")  # 128 experts
    for fp8, per_expert in ((False, 2), (True, 4)):
        a = layer_launches(model, 0, _shard(4096, ep=8, fp8=fp8))  # 16 local experts
        b = layer_launches(model, 0, _shard(4096, ep=16, fp8=fp8))  # 8
        assert a.host_fwd - b.host_fwd == per_expert * 8
        assert a.host_bwd - b.host_bwd == 2 * per_expert * 8


def test_the_fused_grouped_mlp_launches_a_few_kernels_whatever_the_experts():
    """TransformerEngine's fused grouped MLP runs the local experts' GEMMs as grouped kernels
    with the activation in FC1's epilogue: its launches do not grow with the local experts,
    and the activation's own HBM pass is gone (GPT-OSS: also its clamp and bias passes)."""
    for name in ("qwen3-30b-a3b", "gpt-oss-120b"):
        model = load_model(name)
        layer = next(i for i in range(model.num_layers) if model.is_moe_layer(i))
        def fused(ep):
            return replace(_shard(4096, ep=ep, fp8=True), fused_grouped_mlp=True)
        a, b = layer_launches(model, layer, fused(8)), layer_launches(model, layer, fused(16))
        assert (a.fwd, a.bwd) == (b.fwd, b.bwd)
        plain = layer_launches(model, layer, _shard(4096, ep=8, fp8=True))
        assert plain.fwd - a.fwd > 16 * 4 - 6 and plain.bwd > a.bwd
        work_f = layer_work(model, layer, fused(8))
        work_p = layer_work(model, layer, _shard(4096, ep=8, fp8=True))
        assert work_f.gemms == work_p.gemms and work_f.elementwise_bytes < work_p.elementwise_bytes


def test_fp8_attention_runs_the_core_at_the_fp8_attention_rate():
    """Only the fused attention core speeds up, by FP8_ATTENTION_SPEEDUP (FlashAttention-3's
    FP8/BF16 ratio), not by the GEMMs' fp8 speedup."""
    from cost_models.compute import FP8_ATTENTION_SPEEDUP
    model = load_model("qwen3-30b-a3b")
    rates = replace(RATES, fp8=True)
    base = layer_forward_time(layer_work(model, 0, _shard(4096, fp8=True)), rates, PROF)
    fast = layer_forward_time(
        layer_work(model, 0, replace(_shard(4096, fp8=True), fp8_attention=True)), rates, PROF)
    assert fast.attention_s == pytest.approx(base.attention_s / FP8_ATTENTION_SPEEDUP)
    assert 1 < FP8_ATTENTION_SPEEDUP < 2
    assert (fast.gemm_s, fast.elementwise_s, fast.overhead_s) == (
        base.gemm_s, base.elementwise_s, base.overhead_s)


def test_the_flex_dispatcher_launches_fewer_kernels_than_the_all_to_all():
    model = load_model("qwen3-30b-a3b")
    a2a = layer_launches(model, 0, _shard(4096))
    flex = layer_launches(model, 0, _shard(4096, flex=True))
    assert flex.fwd < a2a.fwd and flex.host_fwd < a2a.host_fwd


def _qwen3_30b_step(micro_batch: int, graphs: str) -> float:
    model = load_model("qwen3-30b-a3b")
    cluster = homogeneous_cluster("B200", 1, 8)
    cfg = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8, ep=8), micro_batch=micro_batch,
                         cuda_graphs=graphs)
    est = estimate(model, cluster, Workload(4096, 512, "fp8"), cfg, default_profile("B200"))
    return est.step_time_s


def test_small_micro_batches_are_launch_bound_without_graphs():
    """Megatron-Bridge's Qwen3-30B-A3B on 8 B200 ran 2.8x slower at micro-batch 1 than at 4
    without full-iteration graphs (26.02: 9,691 vs 26,695 tokens/s/GPU); the same work in a
    quarter of the launches. Full-iteration graphs take the launches off the CPU: micro-batch
    1 then loses only what the GPU loses (smaller GEMMs, kernels' fixed costs)."""
    eager = _qwen3_30b_step(1, "none") / _qwen3_30b_step(4, "none")
    graphed = _qwen3_30b_step(1, "full") / _qwen3_30b_step(4, "full")
    assert eager > 2.0
    assert eager > graphed + 0.2


def test_cuda_graphs_is_a_checked_option_and_round_trips():
    with pytest.raises(ConfigError, match="cuda_graphs"):
        TrainingConfig(cuda_graphs="partial")
    cfg = TrainingConfig(cuda_graphs="attn+moe_router")
    assert TrainingConfig.from_dict({"degrees": {}, **cfg.options_dict()}) == cfg
    assert "cuda_graphs" not in TrainingConfig().options_dict()


def test_a_calibrated_profile_prices_no_separate_launch_time():
    """planner calibrate times launches and kernels on one machine together: its profile's
    ``kernel_overhead_s`` carries them and ``host_launch_s`` stays 0."""
    assert Profile().host_launch_s == 0.0
    assert default_profile("H100-SXM5-80GB").host_launch_s > 0


def test_estimate_table_names_cuda_graphs_when_set():
    from typer.testing import CliRunner

    from planner.cli.app import app
    args = ["estimate", "--model", "qwen3-30b-a3b", "--gpu", "B200", "--nodes", "1", "--ep", "8",
            "--global-batch", "64"]
    runner = CliRunner()
    plain = runner.invoke(app, args, env={"COLUMNS": "80"})
    graphed = runner.invoke(app, [*args, "--cuda-graphs", "attn+moe_router"],
                            env={"COLUMNS": "80"})
    assert plain.exit_code == graphed.exit_code == 0
    assert "CUDA graphs" not in plain.stdout
    header = graphed.stdout.split("Step time")[0]
    assert "CUDA graphs attn+moe_router" in header
    assert max(len(line) for line in header.splitlines()) <= 80


def test_estimate_prices_and_names_the_fused_kernels():
    """--fp8-attention and --fused-grouped-mlp shorten a Blackwell MXFP8 MoE step, appear in
    the table's header at 80 columns and in the JSON config, and need fp8."""
    import json

    from typer.testing import CliRunner

    from planner.cli.app import app
    args = ["estimate", "--model", "qwen3-30b-a3b", "--gpu", "B200", "--nodes", "1", "--ep", "8",
            "--global-batch", "64", "--precision", "fp8", "--format", "json"]
    runner = CliRunner()
    plain = json.loads(runner.invoke(app, args).stdout)
    fused = json.loads(runner.invoke(app, [*args, "--fp8-attention", "--fused-grouped-mlp"]).stdout)
    assert fused["config"]["fp8_attention"] and fused["config"]["fused_grouped_mlp"]
    assert "fp8_attention" not in plain["config"]
    assert fused["time"]["step_s"] < plain["time"]["step_s"]
    table = runner.invoke(app, [*args[:-2], "--fp8-attention", "--fused-grouped-mlp"],
                          env={"COLUMNS": "80"})
    header = table.stdout.split("Step time")[0]
    assert "fp8 attention · fused grouped MLP" in header
    assert max(len(line) for line in header.splitlines()) <= 80
    bad = runner.invoke(app, [*args[:-4], "--fp8-attention"])
    assert bad.exit_code == 2 and "--fp8-attention" in bad.output
