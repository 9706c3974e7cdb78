"""Time of one prefill and of one decode step on a serving instance, split into named parts.

Sources, per term:
* GEMMs: 2*M*N*K FLOPs; time = max(FLOPs / (peak * gemm_efficiency), bytes / (HBM * eff)),
  the roofline (Williams et al. 2009), with M padded to the 16-row tensor-core tile
  (:func:`gemm_s`). At decode M is the batch, so weight reads dominate (the "memory-bound
  decode" of Pope et al., "Efficiently Scaling Transformer Inference", MLSys 2023, sec. 2).
* Attention core: prefill computes the causal triangle, 2*new*(cached + (new+1)/2)*heads*(dqk+dv)
  FLOPs per layer (FlashAttention-2 convention); decode reads every cached KV byte once per step
  (PagedAttention, Kwon et al. SOSP 2023) and computes 2*keys*heads*(dqk+dv) per query token;
  MLA decode runs absorbed, over the latent: dqk = kv_lora + rope, dv = kv_lora (DeepSeek-V2
  sec. 2.1.3, the weight-absorption remark). Sliding-window layers see at most the window.
* DeepSeek Sparse Attention (DeepSeek-V3.2-Exp technical report, "Prototype of DSA", eqs. 1-2:
  "the lightning indexer ... can be implemented in FP8"; top-k = 2048): the main MLA attention
  of a query attends only to min(position, index_topk) keys, gathered from the cache, in MLA's
  MQA mode (over the latent, as absorbed decode: the report builds DSA on the MQA mode of MLA);
  a prefill takes the cheaper of that and the dense causal MHA mode (the report's masked MHA
  mode that simulates DSA for short prefills). The lightning indexer scores every preceding
  token with 2*index_n_heads*index_head_dim FLOPs per key per query token at the FP8 rate
  (``fp8_speedup``), reading each token's FP8 indexer key and its scale at decode. Past top-k,
  prefill stays quadratic in the indexer term only. The indexer (its GEMMs, scores and key
  cache) is replicated over TP (vLLM ``Indexer``: "no tensor parallel, just replicated").
  Not priced: the top-k selection over the scores, the fp32 score matrix's traffic (8 bytes a
  key against the key's 132), and the larger gathered set when MTP queries of one request pick
  different keys.
* MoE: T tokens choosing top_k of E experts touch E*(1-(1-k/E)^T) distinct experts in
  expectation (each expert is missed by a token with probability 1-k/E); only touched experts'
  weights are read. The busiest EP rank gets ``moe_imbalance`` times the mean tokens.
* Communication: TP all-reduce of the hidden state after attention and after the MLP
  (Megatron-LM, Shoeybi et al. 2019, sec. 3); with attention data parallelism the MoE layer
  dispatches and combines tokens by all-to-all over the EP group (DeepEP: fp8 dispatch, bf16
  combine, DeepSeek-V3 report sec. 3.4); pipeline stages pass the hidden state by send/recv.
  Collective times are ``cost_models/communication.py``'s alpha-beta model.
* Overheads: one fixed cost per engine iteration (scheduling, sampling; fitted), a cost per
  running request per decode iteration (the scheduler's and sampler's per-sequence work; the
  ``c * batch`` term of DistServe's fitted decode latency; fitted), plus a launch gap per
  kernel when CUDA graphs are off.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from cost_models.communication import (
    all_gather_s, all_reduce_s, all_to_all_s, reduce_scatter_s, send_recv_s)
from cost_models.compute import attention_exp_excess_s
from cost_models.model_spec import (
    ModelSpec, attention_params, indexer_params, linear_attention_params, mlp_params)
from cost_models.profile import Profile
from cost_models.serving.config import KV_BYTES, WEIGHT_BYTES, PoolLayout
from cost_models.serving.memory import (
    BF16, _kv_values_per_layer, indexer_key_bytes, linear_state_bytes)
from cost_models.serving.profile import ServingProfile
from topologies.cluster import GroupView

# Launches of one decoder layer without CUDA graphs, an estimate: vLLM's LlamaDecoderLayer
# runs the fused add + RMSNorm, the QKV GEMM, rotary, the KV-cache write and attention, the
# output GEMM, the second fused add + RMSNorm, the gate/up GEMM, SiluAndMul and the down GEMM
# (10; vllm/model_executor/models/llama.py), plus the two TP all-reduces and an fp8 model's
# input quantisations (up to 4): 10 to 16, taken as 14. It only prices eager mode.
KERNELS_PER_LAYER = 14


@dataclass(frozen=True)
class InstanceHardware:
    """What one engine instance runs on: one GPU's rates and the views its groups see."""

    peak_flops: float  # dense bf16 peak
    hbm_bytes_per_s: float
    hbm_bytes: float
    tp_view: GroupView
    ep_view: GroupView  # the instance's tp*dp GPUs of one pipeline stage
    pp_view: GroupView | None
    # dense bf16 tensor FLOPs per softmax exponential in the same time (GpuSpec's
    # tensor_flops_per_exp2; cost_models.compute.attention_exp_excess_s); 0: not known
    flops_per_exp: float = 0.0


@dataclass(frozen=True)
class StepTime:
    """One iteration's time by part (seconds); ``total_s`` is their sum."""

    gemm_s: float
    attention_s: float
    moe_s: float
    comm_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.attention_s + self.moe_s + self.comm_s + self.overhead_s

    def as_dict(self) -> dict[str, float]:
        return {"gemm_s": self.gemm_s, "attention_s": self.attention_s, "moe_s": self.moe_s,
                "comm_s": self.comm_s, "overhead_s": self.overhead_s, "total_s": self.total_s}


@dataclass(frozen=True)
class Costing:
    """Everything a step time needs besides the batch: model, layout, hardware, calibration."""

    model: ModelSpec
    layout: PoolLayout
    hw: InstanceHardware
    prof: Profile
    sprof: ServingProfile
    precision: str = "bf16"
    kv_dtype: str = "bf16"
    moe_imbalance: float = 1.0
    cuda_graphs: bool = True
    overlap_comm: bool = False  # two-batch overlap hides EP all-to-all behind compute
    #                             (SGLang --enable-two-batch-overlap; DeepSeek's dual micro-batch)


def _speedup(c: Costing) -> float:
    """GEMM speed over bf16: fp8 and fp4 run fp8 tensor cores (fp4 counted as fp8, which
    undercounts Blackwell's fp4 rate); int4 is weight-only, computed in bf16."""
    return c.prof.fp8_speedup if c.precision in ("fp8", "fp4") else 1.0


MMA_ROWS = 16  # rows of the smallest tensor-core tile a skinny GEMM runs on


def gemm_s(c: Costing, flops: float, weight_params: float, m: float, act_bytes: float) -> float:
    """One weight GEMM (or a group of them) with ``m`` rows: roofline of compute and reads.

    A decode GEMM has as many rows as tokens in the batch; libraries run skinny GEMMs with the
    token dimension on the narrow side of the tensor-core tile (cuBLAS/CUTLASS "swap AB"; the
    PTX ``mma`` shapes are m16n8k16), so fewer than ``MMA_ROWS`` rows cost as many as
    ``MMA_ROWS`` and the weights' reads decide. (The training model's ``gemm_half_dim`` term
    prices thin *shards* of large GEMMs, not few rows, and is not used here.)"""
    if flops <= 0 and weight_params <= 0:
        return 0.0
    padded = flops * max(m, MMA_ROWS) / m if m > 0 else 0.0
    compute = padded / (c.hw.peak_flops * c.prof.gemm_efficiency * _speedup(c))
    memory = (weight_params * WEIGHT_BYTES[c.precision] + act_bytes) / (
        c.hw.hbm_bytes_per_s * weight_read_efficiency(c))
    return max(compute, memory)


def weight_read_efficiency(c: Costing) -> float:
    """The fraction of HBM bandwidth decode streams weights at: the serving profile's
    ``weight_read_efficiency`` when measured (``planner calibrate``), else the training
    profile's ``hbm_efficiency``."""
    return c.sprof.weight_read_efficiency or c.prof.hbm_efficiency


def _attention_dims(model: ModelSpec, decode: bool) -> tuple[float, float]:
    """(query-key dim, value dim) the attention kernel multiplies per head."""
    if model.mla is None:
        return float(model.head_dim), float(model.head_dim)
    m = model.mla
    if decode:  # absorbed: attend over the latent (module docstring)
        return float(m.kv_lora_rank + m.qk_rope_head_dim), float(m.kv_lora_rank)
    return float(m.qk_head_dim), float(m.v_head_dim)


def _layers_of_stage(model: ModelSpec, pp: int) -> range:
    """Layers of the first pipeline stage (stages are even; the first carries the remainder)."""
    return range(-(-model.num_layers // pp))


def _expert_params(model: ModelSpec) -> tuple[float, float]:
    """(one routed expert's parameters, all shared experts' parameters) of one MoE layer, as
    :func:`cost_models.model_spec.count_params` counts them."""
    moe = model.moe
    one = mlp_params(model.hidden_size, moe.expert_ffn_hidden, model.glu, moe.expert_bias)
    width = moe.shared_ffn_hidden or moe.expert_ffn_hidden
    shared = moe.num_shared_experts * mlp_params(model.hidden_size, width, model.glu,
                                                 model.mlp_bias)
    return float(one), float(shared)


def _moe_layer_s(c: Costing, tokens_rank: float, all_pairs_touch: bool) -> float:
    """Routed experts of one MoE layer on the busiest GPU; ``tokens_rank`` tokens per attention
    rank, ``dp`` ranks feed the EP group."""
    model, lay = c.model, c.layout
    moe = model.moe
    one, shared = _expert_params(model)
    etp = lay.expert_tp
    tokens = tokens_rank * lay.dp  # tokens entering the EP group (TP ranks share theirs)
    local = (moe.num_experts + lay.redundant) / lay.ep
    # a redundant replica takes part of its expert's tokens: slots touched as for E experts
    touched = local if all_pairs_touch else local * (1.0 - (1.0 - moe.top_k / moe.num_experts)
                                                     ** tokens)
    pairs = tokens * moe.top_k / lay.ep * c.moe_imbalance
    per_expert = pairs / max(touched, 1e-9)
    routed = gemm_s(c, 2.0 * pairs * one / etp, touched * one / etp, per_expert,
                    2 * pairs * model.hidden_size * BF16)
    shared_s = gemm_s(c, 2.0 * tokens_rank * shared / lay.tp, shared / lay.tp, tokens_rank, 0.0)
    router = gemm_s(c, 2.0 * tokens_rank * model.hidden_size * moe.num_experts,
                    0.0, tokens_rank, model.hidden_size * moe.num_experts * BF16)
    return routed + shared_s + router


def _comm_layer_s(c: Costing, tokens_rank: float, moe_layer: bool) -> float:
    """TP all-reduces, or attention all-reduce + EP all-to-all (dp > 1 with MoE)."""
    lay, h = c.layout, c.model.hidden_size
    act = tokens_rank * h * BF16
    attn = all_reduce_s(c.hw.tp_view, act, c.prof) if lay.tp > 1 else 0.0
    if moe_layer and lay.dp > 1 and lay.ep > 1:
        k = c.model.moe.top_k
        send = tokens_rank / lay.tp * k * h  # each TP rank dispatches its share of the tokens
        return attn + all_to_all_s(c.hw.ep_view, send * 1.0, c.prof) + all_to_all_s(
            c.hw.ep_view, send * BF16, c.prof)
    if moe_layer and lay.dp > 1:  # expert TP over the DP ranks: gather tokens, scatter sums
        everyone = tokens_rank * lay.dp * h * BF16
        return attn + all_gather_s(c.hw.ep_view, everyone, c.prof) + reduce_scatter_s(
            c.hw.ep_view, everyone, c.prof)
    return 2 * attn  # TP attention, TP (or EP over the same GPUs) MLP: one all-reduce each


@dataclass(frozen=True)
class LayerKind:
    """Layers that cost the same: MoE or dense FFN, and the attention they run (full, a
    sliding ``window``, a Llama-4 ``chunk``, ``linear``, or sparse over the ``topk`` keys an
    indexer picks, with an ``indexer`` of its own or reusing an earlier layer's choice),
    ``count`` of them in a stage."""

    moe: bool
    linear: bool
    window: int | None
    chunk: int | None
    topk: int | None
    indexer: bool
    count: int

    def decode_keys(self, context: float) -> float:
        """Keys one decode query reads: the window, the top-k, or its position inside the
        current chunk (half a chunk on average once the context is longer), or the whole
        context."""
        if self.window:
            return min(context, self.window)
        if self.topk:
            return min(context, self.topk)
        if self.chunk and context > self.chunk:
            return self.chunk / 2.0
        return context

    def prefill_keys(self, new: float, cached: float) -> float:
        """Mean keys per query of a prompt's ``new`` tokens after ``cached`` ones (causal: the
        query at position p sees p keys; sparse attention caps each at ``topk``)."""
        keys = cached + (new + 1) / 2.0
        if self.window:
            return min(keys, self.window)
        if self.topk and cached + new > self.topk:
            below = max(0.0, self.topk - cached)  # queries still seeing fewer than topk keys
            return ((cached + 1 + self.topk) * below / 2.0 + (new - below) * self.topk) / max(
                new, 1e-9)
        if self.chunk and cached + new > self.chunk:
            return (self.chunk + 1) / 2.0
        return keys


def _linear_flops_per_token(model: ModelSpec, tp: int) -> float:
    """Gated DeltaNet per token on one GPU: the delta-rule state update and readout, about
    6 * H_v * d_k * d_v FLOPs (Yang et al. 2024, sec. 3: a rank-1 update and two mat-vecs per
    head), and the depthwise causal conv, 2 * conv_dim * kernel; heads split over TP."""
    la = model.linear_attn
    return (6.0 * la.num_value_heads * la.key_head_dim * la.value_head_dim
            + 2.0 * la.conv_dim * la.conv_kernel) / tp


def _attention_core_s(c: Costing, queries: float, keys_of, requests: float,
                      context: float, decode: bool) -> float:
    """Attention core over the first stage's layers. ``queries`` query tokens on this GPU;
    ``keys_of(kind)`` gives (keys each attends to, keys of its full causal span): a
    sparse-attention indexer scores the latter. At decode ``requests`` requests of ``context``
    tokens read their cached KV and indexer keys (and linear layers read and write their
    state) once per step."""
    model, lay = c.model, c.layout
    dqk, dv = _attention_dims(model, decode)
    latent = sum(_attention_dims(model, True))  # MLA in MQA mode: over the latent
    heads = model.num_heads / lay.tp
    kv_values = _kv_values_per_layer(model, lay.tp) * KV_BYTES[c.kv_dtype]
    sa = model.sparse_attn
    index_macs = sa.index_n_heads * sa.index_head_dim if sa is not None else 0.0  # per key
    flops = index_flops = reads = scores = 0.0
    for kind in _layer_kinds(model, lay.pp):
        if kind.linear:
            flops += kind.count * queries * _linear_flops_per_token(model, lay.tp)
            reads += kind.count * requests * 2.0 * linear_state_bytes(model, lay.tp)
            continue
        keys, causal = keys_of(kind)
        per_query, scored = keys * (dqk + dv), keys
        if kind.topk:  # DSA's sparse kernels run MLA's MQA mode; a short prompt's prefill the
            #            masked MHA mode, whichever is cheaper (module docstring)
            per_query, scored = min((keys * latent, keys), (causal * (dqk + dv), causal))
        flops += kind.count * 2.0 * queries * per_query * heads
        scores += kind.count * queries * scored * heads
        reads += kind.count * requests * kv_values * kind.decode_keys(context)
        if kind.indexer:  # replicated over TP: every head on every rank (module docstring)
            index_flops += kind.count * 2.0 * queries * causal * index_macs
            reads += kind.count * requests * indexer_key_bytes(model) * context
    efficiency = c.sprof.decode_attention_efficiency if decode else c.prof.attention_efficiency
    rate = c.hw.peak_flops * efficiency
    # the softmax's exponentials bound the core where the tensor cores outrun them
    core = flops / rate
    core += attention_exp_excess_s(scores, core, rate, c.hw.flops_per_exp)
    compute = core + index_flops / c.prof.fp8_speedup / rate
    memory = reads / (c.hw.hbm_bytes_per_s * c.sprof.kv_read_efficiency) if decode else 0.0
    return max(compute, memory)


def _layer_kinds(model: ModelSpec, pp: int) -> tuple[LayerKind, ...]:
    """The first stage's layers grouped by :class:`LayerKind`: each kind is priced once."""
    topk = model.sparse_attn.index_topk if model.sparse_attn is not None else None
    indexer = tuple(model.has_indexer(i) for i in range(model.num_layers)) if topk else ()
    return _kinds(model.num_layers, tuple(model.moe_layers), model.sliding_window,
                  tuple(model.sliding_layers), model.attention_chunk,
                  tuple(model.chunk_layers), tuple(model.linear_layers), topk, indexer, pp)


@lru_cache(maxsize=256)
def _kinds(num_layers: int, moe_layers: tuple[bool, ...], window: int | None,
           sliding: tuple[bool, ...], chunk: int | None, chunked: tuple[bool, ...],
           linear: tuple[bool, ...], topk: int | None, indexer: tuple[bool, ...], pp: int
           ) -> tuple[LayerKind, ...]:
    counts: dict[tuple, int] = {}
    for i in range(-(-num_layers // pp)):
        is_linear = bool(linear) and linear[i]
        w = window if window and (not sliding or sliding[i]) and not is_linear else None
        ch = chunk if chunk and (not chunked or chunked[i]) and not is_linear else None
        k = topk if not is_linear else None
        key = (bool(moe_layers) and moe_layers[i], is_linear, w, ch, k,
               bool(k) and bool(indexer) and indexer[i])
        counts[key] = counts.get(key, 0) + 1
    return tuple(LayerKind(*key, n) for key, n in sorted(
        counts.items(), key=lambda kv: tuple(x or 0 for x in kv[0])))


def _layer_stack(c: Costing, tokens_rank: float, decode: bool) -> tuple[float, float, float]:
    """(GEMM, MoE, comm) seconds of one pipeline stage's layers for ``tokens_rank`` tokens."""
    model, lay = c.model, c.layout
    attn_p = attention_params(model) / lay.tp
    linear_p = linear_attention_params(model) / lay.tp
    dense_p = mlp_params(model.hidden_size, model.ffn_hidden_size, model.glu,
                         model.mlp_bias) / lay.tp
    act = tokens_rank * model.hidden_size * BF16 * 4
    attn_g = gemm_s(c, 2.0 * tokens_rank * attn_p, attn_p, tokens_rank, act)
    linear_g = gemm_s(c, 2.0 * tokens_rank * linear_p, linear_p, tokens_rank, act)
    index_p = float(indexer_params(model))  # replicated over TP (module docstring)
    index_g = gemm_s(c, 2.0 * tokens_rank * index_p, index_p, tokens_rank,
                     tokens_rank * model.hidden_size * BF16)
    g = moe = comm = 0.0
    for kind in _layer_kinds(model, lay.pp):
        is_moe, n = kind.moe, kind.count
        g += n * (linear_g if kind.linear else attn_g) + (n * index_g if kind.indexer else 0.0)
        if is_moe:
            moe += n * _moe_layer_s(c, tokens_rank, all_pairs_touch=not decode)
        else:
            g += n * gemm_s(c, 2.0 * tokens_rank * dense_p, dense_p, tokens_rank, act)
        comm += n * _comm_layer_s(c, tokens_rank, is_moe)
    return g, moe, comm


def _head_s(c: Costing, tokens: float) -> float:
    """LM head on the last stage for ``tokens`` positions (bf16, vocab-parallel over TP)."""
    p = c.model.vocab_size * c.model.hidden_size / c.layout.tp
    return max(2.0 * max(tokens, MMA_ROWS) * p / (c.hw.peak_flops * c.prof.gemm_efficiency),
               p * BF16 / (c.hw.hbm_bytes_per_s * weight_read_efficiency(c)))


def _stage_hops_s(c: Costing, tokens_rank: float) -> float:
    if c.layout.pp <= 1 or c.hw.pp_view is None:
        return 0.0
    return (c.layout.pp - 1) * send_recv_s(c.hw.pp_view, tokens_rank * c.model.hidden_size
                                           * BF16, c.prof)


def _launch_s(c: Costing) -> float:
    if c.cuda_graphs:
        return 0.0
    return c.model.num_layers * KERNELS_PER_LAYER * c.sprof.eager_kernel_overhead_s


def _exposed_comm(c: Costing, comm_s: float, compute_s: float) -> float:
    """Communication left on the critical path: all of it, or with two-batch overlap (two
    micro-batches, one computing while the other communicates) what exceeds the compute."""
    if c.overlap_comm and c.layout.dp > 1 and c.layout.ep > 1:
        return max(0.0, comm_s - compute_s)
    return comm_s


def decode_step(c: Costing, batch: float, context: float, tokens_per_request: float = 1.0
                ) -> StepTime:
    """One decode iteration for ``batch`` requests per attention rank, each holding ``context``
    tokens of KV and verifying ``tokens_per_request`` positions (1 + MTP depth). With pipeline
    parallelism the batch runs as ``pp`` micro-batches; one request's step crosses every stage,
    so the step time is ``pp`` stage times at batch/pp, each with its iteration overhead."""
    pp = c.layout.pp
    micro = batch / pp
    q = micro * tokens_per_request
    g, moe, comm = _layer_stack(c, q, decode=True)
    attn = _attention_core_s(c, q, lambda kind: (kind.decode_keys(context), context), micro,
                             context, decode=True)
    head = _head_s(c, q)
    # every micro-batch is an engine iteration of its own (vLLM's virtual engines, one
    # scheduler): a request's step pays the iteration cost once per stage it crosses
    # per running request: each attention-DP rank schedules and samples its own requests
    overhead = pp * (c.sprof.decode_step_overhead_s + _launch_s(c)) + (
        batch * c.sprof.per_request_overhead_s)
    comm = _exposed_comm(c, comm, g + attn + moe)
    return StepTime(gemm_s=pp * g + head, attention_s=pp * attn, moe_s=pp * moe,
                    comm_s=pp * comm + _stage_hops_s(c, q), overhead_s=overhead)


def prefill_step(c: Costing, new_tokens: tuple[float, ...], cached_tokens: float = 0.0
                 ) -> StepTime:
    """One prefill iteration on one attention rank: prompts of ``new_tokens`` uncached tokens,
    each after ``cached_tokens`` prefix-cache hits; every prompt's first token is sampled.
    Pipeline stages run one after another for this batch (its latency)."""
    n = float(sum(new_tokens))
    pp = c.layout.pp
    g, moe, comm = _layer_stack(c, n, decode=False)

    def flops_keys(kind: LayerKind) -> tuple[float, float]:
        """Mean keys per query (attended, full causal span), weighted by prompt length."""
        return (sum(new * kind.prefill_keys(new, cached_tokens) for new in new_tokens)
                / max(n, 1e-9),
                sum(new * (cached_tokens + (new + 1) / 2.0) for new in new_tokens) / max(n, 1e-9))

    attn = _attention_core_s(c, n, flops_keys, 0.0, 0.0, decode=False)
    head = _head_s(c, float(len(new_tokens)))
    comm = _exposed_comm(c, comm, g + attn + moe)
    return StepTime(gemm_s=pp * g + head, attention_s=pp * attn, moe_s=pp * moe,
                    comm_s=pp * comm + _stage_hops_s(c, n),
                    overhead_s=c.sprof.prefill_step_overhead_s + _launch_s(c))


def prefill_request_s(c: Costing, new_tokens: float, cached: float, chunk_tokens: int
                      ) -> float:
    """Latency of one request's prefill alone, in chunks of at most ``chunk_tokens``."""
    total, done = 0.0, 0.0
    while done < new_tokens - 1e-9:
        step = min(float(chunk_tokens), new_tokens - done)
        total += prefill_step(c, (step,), cached + done).total_s
        done += step
    return total


def kv_transfer_s(kv_bytes: float, link_bytes_per_s: float, latency_s: float,
                  efficiency: float) -> float:
    """Moving one request's KV from its prefill to its decode instance over one link
    (alpha-beta; NIXL/Mooncake move layer blocks GPU to GPU by RDMA)."""
    return latency_s + kv_bytes / (link_bytes_per_s * efficiency)
