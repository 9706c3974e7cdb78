"""The fused attention forward's bound by its softmax exponentials
(``cost_models.compute.attention_exp_excess_s``): per SM and clock a B200 does 8,192 dense
BF16 tensor FLOPs and 16 exponentials (FlashAttention-4, sec. 2), so at head dim 64 its
forward waits twice its tensor-core time; at head dim 128, on H100 and on Blackwell Ultra
(whose special function units are twice as fast) bf16 attention is not bound by them; the
backward never is."""
from __future__ import annotations

import dataclasses

import pytest

from cost_models.compute import (FP8_ATTENTION_SPEEDUP, Shard, attention_exp_excess_s,
                                 backward_gpu_s, layer_forward_time, layer_work)
from cost_models.profile import Profile
from cost_models.training.config import Workload
from cost_models.training.context import gpu_rates
from planner.inputs.models import load_model
from topologies.catalog import _raw, get_gpu, gpu_catalog

LLAMA = load_model("llama-3.1-8b")  # head dim 128
D64 = dataclasses.replace(LLAMA, head_dim=64, num_heads=2 * LLAMA.num_heads)  # same q width
SHARD = Shard(batch=1, seq_len=8192, tp=1, cp=1, ep=1, etp=1, sequence_parallel=False,
              unfused_attention=False, dropout=False)


def _times(model, gpu: str, fp8_attention: bool = False):
    sh = dataclasses.replace(SHARD, fp8_attention=fp8_attention)
    return layer_forward_time(layer_work(model, 0, sh), gpu_rates(get_gpu(gpu), Workload(
        seq_len=8192, global_batch=8)), Profile())


def test_b200_at_head_dim_64_waits_for_its_exponentials_twice_its_tensor_time():
    t = _times(D64, "B200")
    assert t.attention_exp_s == pytest.approx(t.attention_s, rel=1e-9)
    assert t.attention_fwd_s == pytest.approx(2 * t.attention_s, rel=1e-9)
    # the backward (10 d FLOPs and one exponential a score) is priced from the tensor time
    plain = dataclasses.replace(t, attention_exp_s=0.0)
    assert backward_gpu_s(t) == backward_gpu_s(plain)


@pytest.mark.parametrize("model,gpu", [(LLAMA, "B200"), (LLAMA, "H100"), (D64, "H100"),
                                       (D64, "B300"), (D64, "GB300"), (D64, "A100")])
def test_bf16_attention_is_not_bound_where_the_tensor_cores_are_slow_enough(model, gpu):
    assert _times(model, gpu).attention_exp_s == 0.0


def test_fp8_attention_speeds_the_gemms_not_the_exponentials():
    # H100 at head dim 64: fp8 GEMMs take 1 / 1.6 of the bf16 time, the exponentials as long
    # as the bf16 GEMMs: the forward lasts as long as in bf16
    bf16, fp8 = _times(D64, "H100"), _times(D64, "H100", fp8_attention=True)
    assert fp8.attention_s == pytest.approx(bf16.attention_s / FP8_ATTENTION_SPEEDUP, rel=1e-9)
    assert fp8.attention_fwd_s == pytest.approx(bf16.attention_fwd_s, rel=1e-9)
    # at head dim 128 the exponentials take half the bf16 GEMMs' time: fp8 still gains
    assert _times(LLAMA, "H100", fp8_attention=True).attention_exp_s == 0.0


def test_blackwell_ultra_halves_what_blackwell_waits_for():
    gb200, gb300 = get_gpu("GB200"), get_gpu("GB300")
    assert gb300.tensor_flops_per_exp2 == gb200.tensor_flops_per_exp2 / 2
    assert get_gpu("B200").tensor_flops_per_exp2 == 2 * get_gpu("H100").tensor_flops_per_exp2


def test_excess_is_zero_without_the_rate_and_linear_in_the_scores():
    assert attention_exp_excess_s(1e9, 0.0, 1e15, 0.0) == 0.0
    assert attention_exp_excess_s(0.0, 1.0, 1e15, 512.0) == 0.0
    one = attention_exp_excess_s(1e9, 0.0, 1e15, 512.0)
    assert one == pytest.approx(1e9 * 512 / 1e15)
    assert attention_exp_excess_s(2e9, 0.0, 1e15, 512.0) == pytest.approx(2 * one)
    assert attention_exp_excess_s(1e9, 2 * one, 1e15, 512.0) == 0.0


def test_catalog_values_are_known_only_with_a_source():
    raw = _raw()["gpus"]
    for name, gpu in gpu_catalog().items():
        if gpu.tensor_flops_per_exp2:
            assert gpu.tensor_flops_per_exp2 in (128, 256, 512), name
            assert "tensor_flops_per_exp2" in raw[name]["catalog_additions"], name


def test_the_knees_fixed_work_per_tile_is_not_doubled():
    # a short window pays the kernel's fixed work per tile (fused_attention_efficiency's
    # knees): the exponentials lengthen the streaming part only
    knees = Profile(attention_half_keys=390.0, attention_half_tiles=156.0)
    sh = SHARD
    work = layer_work(D64, 0, sh)
    rates = gpu_rates(get_gpu("B200"), Workload(seq_len=8192, global_batch=8))
    plain, kneed = layer_forward_time(work, rates, Profile()), layer_forward_time(work, rates,
                                                                               knees)
    assert kneed.attention_s > plain.attention_s
    assert kneed.attention_exp_s == pytest.approx(plain.attention_exp_s, rel=1e-12)


def _serving(model: str, gpu_name: str, tensor_flops_per_exp2: float | None = None):
    from cost_models.serving.config import PoolLayout, ServingWorkload
    from planner.serving.estimate import Calibration, PoolSpec, costing
    from topologies.standard import homogeneous_cluster
    g = get_gpu(gpu_name)
    if tensor_flops_per_exp2 is not None:
        g = dataclasses.replace(g, tensor_flops_per_exp2=tensor_flops_per_exp2)
    return costing(load_model(model), PoolSpec("prefill", g.name, PoolLayout(tp=1)),
                   ServingWorkload(), homogeneous_cluster(g.name, 1),
                   Calibration.defaults((g.name,)), g)


def test_serving_prefill_attention_pays_the_same_bound():
    from cost_models.serving.latency import prefill_step
    with_bound = prefill_step(_serving("gpt-oss-20b", "B200"), (8192.0,))
    without = prefill_step(_serving("gpt-oss-20b", "B200", 0.0), (8192.0,))
    # gpt-oss has head dim 64: on B200 the prefill's attention core takes twice as long
    assert with_bound.attention_s == pytest.approx(2 * without.attention_s, rel=1e-9)
    assert with_bound.gemm_s == without.gemm_s
    # a head dim 128 model on the same GPU is not bound
    llama = prefill_step(_serving("llama-3.1-8b", "B200"), (8192.0,))
    assert llama.attention_s == prefill_step(_serving("llama-3.1-8b", "B200", 0.0),
                                             (8192.0,)).attention_s
