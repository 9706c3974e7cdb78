"""Attention kernel generations (``TrainingConfig.attention``): ``flash`` is the GPU's native
fused kernel, ``flash2`` the FlashAttention-2 generation, slower on Hopper and Blackwell by
:data:`cost_models.compute.FA2_ON_SM90_PLUS` (measured on an H200; pytorch/pytorch#142132;
FlashAttention-3 paper) and the same kernel as ``flash`` on Ampere and older. And the fused
kernels' efficiency curve over the keys each query attends to (``attention_half_keys``)."""
from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path

import pytest

from cost_models.compute import (FA2_ON_SM90_PLUS, Shard, attention_kernel_scale,
                                 fused_attention_efficiency, layer_forward_time, layer_work)
from cost_models.fitting import BWD_ATTN, attention_flops
from cost_models.parallel import ConfigError, Degrees
from cost_models.profile import Profile, default_profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.context import gpu_rates
from cost_models.training.step import estimate
from planner.inputs.models import load_model
from topologies.catalog import get_gpu, gpu_catalog
from topologies.standard import homogeneous_cluster

MODEL = load_model("llama-3.1-8b")


def test_fa2_is_slower_only_where_a_newer_native_kernel_exists():
    # the measured ratio (H200, fwd + bwd); PyTorch's report: 329 vs 631 TFLOP/s on one H100
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


RESULTS = Path(__file__).resolve().parents[1] / "benchmarks/results"


def _measured(backend: str, gpu: str = "*") -> list[tuple[float, float, float]]:
    """(keys per query, 128-query tiles, fraction of the 989 TFLOP/s bf16 peak) of every SDPA
    causal forward + backward at head dim 128 timed on the lent GPUs (``kernel_probe.py``)."""
    out = []
    for path in sorted(RESULTS.glob(f"device-{gpu}-kernels/kernels*.json")):
        data = json.loads(path.read_text())
        for r in data.get("attention", []) + data.get("attention_shapes", []):
            if (r["backend"] != backend or "error" in r
                    or (r["head_dim_qk"], r["head_dim_v"]) != (128, 128)):
                continue
            flops = (1 + BWD_ATTN) * attention_flops(r["batch"], r["heads"], r["seq"], 128)
            out.append((r["seq"] / 2, r["batch"] * r["heads"] * math.ceil(r["seq"] / 128),
                        flops / r["fwd_bwd_s"] / 989e12))
    return out


def _fit(points, prof: Profile) -> tuple[float, float]:
    """(sum of squared log errors, level) of the profile's curve over ``points``, the level
    the geometric-mean one."""
    shape = [fused_attention_efficiency(prof, keys, tiles) / prof.attention_efficiency
             for keys, tiles, _ in points]
    level = math.exp(statistics.fmean(math.log(e / f) for (_, _, e), f in zip(points, shape)))
    return sum(math.log(level * f / e) ** 2 for (_, _, e), f in zip(points, shape)), level


def _rms_log(points, prof: Profile) -> float:
    return math.sqrt(_fit(points, prof)[0] / len(points))


def test_shipped_knees_follow_the_measured_kernels():
    """The shipped knees (keys and tiles), with one free level per kernel, reproduce FA2 within
    6% and cuDNN within 15% (rms) on each GPU that timed them - 1k to 32k tokens, 64 to 8,192
    tiles - where a constant efficiency is off by over 25%; they are the least-squares knees of
    both kernels together (no neighbour on the fit's grid does better), and FA2_ON_SM90_PLUS is
    the ratio of the two kernels' levels there."""
    shipped = default_profile("H100-SXM5-80GB")
    assert shipped.attention_half_keys > 0 and shipped.attention_half_tiles > 0
    flat = dataclasses.replace(shipped, attention_half_keys=0.0, attention_half_tiles=0.0)
    for gpu in ("h100", "h200"):
        for backend, bound in (("flash", 0.06), ("cudnn", 0.15)):
            points = _measured(backend, gpu)
            assert len(points) >= 17 and min(t for _, t, _ in points) <= 128
            assert _rms_log(points, shipped) < bound, (gpu, backend)
            assert _rms_log(points, flat) > 0.25, (gpu, backend)
    both = [_measured("cudnn"), _measured("flash")]

    def total(prof: Profile) -> float:
        return sum(_fit(points, prof)[0] for points in both)
    for dk, dt in ((10, 0), (-10, 0), (0, 4), (0, -4)):
        assert total(shipped) <= total(dataclasses.replace(
            shipped, attention_half_keys=shipped.attention_half_keys + dk,
            attention_half_tiles=shipped.attention_half_tiles + dt)), (dk, dt)
    ratio = _fit(both[1], shipped)[1] / _fit(both[0], shipped)[1]
    assert FA2_ON_SM90_PLUS == pytest.approx(ratio, abs=0.0005)


def test_attention_time_per_flop_falls_with_keys_and_tiles_and_windows_pay_the_knee():
    prof = Profile(attention_efficiency=0.5, attention_half_keys=390.0, attention_half_tiles=156.0)
    flat = Profile(attention_efficiency=0.5)
    assert fused_attention_efficiency(flat, 100.0, 10.0) == 0.5
    assert fused_attention_efficiency(prof, 390.0, 156.0) == pytest.approx(0.125)
    rates = gpu_rates(get_gpu("H100"), Workload(seq_len=4096, global_batch=8))

    def per_flop(model, seq: int, cp: int = 1, tp: int = 1, batch: int = 1,
                 p: Profile = prof) -> float:
        work = layer_work(model, 0, Shard(batch=batch, seq_len=seq, tp=tp, cp=cp, ep=1, etp=1,
                                          sequence_parallel=False, unfused_attention=False,
                                          dropout=False))
        return layer_forward_time(work, rates, p).attention_s / work.attn_flops
    times = [per_flop(MODEL, s) for s in (1024, 4096, 16384)]
    assert times[0] > times[1] > times[2]
    assert len({round(per_flop(MODEL, s, p=flat) * 1e18, 9) for s in (1024, 4096)}) == 1
    # tensor parallelism leaves a call fewer heads, so fewer tiles: slower per FLOP, and a
    # larger micro-batch gives them back
    assert per_flop(MODEL, 4096, tp=8) > per_flop(MODEL, 4096, tp=2) > per_flop(MODEL, 4096)
    assert per_flop(MODEL, 4096, tp=8, batch=4) == pytest.approx(per_flop(MODEL, 4096, tp=2))
    # context parallelism: each kernel call sees one chunk's keys and queries
    assert per_flop(MODEL, 16384, cp=4) == pytest.approx(per_flop(MODEL, 4096), rel=1e-12)
    # a 128-token window attends to at most 128 keys, however long the sequence
    windowed = dataclasses.replace(MODEL, sliding_window=128)
    tiles = MODEL.num_heads * 16384 / 128
    assert per_flop(windowed, 16384) == pytest.approx(1 / (
        rates.peak_flops * fused_attention_efficiency(prof, 128 - 128 * 128 / 32768, tiles)))
