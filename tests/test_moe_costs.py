"""MoE terms of the training cost model, each checked against an independent computation.

Sources are in ``cost_models/compute.py`` and ``cost_models/training/stage.py`` (module
docstrings): Megatron-Core ``moe_utils.permute``/``unpermute`` (permutation traffic), the router
kernels (Switch Transformer eq. 4), grouped-GEMM M = tokens per local expert, Megatron's combined
1F1B EP all-to-all overlap (``--overlap-moe-expert-parallel-comm``), DeepSeek-V3 MTP (sec. 2.2).
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models.compute import (ACT_BYTES, GpuRates, Gemm, Shard, gemm_time_s,
                                 layer_forward_time, layer_work, lm_head_forward_time,
                                 moe_gemms, tokens_per_expert)
from cost_models.model_spec import ModelSpec, MoESpec, count_params
from cost_models.parallel import ConfigError, Degrees
from cost_models.profile import Profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.context import make_context
import cost_models.training.stage as stage
from cost_models.training.stage import (COMM_SM_SHARE, NCCL_A2A_SM_SHARE, a2a_exposed_s,
                                        a2a_sm_share, unpaired_share)
from cost_models.training.step import estimate
from planner.inputs.models import load_model
from topologies.standard import homogeneous_cluster

PROF = Profile()
RATES = GpuRates(peak_flops=989e12, hbm_bytes_per_s=3.35e12)


def _moe(layers: int = 4, hidden: int = 1024, experts: int = 16, top_k: int = 2,
         width: int = 512, shared: int = 0, mtp: int = 0) -> ModelSpec:
    return ModelSpec(name="moe-test", num_layers=layers, hidden_size=hidden, num_heads=8,
                     num_kv_heads=8, head_dim=hidden // 8, ffn_hidden_size=width, vocab_size=32000,
                     glu=True,
                     moe=MoESpec(experts, top_k, width, num_shared_experts=shared),
                     mtp_layers=mtp)


def _shard(tokens: int = 4096, tp: int = 1, ep: int = 1, imbalance: float = 1.0) -> Shard:
    return Shard(batch=1, seq_len=tokens, tp=tp, cp=1, ep=ep, etp=1, sequence_parallel=tp > 1,
                 unfused_attention=False, dropout=False, moe_imbalance=imbalance)


@pytest.mark.parametrize("tokens,top_k,hidden", [(4096, 2, 1024), (8192, 2, 1024),
                                                 (4096, 8, 1024), (4096, 2, 4096)])
def test_permutation_traffic_is_routed_copies_times_hidden(tokens, top_k, hidden):
    """Permute + un-permute move 4 * h elements per routed copy (read and write, twice):
    the MoE layer's memory-bound bytes exceed the same layer without those copies by exactly
    tokens * top_k * 4h * 2 B plus the router's fp32 passes, so the permutation time is that
    traffic over the HBM bandwidth."""
    model = _moe(hidden=hidden, top_k=top_k)
    # independent path: a dense layer whose GLU MLP is as wide as the token's routed copies
    # together (top_k * 512) moves the same activation bytes, and no permutation or router ones
    dense = replace(model, moe=None, moe_layers=(), ffn_hidden_size=top_k * 512)
    sh = _shard(tokens)
    moe_work, dense_work = layer_work(model, 0, sh), layer_work(dense, 0, sh)
    extra = moe_work.elementwise_bytes - dense_work.elementwise_bytes
    permute = tokens * top_k * 4 * hidden * ACT_BYTES
    router = tokens * 4 * 4 * 16  # the router's four fp32 passes over the 16 experts' scores
    assert extra == pytest.approx(permute + router, rel=1e-12)
    # and the model's time for them: that traffic at the HBM bandwidth it reaches
    extra_s = (layer_forward_time(moe_work, RATES, PROF).elementwise_s
               - layer_forward_time(dense_work, RATES, PROF).elementwise_s)
    assert extra_s == pytest.approx((permute + router) / (3.35e12 * PROF.hbm_efficiency),
                                    rel=1e-12)


@pytest.mark.parametrize("ep,tp,imbalance,expected", [
    (1, 1, 1.0, 4096 * 2 / 16), (4, 1, 1.0, 4096 * 2 / 4), (4, 2, 1.0, 4096 * 2 / 2 / 4),
    (4, 1, 1.5, 4096 * 2 * 1.5 / 4)])
def test_tokens_per_expert(ep, tp, imbalance, expected):
    """M of the grouped GEMM = tokens/tp * top_k * imbalance / (E/ep)."""
    assert tokens_per_expert(_moe(), _shard(4096, tp=tp, ep=ep, imbalance=imbalance)) == \
        pytest.approx(expected)


def test_grouped_gemm_efficiency_falls_as_tokens_per_expert_fall():
    """Same FLOPs of routed experts split over more, finer experts: fewer tokens per expert,
    lower achieved FLOP/s (fine-grained experts at small M run below peak)."""
    rates = []
    for experts, width in ((8, 4096), (32, 1024), (128, 256)):
        model = _moe(hidden=4096, experts=experts, top_k=experts // 8, width=width)
        sh = _shard(2048)
        expert_gemms = moe_gemms(model, sh)[1:3]
        flops = sum(g.flops for g in expert_gemms)
        rates.append(flops / sum(gemm_time_s(g, RATES, PROF) for g in expert_gemms))
    assert rates[0] > rates[1] > rates[2]


def test_imbalance_slows_the_busiest_rank():
    model = _moe()
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    cfg = TrainingConfig(degrees=Degrees(dp=8, ep=8))
    w = Workload(4096, 64)
    balanced, skewed = (estimate(model, cluster, w, replace(cfg, moe_imbalance=x), PROF)
                        for x in (1.0, 1.5))
    assert skewed.time.compute_s > balanced.time.compute_s
    assert skewed.time.ep_comm_s > balanced.time.ep_comm_s


F = COMM_SM_SHARE / (1 - COMM_SM_SHARE)  # compute slow-down while an all-to-all runs beside it


@pytest.mark.parametrize("a2a,parts,expected", [
    (1.0, (2.0, 2.0, 2.0, 2.0), 4 * F),        # hidden, only the SMs it takes show
    (3.0, (2.0, 2.0, 2.0, 2.0), 4.0),          # each outlasts its partner by 1
    (3.0, (0.0, 0.0, 0.0, 0.0), 12.0),         # nothing to hide behind: all four exposed
    (1.0, (0.5, 4.0, 4.0, 0.5), 1.0 + 2 * F)])  # the attention pairings show
def test_a2a_exposed_pairs(a2a, parts, expected):
    assert a2a_exposed_s(a2a, *parts) == pytest.approx(expected)


@pytest.mark.parametrize("a2a", [0.1, 1.0, 5.0])
@pytest.mark.parametrize("c", [0.0, 0.5, 2.0])
def test_a2a_overlap_between_hidden_and_fully_exposed(a2a, c):
    assert 0.0 <= a2a_exposed_s(a2a, c, c, c, c) <= 4 * a2a


def test_nccl_all_to_all_takes_more_sms_beside_the_compute_than_deepep(monkeypatch):
    """The all-to-all dispatcher's NCCL exchange holds a CTA per p2p channel (32), DeepEP (the
    flex dispatcher) the 20 SMs Megatron gives it: beside the same compute the NCCL one slows
    it more, so under the overlap an estimate with the all-to-all dispatcher shows more
    all-to-all time than the same estimate priced at DeepEP's share, and the same compute."""
    nccl = TrainingConfig(degrees=Degrees(dp=32, ep=32), moe_a2a_overlap=True)
    assert a2a_sm_share(nccl) == NCCL_A2A_SM_SHARE > COMM_SM_SHARE
    assert a2a_sm_share(replace(nccl, moe_dispatcher="flex")) == COMM_SM_SHARE
    model = _moe(layers=4, hidden=4096, experts=64, top_k=8, width=1536)
    cluster = homogeneous_cluster("H100-SXM5-80GB", 4)
    w = Workload(4096, 32 * 8)
    priced = estimate(model, cluster, w, nccl, PROF)
    monkeypatch.setattr(stage, "NCCL_A2A_SM_SHARE", COMM_SM_SHARE)
    at_deepep = estimate(model, cluster, w, nccl, PROF)
    assert priced.time.ep_comm_s > at_deepep.time.ep_comm_s
    assert priced.time.compute_s == at_deepep.time.compute_s


@pytest.mark.parametrize("dispatcher,hidden_share", [("alltoall", 0.0), ("flex", 7 / 8)])
def test_a2a_overlap_leaves_the_count_exchange_of_the_all_to_all_dispatcher(
        monkeypatch, dispatcher, hidden_share):
    """The all-to-all dispatcher all-gathers its per-expert counts in the pre-dispatch node on
    the compute stream, which the combined 1F1B does not hide: a count exchange 1 ms longer
    adds 1 ms per MoE layer and micro-batch under the overlap too. The flex dispatcher's
    exchange (DeepEP's notify, inside its dispatch on the communication stream) hides with the
    dispatch: under the overlap it shows only in the passes without a partner (1 of 8
    micro-batches here)."""
    model = _moe(layers=4, hidden=4096, experts=64, top_k=8, width=1536)
    cluster = homogeneous_cluster("H100-SXM5-80GB", 4)
    cfg = TrainingConfig(degrees=Degrees(dp=32, ep=32), moe_a2a_overlap=True,
                         moe_dispatcher=dispatcher)
    m, w = 8, Workload(4096, 32 * 8)
    base = estimate(model, cluster, w, cfg, PROF)
    counts = stage._ep_counts_s
    monkeypatch.setattr(stage, "_ep_counts_s", lambda *a: counts(*a) + 1e-3)
    longer = estimate(model, cluster, w, cfg, PROF)
    added = longer.time.ep_comm_s - base.time.ep_comm_s
    assert added == pytest.approx(model.num_layers * m * 1e-3 * (1 - hidden_share), rel=1e-6)


@pytest.mark.parametrize("nodes,ep", [(1, 8), (4, 32)])
def test_a2a_overlap_never_slows_a_step_and_hides_on_the_nic(nodes, ep):
    """Overlap can only hide all-to-all time; with cross-node EP (NIC-bound) it hides some."""
    model = _moe(layers=4, hidden=4096, experts=64, top_k=8, width=1536)
    cluster = homogeneous_cluster("H100-SXM5-80GB", nodes)
    cfg = TrainingConfig(degrees=Degrees(dp=8 * nodes, ep=ep))
    w = Workload(4096, 16 * nodes)
    off = estimate(model, cluster, w, cfg, PROF)
    on = estimate(model, cluster, w, replace(cfg, moe_a2a_overlap=True), PROF)
    assert on.step_time_s <= off.step_time_s
    assert on.time.ep_comm_s <= off.time.ep_comm_s
    assert on.time.compute_s == off.time.compute_s
    if nodes > 1:
        assert on.time.ep_comm_s < off.time.ep_comm_s


@pytest.mark.parametrize("pp,vpp,m,stage,expected", [
    (1, 1, 4, 0, 1 / 4),      # the first forward and the last backward of four micro-batches
    (1, 1, 1, 0, 1.0),        # one micro-batch: no pair at all
    (2, 2, 4, 0, 5 / 8),      # warm-up (2-0-1)*2 + (2-1)*2 + 1 = 5 of 4*2 chunk passes
    (2, 2, 4, 1, 3 / 8),      # the last stage warms up with fewer: 0 + 2 + 1
    (4, 2, 4, 0, 1.0),        # warm-up (6 + 4 + 1 = 11) takes all 8 chunk passes
    (4, 2, 64, 0, 11 / 128)])
def test_unpaired_share_counts_megatrons_warm_up(pp, vpp, m, stage, expected):
    """Megatron-Core's moe_a2a_overlap docs: without pipelining the first forward and the
    final backward stay exposed; with the interleaved pipeline every warm-up forward (its
    interleaved warm-up count plus the one the overlap schedule adds) and cool-down backward."""
    dp = 8 // pp
    cfg = TrainingConfig(degrees=Degrees(pp=pp, dp=dp, ep=dp), vpp=vpp, moe_a2a_overlap=True)
    assert unpaired_share(cfg, m, stage) == pytest.approx(expected)
    assert unpaired_share(replace(cfg, moe_a2a_overlap=False), m, stage) == 0.0


def test_a2a_overlap_with_one_micro_batch_hides_nothing_and_more_with_more():
    """With one micro-batch the combined 1F1B has no pair (Megatron-Core docs), so the
    all-to-all shows as without the overlap; per micro-batch it shows less the more there are,
    and never more than without the overlap."""
    model = _moe(layers=4, hidden=4096, experts=64, top_k=8, width=1536)
    cluster = homogeneous_cluster("H100-SXM5-80GB", 4)
    cfg = TrainingConfig(degrees=Degrees(dp=32, ep=32))
    per_mb = []
    for m in (1, 2, 8):
        w = Workload(4096, 32 * m)
        off = estimate(model, cluster, w, cfg, PROF)
        on = estimate(model, cluster, w, replace(cfg, moe_a2a_overlap=True), PROF)
        assert on.time.ep_comm_s <= off.time.ep_comm_s * (1 + 1e-12)
        if m == 1:
            assert on.time.ep_comm_s == pytest.approx(off.time.ep_comm_s)
        per_mb.append(on.time.ep_comm_s / m)
    assert per_mb[0] > per_mb[1] > per_mb[2]


@pytest.mark.parametrize("options", [dict(recompute="full"), dict(degrees=Degrees(pp=2, dp=4))])
def test_a2a_overlap_refused_where_megatron_refuses_it(options):
    """Megatron-LM's argument checks: no full recompute, interleaved schedule when pp > 1."""
    with pytest.raises(ConfigError, match="moe_a2a_overlap"):
        TrainingConfig(moe_a2a_overlap=True, **options)
    TrainingConfig(moe_a2a_overlap=True, degrees=Degrees(pp=2, dp=4), vpp=2)


def test_dense_model_has_no_moe_terms_and_ignores_moe_flags():
    """A dense model's estimate does not see the MoE options, and its elementwise traffic is
    the dense sum with no permutation or router bytes: norms and residual adds in bytes at
    ACT_BYTES per value (4h + 6h values per token, sequence-parallel over TP 2)."""
    model = load_model("llama-3.1-8b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    cfg = TrainingConfig(degrees=Degrees(tp=2, dp=4), sequence_parallel=True)
    w = Workload(4096, 32)
    base = estimate(model, cluster, w, cfg, PROF)
    flagged = estimate(model, cluster, w, replace(cfg, moe_a2a_overlap=True), PROF)
    assert flagged.step_time_s == base.step_time_s and base.time.ep_comm_s == 0.0
    sh = _shard(4096, tp=2)
    h, f = model.hidden_size, model.ffn_hidden_size
    rotary = 4 * (model.num_heads + model.num_kv_heads) * model.head_dim / 2
    dense = 4096 * (ACT_BYTES * (4 * h + 6 * h) / 2 + rotary + ACT_BYTES * 3 * f / 2)
    assert layer_work(model, 0, sh).elementwise_bytes == pytest.approx(dense, rel=1e-12)


def test_mtp_adds_a_layer_and_a_head_on_the_last_stage_only():
    """DeepSeek-V3 sec. 2.2: one MTP module = a transformer layer, a 2h -> h projection and
    the shared LM head with its loss (forward + 2x backward), on the last pipeline stage."""
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    cfg = TrainingConfig(degrees=Degrees(pp=2, dp=4, ep=4))
    w = Workload(2048, 32)
    plain_model, mtp_model = _moe(layers=4, hidden=2048), _moe(layers=4, hidden=2048, mtp=1)
    plain = estimate(plain_model, cluster, w, cfg, PROF)
    mtp = estimate(mtp_model, cluster, w, cfg, PROF)
    assert mtp.stages[0] == plain.stages[0]
    layer_s = plain.stages[0].compute_s / plain.stages[0].layers  # stage 0: layers only
    ctx = make_context(mtp_model, cluster, w, cfg, PROF, ())
    proj = Gemm(2048, 2048, 2 * 2048)
    extra = 3 * (gemm_time_s(proj, ctx.rates, PROF)
                 + lm_head_forward_time(mtp_model, ctx.shard, ctx.rates, PROF))
    gain = mtp.stages[1].compute_s - plain.stages[1].compute_s
    assert gain == pytest.approx(layer_s + extra, rel=1e-9)
    assert mtp.stages[1].ep_comm_s > plain.stages[1].ep_comm_s  # its MoE layer's all-to-all


def test_mtp_memory_on_the_last_stage_matches_its_parameter_count():
    """The last stage holds the MTP modules' parameters (``count_params(...).mtp``, counted
    independently in ``model_spec``), their activations and a second set of logits; the other
    stages are unchanged."""
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    cfg = TrainingConfig(degrees=Degrees(pp=2, dp=4, ep=4), zero=0)
    w = Workload(2048, 32)
    plain_model, mtp_model = _moe(layers=4, hidden=2048), _moe(layers=4, hidden=2048, mtp=1)
    plain = estimate(plain_model, cluster, w, cfg, PROF)
    mtp = estimate(mtp_model, cluster, w, cfg, PROF)
    assert mtp.stage_memory[0] == plain.stage_memory[0]
    moe = mtp_model.moe
    expert = moe.num_experts * 3 * 2048 * moe.expert_ffn_hidden  # GLU experts, no bias
    dense_mtp = count_params(mtp_model).mtp - expert
    want = 2 * (dense_mtp + expert / 4)  # bf16 weights; experts split over ep = 4
    got = mtp.stage_memory[1].weights_bytes - plain.stage_memory[1].weights_bytes
    assert got == pytest.approx(want, rel=1e-9)
    assert mtp.stage_memory[1].logits_bytes == pytest.approx(
        2 * plain.stage_memory[1].logits_bytes)
    assert mtp.stage_memory[1].activations_bytes > plain.stage_memory[1].activations_bytes


def test_gpt_oss_eager_expert_passes_are_priced_exactly():
    """GPT-OSS's clamped GLU (two eager clamps and a cat over the FC1 output, 8f per routed
    copy) and its FC2 expert bias (b * p, the add and the cat, 6h per routed copy, two kernels
    per local expert and one cat) are the only difference to the same model without them."""
    oss = load_model("gpt-oss-120b")
    plain = replace(oss, glu_clamp=None, moe=replace(oss.moe, expert_bias=False))
    sh = _shard(tokens=4096, ep=8)
    a, b = layer_work(oss, 0, sh), layer_work(plain, 0, sh)
    routed = oss.moe.top_k * sh.tokens
    extra = routed * (8 * oss.moe.expert_ffn_hidden + 6 * oss.hidden_size) * ACT_BYTES
    assert a.elementwise_bytes - b.elementwise_bytes == pytest.approx(extra)
    assert a.launches.fwd - b.launches.fwd == 3 + 2 * (oss.moe.num_experts // 8) + 1
    assert a.gemms == b.gemms


def test_flex_dispatcher_runs_the_expert_bias_loop_in_fp32():
    """DeepEP and HybridEP hand the experts fp32 router probabilities, so GPT-OSS's FC2 bias
    loop (t + b * p per local expert, then the cat) runs in fp32 and is cast back: 14h
    2-byte units per routed copy instead of 6h, and one cast kernel more; a model without
    expert biases is priced alike under both dispatchers."""
    oss = load_model("gpt-oss-120b")
    a2a, flex = _shard(tokens=4096, ep=8), replace(_shard(tokens=4096, ep=8), flex_dispatch=True)
    a, b = layer_work(oss, 0, flex), layer_work(oss, 0, a2a)
    routed = oss.moe.top_k * a2a.tokens
    assert a.elementwise_bytes - b.elementwise_bytes == pytest.approx(
        routed * 8 * oss.hidden_size * ACT_BYTES)
    plain = replace(oss, moe=replace(oss.moe, expert_bias=False))
    assert layer_work(plain, 0, flex).elementwise_bytes == pytest.approx(
        layer_work(plain, 0, a2a).elementwise_bytes)
    launches = (a.launches.fwd - layer_work(plain, 0, flex).launches.fwd,
                b.launches.fwd - layer_work(plain, 0, a2a).launches.fwd)
    assert launches[0] == launches[1] + 1


def test_yarn_runs_the_unfused_rope():
    """GPT-OSS's YaRN attention factor (1.347) is not taken by TransformerEngine's fused RoPE,
    so Megatron-Core runs the unfused one: 24 bytes per q/k element instead of 4, and 22 more
    forward and 8 more backward launches; nothing else changes, and the step gets slower."""
    from cost_models.compute import UNFUSED_ROPE_EXTRA, rope_bytes_per_elem
    oss = load_model("gpt-oss-120b")
    fused = replace(oss, rope_attention_factor=1.0)
    assert (rope_bytes_per_elem(oss), rope_bytes_per_elem(fused)) == (24, 4)
    for tp in (1, 2):
        sh = _shard(tokens=4096, tp=tp, ep=8)
        a, b = layer_work(oss, 0, sh), layer_work(fused, 0, sh)
        qk = (oss.num_heads + oss.num_kv_heads) * oss.head_dim / tp
        assert a.elementwise_bytes - b.elementwise_bytes == pytest.approx(20 * qk * sh.tokens)
        assert (a.launches.fwd - b.launches.fwd, a.launches.bwd - b.launches.bwd) == \
            UNFUSED_ROPE_EXTRA == (22, 8)
        assert a.gemms == b.gemms and a.attn_flops == b.attn_flops
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1, 8)
    work = Workload(seq_len=4096, global_batch=64)
    cfg = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8, ep=8), micro_batch=1)
    assert estimate(oss, cluster, work, cfg, PROF).step_time_s > \
        estimate(fused, cluster, work, cfg, PROF).step_time_s
