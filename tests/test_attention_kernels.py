"""Attention kernel generations (``TrainingConfig.attention``): ``flash`` is the GPU's native
fused kernel, ``flash2`` the FlashAttention-2 generation, slower on Hopper and Blackwell by
:data:`cost_models.compute.FA2_ON_SM90_PLUS` (pytorch/pytorch#142132; FlashAttention-3 paper)
and the same kernel as ``flash`` on Ampere and older."""
from __future__ import annotations

import dataclasses

import pytest

from cost_models.compute import (FA2_ON_SM90_PLUS, Shard, attention_kernel_scale,
                                 layer_forward_time, layer_work)
from cost_models.parallel import ConfigError, Degrees
from cost_models.profile import Profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.context import gpu_rates
from cost_models.training.step import estimate
from planner.inputs.models import load_model
from topologies.catalog import get_gpu, gpu_catalog
from topologies.standard import homogeneous_cluster

MODEL = load_model("llama-3.1-8b")


def test_fa2_is_slower_only_where_a_newer_native_kernel_exists():
    # the measured ratio: SDPA's FA2 backend 329 vs cuDNN 631 TFLOP/s on one H100
    assert 0.5 < FA2_ON_SM90_PLUS < 0.67  # FA3 paper: FA3 is 1.5-2.0x FA2 on H100
    for name in gpu_catalog():
        arch = get_gpu(name).arch
        newer = arch.startswith(("Hopper", "Blackwell"))
        assert attention_kernel_scale(arch, "flash2") == (FA2_ON_SM90_PLUS if newer else 1.0), name
        assert attention_kernel_scale(arch, "flash") == 1.0
        assert attention_kernel_scale(arch, "unfused") == 1.0


@pytest.mark.parametrize("gpu", ["H100", "A100"])
def test_only_the_attention_core_slows_down(gpu):
    w = Workload(seq_len=8192, global_batch=8)
    spec = get_gpu(gpu)
    fast, slow = (gpu_rates(spec, w, attention=a) for a in ("flash", "flash2"))
    assert dataclasses.replace(slow, attention_scale=fast.attention_scale) == fast
    work = layer_work(MODEL, 0, Shard(batch=1, seq_len=8192, tp=1, cp=1, ep=1, etp=1,
                                      sequence_parallel=False, unfused_attention=False,
                                      dropout=False))
    a, b = layer_forward_time(work, fast, Profile()), layer_forward_time(work, slow, Profile())
    assert (b.gemm_s, b.elementwise_s, b.overhead_s) == (a.gemm_s, a.elementwise_s, a.overhead_s)
    ratio = FA2_ON_SM90_PLUS if gpu == "H100" else 1.0
    assert b.attention_s == pytest.approx(a.attention_s / ratio, rel=1e-12)


def _step(gpu: str, attention: str, seq: int):
    w = Workload(seq_len=seq, global_batch=8)
    cfg = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8), attention=attention,
                         recompute="full")
    return estimate(MODEL, homogeneous_cluster(gpu, 1), w, cfg, Profile())


def test_step_cost_grows_with_the_attention_share():
    """The slowdown is the attention core's: larger at long sequences, none on A100, and the
    memory (no s^2 tensors either way) does not move."""
    slowdown = {}
    for seq in (2048, 32768):
        fast, slow = _step("H100", "flash", seq), _step("H100", "flash2", seq)
        assert slow.memory == fast.memory
        slowdown[seq] = slow.time.step_s / fast.time.step_s
        assert slow.time.recompute_s > fast.time.recompute_s  # the recomputed forward too
    assert 1.0 < slowdown[2048] < slowdown[32768] < 1 / FA2_ON_SM90_PLUS
    a100 = _step("A100", "flash", 8192), _step("A100", "flash2", 8192)
    assert a100[0].time == a100[1].time


def test_attention_option_is_validated_and_round_trips():
    with pytest.raises(ConfigError):
        TrainingConfig(attention="flash3")
    cfg = TrainingConfig(attention="flash2")
    assert TrainingConfig.from_dict({"degrees": {}, **cfg.options_dict()}) == cfg


def _cli_json(*args: str) -> dict:
    import json

    from typer.testing import CliRunner

    from planner.cli.app import app
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_estimate_and_solve_take_the_attention_kernels():
    common = ("--model", "llama-3.1-8b", "--nodes", "1", "--seq-len", "16384",
              "--global-batch", "16", "--format", "json")
    rate = {}
    for gpu in ("H100", "A100"):
        for kernels in ("flash", "flash2"):
            out = _cli_json("estimate", "--gpu", gpu, "--tp", "1", "--recompute", "full",
                            "--attention", kernels, *common)
            assert out["config"]["attention"] == kernels
            rate[gpu, kernels] = out["tokens_per_s_per_gpu"]
    assert rate["H100", "flash2"] < 0.9 * rate["H100", "flash"]
    assert rate["A100", "flash2"] == rate["A100", "flash"]
    plans = _cli_json("solve", "--gpu", "H100", "--attention", "flash2", "--top-k", "2",
                      *common)
    assert plans and all(p["training"]["options"]["attention"] == "flash2" for p in plans)


def test_estimate_table_names_non_default_attention_kernels():
    from typer.testing import CliRunner

    from planner.cli.app import app
    args = ["estimate", "--model", "llama-3.1-8b", "--gpu", "H100", "--nodes", "1", "--tp", "1"]
    runner = CliRunner()
    plain = runner.invoke(app, args, env={"COLUMNS": "80"})
    fa2 = runner.invoke(app, [*args, "--attention", "flash2"], env={"COLUMNS": "80"})
    assert plain.exit_code == fa2.exit_code == 0
    assert "attention" not in plain.stdout.split("Step time")[0]
    assert "· attention flash2" in fa2.stdout
