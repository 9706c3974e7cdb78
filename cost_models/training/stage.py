"""Time of one pipeline stage for one micro-batch: per-layer and per-stage costs.

Owns :class:`StageCost` and how it is built: each layer's forward + backward compute
(``cost_models.compute``), its recompute, and its TP/CP/EP collectives after overlap; the LM
head on the last stage; the send/recv to the pipeline neighbour. Each stage's collectives run
over that stage's own groups (``cost_models.groups.stage_views``), so a stage on slower nodes is
a slower stage.

Overlap assumptions (explicit, each a Megatron option in ``TrainingConfig``):
* TP collectives are exposed, unless ``tp_comm_overlap``: then each all-gather hides behind
  the GEMM it feeds and each reduce-scatter behind the GEMM that produces it, and only the
  excess shows (:func:`_tp_overlap_exposed_s`).
* Context-parallel KV exchange hides behind the attention core it feeds (ring attention); only
  the excess shows.
* Expert all-to-all (dispatch, combine) is exposed, unless ``moe_a2a_overlap`` (Megatron
  ``--overlap-moe-expert-parallel-comm``, "Combined 1F1B" / "EP A2A overlap" in the
  Megatron-Core MoE docs, ``user-guide/features/moe_a2a_overlap``): the forward of one
  micro-batch and the backward of another run as one interleaved unit, each layer cut into
  attention, dispatch, MLP, combine (DeepSeek-V3 report, sec. 3.2.1), and each all-to-all
  hides behind the other micro-batch's compute it is paired with; only the excess shows
  (:func:`a2a_exposed_s`). Megatron allows it only without full recompute and, when
  pipelined, with the interleaved schedule (``TrainingConfig`` checks both). The passes that
  have no partner, the first forward and last backward without pipelining and the warm-up
  forwards and cool-down backwards with it, expose their all-to-alls in full
  (:func:`unpaired_share`). The all-to-all dispatcher's all-gather of per-expert counts runs on
  the compute stream before its dispatch and stays exposed (:func:`_ep_counts_s`).
* Pipeline send/recv: a stage pays one transfer on each of its two links (``pp_link_s``).
  With the interleaved schedule (``vpp`` > 1) Megatron posts each chunk's sends and receives
  asynchronously and waits on them only when the next chunk needs its input
  (``--overlap-p2p-communication`` is on unless ``--no-overlap-p2p-communication``, and it
  applies to the interleaved schedule only: Megatron-LM ``arguments.py``; Megatron-Bridge
  ``training/comm_overlap.py:451-457`` sets ``overlap_p2p_comm`` with VP > 1 and
  ``batch_p2p_comm`` without), so in the steady state only what the stage's own work of the
  micro-batch does not cover shows (:func:`pp_exposed_s`). Warm-up and flush are not overlapped
  (``--overlap-p2p-communication-warmup-flush`` is off by default): the bubble keeps the
  whole transfer (``StageCost.pp_hidden_s``). Plain 1F1B pays the transfers in full.

MTP (DeepSeek-V3 report, sec. 2.2): each of ``model.mtp_layers`` modules on the last stage
costs one more transformer layer of the last layer's kind, a 2h -> h projection and one more
LM head and loss (Megatron-Core places MTP on the last pipeline stage).

SlimPipe (``seq_slices = k``): a slice's GEMMs, elementwise kernels, launch overheads and TP/EP
collectives are costed at the slice's token count (smaller GEMMs run less efficiently, k times
as many kernels and messages), its attention as its share of the whole causal attention.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from cost_models import communication as comm
from cost_models.compute import (ACT_BYTES, BWD_ATTN, BWD_GEMM, FP4_PER_LINEAR,
                                 FP8_PER_LINEAR, SHARED_EXPERT_LAUNCHES, UNFUSED_ATTN_EXTRA,
                                 Gemm, LayerTime, Shard,
                                 activation_elems_per_token, attention_gemms,
                                 attention_launches, backward_gpu_s, backward_time_s,
                                 gemm_time_s,
                                 layer_forward_time, layer_launches, layer_work,
                                 lm_head_forward_time, low_precision_bytes, mla_up_gemms,
                                 mlp_gemms, moe_gemms, moe_permute_elems_per_token,
                                 norm_bytes_per_token, rope_bytes_per_elem,
                                 router_bytes_per_token)
from cost_models.groups import GroupViews
from cost_models.model_spec import ModelSpec
from cost_models.training.config import TrainingConfig
from cost_models.training.context import StepContext
from cost_models.training.layers import kind_counts
from cost_models.training.memory import interleaved_warmup_chunks

__all__ = ["CE_TP_ALL_REDUCES", "COMM_SM_SHARE", "NCCL_A2A_SM_SHARE", "pp_link_s",
           "SELECTIVE_UNFUSED_ELEMENTWISE_SHARE", "StageCost", "a2a_exposed_s", "a2a_sm_share",
           "fully_recomputed", "layer_cost", "mtp_cost", "op_gemms",
           "overlapped_exposed_s", "op_recompute_s", "selective_recompute_s",
           "selective_recompute_work", "stage_cost", "unpaired_share", "vocab_parallel_comm"]

# Selective recompute with unfused attention re-runs the attention core (Korthikanti et al.
# 2022, sec. 5: QK^T, softmax, dropout, AV) and its scale/mask/softmax/dropout kernels, taken
# as 0.3 of the layer's elementwise time: a modelling assumption no published measurement
# gives, kept as it was fitted with the rest. Every other submodule is priced by its own
# kernels (:func:`selective_recompute_s`).
SELECTIVE_UNFUSED_ELEMENTWISE_SHARE = 0.3
# Kernels the forward of each selectively recomputed submodule launches again (the launch
# counts of cost_models.compute): the two norms 2; the routed experts' activation 1, with a
# clamped GLU's two clamps and cat 3 more; the dense MLP or the shared experts FC1, the
# activation and FC2 3; MLA's up-projections (one or two) and RoPE on q and k 2 more; the
# attention core 1 (unfused: its softmax kernels too). With fp8/NVFP4 each re-run Linear
# quantises its input again (FP8_PER_LINEAR, FP4_PER_LINEAR launches): Megatron's
# output-discarding recompute keeps the high-precision input of a discarded output and
# requantises it in the backward (NVIDIA's DeepSeek-V3 GB200 guide, sec. 2.2.2).
NORM_KERNELS, ACT_KERNELS, CLAMP_KERNELS, MLP_KERNELS, ROPE_KERNELS = 2, 1, 3, 3, 2


@dataclass(frozen=True, kw_only=True)
class StageCost:
    """One pipeline stage, one micro-batch through all its chunks (seconds)."""

    stage: int
    layers: int
    compute_s: float
    recompute_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    pp_comm_s: float
    weight_grad_s: float = 0.0  # the part of compute_s that is weight gradients (ZB-H1's W)
    pp_hidden_s: float = 0.0  # send/recv the interleaved schedule hides (warm-up still pays)

    @property
    def total_s(self) -> float:
        return (self.compute_s + self.recompute_s + self.tp_comm_s + self.cp_comm_s
                + self.ep_comm_s + self.pp_comm_s)


def _layer_comm_fwd(ctx: StepContext, views: GroupViews, layer: int) -> tuple[float, float, float]:
    """(tp, cp, ep) collective time of one layer's forward, before overlap; with SlimPipe the
    TP and EP collectives run once per slice at the slice's size."""
    if ctx.cfg.seq_slices == 1:
        return _layer_comm_fwd_shard(ctx, views, layer, ctx.shard)
    k = ctx.cfg.seq_slices
    tp, _, ep = _layer_comm_fwd_shard(ctx, views, layer, ctx.slice_shard)
    cp = _layer_comm_fwd_shard(ctx, views, layer, ctx.shard)[1]
    return k * tp, cp, k * ep


def _layer_comm_fwd_shard(ctx: StepContext, views: GroupViews, layer: int,
                          sh: Shard) -> tuple[float, float, float]:
    m, cfg, prof = ctx.model, ctx.cfg, ctx.prof
    elem = ctx.rates.elem_bytes
    act_bytes = sh.tokens * m.hidden_size * elem
    moe_layer = m.is_moe_layer(layer)
    tp_blocks = _tp_blocks(ctx, layer)
    tp = 0.0
    if views.tp.size > 1 and cfg.sequence_parallel and sh.fp8:
        # TransformerEngine quantises a sequence-parallel Linear's input before it gathers it
        # (module/linear.py: the input quantizer runs on the local shard, then
        # ``gather_along_first_dim(..., quantizer=...)``), and the gradient alike: the
        # all-gather half moves low-precision bytes, the reduce-scatter half bf16
        gathered = act_bytes * low_precision_bytes(sh) / elem
        one = comm.all_gather_s(views.tp, gathered, prof) + comm.reduce_scatter_s(
            views.tp, act_bytes, prof)
        tp = tp_blocks * (one + prof.collective_switch_s)
    elif views.tp.size > 1:  # AR == AG + RS in bytes; each blocking call breaks the compute
        tp = tp_blocks * (comm.all_reduce_s(views.tp, act_bytes, prof) + prof.collective_switch_s)
    cp = 0.0
    if cfg.degrees.cp > 1:
        kv_width = (m.num_heads * (m.mla.qk_head_dim + m.mla.v_head_dim) if m.mla
                    else 2 * m.num_kv_heads * m.head_dim) / cfg.degrees.tp
        cp = comm.all_gather_s(views.cp, sh.tokens * kv_width * elem * cfg.degrees.cp, prof)
    ep = 0.0
    if moe_layer and cfg.degrees.ep > 1:
        tokens = sh.tokens / cfg.degrees.tp
        if cfg.moe_dispatcher == "flex":  # once per destination GPU / node, not per expert
            one = comm.dedup_dispatch_s(views.ep, tokens * cfg.moe_imbalance, m.moe.top_k,
                                        m.moe.num_experts, m.hidden_size * elem, prof,
                                        m.moe.router_groups, m.moe.router_group_topk)
        else:
            send = tokens * m.moe.top_k * cfg.moe_imbalance * m.hidden_size * elem
            one = comm.all_to_all_s(views.ep, send, prof)
        ep = 2 * (one + prof.collective_switch_s)  # dispatch + combine
    return tp, cp, ep


# Megatron-Core's unfused vocab-parallel cross entropy all-reduces three fp32 values per token
# over the TP group in its forward (the largest logit, the target's logit, the sum of
# exponentials; ``megatron/core/tensor_parallel/cross_entropy.py``,
# ``_VocabParallelCrossEntropy.forward``) and none in its backward. Its fused version
# (``cross_entropy_loss_fusion``) joins the last two into one; the planner does not emit it.
CE_TP_ALL_REDUCES = 3


def vocab_parallel_comm(ctx: StepContext, views: GroupViews, stage: int) -> tuple[float, int]:
    """TP collectives of the vocabulary-parallel embedding (first stage) and output layer and
    loss (last stage) for one micro-batch, forward + backward: (seconds, blocking calls).

    Megatron-Core splits both by vocabulary over the TP group (Shoeybi et al. 2019, sec. 3;
    ``VocabParallelEmbedding``, the ``ColumnParallelLinear`` output layer): the embedding
    all-reduces its output in the forward (under sequence parallelism: reduce-scatter
    forward, all-gather backward), the output layer its input gradient in the backward
    (all-gather forward, reduce-scatter backward), and the loss three values a token
    (:data:`CE_TP_ALL_REDUCES`). Each MTP module on the last stage runs the shared embedding
    and output layer and a loss once more (DeepSeek-V3 report, sec. 2.2). Blocking calls are
    counted as the layers' are (:func:`_restarts`): an all-reduce, or under sequence
    parallelism its gather and scatter together, is one call.

    Each is priced exposed: Megatron-Core launches the output layer's input-gradient
    collective asynchronously beside its weight-gradient GEMM
    (``LinearWithGradAccumulationAndAsyncCommunication``; under sequence parallelism it also
    gathers the input again for that GEMM, not priced), which is not credited here (one
    activation collective a micro-batch, against two to four per layer). No arrival skew is
    charged on them (the layers' collectives pay it, :func:`_skew_s`)."""
    if views.tp.size <= 1:
        return 0.0, 0
    cfg, prof, sh = ctx.cfg, ctx.prof, ctx.slice_shard
    act_bytes = sh.tokens * ctx.model.hidden_size * ctx.rates.elem_bytes
    if cfg.sequence_parallel:
        act_s = (comm.all_gather_s(views.tp, act_bytes, prof)
                 + comm.reduce_scatter_s(views.tp, act_bytes, prof))
    else:
        act_s = comm.all_reduce_s(views.tp, act_bytes, prof)
    seconds, calls = 0.0, 0
    if stage == 0:
        seconds, calls = act_s, 1
    if stage == cfg.degrees.pp - 1:
        loss_s = CE_TP_ALL_REDUCES * comm.all_reduce_s(views.tp, 4.0 * sh.tokens, prof)
        mtp = ctx.model.mtp_layers  # each: the embedding, the output layer and a loss again
        seconds += act_s + loss_s + mtp * (2 * act_s + loss_s)
        calls += 1 + CE_TP_ALL_REDUCES + mtp * (2 + CE_TP_ALL_REDUCES)
    k = cfg.seq_slices
    return k * (seconds + calls * prof.collective_switch_s), k * calls


def _tp_blocks(ctx: StepContext, layer: int) -> int:
    """Blocking TP all-reduces of one layer's forward (and again its backward): attention and
    the MLP, or attention alone before a MoE block without shared experts."""
    m = ctx.model
    return 1 + (0 if m.is_moe_layer(layer) and not m.moe.num_shared_experts else 1)


def _skew_s(ctx: StepContext, blocking: bool, count: int, compute_s: float) -> float:
    """Arrival skew of ``count`` blocking collectives spread evenly over ``compute_s`` of one
    pass (``communication.arrival_skew_s``; 0 unless the profile measured it)."""
    if not blocking or count <= 0:
        return 0.0
    return count * comm.arrival_skew_s(compute_s / count, ctx.prof)


def _ep_counts_s(ctx: StepContext, views: GroupViews, layer: int) -> float:
    """The per-expert token counts every EP rank learns before an uneven dispatch: an
    all-gather of E int64 counts per rank, latency-bound (Megatron-Core's all-to-all token
    dispatcher exchanges them in ``preprocess`` before the permutation, DeepEP in its notify
    step inside the dispatch; the reference job's ``ExpertDispatch`` all-gathers them), plus
    the blocking call's switch cost."""
    m = ctx.model
    if not m.is_moe_layer(layer) or ctx.cfg.degrees.ep <= 1:
        return 0.0
    k = ctx.cfg.seq_slices
    return k * (comm.all_gather_s(views.ep, 8.0 * m.moe.num_experts * ctx.cfg.degrees.ep,
                                  ctx.prof) + ctx.prof.collective_switch_s)


def _forward_time(ctx: StepContext, layer: int) -> LayerTime:
    """Forward time of one layer for one micro-batch; with k SlimPipe slices the GEMMs,
    elementwise kernels and launches run per slice, the attention as a whole."""
    t = layer_forward_time(layer_work(ctx.model, layer, ctx.shard), ctx.rates, ctx.prof)
    k = ctx.cfg.seq_slices
    if k == 1:
        return t
    ts = layer_forward_time(layer_work(ctx.model, layer, ctx.slice_shard), ctx.rates, ctx.prof)
    return replace(ts.scaled(k), attention_s=t.attention_s, attention_exp_s=t.attention_exp_s)


def selective_recompute_s(ctx: StepContext, layer: int, t: LayerTime, ep_s: float) -> float:
    """Recompute time of one layer under ``recompute="selective"``: the forward of each
    submodule ``TrainingConfig.selective_modules`` names, re-run in the backward (Megatron-Core
    ``recompute_modules``), by its own kernels: its GEMMs at their efficiency, its
    memory-bound passes at the HBM rate, a kernel overhead per launch
    (:func:`selective_recompute_work`). Its launches are the CPU's too: the backward then
    takes the GPU's work plus the re-run, or the CPU's launches plus the re-run's, whichever
    is longer, and the recompute is what that adds to the backward alone (a launch-bound
    backward pays the re-run's launches, not its GPU time)."""
    gpu, kernels = selective_recompute_work(ctx, layer, t, ep_s)
    host = 0.0 if ctx.cfg.cuda_graphs == "full" else kernels * ctx.prof.host_launch_s
    gpu_bwd = backward_gpu_s(t)
    return max(gpu_bwd + gpu, t.host_bwd_s + host) - max(gpu_bwd, t.host_bwd_s)


def selective_recompute_work(ctx: StepContext, layer: int, t: LayerTime,
                             ep_s: float) -> tuple[float, int]:
    """(GPU seconds, kernel launches) of one layer's selective re-run. ``core_attn``: the
    attention core (with unfused attention also its softmax kernels, the share above);
    ``layernorm``: the two norms; ``moe_act``: the routed experts' activation (with a clamped
    GLU's clamps); ``mlp``: a dense layer's MLP; ``shared_experts``: the shared experts' MLP;
    ``mla_up_proj``: MLA's up-projections and RoPE; ``moe``: the whole MoE layer, its token
    exchange (``ep_s``, forward dispatch and combine) included."""
    mods = ctx.cfg.selective_modules()
    m, sh, rates, prof, k = ctx.model, ctx.slice_shard, ctx.rates, ctx.prof, ctx.cfg.seq_slices
    moe_layer = m.is_moe_layer(layer)
    bytes_per_s = rates.hbm_bytes_per_s * prof.hbm_efficiency

    def gemms(gs) -> float:
        return sum(gemm_time_s(g, rates, prof) for g in gs)

    def passes(elems_per_token: float) -> float:  # memory-bound, 2-byte (elem_bytes) values
        return sh.tokens * elems_per_token * sh.elem_bytes / bytes_per_s

    s, kernels = 0.0, 0
    if "layernorm" in mods:
        s += passes(norm_bytes_per_token(m, sh) / ACT_BYTES)
        kernels += NORM_KERNELS
    if "moe_act" in mods and moe_layer and "moe" not in mods:
        s += passes(activation_elems_per_token(m, layer, sh))
        kernels += ACT_KERNELS + (CLAMP_KERNELS if m.glu_clamp is not None and m.glu else 0)
    quant = FP4_PER_LINEAR if sh.nvfp4 else FP8_PER_LINEAR if sh.fp8 else 0
    if "mlp" in mods and not moe_layer:
        s += gemms(mlp_gemms(m.hidden_size, m.ffn_hidden_size, m.glu, sh.tokens, sh.tp))
        s += passes(activation_elems_per_token(m, layer, sh))
        kernels += MLP_KERNELS + 2 * quant
    if moe_layer and m.moe.num_shared_experts and ("shared_experts" in mods or "moe" in mods):
        w = m.moe.shared_width
        s += gemms(mlp_gemms(m.hidden_size, w, m.glu, sh.tokens, sh.tp))
        s += passes((3 if m.glu else 2) * w / sh.tp)
        kernels += MLP_KERNELS + 2 * quant
    if "moe" in mods and moe_layer:
        routed = moe_gemms(m, sh)[:3]  # the router and the routed experts (shared: above)
        s += gemms(routed) + passes(activation_elems_per_token(m, layer, sh)
                                    + moe_permute_elems_per_token(
                                        m.moe.top_k * sh.moe_imbalance * sh.etp / sh.tp,
                                        m.hidden_size))
        s += sh.tokens * router_bytes_per_token(m.moe.num_experts) / sh.tp / bytes_per_s
        # the layer's launches but attention's and the shared experts' (counted above)
        kernels += (layer_launches(m, layer, sh).fwd - attention_launches(m, sh)[0]
                    - (SHARED_EXPERT_LAUNCHES[0] + 2 * quant if m.moe.num_shared_experts
                       else 0))
    if "mla_up_proj" in mods and m.mla is not None:
        up = mla_up_gemms(m, sh)
        rope = (m.num_heads / sh.tp + 1) * m.mla.qk_rope_head_dim  # q's heads and k's one
        s += gemms(up) + passes(rope_bytes_per_elem(m) * rope / ACT_BYTES)
        kernels += len(up) * (1 + quant) + ROPE_KERNELS
    if "core_attn" in mods:
        kernels += 1 + (UNFUSED_ATTN_EXTRA[0] if sh.unfused_attention else 0)
    total = k * (s + kernels * prof.kernel_overhead_s)
    if "core_attn" in mods:
        total += t.attention_fwd_s
        if sh.unfused_attention:
            total += SELECTIVE_UNFUSED_ELEMENTWISE_SHARE * t.elementwise_s
    if "moe" in mods and moe_layer:
        total += ep_s
    return total, k * kernels


def op_gemms(model: ModelSpec, layer: int, sh: Shard) -> tuple[Gemm, ...]:
    """A dense layer's matmuls in the order torchtitan's Llama block runs them: Q, K, V, the
    output projection, then the MLP's w1, w3 (GLU) and w2, or up and down."""
    if model.mla is not None or model.is_moe_layer(layer):
        raise ValueError("recompute 'op' (torchtitan's per-op checkpointing) is priced for "
                         "dense layers with standard attention only")
    h, a, d, kv, t, m = (model.hidden_size, model.num_heads, model.head_dim,
                         model.num_kv_heads, sh.tp, sh.tokens)
    attention = (Gemm(m, a * d / t, h), Gemm(m, kv * d / t, h), Gemm(m, kv * d / t, h),
                 Gemm(m, h, a * d / t))
    f = model.ffn_hidden_size / t
    mlp = ((Gemm(m, f, h), Gemm(m, f, h), Gemm(m, h, f)) if model.glu
           else (Gemm(m, f, h), Gemm(m, h, f)))
    return attention + mlp


def op_recompute_s(ctx: StepContext, layer: int, t: LayerTime, tp: float) -> float:
    """Recompute time of one layer under ``recompute="op"``: torchtitan's per-op selective
    activation checkpointing (``selective_ac_option = "op"``, the default of its Llama 3 8B
    config; torchtitan ``parallelize_llama.py`` ``_apply_ac_to_transformer_block`` at 9dec370
    and 820504e). The backward re-runs the block's forward but for the ops in its save list
    (``aten.mm``, SDPA, ``reduce_scatter_tensor``, ``max``), and of those it re-runs every
    second matmul too ("Saves output of all compute ops, except every second mm"): every
    elementwise op, the 2nd, 4th and 6th matmul (K, the output projection, and w3 or w2), and
    with sequence parallelism the two all-gathers that feed them (their outputs are not saved;
    hidden behind the re-run GEMMs with ``tp_comm_overlap``). Attention is not re-run."""
    k = ctx.cfg.seq_slices
    gemms = op_gemms(ctx.model, layer, ctx.slice_shard)
    rerun = k * sum(gemm_time_s(g, ctx.rates, ctx.prof) for g in gemms[1::2])
    gathers = tp / 2 if ctx.cfg.sequence_parallel else tp
    if ctx.cfg.tp_comm_overlap:
        gathers = max(0.0, gathers - rerun)
    return t.elementwise_s + rerun + gathers


# Share of the GPU's SMs a collective overlapped with compute takes from it: DeepSeek-V3
# report, sec. 3.2.2 ("only 20 SMs are sufficient to fully utilize the bandwidths of IB and
# NVLink", of the H800's 132), which is what the flex dispatcher's DeepEP takes (Megatron-Core
# ``moe_deepep_num_sms``, "historical default 20"). Taken alike for NCCL's data-parallel
# reductions and gathers (a CTA per channel, a comparable count). A physical figure, not fitted.
COMM_SM_SHARE = 20 / 132
# The all-to-all dispatcher's exchange (``torch.distributed.all_to_all_single``: NCCL grouped
# sends and receives) runs one CTA per NCCL point-to-point channel in use, and an all-to-all
# over many peers uses them all: NCCL rounds its p2p channels up to a power of two above its
# collective channels (``ncclTopoComputeP2pChannels``, ``src/graph/paths.cc``), and its init
# log on 8-GPU Hopper nodes reads "32 p2p channels" (one node: 24 coll channels; two nodes:
# 32, with 2 channels per network peer, so 16 or more peers fill the 32). 32 of 132 SMs.
NCCL_A2A_SM_SHARE = 32 / 132


def overlapped_exposed_s(comm_s: float, compute_s: float,
                         sm_share: float = COMM_SM_SHARE) -> float:
    """Time a collective of ``comm_s`` adds to the ``compute_s`` it overlaps: the pair takes
    the longer of the collective and the compute, the compute slowed while they overlap by
    the SMs the collective holds (``sm_share`` = f, ``COMM_SM_SHARE`` unless given):
    max(comm, c + min(comm, c) * f / (1 - f)) - c. Between f / (1 - f) of the collective
    (short, hidden) and comm - c (longer than the compute); with no compute to hide behind,
    the whole collective."""
    slowed = compute_s + min(comm_s, compute_s) * sm_share / (1 - sm_share)
    return max(comm_s, slowed) - compute_s


def a2a_sm_share(cfg: TrainingConfig) -> float:
    """Share of the SMs the expert all-to-all holds while compute runs beside it: NCCL's
    point-to-point channels for the all-to-all dispatcher (``NCCL_A2A_SM_SHARE``), the SMs
    the flex dispatcher's kernels are given otherwise (``COMM_SM_SHARE``)."""
    return NCCL_A2A_SM_SHARE if cfg.moe_dispatcher == "alltoall" else COMM_SM_SHARE


def a2a_exposed_s(a2a_s: float, attn_fwd_s: float, mlp_fwd_s: float, attn_bwd_s: float,
                  mlp_bwd_s: float, sm_share: float = COMM_SM_SHARE) -> float:
    """Exposed time of one layer's four all-to-alls (forward dispatch and combine, backward
    dispatch and combine, ``a2a_s`` each) under Megatron's combined 1F1B.

    The forward of micro-batch i+1 and the backward of micro-batch i are interleaved as
    (Megatron-Core ``moe_a2a_overlap`` docs; DeepSeek-V3 report, sec. 3.2.1, fig. 4):
    forward attention | backward combine, forward dispatch | backward MLP, forward MLP |
    backward dispatch, forward combine | backward attention. Each pair takes the longer of the
    all-to-all and its partner compute c, the compute slowed while they overlap by the SMs the
    communication holds: c + min(a2a, c) * f / (1 - f), f = ``sm_share`` (the dispatcher's,
    :func:`a2a_sm_share`). The result is that minus the compute: between 0 and the four
    all-to-alls fully exposed.
    """
    return sum(overlapped_exposed_s(a2a_s, c, sm_share)
               for c in (attn_fwd_s, mlp_bwd_s, mlp_fwd_s, attn_bwd_s))


def _attention_block_s(ctx: StepContext, t: LayerTime) -> tuple[float, float]:
    """(forward, backward) time of a layer's attention block: its projections and core (the
    rest of the layer is the MLP/MoE block and the memory-bound kernels around it)."""
    k = ctx.cfg.seq_slices
    proj = k * sum(gemm_time_s(g, ctx.rates, ctx.prof)
                   for g in attention_gemms(ctx.model, ctx.slice_shard))
    return proj + t.attention_fwd_s, BWD_GEMM * proj + BWD_ATTN * t.attention_s


def unpaired_share(cfg: TrainingConfig, micro_batches: int, stage: int) -> float:
    """Share of ``stage``'s forward passes (and, alike, backward passes) that Megatron's
    combined 1F1B (``moe_a2a_overlap``) runs without a partner, so their all-to-alls show in
    full (Megatron-Core docs, ``user-guide/features/moe_a2a_overlap``, "Schedule overview"):
    without pipelining the first forward and the final backward, 1 of the ``m``
    micro-batches; with the interleaved pipeline the warm-up forwards and the cool-down
    backwards, Megatron's interleaved warm-up (:func:`memory.interleaved_warmup_chunks`) plus
    the one more forward the overlap schedule moves into it (``schedules.py`` adds 1 to
    ``num_warmup_microbatches`` under ``overlap_moe_expert_parallel_comm``), of the stage's
    m * v chunk passes. 0 without the overlap."""
    if not cfg.moe_a2a_overlap:
        return 0.0
    pp, v = cfg.degrees.pp, cfg.vpp
    if pp == 1:
        return min(1.0, 1 / max(micro_batches, 1))
    warmup = interleaved_warmup_chunks(stage, pp, v) + 1
    return min(1.0, warmup / max(micro_batches * v, 1))


def layer_cost(ctx: StepContext, views: GroupViews, layer: int,
               recomputed: bool, unpaired: float = 0.0) -> tuple[float, ...]:
    """(compute, recompute, tp, cp, ep, weight-grad) seconds of one layer, forward + backward;
    ``unpaired``: the share of its passes the all-to-all overlap leaves without a partner
    (:func:`unpaired_share`), whose all-to-alls show as without the overlap."""
    t = _forward_time(ctx, layer)
    fwd, bwd = t.total_s, backward_time_s(t)
    tp, cp, ep = _layer_comm_fwd(ctx, views, layer)
    if ctx.cfg.tp_comm_overlap:
        tp_fwd = tp_bwd = _tp_overlap_exposed_s(ctx, layer, tp)
    else:
        tp_fwd, tp_bwd = (tp + _skew_s(ctx, tp > 0, _tp_blocks(ctx, layer), fwd),
                          tp + _skew_s(ctx, tp > 0, _tp_blocks(ctx, layer), bwd))
    cp_fwd = max(0.0, cp - t.attention_fwd_s)
    cp_bwd = max(0.0, 2 * cp - BWD_ATTN * t.attention_s)
    # forward dispatch + combine, the same again in the backward, and the forward's exchange
    # of per-expert token counts that sizes the dispatch
    counts = _ep_counts_s(ctx, views, layer)
    ep_total = (2 * ep + counts + _skew_s(ctx, ep > 0, 2, fwd) + _skew_s(ctx, ep > 0, 2, bwd))
    if ctx.cfg.moe_a2a_overlap and ep > 0:  # never with full recompute (TrainingConfig)
        attn_f, attn_b = _attention_block_s(ctx, t)
        paired = a2a_exposed_s(ep / 2, attn_f, fwd - attn_f, attn_b, bwd - attn_b,
                               a2a_sm_share(ctx.cfg))
        if ctx.cfg.moe_dispatcher == "alltoall":
            # its count exchange runs in the pre-dispatch node on the compute stream (Megatron
            # ``fine_grained_callables.py``: attention, router, dispatch preprocess), a
            # blocking all-gather nothing runs beside: the overlap does not hide it
            paired += counts
        ep_total = unpaired * ep_total + (1 - unpaired) * paired
    recompute = 0.0
    if recomputed:
        recompute = fwd + tp_fwd + cp_fwd + ep
    elif ctx.cfg.recompute == "selective":
        recompute = selective_recompute_s(ctx, layer, t, ep)
    elif ctx.cfg.recompute == "op":
        recompute = op_recompute_s(ctx, layer, t, tp)
    weight_grad = (BWD_GEMM - 1) * t.gemm_s  # dW = x^T dy: one forward GEMM's worth
    resumed = _restarts(ctx, layer, tp > 0, ep > 0) * ctx.prof.resume_s
    return (fwd + bwd + resumed, recompute, tp_fwd + tp_bwd, cp_fwd + cp_bwd, ep_total,
            weight_grad)


def _tp_overlap_exposed_s(ctx: StepContext, layer: int, tp: float) -> float:
    """Exposed TP communication of one layer's forward (and, alike, its backward) under TP
    communication overlap. Each block's all-reduce runs as an all-gather fused with the GEMM
    that consumes it (QKV, the MLP's up projection) and a reduce-scatter fused with the GEMM
    that produces it (the output projection, the down projection): TransformerEngine's
    userbuffers comm-GEMM overlap (``ub_overlap_ag`` / ``ub_overlap_rs``) and PyTorch's async
    TP (``fused_all_gather_matmul`` / ``fused_matmul_reduce_scatter``) pipeline a collective
    only with its own GEMM, so each half hides behind that GEMM alone and the excess shows.
    In the backward the same pairs run mirrored (dgrad with the gradient's collective)."""
    blocks = _tp_blocks(ctx, layer)
    if tp <= 0 or blocks <= 0:
        return 0.0
    half = tp / blocks / 2
    k = ctx.cfg.seq_slices
    sh, m = ctx.slice_shard, ctx.model

    def g(x: Gemm) -> float:
        return k * gemm_time_s(x, ctx.rates, ctx.prof)
    att = attention_gemms(m, sh)
    pairs = [(sum(g(x) for x in att[:-1]), g(att[-1]))]
    if blocks > 1:
        width = m.moe.shared_width if m.is_moe_layer(layer) else m.ffn_hidden_size
        up, down = mlp_gemms(m.hidden_size, width, m.glu, sh.tokens, sh.tp)
        pairs.append((g(up), g(down)))
    return sum(max(0.0, half - first) + max(0.0, half - last) for first, last in pairs)


def _restarts(ctx: StepContext, layer: int, tp: bool, ep: bool) -> int:
    """Blocking collectives of one layer's forward + backward after which its compute resumes
    (each costs ``Profile.resume_s`` of compute: calibrate's ping-pong pairs time a block's
    forward after a blocking receive against the same forward back to back,
    ``planner/run/calibrate_job.py`` ``resume_cases``; 0 unless a machine was calibrated).
    TP: every all-reduce of ``f`` and ``g`` unless asynchronous (``tp_comm_overlap``); EP:
    the count exchange, and dispatch and combine both ways unless overlapped
    (``moe_a2a_overlap``). With SlimPipe each runs once per slice. On the 2-vCPU Xeon
    (2026-11-28, ranks pinned) TP2's compute at micro-batch 1, with its 128 blocking
    all-reduces a step (before the job split its output layer by vocabulary) replaced by
    nothing, by 4-byte ones, and by the real 128 KiB ones: 117-130, 132-146 and 135-143 ms a
    step (three alternating runs each), 0.08-0.16 ms more per all-reduce whatever its size,
    where calibrate measured resume_s at 0.12-0.15 ms."""
    count = 0
    if tp and not ctx.cfg.tp_comm_overlap:
        count += 2 * _tp_blocks(ctx, layer)
    if ep:
        count += 1 + (0 if ctx.cfg.moe_a2a_overlap else 4)
    return count * ctx.cfg.seq_slices


def mtp_cost(ctx: StepContext, views: GroupViews, unpaired: float = 0.0) -> tuple[float, ...]:
    """(compute, recompute, tp, cp, ep, weight-grad) seconds of the model's MTP modules for one
    micro-batch (DeepSeek-V3 report, sec. 2.2, eq. 21-23): per module a transformer layer of
    the last layer's kind, the projection M_k of [h; emb] (2h -> h, column-parallel over TP)
    and one more shared LM head with its loss; forward + 2x backward as elsewhere."""
    m = ctx.model
    if not m.mtp_layers:
        return (0.0,) * 6
    layer = layer_cost(ctx, views, m.num_layers - 1, recomputed=False, unpaired=unpaired)
    k = ctx.cfg.seq_slices
    proj = Gemm(ctx.slice_shard.tokens, m.hidden_size / ctx.cfg.degrees.tp, 2 * m.hidden_size)
    extra = 3 * k * (gemm_time_s(proj, ctx.rates, ctx.prof)
                     + lm_head_forward_time(m, ctx.slice_shard, ctx.rates, ctx.prof))
    per_module = (layer[0] + extra,) + layer[1:]
    return tuple(m.mtp_layers * x for x in per_module)


def fully_recomputed(cfg: TrainingConfig, layers: Sequence[int]) -> int:
    """How many of a stage's layers full recompute covers (``recompute_layers`` per chunk)."""
    if cfg.recompute != "full":
        return 0
    if cfg.recompute_layers is None:
        return len(layers)
    return min(len(layers), cfg.recompute_layers * cfg.vpp)


def pp_link_s(ctx: StepContext, stage: int) -> float:
    """Pipeline send/recv of one micro-batch on ``stage`` (``vpp`` chunks, ``k`` slices). In
    Megatron's 1F1B steady state a stage exchanges with its successor (activation out,
    gradient in: one batched duplex transfer) and with its predecessor (gradient out,
    activation in), so it pays one transfer on each of its two links (Narayanan et al. 2021
    §2.2; ``send_forward_recv_backward`` / ``send_backward_recv_forward``); an end stage has
    one link and pays it twice, as a uniform pipeline's stages all do (conservative: the end
    stage's second exchange has no peer). Each TP rank sends 1/t of the boundary activation
    (sequence parallelism, or Megatron's scatter/gather optimisation without it, SC'21 sec.
    4.1); SlimPipe sends k slices."""
    cfg = ctx.cfg
    if cfg.degrees.pp == 1:
        return 0.0
    act_bytes = (ctx.slice_shard.tokens * ctx.model.hidden_size * ctx.rates.elem_bytes
                 / cfg.degrees.tp)
    out_link = ctx.views[stage].pp  # the last stage's view is its link to the stage before
    in_link = ctx.views[stage - 1].pp if stage > 0 else out_link
    return cfg.vpp * cfg.seq_slices * (comm.send_recv_s(in_link, act_bytes, ctx.prof)
                                       + comm.send_recv_s(out_link, act_bytes, ctx.prof))


def pp_exposed_s(cfg: TrainingConfig, link_s: float, work_s: float) -> float:
    """Pipeline send/recv that shows in a micro-batch's steady state (module docstring): all
    of ``link_s`` in plain 1F1B; with interleaving only what exceeds the stage's own work of
    the micro-batch (``work_s``: compute, recompute and its TP/CP/EP collectives), which the
    asynchronous transfers run beside."""
    if cfg.vpp == 1:
        return link_s
    return max(0.0, link_s - work_s)


def stage_cost(ctx: StepContext, stage: int, layers: Sequence[int],
               cache: dict[tuple, tuple[float, ...]]) -> StageCost:
    """Cost of ``stage`` holding ``layers`` at ``ctx.rates`` (pass ``ctx.on_stage(stage)`` for
    the stage's own GPU); ``cache`` keeps layer costs across stages whose group views are the
    same objects and whose rates are equal (layers of one kind cost the same)."""
    cfg, m = ctx.cfg, ctx.model
    n_recompute = fully_recomputed(cfg, layers)
    views = ctx.views[stage]
    unpaired = unpaired_share(cfg, cfg.micro_batches(ctx.workload), stage)
    parts = [0.0] * 6
    for recomputed, (lo, hi) in ((True, (0, n_recompute)), (False, (n_recompute, len(layers)))):
        for kind, count, layer in kind_counts(m, layers, lo, hi):
            key = (kind, recomputed, id(views.tp), id(views.cp), id(views.ep), ctx.rates,
                   unpaired)
            if key not in cache:
                cache[key] = layer_cost(ctx, views, layer, recomputed, unpaired)
            parts = [a + count * b for a, b in zip(parts, cache[key])]
    k = cfg.seq_slices
    if stage == cfg.degrees.pp - 1:  # LM head and loss: forward + 2x backward; MTP modules
        parts[0] += 3 * k * lm_head_forward_time(m, ctx.slice_shard, ctx.rates, ctx.prof)
        parts = [a + b for a, b in zip(parts, mtp_cost(ctx, views, unpaired))]
    vocab_s, vocab_calls = vocab_parallel_comm(ctx, views, stage)
    parts[2] += vocab_s
    parts[0] += vocab_calls * ctx.prof.resume_s  # compute resumes after each blocking call
    link = pp_link_s(ctx, stage)
    pp = pp_exposed_s(cfg, link, sum(parts[:5]))
    return StageCost(stage=stage, layers=len(layers), compute_s=parts[0], recompute_s=parts[1],
                     tp_comm_s=parts[2], cp_comm_s=parts[3], ep_comm_s=parts[4], pp_comm_s=pp,
                     weight_grad_s=parts[5], pp_hidden_s=link - pp)
