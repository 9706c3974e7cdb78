"""HBM of one GPU of a serving instance: weights, KV cache, activations, and the KV capacity.

Sharding follows the engines: attention and dense MLP weights are split over the ``tp`` GPUs of
an attention rank and replicated over ``dp`` (vLLM data parallel + expert parallel, "Data
Parallel Deployment" docs; SGLang DP attention); routed experts are split over ``ep*etp``;
embedding and LM head are vocab-parallel over ``tp`` (``VocabParallelEmbedding``); layers over
``pp``. Quantisation applies to the GEMM weights; embeddings, LM head, norms and routers stay
bf16 (FP8 checkpoints such as DeepSeek-V3 keep them in bf16).

KV per token (per layer): MHA/GQA stores K and V, ``2*kv_heads*head_dim`` values, with the KV
heads split over TP (replicated when ``kv_heads < tp``, as vLLM does); MLA stores the latent and
the rope key, ``kv_lora_rank + qk_rope_head_dim`` values, on every TP rank (DeepSeek-V2 sec.
2.1.3); a sliding-window layer keeps at most ``window`` tokens. DeepSeek Sparse Attention adds,
on every layer that runs a lightning indexer, the indexer's key of every token: ``index_head_dim``
FP8 values and one fp32 scale per 128 of them, whatever the KV dtype, on every TP rank (the
indexer is replicated; :func:`indexer_key_bytes`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.model_spec import (
    ModelSpec, attention_params, count_params, indexer_params, linear_attention_params,
    mlp_params)
from cost_models.serving.config import KV_BYTES, WEIGHT_BYTES, PoolLayout, ServingWorkload
from cost_models.serving.profile import ServingProfile

BF16 = 2.0
PREFILL_CHUNK_TOKENS = 8192  # chunked-prefill budget (vLLM max_num_batched_tokens, SGLang
#                              --chunked-prefill-size default 8192 on large GPUs)


@dataclass(frozen=True)
class PoolMemory:
    """Bytes on the fullest GPU of one instance."""

    weights_bytes: float
    kv_bytes: float  # the KV the layout's batch needs at full context
    activations_bytes: float
    capacity_bytes: float  # HBM the engine may use (mem_fraction of the GPU)
    kv_capacity_tokens: int  # tokens of KV one attention rank can hold after weights

    @property
    def used_bytes(self) -> float:
        return self.weights_bytes + self.kv_bytes + self.activations_bytes

    @property
    def fits(self) -> bool:
        return self.used_bytes <= self.capacity_bytes

    def as_dict(self) -> dict[str, float]:
        return {"weights_gb": self.weights_bytes / 1e9, "kv_gb": self.kv_bytes / 1e9,
                "activations_gb": self.activations_bytes / 1e9,
                "capacity_gb": self.capacity_bytes / 1e9,
                "kv_capacity_tokens": self.kv_capacity_tokens, "fits": self.fits}


def weight_bytes_per_gpu(model: ModelSpec, layout: PoolLayout, precision: str) -> float:
    """Weights on the fullest GPU (the pipeline stage with the embedding or the head)."""
    w = WEIGHT_BYTES[precision]
    tp, pp = layout.tp, layout.pp
    attn = (model.num_kv_layers * attention_params(model)
            + model.num_linear_layers * linear_attention_params(model)) * w / tp
    # DSA indexers are replicated over TP (vLLM ``Indexer``: ReplicatedLinear wq_b and an
    # unsplit wk/weights_proj); counted at the GEMM weights' precision, though vLLM keeps wk and
    # weights_proj (10% of the indexer) in bf16
    attn += model.num_indexer_layers * indexer_params(model) * w
    dense = mlp_params(model.hidden_size, model.ffn_hidden_size, model.glu, model.mlp_bias)
    layers_dense = model.num_dense_layers / pp
    layers_moe = model.num_moe_layers / pp
    total = attn / pp + layers_dense * dense * w / tp
    if model.is_moe:
        counts = count_params(model)
        per_moe = counts.experts / model.num_moe_layers
        shared = counts.shared_experts / model.num_moe_layers
        routers = counts.routers / model.num_moe_layers
        slots = (model.moe.num_experts + layout.redundant) / model.moe.num_experts
        total += layers_moe * (per_moe * slots * w / (layout.ep * layout.expert_tp)
                               + shared * w / tp
                               + routers * BF16)
    emb = model.vocab_size * model.hidden_size * BF16 / tp
    total += emb * (1 if model.tied_embeddings or pp > 1 else 2)
    return total


def _kv_values_per_layer(model: ModelSpec, tp: int) -> float:
    if model.mla is not None:
        return model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
    heads = max(1.0, model.num_kv_heads / tp) if model.num_kv_heads >= tp else 1.0
    return 2.0 * math.ceil(heads) * model.head_dim


INDEX_SCALE_BLOCK = 128  # indexer key elements sharing one fp32 scale


def indexer_key_bytes(model: ModelSpec) -> float:
    """One token's key in one DSA indexer layer: ``index_head_dim`` FP8 bytes plus an fp32 scale
    per 128 (DeepSeek-V3.2-Exp ``inference/model.py``: fp8 ``k_cache`` and fp32
    ``k_scale_cache`` per ``block_size`` 128; vLLM's indexer cache: ``head_dim + head_dim //
    128 * 4`` bytes, 132 for V3.2). Every TP rank holds it. 0 without sparse attention."""
    sa = model.sparse_attn
    if sa is None:
        return 0.0
    return sa.index_head_dim + 4.0 * math.ceil(sa.index_head_dim / INDEX_SCALE_BLOCK)


def linear_state_bytes(model: ModelSpec, tp: int) -> float:
    """One request's linear-attention state in one layer on one GPU: the fp32 recurrent state
    (Qwen3.5 ``mamba_ssm_dtype: float32``) and the bf16 conv window, heads split over TP."""
    la = model.linear_attn
    if la is None:
        return 0.0
    return (4.0 * la.recurrent_state_elems + BF16 * la.conv_state_elems) / tp


def _cached_tokens(model: ModelSpec, i: int, context: float) -> float:
    """Tokens layer ``i`` keeps of a ``context``-token request: a sliding window or a Llama-4
    chunk caps it (a chunk layer holds at most the current chunk); linear layers keep none."""
    if model.is_linear_layer(i):
        return 0.0
    span = model.window(i) or model.chunk(i)
    return min(context, span) if span else context


def kv_bytes_per_request(model: ModelSpec, layout: PoolLayout, kv_dtype: str,
                         context: float) -> float:
    """KV (and linear-attention state) one request of ``context`` tokens holds on one GPU of
    its attention rank."""
    per_layer = _kv_values_per_layer(model, layout.tp) * KV_BYTES[kv_dtype]
    tokens = sum(_cached_tokens(model, i, context) for i in range(model.num_layers))
    state = model.num_linear_layers * linear_state_bytes(model, layout.tp)
    index = indexer_key_bytes(model) * model.num_indexer_layers * context  # every token
    return (per_layer * tokens + state + index) / layout.pp


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str) -> float:
    """KV bytes of one token over the whole model, unsharded (what a transfer moves): every
    layer that keeps a KV cache, and the indexer keys of the sparse-attention layers."""
    return (_kv_values_per_layer(model, 1) * KV_BYTES[kv_dtype] * model.num_kv_layers
            + indexer_key_bytes(model) * model.num_indexer_layers)


def activation_bytes(model: ModelSpec, layout: PoolLayout) -> float:
    """Peak activations of one prefill chunk: the hidden state in and out, q/k/v, the MLP's
    intermediate (GLU: two of them) on this GPU, and fp32 logits of the chunk's last tokens;
    bf16 throughout. A working-set estimate, not a profile: engines compute logits only for
    each sequence's last token (vLLM ``logits_processor`` on the sampled positions), and 256
    such sequences in one chunk is an assumption; the engines' own memory profiling
    (vLLM's ``profile_run``, SGLang's ``mem_fraction_static``) is what the deployment uses."""
    h = model.hidden_size
    ffn = model.moe.expert_ffn_hidden * model.moe.top_k if model.is_moe else model.ffn_hidden_size
    per_token = BF16 * (4 * h + 3 * model.num_heads * model.head_dim / layout.tp
                        + (3 if model.glu else 2) * ffn / layout.tp)
    return PREFILL_CHUNK_TOKENS * per_token + 256 * model.vocab_size / layout.tp * 4


def pool_memory(model: ModelSpec, layout: PoolLayout, wl: ServingWorkload, hbm_bytes: float,
                sprof: ServingProfile, reserved_bytes: float) -> PoolMemory:
    """Memory of one GPU when each attention rank runs ``layout.batch`` requests at full
    context ``isl + osl``; the KV capacity is what is left after weights and activations."""
    weights = weight_bytes_per_gpu(model, layout, wl.precision)
    acts = activation_bytes(model, layout)
    capacity = hbm_bytes * sprof.mem_fraction - reserved_bytes
    per_token = kv_bytes_per_request(model, layout, wl.kv_dtype, 1.0)
    full = kv_bytes_per_request(model, layout, wl.kv_dtype, wl.isl + wl.osl)
    free = max(0.0, capacity - weights - acts)
    return PoolMemory(weights_bytes=weights, kv_bytes=full * layout.batch,
                      activations_bytes=acts, capacity_bytes=capacity,
                      kv_capacity_tokens=int(free / per_token) if per_token > 0 else 0)


def max_batch_by_memory(model: ModelSpec, layout: PoolLayout, wl: ServingWorkload,
                        hbm_bytes: float, sprof: ServingProfile, reserved_bytes: float) -> int:
    """Most requests per attention rank whose full-context KV fits (0: the weights alone don't)."""
    mem = pool_memory(model, layout, wl, hbm_bytes, sprof, reserved_bytes)
    full = kv_bytes_per_request(model, layout, wl.kv_dtype, wl.isl + wl.osl)
    free = mem.capacity_bytes - mem.weights_bytes - mem.activations_bytes
    return max(0, int(free // full)) if full > 0 else 0
