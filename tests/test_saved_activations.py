"""Activation memory of fp8 runs, host-offloaded layers, and the interleaved schedule's
overlapped pipeline transfers (cost_models.training.memory, stage_memory, stage)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models.model_spec import ModelSpec
from cost_models.parallel import ConfigError, Degrees
from cost_models.profile import Profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.memory import ActivationShape, layer_activation_bytes
from cost_models.training.stage import pp_exposed_s
from cost_models.training.step import estimate
from planner.inputs.models import load_model
from topologies.standard import homogeneous_cluster

LLAMA = ModelSpec("llama", 8, 4096, 32, 8, 128, 14336, 128256, glu=True, activation="silu")


def _shape(q: float, tp: int = 4) -> ActivationShape:
    return ActivationShape(tokens=8192, seq_len=8192, tp=tp, etp=1, sequence_parallel=True,
                           unfused_attention=False, dropout=False, moe_imbalance=1.0,
                           gemm_input_scale=q)


@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_fp8_keeps_gemm_inputs_quantised_and_the_rest_in_bf16(recompute):
    """Per token, the GEMM inputs TransformerEngine saves in fp8 are QKV's and FC1's (h each,
    sequence-parallel: /t), the output projection's (a*d/t) and FC2's (f/t): bf16 minus fp8 is
    (1 - q) * 2 * (2h/t + a*d/t + f/t) bytes, q the quantised size over bf16's. Selective
    recompute of the norms (the default on a dense model) does not keep QKV's or FC1's inputs,
    so only the projection's and FC2's differ."""
    h, t, f, ad, tokens = 4096, 4, 14336, 32 * 128, 8192
    q = (1 + 1 / 32) / 2  # MXFP8: a byte and an E8M0 scale per 32 values
    bf16 = layer_activation_bytes(LLAMA, 0, _shape(1.0), recompute)
    fp8 = layer_activation_bytes(LLAMA, 0, _shape(q), recompute)
    per_token = (2 * h / t + ad / t + f / t) if recompute == "none" else ad / t + f / t
    assert bf16 - fp8 == pytest.approx(tokens * (1 - q) * 2 * per_token, rel=1e-12)
    assert 0.6 * bf16 < fp8 < bf16


def test_fp8_memory_follows_the_framework():
    """An fp8 estimate holds fewer activation bytes than bf16 with TransformerEngine, and the
    same bytes when the framework saves the high-precision inputs (torchao float8)."""
    model = load_model("llama-3.1-8b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    cfg = TrainingConfig(degrees=Degrees(tp=2, dp=4), sequence_parallel=True)
    acts = {}
    for precision, saved in (("bf16", True), ("fp8", True), ("fp8", False)):
        est = estimate(model, cluster, Workload(8192, 64, precision),
                       replace(cfg, quantized_saved_inputs=saved), Profile())
        acts[precision, saved] = est.memory.activations_bytes
    assert acts["fp8", False] == pytest.approx(acts["bf16", True], rel=1e-12)
    assert acts["fp8", True] < 0.9 * acts["bf16", True]


def test_offloaded_layers_leave_one_layer_on_the_gpu():
    """``offload_layers = n`` of a stage's L layers keeps L - n + 1 layers' activations (one
    offloaded layer double-buffered); more than L offloads them all but the buffer; the
    config refuses a negative count."""
    model = load_model("llama-3.1-8b")  # 32 layers, one kind
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    w = Workload(8192, 64)
    base = TrainingConfig(degrees=Degrees(dp=8), micro_batch=1)
    full = estimate(model, cluster, w, base, Profile()).memory.activations_bytes
    per_layer = full / model.num_layers
    for n, kept in ((8, 25), (32, 1), (40, 1)):
        acts = estimate(model, cluster, w, replace(base, offload_layers=n),
                        Profile()).memory.activations_bytes
        assert acts == pytest.approx(kept * per_layer, rel=1e-9)
    with pytest.raises(ConfigError):
        replace(base, offload_layers=-1)


def test_interleaving_hides_pipeline_transfers_up_to_the_stage_work():
    """Plain 1F1B pays its send/recv; the interleaved schedule only what exceeds the stage's
    work of the micro-batch (Megatron's overlap_p2p_comm)."""
    plain = TrainingConfig(degrees=Degrees(pp=4, dp=2))
    inter = replace(plain, vpp=2)
    assert pp_exposed_s(plain, 0.3, 1.0) == 0.3
    assert pp_exposed_s(inter, 0.3, 1.0) == 0.0
    assert pp_exposed_s(inter, 1.3, 1.0) == pytest.approx(0.3)


def test_interleaved_estimate_keeps_transfers_in_the_bubble_only():
    """Llama-3.1-70B on 8 nodes, PP across nodes: with vpp = 2 the stages' steady-state
    send/recv is hidden (pp_comm 0, pp_hidden > 0), while vpp = 1 pays it in every
    micro-batch; the bubble still counts the transfers (warm-up and flush are not
    overlapped)."""
    model = load_model("llama-3.1-70b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 8)
    w = Workload(4096, 512)
    cfg = TrainingConfig(degrees=Degrees(tp=8, pp=4, dp=2), sequence_parallel=True)
    one = estimate(model, cluster, w, cfg, Profile())
    two = estimate(model, cluster, w, replace(cfg, vpp=2), Profile())
    assert one.time.pp_comm_s > 0 and all(s.pp_hidden_s == 0 for s in one.stages)
    assert two.time.pp_comm_s == 0 and all(s.pp_hidden_s > 0 for s in two.stages)
    s = two.stages[1]
    assert two.time.bubble_s == pytest.approx(
        (4 - 1) / 2 * sum(x.total_s + x.pp_hidden_s for x in two.stages) / 4, rel=1e-9)
    assert s.pp_hidden_s < s.total_s
