"""FLOPs and memory traffic of one transformer layer, and their time on a GPU.

Sources, per formula:
* GEMM FLOPs = 2*M*N*K per matrix multiply; a layer's forward is 24*b*s*h^2 + 4*b*s^2*h for
  GPT-3 (Narayanan et al., SC'21, sec. 5.1 / appendix eq. 3); we count each projection by its
  real shape so GQA, GLU, MLA and MoE fall out of the same sums.
* Backward = 2x forward for GEMMs (one GEMM for input grads, one for weight grads; SC'21
  appendix). Flash-attention backward = 2.5x forward (5 matmuls vs 2; Dao 2023, FlashAttention-2
  sec. 3.1 and its benchmark FLOP counts). A memory-bound kernel's backward reads the output
  gradient and the saved input and writes the input gradient: about 2x its forward traffic
  (roofline, as for the forward). :func:`backward_time_s` applies these ratios.
* Causal attention with a fused kernel computes only the lower triangle: half of s^2
  (FlashAttention-2 benchmark convention); an unfused kernel (Megatron 2021 softmax) computes
  the full s^2 and moves 2-byte scores through HBM (Korthikanti et al. 2022, sec. 4.1: the
  5*a*s^2*b activation terms are those tensors).
* Elementwise kernels (norms, residual adds, activations, dropout, rotary) are memory bound:
  time = bytes / (HBM bandwidth * efficiency), the roofline model (Williams et al. 2009).
* GEMM efficiency falls for thin shards: eff = gemm_efficiency * n / (n + gemm_half_dim) with n
  the smallest GEMM dimension (tile and wave quantisation; a calibration parameter). On a
  cluster of several GPU types each type's GEMMs run at its own efficiency:
  ``GpuRates.gemm_scale`` is its efficiency relative to the profile's GPU
  (:func:`cost_models.profile.gemm_efficiency_ratio`).

* Launches: a layer's kernels are counted from Megatron-Core's and TransformerEngine's source
  (:func:`layer_launches`); the GPU pays ``kernel_overhead_s`` per kernel, the CPU
  ``host_launch_s`` per kernel it issues itself (none inside a CUDA graph), and a layer takes
  the longer of its GPU work and its launches (:attr:`LayerTime.total_s`; the roofline's
  reasoning applied to the launch rate).

MoE terms (each a small function below; no MoE-only parameter):
* Routed-expert GEMMs run as one grouped GEMM whose M is the tokens each local expert gets,
  :func:`tokens_per_expert` = tokens/tp * top_k * imbalance * etp / (E/ep) (Megatron-Core MoE
  docs, "parallel folding"; the busiest rank under ``moe_imbalance``). Fine-grained experts
  (DeepSeek-V3 2048 wide, Qwen3 1536) at small M run below peak through the same
  n/(n + gemm_half_dim) curve as every other GEMM.
* Token permutation and un-permutation are memory-bound copies (Megatron-Core
  ``moe_utils.permute`` / ``unpermute``: an index_select of each routed copy and a weighted
  scatter-add back): :func:`moe_permute_elems_per_token`, HBM traffic / HBM bandwidth.
* Router: the h x E GEMM (in :func:`moe_gemms`) and the fp32 softmax/sigmoid, top-k and
  aux-loss kernels over the E logits (:func:`router_bytes_per_token`).
* Shared experts: a dense (GLU-)MLP on every token, TP-sharded like a dense MLP (DeepSeek-V3
  report, sec. 2.1.2, eq. 12).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import lru_cache

from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile

ACT_BYTES = 2  # bf16/fp16 activations (Shard.elem_bytes scales everything for fp32)
# FlashAttention-2-generation kernels (flash-attn 2.x, PyTorch SDPA's FLASH backend) on Hopper
# and later GPUs, as a fraction of the speed of the kernels written for them (FlashAttention-3,
# cuDNN fused attention, which Transformer Engine runs): FA2 uses neither TMA nor warpgroup MMA
# (Shah et al. 2024, FlashAttention-3, abstract: FA3 is 1.5-2.0x FA2). Measured, not fitted:
# SDPA's FLASH backend against its CUDNN backend, causal forward + backward, bf16, head dim 128,
# 51 shapes each (1k-32k tokens, 64-8,192 query tiles) on a lent H200 and H100: the ratio of
# the two kernels' levels in one fit of fused_attention_efficiency's curve with shared knees
# (benchmarks/device/kernel_report.py; benchmarks/results/device-h*-kernels/). PyTorch's own
# report has 0.52 for the forward at 4,608 tokens on an H100 (pytorch/pytorch#142132). On
# Ampere and older FA2 is the native kernel (factor 1).
FA2_ON_SM90_PLUS = 0.568
ATTN_TILE_QUERIES = 128  # queries per tile of FlashAttention-2/3 and cuDNN at head dim 128
BWD_GEMM, BWD_ATTN, BWD_ELEM = 2.0, 2.5, 2.0  # backward / forward work (module docstring)


@dataclass(frozen=True)
class Gemm:
    """One matrix multiply M x K @ K x N, repeated ``count`` times (experts, heads)."""

    m: float
    n: float
    k: float
    count: float = 1.0

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count


@dataclass(frozen=True)
class LayerWork:
    """Forward work of one layer on one GPU for one micro-batch.

    ``gemms``: weight GEMMs (sharded). ``attn_flops``: attention-core FLOPs actually computed.
    ``attn_unfused``: the core runs as batched GEMMs with s^2 scores in HBM.
    ``elementwise_bytes``: HBM traffic of memory-bound kernels. ``launches``: its kernel
    launches forward and backward, and those the CPU issues itself (:func:`layer_launches`).
    ``attn_keys``: keys each query attends to in one fused-kernel call, on average, and
    ``attn_tiles``: that call's 128-query tiles (the fused kernel's efficiency curve,
    :func:`fused_attention_efficiency`; 0: not known, no curve).
    """

    gemms: tuple[Gemm, ...]
    attn_flops: float
    attn_head_dim: int
    attn_unfused: bool
    elementwise_bytes: float
    launches: "Launches"
    attn_keys: float = 0.0
    attn_tiles: float = 0.0
    attn_fp8: bool = False  # the fused attention core runs at the fp8 rate
    attn_scores: float = 0.0  # query-key scores of the core: one exponential each, forward

    @property
    def gemm_flops(self) -> float:
        return sum(g.flops for g in self.gemms)


@dataclass(frozen=True)
class Shard:
    """How one layer is cut on a GPU: tokens it holds and the TP/EP factors."""

    batch: int  # sequences per micro-batch
    seq_len: int  # full sequence length
    tp: int
    cp: int
    ep: int
    etp: int
    sequence_parallel: bool
    unfused_attention: bool
    dropout: bool
    moe_imbalance: float = 1.0
    elem_bytes: int = 2  # bytes per activation element (4 in fp32)
    cuda_graphs: str = "none"  # what CUDA graphs capture (TrainingConfig.cuda_graphs)
    fp8: bool = False  # fp8 GEMMs (their inputs quantised by extra kernels)
    flex_dispatch: bool = False  # the flex (DeepEP) MoE token dispatcher, not the all-to-all
    fp8_attention: bool = False  # the attention core in fp8 (TrainingConfig.fp8_attention)
    fused_grouped_mlp: bool = False  # TransformerEngine's fused grouped MLP (same, config)
    nvfp4: bool = False  # NVFP4 GEMMs (fp8 is set too): their operands quantised to 4 bits

    @property
    def tokens(self) -> float:
        """Tokens whose projections this GPU computes (all TP ranks see the same tokens)."""
        return self.batch * self.seq_len / self.cp


def _attention_keys(model: ModelSpec, layer: int, seq_len: int, causal_skip: bool) -> float:
    """Average keys each query attends to (causal; windowed layers see at most the window)."""
    window = model.window(layer)
    if window and window < seq_len:
        return window - window * window / (2.0 * seq_len) if causal_skip else window
    return seq_len / 2.0 if causal_skip else float(seq_len)


def mla_up_gemms(model: ModelSpec, sh: Shard) -> tuple[Gemm, ...]:
    """MLA's up-projections from the compressed latents to the heads: Q's (when queries are
    compressed, ``q_lora_rank``) and K/V's (DeepSeek-V2 report, sec. 2.1.2, eq. 10-14)."""
    ml, a, t, m = model.mla, model.num_heads, sh.tp, sh.tokens
    q = (Gemm(m, a * ml.qk_head_dim / t, ml.q_lora_rank),) if ml.q_lora_rank else ()
    return q + (Gemm(m, a * (ml.qk_nope_head_dim + ml.v_head_dim) / t, ml.kv_lora_rank),)


def attention_gemms(model: ModelSpec, sh: Shard) -> tuple[Gemm, ...]:
    """Projection GEMMs of the attention block (standard/GQA, or MLA)."""
    h, a, t, m = model.hidden_size, model.num_heads, sh.tp, sh.tokens
    if model.mla is not None:
        ml = model.mla
        up = mla_up_gemms(model, sh)
        q = ((Gemm(m, ml.q_lora_rank, h), up[0]) if ml.q_lora_rank
             else (Gemm(m, a * ml.qk_head_dim / t, h),))
        kv = (Gemm(m, ml.kv_lora_rank + ml.qk_rope_head_dim, h), up[-1])
        return q + kv + (Gemm(m, h, a * ml.v_head_dim / t),)
    d, kv_heads = model.head_dim, model.num_kv_heads
    qkv = Gemm(m, (a * d + 2 * kv_heads * d) / t, h)
    return qkv, Gemm(m, h, a * d / t)


def mlp_gemms(hidden: int, ffn: int, glu: bool, tokens: float, tp: int,
              count: float = 1.0) -> tuple[Gemm, ...]:
    """Up (and gate) and down projections of one (GLU-)MLP, ``count`` copies."""
    up = Gemm(tokens, ffn * (2 if glu else 1) / tp, hidden, count)
    return up, Gemm(tokens, hidden, ffn / tp, count)


def tokens_per_expert(model: ModelSpec, sh: Shard) -> float:
    """M of the grouped expert GEMM: (token, expert) pairs each local expert of the busiest
    EP rank computes for one micro-batch.

    Every token of the EP group picks ``top_k`` experts spread over ``ep`` ranks, so a rank
    receives on average as many pairs as it sent: tokens/tp * top_k (tokens are sequence-sharded
    over TP); the busiest rank ``moe_imbalance`` times that (1 = Megatron's
    ``--moe-router-force-load-balancing``). With expert TP the etp ranks of one expert slice each
    see those tokens (Megatron-Core MoE parallel folding). They are shared by E/ep local experts.
    """
    moe = model.moe
    routed_tokens = sh.tokens * moe.top_k * sh.moe_imbalance * sh.etp / sh.tp
    return routed_tokens / (moe.num_experts / sh.ep)


def moe_gemms(model: ModelSpec, sh: Shard) -> tuple[Gemm, ...]:
    """Router (h x E on this rank's tokens), routed experts on this GPU (busiest GPU under
    imbalance; M from :func:`tokens_per_expert`), shared experts (every token, TP-sharded)."""
    moe = model.moe
    h = model.hidden_size
    local_experts = moe.num_experts / sh.ep
    gemms = (Gemm(sh.tokens / sh.tp, moe.num_experts, h),)
    gemms += mlp_gemms(h, moe.expert_ffn_hidden, model.glu, tokens_per_expert(model, sh),
                       sh.etp, local_experts)
    if moe.num_shared_experts:
        gemms += mlp_gemms(h, moe.shared_width, model.glu, sh.tokens, sh.tp)
    return gemms


def moe_permute_elems_per_token(routed_per_token: float, hidden: int) -> float:
    """HBM elements moved per token by permute + un-permute: each of the token's routed
    copies is read and written once by the permute (gather into expert order) and once by the
    un-permute (weighted scatter back), 4*h per copy (Megatron-Core
    ``megatron/core/transformer/moe/moe_utils.py``: ``permute``, ``unpermute``)."""
    return routed_per_token * 4 * hidden


def clamp_elems_per_copy(model: ModelSpec) -> float:
    """Elements a clamped GLU's two clamps and cat move per routed copy (8f; 0 without a
    clamp; :func:`expert_eager_elems_per_copy`)."""
    return 8 * model.moe.expert_ffn_hidden if model.glu_clamp is not None and model.glu else 0


def expert_eager_elems_per_copy(model: ModelSpec,
                                fp32_probs: bool = False) -> tuple[float, int, int]:
    """(elements moved per routed token copy, kernels per local expert, kernels per layer) of the
    eager PyTorch passes Megatron-Core's ``TEGroupedMLP`` runs around its grouped GEMMs (its
    path without TransformerEngine's fused grouped MLP, ``Shard.fused_grouped_mlp``, which
    Megatron-Bridge's GPT-OSS benchmarks take on GB200/GB300 with MXFP8 from 26.06):

    * a clamped GLU (``ModelSpec.glu_clamp``): ``weighted_bias_quick_geglu_impl``
      (``megatron/core/fusions/fused_bias_geglu.py``) clamps the two halves of the FC1 output
      with two eager ``clamp`` calls (each reads f, writes f) and joins them with ``torch.cat``
      (reads 2f, writes 2f) before the compiled activation kernel: 8f per copy, 3 kernels;
    * expert biases (``MoESpec.expert_bias``): FC2 is built with ``skip_bias_add`` and
      ``_apply_bias`` (``megatron/core/transformer/moe/experts.py``) adds bias x router
      probability per local expert in a Python loop (``b * p`` writes h, the add reads 2h and
      writes h) and concatenates the results (reads h, writes h): 6h per copy, 2 kernels per
      local expert and the ``torch.cat``. With ``fp32_probs`` (the flex dispatcher: DeepEP and
      HybridEP take fp32 probabilities, ``token_dispatcher.py`` at d7288711 casts them,
      "DeepEP only supports float32 probs") the loop runs in fp32 and a cast back to the
      compute dtype follows (``.to(intermediate_parallel.dtype)``): ``b * p`` writes 2h, the
      add reads h + 2h and writes 2h, the cat reads and writes 2h each, the cast reads 2h and
      writes h, in 2-byte units: 14h per copy and one kernel more.
    """
    moe = model.moe
    elems, per_expert, per_layer = clamp_elems_per_copy(model), 0, 0
    if elems:
        per_layer += 3
    if moe.expert_bias:
        elems += (14 if fp32_probs else 6) * model.hidden_size
        per_expert, per_layer = per_expert + 2, per_layer + (2 if fp32_probs else 1)
    return elems, per_expert, per_layer


def router_bytes_per_token(num_experts: int) -> float:
    """HBM bytes per token of the router's memory-bound kernels: the E logits in fp32 written
    by the router GEMM epilogue, read by the score function (softmax or sigmoid) which writes E
    probabilities, read again by top-k and by the load-balancing loss (Switch Transformer,
    Fedus et al. 2021, eq. 4; Megatron-Core ``moe/router.py``, fp32 router logits): 4 passes
    of 4 bytes over E."""
    return 4 * 4 * num_experts


def attention_head_dims(model: ModelSpec) -> tuple[int, int]:
    """(query-key, value) head dims of the attention core."""
    if model.mla is not None:
        return model.mla.qk_head_dim, model.mla.v_head_dim
    return model.head_dim, model.head_dim


def attention_core_flops(model: ModelSpec, layer: int, sh: Shard) -> tuple[float, int]:
    """Forward FLOPs of softmax(QK^T)V on this GPU, and the head dim (the GEMMs' thin side)."""
    a_local = model.num_heads / sh.tp
    qk, v = attention_head_dims(model)
    keys = _attention_keys(model, layer, sh.seq_len, causal_skip=not sh.unfused_attention)
    flops = 2.0 * sh.tokens * keys * a_local * (qk + v)
    return flops, min(qk, v)


def rope_fused(model: ModelSpec) -> bool:
    """Whether Megatron-Core runs the model's rotary embedding fused (TransformerEngine's
    ``fused_apply_rotary_pos_emb``): not when YaRN's attention factor is not 1, which the fused
    kernel does not take (``megatron/core/models/common/embeddings/rope_utils.py``
    ``apply_rotary_pos_emb`` at d7288711ba, the commit Megatron-Bridge 0.4.0 pins: "mscale=...
    is not supported by TE's fused RoPE. Using unfused implementation.")."""
    return model.rope_attention_factor == 1.0


def rope_bytes_per_elem(model: ModelSpec) -> int:
    """HBM bytes per q or k element of the forward rotary embedding. Fused: one read and one
    write (2 B each). Unfused (``_apply_rotary_pos_emb_bshd``, same file): ``t * cos`` (read,
    write), ``_rotate_half``'s negation of one half and ``torch.cat`` (0.5 + 1 read, 0.5 + 1
    write), ``* sin`` (read, write), the sum (2 reads, 1 write) and the final ``torch.cat``
    with the (empty) pass-through part (read, write): 6.5 reads + 5.5 writes = 24 B."""
    return 4 if rope_fused(model) else 24


# NVFP4 quantisation (TransformerEngine ``NVFP4BlockScaling``, transformer_engine/common/recipe/
# __init__.py at d0067d0d; NVIDIA 2025, "Pretraining Large Language Models with NVFP4",
# arXiv:2509.25149): two scaling levels, an E4M3 scale per 16 values and an fp32 scale per
# tensor, so the tensor's amax is read first (with the 16-point random Hadamard transform the
# recipe applies to wgrad operands: one pass, 2 bytes a value); then one kernel reads the bf16
# values again (2) and writes both the row-wise and the column-wise copy, since "both versions
# are computed from the high precision input" (2 x (0.5 + 1/16)). Each Linear quantises its
# input X once (forward, for fprop and wgrad) and its output gradient dY once (backward, for
# dgrad and wgrad); weights are quantised once per step (2D 16x16 scales), not per micro-batch.
# Not fitted. The fp8 path's quantisation is inside ``Profile.fp8_speedup`` (fitted, at its cap,
# the peak ratio 2); at 4-bit rates these passes are no longer small against the GEMMs.
NVFP4_QUANT_BYTES = 2 + 2 + 2 * (0.5 + 1 / 16)


def low_precision_bytes(sh: Shard) -> float:
    """Bytes per value of a quantised GEMM operand: fp8 1 and MXFP8's E8M0 scale per 32 values
    (1/32; OCP Microscaling Formats (MX) Specification v1.0: blocks of 32 values share an
    8-bit E8M0 scale; per-tensor-scaled FP8 has none, 3% less, not told apart here),
    NVFP4 0.5 with an E4M3 scale per 16 (1/16; NVIDIA, "Pretraining Large Language Models
    with NVFP4", 2025, arXiv:2509.25149:
    16-element micro-blocks, E4M3 scale, plus one fp32 scale per tensor, negligible)."""
    return 0.5 + 1 / 16 if sh.nvfp4 else 1 + 1 / 32


def nvfp4_quant_elems(model: ModelSpec, layer: int, sh: Shard) -> float:
    """Values one layer's NVFP4 Linears quantise per micro-batch on this GPU, forward and
    backward: each weight GEMM's input (m x k) and output gradient (m x n), the attention
    projections, the dense MLP or the routed and shared experts (not the router, which
    Megatron-Core runs outside TransformerEngine)."""
    gemms = attention_gemms(model, sh)
    if model.is_moe_layer(layer):
        gemms += moe_gemms(model, sh)[1:]  # [0] is the router
    else:
        gemms += mlp_gemms(model.hidden_size, model.ffn_hidden_size, model.glu, sh.tokens, sh.tp)
    return sum((g.m * g.k + g.m * g.n) * g.count for g in gemms)


def norm_bytes_per_token(model: ModelSpec, sh: Shard) -> float:
    """HBM bytes per token of a layer's two norms, forward: each reads h and writes h, 2-byte
    values, sharded over TP by sequence parallelism (:func:`_elementwise_bytes`' terms)."""
    b = ACT_BYTES * 2 * 2 * model.hidden_size
    return b / sh.tp if sh.sequence_parallel else b


def activation_elems_per_token(model: ModelSpec, layer: int, sh: Shard) -> float:
    """Elements per token the FFN's activation function moves, forward (GELU: read f, write f;
    GLU: read 2f, write f): the dense MLP's, or the routed experts' with a clamped GLU's
    clamps (:func:`expert_eager_elems_per_copy`), without the shared experts'."""
    if not model.is_moe_layer(layer):
        return (3 if model.glu else 2) * model.ffn_hidden_size / sh.tp
    moe = model.moe
    routed = moe.top_k * sh.moe_imbalance * sh.etp / sh.tp
    return routed * ((3 if model.glu else 2) * moe.expert_ffn_hidden
                     + clamp_elems_per_copy(model)) / sh.etp


def _elementwise_bytes(model: ModelSpec, layer: int, sh: Shard) -> float:
    """HBM bytes of one layer's memory-bound forward kernels on this GPU.

    Per token, 2-byte values: two norms (read h, write h), two residual adds (read 2h, write
    h), rotary on q and k (read and write; more when unfused, :func:`rope_bytes_per_elem`),
    the activation (GELU: read f, write f; GLU: read 2f, write f), two dropouts (read, write,
    1-byte mask). Norm/residual/dropout run on every TP rank unless sequence parallelism
    shards them (Korthikanti et al. 2022, sec. 4.2.2). With NVFP4, a third of the layer's
    quantisation passes (:data:`NVFP4_QUANT_BYTES`), so that forward and backward (twice the
    forward's bytes) carry all of them.
    """
    h, t = model.hidden_size, sh.tp
    # bytes at ACT_BYTES per value: norms 2 x (h + h), residual adds 2 x (2h + h), dropouts
    # 2 x (2 + 2 + 1 bytes) x h
    replicated = ACT_BYTES * (2 * 2 * h + 2 * 3 * h) + (2 * 5 * h if sh.dropout else 0)
    replicated /= t if sh.sequence_parallel else 1
    qk_elems = (model.num_heads + model.num_kv_heads) * model.head_dim / t
    rotary = rope_bytes_per_elem(model) * qk_elems
    if model.is_moe_layer(layer):
        moe = model.moe
        routed = moe.top_k * sh.moe_imbalance * sh.etp / sh.tp
        ffn = moe.num_shared_experts * (3 if model.glu else 2) * (
            moe.shared_ffn_hidden or moe.expert_ffn_hidden) / t
        ffn += moe_permute_elems_per_token(routed, h)
        if not sh.fused_grouped_mlp:  # else the activation (and clamp, bias) is FC1's epilogue
            bias = (expert_eager_elems_per_copy(model, sh.flex_dispatch)[0]
                    - clamp_elems_per_copy(model))
            ffn += activation_elems_per_token(model, layer, sh) + routed * bias / sh.etp
        router = router_bytes_per_token(moe.num_experts) / t  # router sees tokens/tp
    else:
        ffn = activation_elems_per_token(model, layer, sh)
        router = 0.0
    per_token = replicated + rotary + ACT_BYTES * ffn
    scores = 0.0
    if sh.unfused_attention:  # scale+mask+softmax (r/w 2 B), dropout (r/w 2 B + 1 B mask)
        keys = _attention_keys(model, layer, sh.seq_len, causal_skip=False)
        scores = keys * model.num_heads / t * (4 + (5 if sh.dropout else 0))
    quant = 0.0
    if sh.nvfp4:  # forward share of the forward + backward passes (backward = 2 x forward)
        quant = NVFP4_QUANT_BYTES * nvfp4_quant_elems(model, layer, sh) / (1 + BWD_ELEM)
    return sh.tokens * ((per_token + scores) * sh.elem_bytes / ACT_BYTES + router) + quant


CUDA_GRAPHS = ("none", "moe_router", "attn+moe_router", "full")


@dataclass(frozen=True)
class Launches:
    """Kernel launches of one layer for one micro-batch: all of them forward and backward, and
    those the CPU issues one by one (``host_*``; the rest replay from CUDA graphs)."""

    fwd: int
    bwd: int
    host_fwd: int
    host_bwd: int


# Launches (forward, backward) of each part of a Megatron-Core layer as Megatron-Bridge's MoE
# benchmarks run it (TransformerEngine modules; fused RoPE, router and permutation; grouped
# GEMM), counted from source: Megatron-LM core_r0.16.0 (ddc0d677), TransformerEngine v2.11
# (c188b533), DeepEP v1.2.1; a launch is a kernel, an NCCL call or a device-to-host copy.
# Forward counts are read from the code; backward counts are estimates (about 1.5x a part's
# forward, twice its GEMMs).
# * attention half: input norm + QKV GEMM (TE LayerNormLinear, 2), the GQA query reshape (1),
#   fused RoPE on q and k (2), TE's copy of V and its philox seed kernel (2), cuDNN attention
#   (1), the projection GEMM (1), bias-dropout-add (1): 10;
# * dense MLP: pre-MLP norm + FC1 (2), SwiGLU (1), FC2 (1), bias-dropout-add (1): 5;
# * MoE router: pre-MLP norm (1), gating GEMM (1), forced-balance logits (2), fused top-k
#   (1), aux-loss scores (1) and loss (4): 10 (``transformer/moe/router.py``);
# * all-to-all dispatcher (``MoEAlltoAllTokenDispatcher``, fused permutation): count sums and
#   their all-gather (7, the "preprocess" CUDA graphs capture), 4 device-to-host copies of
#   the split sizes, permute (4), token and prob all-to-alls (2), chunk sort (2), unsort (3),
#   combine all-to-all (1), unpermute (1): 24, with one host synchronisation
#   (``token_dispatcher.py:899``);
# * flex dispatcher (DeepEP): top-k indices (1), dispatch layout (1), notify + dispatch (2),
#   multihot (1), permute (4), unpermute (1), notify + combine (2): 12, of which the first 2
#   are preprocessing;
# * routed experts (TE ``GroupedLinear``): cuBLAS runs one GEMM per local expert
#   (``multi_stream_cublas_gemm``), so FC1 and FC2 cost 2 launches per local expert plus the
#   activation (1); MXFP8 quantises each expert's input (+1 per GEMM) and swizzles scales
#   (+3 per layer); backward: dgrad and wgrad per expert;
# * fp8 (MXFP8): each other Linear quantises its input and swizzles two scale tensors (+3).
# * fused grouped MLP (TransformerEngine ``ops/fused/grouped_mlp.py``, MXFP8 on sm100+, read
#   at d0067d0d): forward, the split offsets (``tex.splits_to_offsets_multi``), the input's
#   group quantisation, FC1's and FC2's weight-scale swizzles, the FC1 grouped CuTe GEMM with
#   the activation and its output's quantisation fused, and the FC2 grouped GEMM: 6 launches
#   whatever the number of local experts; backward (estimate): the gradient's requantisation
#   and swizzle, FC2's dgrad fused with the activation's backward, the scales' zeroing, FC1's
#   dgrad and both grouped wgrads: 9.
ATTN_LAUNCHES, DENSE_MLP_LAUNCHES, ROUTER_LAUNCHES = (10, 15), (5, 8), (10, 8)
DISPATCH_LAUNCHES = {"alltoall": (24, 16), "flex": (12, 8)}
DISPATCH_PREPROCESS = {"alltoall": 7, "flex": 2}  # captured by the "moe_preprocess" scope
MOE_TAIL_LAUNCHES = (1, 1)  # the MoE layer's bias-dropout-add
SHARED_EXPERT_LAUNCHES = (4, 6)  # shared experts: FC1, activation, FC2, their sum (fp8: more)
UNFUSED_ATTN_EXTRA = (6, 12)  # scale, mask, softmax, dropout, two batched GEMMs (2021 Megatron)
FP8_PER_LINEAR = 3
# * nvfp4 (TransformerEngine's NVFP4BlockScaling): the fp8 path's quantisation and scale
#   swizzles, and the per-tensor amax of the second scaling level before them (+1): 4.
FP4_PER_LINEAR = 4
FUSED_GROUPED_MLP_LAUNCHES = (6, 9)
# Unfused RoPE (rope_fused False) instead of the 2 fused calls, forward: per q and k, cos, sin,
# their scaling and casts (6) and mul, neg, cat, mul, add, cat (6): 24, 22 more; backward
# (estimate): two muls, the negation and the sum of the two paths per tensor, 8 more.
UNFUSED_ROPE_EXTRA = (22, 8)
# Fused attention in fp8 over bf16 (TrainingConfig.fp8_attention): FlashAttention-3 (Shah et
# al. 2024, abstract) reaches close to 1.2 PFLOP/s in FP8 against up to 740 TFLOP/s in 16-bit
# on H100, 1.6x, short of the tensor cores' 2x: the softmax's exponentials and the FP8 operand
# layout do not speed up. Not fitted; the backward is taken alike.
FP8_ATTENTION_SPEEDUP = 1.6


def attention_launches(model: ModelSpec, sh: Shard) -> tuple[int, int]:
    """(forward, backward) launches of a layer's attention half (counts above)."""
    fp8 = FP4_PER_LINEAR if sh.nvfp4 else FP8_PER_LINEAR if sh.fp8 else 0
    attn = (ATTN_LAUNCHES[0] + 2 * fp8, ATTN_LAUNCHES[1] + 4 * fp8)
    if sh.unfused_attention:
        attn = (attn[0] + UNFUSED_ATTN_EXTRA[0], attn[1] + UNFUSED_ATTN_EXTRA[1])
    if not rope_fused(model):
        attn = (attn[0] + UNFUSED_ROPE_EXTRA[0], attn[1] + UNFUSED_ROPE_EXTRA[1])
    return attn


def layer_launches(model: ModelSpec, layer: int, sh: Shard) -> Launches:
    """Launches of ``layer`` (see the counts above); CUDA graphs (``Shard.cuda_graphs``)
    capture the attention half (``attn``), the router and the dispatcher's preprocessing
    (``moe_router``), or the whole iteration (``full``, no launch is the CPU's)."""
    fp8 = FP4_PER_LINEAR if sh.nvfp4 else FP8_PER_LINEAR if sh.fp8 else 0
    attn = attention_launches(model, sh)
    captured = (0, 0)
    if not model.is_moe_layer(layer):
        parts = [attn, (DENSE_MLP_LAUNCHES[0] + 2 * fp8, DENSE_MLP_LAUNCHES[1] + 4 * fp8)]
        if sh.cuda_graphs == "attn+moe_router":
            captured = attn
    else:
        _, per_expert, per_layer = expert_eager_elems_per_copy(model, sh.flex_dispatch)
        local = math.ceil(model.moe.num_experts / sh.ep)
        gemm_fwd = (2 + (2 if sh.fp8 else 0)) * local
        experts = (1 + gemm_fwd + (3 if sh.fp8 else 0) + per_layer + per_expert * local,
                   1 + 2 * gemm_fwd + (3 if sh.fp8 else 0) + per_layer + per_expert * local)
        if sh.fused_grouped_mlp:  # the GEMMs, activation (clamped or not), bias: grouped
            experts = FUSED_GROUPED_MLP_LAUNCHES
        kind = "flex" if sh.flex_dispatch else "alltoall"
        dispatch, pre = DISPATCH_LAUNCHES[kind], DISPATCH_PREPROCESS[kind]
        if sh.ep == 1:  # no exchange: the permutation and its inverse only
            dispatch, pre = (5, 5), 0
        parts = [attn, ROUTER_LAUNCHES, dispatch, experts, MOE_TAIL_LAUNCHES]
        if model.moe.num_shared_experts:
            parts.append((SHARED_EXPERT_LAUNCHES[0] + 2 * fp8, SHARED_EXPERT_LAUNCHES[1] + 4 * fp8))
        router = (ROUTER_LAUNCHES[0] + pre, ROUTER_LAUNCHES[1])
        if sh.cuda_graphs == "moe_router":
            captured = router
        elif sh.cuda_graphs == "attn+moe_router":
            captured = (router[0] + attn[0], router[1] + attn[1])
    fwd, bwd = sum(p[0] for p in parts), sum(p[1] for p in parts)
    if sh.cuda_graphs == "full":
        return Launches(fwd, bwd, 0, 0)
    return Launches(fwd, bwd, fwd - captured[0], bwd - captured[1])


def layer_work(model: ModelSpec, layer: int, sh: Shard) -> LayerWork:
    """Forward work of ``layer`` on one GPU (see :class:`LayerWork`)."""
    gemms = attention_gemms(model, sh)
    if model.is_moe_layer(layer):
        gemms += moe_gemms(model, sh)
    else:
        gemms += mlp_gemms(model.hidden_size, model.ffn_hidden_size, model.glu, sh.tokens, sh.tp)
    attn, head_dim = attention_core_flops(model, layer, sh)
    launches = layer_launches(model, layer, sh)
    # one fused-kernel call sees the keys of one context-parallel chunk (ring attention steps)
    # and the queries of its micro-batch, local heads and chunk, in tiles of ATTN_TILE_QUERIES
    keys = _attention_keys(model, layer, sh.seq_len, causal_skip=True) / sh.cp
    tiles = sh.batch * model.num_heads / sh.tp * math.ceil(sh.seq_len / sh.cp / ATTN_TILE_QUERIES)
    return LayerWork(gemms=gemms, attn_flops=attn, attn_head_dim=head_dim,
                     attn_unfused=sh.unfused_attention,
                     elementwise_bytes=_elementwise_bytes(model, layer, sh),
                     attn_keys=keys, attn_tiles=tiles, launches=launches,
                     attn_fp8=sh.fp8_attention,
                     attn_scores=attn / (2.0 * sum(attention_head_dims(model))))


@dataclass(frozen=True)
class GpuRates:
    """What one GPU sustains: dense peak for the precision, HBM bandwidth, and its GEMM
    efficiency relative to the profile's GPU (1 on the profile's own GPU type)."""

    peak_flops: float
    hbm_bytes_per_s: float
    fp8: bool = False
    elem_bytes: int = 2  # operand bytes (4 in fp32)
    # NVFP4: the GPU's fp4 over fp8 dense peak (2 on B200/GB200, 3 on B300/GB300); 1 otherwise
    fp4_over_fp8: float = 1.0
    gemm_scale: float = 1.0
    attention_scale: float = 1.0  # fused attention speed relative to the GPU's native kernel
    # dense bf16 tensor FLOPs per exponential the special function units issue in the same
    # time (topologies' GpuSpec.tensor_flops_per_exp2); 0: not known, the bound is left out
    flops_per_exp: float = 0.0


def attention_kernel_scale(arch: str, attention: str) -> float:
    """Speed of the ``attention`` kernels (``flash``: the GPU's native fused kernel; ``flash2``:
    FlashAttention-2 generation) relative to the native one on a GPU of ``arch``."""
    if attention == "flash2" and arch.startswith(("Hopper", "Blackwell")):
        return FA2_ON_SM90_PLUS
    return 1.0


def fused_attention_efficiency(prof: Profile, keys: float, tiles: float = 0.0) -> float:
    """Fraction of peak a fused attention kernel reaches when each query attends to ``keys``
    keys on average and the call has ``tiles`` 128-query tiles:
    ``attention_efficiency * keys / (keys + attention_half_keys) * tiles / (tiles +
    attention_half_tiles)``.

    Source: FlashAttention-2 and cuDNN fused attention (PyTorch SDPA), causal, bf16, forward +
    backward, head dim 128, timed on a lent H200 and H100 (``benchmarks/device/kernel_probe.py``;
    ``benchmarks/results/device-h*-kernels/``; 51 shapes per kernel, 1k-32k tokens, 64 to 8,192
    tiles): one fit with shared knees puts them at 390 keys and 156 tiles, near the GPUs' 132
    SMs (rms log error 4-5% for FA2, 10-12% for cuDNN, which a fixed cost per call fits
    better; ``docs/benchmarks.md``, "GPU kernels"). The fixed work per query tile (loading Q,
    the masked diagonal tile, the softmax statistics, writing O and, backward, dQ) does not
    shrink with the keys that the tile streams; and a call of fewer tiles than about one per
    SM leaves SMs idle, as TP-sharded heads at micro-batch 1 make. A knee of 0 (or
    ``keys``/``tiles`` unknown) leaves that factor out."""
    eff = prof.attention_efficiency
    if prof.attention_half_keys > 0 and keys > 0:
        eff *= keys / (keys + prof.attention_half_keys)
    if prof.attention_half_tiles > 0 and tiles > 0:
        eff *= tiles / (tiles + prof.attention_half_tiles)
    return eff


def gemm_time_s(g: Gemm, rates: GpuRates, prof: Profile) -> float:
    """Time of one GEMM at the size-dependent efficiency (see module docstring)."""
    n = min(g.m, g.n, g.k)
    eff = min(1.0, prof.gemm_efficiency * rates.gemm_scale) * n / (n + prof.gemm_half_dim)
    speed = prof.fp8_speedup * rates.fp4_over_fp8 if rates.fp8 else 1.0
    compute = g.flops / (rates.peak_flops * eff * speed)
    memory = rates.elem_bytes * (g.m * g.k + g.k * g.n + g.m * g.n) * g.count / (
        rates.hbm_bytes_per_s * prof.hbm_efficiency)
    return max(compute, memory)


@dataclass(frozen=True)
class LayerTime:
    """Forward times of one layer on one GPU, split by kind (seconds), with what its backward
    launches cost: the GPU's gaps between kernels (``overhead_bwd_s``) and the CPU's time to
    issue the kernels it launches itself (``host_s`` forward, ``host_bwd_s`` backward)."""

    gemm_s: float
    attention_s: float
    elementwise_s: float
    overhead_s: float
    overhead_bwd_s: float = 0.0
    host_s: float = 0.0
    host_bwd_s: float = 0.0
    # the fused attention forward's wait for its exponentials beyond ``attention_s`` (its
    # tensor-core time; :func:`attention_exp_excess_s`); the backward is not bound by them
    attention_exp_s: float = 0.0

    @property
    def attention_fwd_s(self) -> float:
        return self.attention_s + self.attention_exp_s

    @property
    def gpu_s(self) -> float:
        return self.gemm_s + self.attention_fwd_s + self.elementwise_s + self.overhead_s

    @property
    def total_s(self) -> float:
        """The GPU's work, or the CPU's launches when they take longer (launch bound): the CPU
        queues kernels ahead of the GPU until the layer's host synchronisation (the MoE
        dispatcher's device-to-host copy of the split sizes) or the step's end."""
        return max(self.gpu_s, self.host_s)

    def scaled(self, k: int) -> "LayerTime":
        """The same layer run k times (SlimPipe slices)."""
        return LayerTime(*(k * getattr(self, f.name) for f in fields(self)))


def weight_bytes(gemms: Sequence[Gemm], elem_bytes: float) -> float:
    """Bytes of the weights of ``gemms``: ``k x n`` of each, ``count`` times."""
    return elem_bytes * sum(g.k * g.n * g.count for g in gemms)


def cold_weights_s(gemms: Sequence[Gemm], rates: GpuRates, prof: Profile) -> float:
    """Loading the weights of ``gemms`` (:func:`weight_bytes`) into a CPU core's cache, not
    overlapped with their math (``Profile.cold_weight_s_per_byte``; 0 on GPUs)."""
    if not prof.cold_weight_s_per_byte:
        return 0.0
    return prof.cold_weight_s_per_byte * weight_bytes(gemms, rates.elem_bytes)


def layer_forward_time(work: LayerWork, rates: GpuRates, prof: Profile) -> LayerTime:
    """Time of one layer's forward pass; kernels run one after another. On a CPU each weight
    GEMM also loads its weight (:func:`cold_weights_s`); the backward's two GEMMs per weight
    (``BWD_GEMM``) load it again."""
    gemm = (sum(gemm_time_s(g, rates, prof) for g in work.gemms)
            + cold_weights_s(work.gemms, rates, prof))
    if work.attn_unfused:  # batched GEMMs whose thin side is the head dim
        n = work.attn_head_dim
        eff = min(1.0, prof.gemm_efficiency * rates.gemm_scale) * n / (n + prof.gemm_half_dim)
        attn = work.attn_flops / (rates.peak_flops * eff)
        exp_excess = 0.0
    else:
        speed = FP8_ATTENTION_SPEEDUP if work.attn_fp8 else 1.0
        rate = rates.peak_flops * rates.attention_scale
        attn = work.attn_flops / (rate * speed * (
            fused_attention_efficiency(prof, work.attn_keys, work.attn_tiles)))
        # the streaming part only: the knees' fixed work per tile is neither unit's
        streaming = rate * prof.attention_efficiency
        exp_excess = attention_exp_excess_s(work.attn_scores, work.attn_flops / (
            streaming * speed), streaming, rates.flops_per_exp)
    elem = work.elementwise_bytes / (rates.hbm_bytes_per_s * prof.hbm_efficiency)
    n = work.launches
    return LayerTime(gemm_s=gemm, attention_s=attn, elementwise_s=elem,
                     overhead_s=n.fwd * prof.kernel_overhead_s,
                     overhead_bwd_s=n.bwd * prof.kernel_overhead_s,
                     host_s=n.host_fwd * prof.host_launch_s,
                     host_bwd_s=n.host_bwd * prof.host_launch_s,
                     attention_exp_s=exp_excess)


def attention_exp_excess_s(scores: float, mma_s: float, rate_flops: float,
                           flops_per_exp: float) -> float:
    """What a fused attention forward waits for its softmax exponentials beyond its
    tensor-core time ``mma_s``: ``scores`` exponentials (one per query-key score) issued at
    ``rate_flops / flops_per_exp`` a second, less ``mma_s``, at least 0; 0 where
    ``flops_per_exp`` is not known. ``layer_forward_time`` passes the kernel's streaming rate
    (``attention_efficiency`` of the peak, for both units) and the tensor time at that rate:
    the fixed work per query tile of ``fused_attention_efficiency``'s knees is neither's.

    Source: FlashAttention-4 (Zadouri et al. 2026, sec. 2, the B200 roofline): per SM and
    clock the tensor cores do 8,192 dense BF16 FLOPs and the special function units 16
    exponentials (MUFU.EX2), so the forward's two GEMMs (4 d FLOPs a score at head dim d)
    take as long as its exponentials at d = 128 and half as long at d = 64: the forward is
    bound by the exponentials there, the backward (10 d FLOPs and one exponential a score)
    is not. H100 has the same special function units and half the tensor rate; Blackwell
    Ultra doubles the special function units' throughput (NVIDIA, "Making Softmax More
    Efficient with NVIDIA Blackwell Ultra", 2026). With fp8 attention the GEMMs speed up
    (``FP8_ATTENTION_SPEEDUP``) and the exponentials do not."""
    if flops_per_exp <= 0 or scores <= 0:
        return 0.0
    return max(0.0, scores * flops_per_exp / rate_flops - mma_s)


def backward_gpu_s(t: LayerTime) -> float:
    """The GPU's backward work of a layer from its forward parts (ratios in the module
    docstring) and its own launches."""
    return (BWD_GEMM * t.gemm_s + BWD_ATTN * t.attention_s + BWD_ELEM * t.elementwise_s
            + t.overhead_bwd_s)


def backward_time_s(t: LayerTime) -> float:
    """Backward time of a layer: the GPU's work, or the CPU's time to issue its launches when
    that is longer."""
    return max(backward_gpu_s(t), t.host_bwd_s)


def lm_head_forward_time(model: ModelSpec, sh: Shard, rates: GpuRates, prof: Profile) -> float:
    """Output projection plus fp32 cross-entropy over this GPU's vocabulary shard: 24 B per
    logit (read and write fp32 three times). Megatron-Core's unfused vocab-parallel cross
    entropy (``megatron/core/tensor_parallel/cross_entropy.py``, ``VocabParallelCrossEntropy``)
    moves about 38 B a logit forward: the fp32 copy of the bf16 logits (read 2, write 4), the
    max (read 4), the in-place subtraction and exponential (read and write, 8 each), the sum
    (read 4) and the softmax's in-place division (read and write, 8); its fused versions
    (``cross_entropy_loss_fusion``, native or TransformerEngine's) fewer. 24 B sits between
    them (an estimate, not fitted; under 0.5% of a Llama-3-8B micro-batch either way)."""
    g = Gemm(sh.tokens, model.vocab_size / sh.tp, model.hidden_size)
    ce_bytes = sh.tokens * model.vocab_size / sh.tp * 4 * 3
    return (gemm_time_s(g, rates, prof) + cold_weights_s((g,), rates, prof)
            + ce_bytes / (rates.hbm_bytes_per_s * prof.hbm_efficiency))


@lru_cache(maxsize=64)
def model_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token, forward + backward, no recompute: the MFU numerator.

    Weight GEMMs: 6 FLOPs per active parameter (Kaplan et al. 2020, sec. 2.1); attention core:
    12 * layers * s * head dims, counting the full s x s (PaLM, Chowdhery et al. 2022, app. B).
    Embedding lookups cost no FLOPs; the LM head counts as weights.
    """
    sh = Shard(batch=1, seq_len=seq_len, tp=1, cp=1, ep=1, etp=1, sequence_parallel=False,
               unfused_attention=True, dropout=False)
    total = 0.0
    for layer in range(model.num_layers):
        work = layer_work(model, layer, sh)
        total += work.gemm_flops + work.attn_flops
    total += 2.0 * seq_len * model.hidden_size * model.vocab_size
    return 3.0 * total / seq_len
