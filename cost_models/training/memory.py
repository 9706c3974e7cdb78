"""Memory per GPU: weights, gradients, optimizer states, activations, and an allowance.

Sources:
* Mixed-precision Adam keeps 2-byte weights, 4-byte fp32 main gradients and 12 bytes of fp32
  master weights, momentum and variance: 18 bytes per parameter; the distributed optimizer
  (ZeRO-1) shards the 12 across data-parallel ranks: 6 + 12/d (Megatron-LM
  ``docs/source/api-guide/dist_optimizer.md``); ZeRO-2 also shards gradients, ZeRO-3 weights
  (Rajbhandari et al. 2020, sec. 5, Fig. 1). PyTorch FSDP keeps no low-precision shard: the
  fp32 shard is the weights' only persistent copy, cast when a unit is gathered
  (``torch.distributed.fsdp.MixedPrecision`` docs; ``TrainingConfig.low_precision_shard``).
* Activations per layer follow Korthikanti et al. 2022 (arXiv:2205.05198): eq. 1
  (s*b*h*(34 + 5*a*s/h) bytes without parallelism), eq. 2 (tensor parallel: 10 + 24/t),
  eq. 4 (+ sequence parallel: 34/t), sec. 5 (selective recompute drops the 5*a*s/h term,
  full recompute keeps the 2*s*b*h layer input). We count each stored tensor by its real width,
  so GQA, GLU, MLA and MoE follow; flash attention keeps no s^2 tensors.
* With fp8/MXFP8/NVFP4 GEMMs TransformerEngine keeps each Linear's input for the backward in
  its quantised form only (``module/linear.py``: after the forward GEMM the saved ``inputmat``
  drops its row-wise data and keeps the column-wise copy the weight gradient reads), so the
  inputs of QKV, the output projection, FC1 and FC2 (and the experts') take 1 byte per value
  plus scales (``ActivationShape.gemm_input_scale``); what non-GEMM backward passes read
  (norm inputs, Q/K/V for attention, the activation function's input) stays 2-byte. torchao's
  float8 (torchtitan) saves the high-precision inputs (``TrainingConfig.quantized_saved_inputs``).
* In-flight micro-batches: 1F1B keeps p - i on stage i; the interleaved schedule keeps
  (p - i - 1)*2 + (v - 1)*p + 1 model chunks (Megatron ``schedules.py`` warm-up count), which for
  i = 0 is Korthikanti's factor (1 + (p-1)/(p*v)) (sec. 4.2.3).
* The last stage holds the fp32 logits and their gradient, 8*s*b*V/t bytes (sec. 4.3); a
  fused cross-entropy keeps both in the compute dtype (flash-attn ``losses/cross_entropy.py``;
  ``TrainingConfig.fused_cross_entropy``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from cost_models.model_spec import ModelSpec, attention_params, mlp_params
from cost_models.training.config import default_selective_modules


@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Peak bytes on the most loaded GPU (``stage`` names its pipeline stage)."""

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    logits_bytes: float
    other_bytes: float  # reserved workspaces + fragmentation allowance
    capacity_bytes: float
    stage: int

    @property
    def peak_bytes(self) -> float:
        return (self.weights_bytes + self.grads_bytes + self.optimizer_bytes
                + self.activations_bytes + self.logits_bytes + self.other_bytes)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.peak_bytes


def layer_params_split(model: ModelSpec, layer: int) -> tuple[float, float]:
    """(non-expert, routed-expert) parameters of one layer."""
    dense = attention_params(model)
    if not model.is_moe_layer(layer):
        return dense + mlp_params(model.hidden_size, model.ffn_hidden_size, model.glu,
                                  model.mlp_bias), 0.0
    moe = model.moe
    shared = moe.num_shared_experts * mlp_params(
        model.hidden_size, moe.shared_ffn_hidden or moe.expert_ffn_hidden, model.glu,
        model.mlp_bias)
    experts = moe.num_experts * mlp_params(model.hidden_size, moe.expert_ffn_hidden, model.glu,
                                           moe.expert_bias)
    return dense + shared + model.hidden_size * moe.num_experts, float(experts)


@dataclass(frozen=True, kw_only=True)
class ActivationShape:
    """What decides the activation bytes of one layer for one micro-batch on one GPU."""

    tokens: float  # b * s / cp
    seq_len: int
    tp: int
    etp: int
    sequence_parallel: bool
    unfused_attention: bool
    dropout: bool
    moe_imbalance: float
    elem_bytes: int = 2  # bytes per stored element (4 in fp32; the formulas count 2-byte values)
    offload: tuple[str, ...] = ()  # activations kept on the host (TrainingConfig.offload_modules)
    gemm_input_scale: float = 1.0  # a saved GEMM input's size relative to the compute dtype's
    # under selective recompute: the submodules re-run (TrainingConfig.selective_modules;
    # empty: the default set, config.default_selective_modules)
    recompute_modules: frozenset[str] = frozenset()


def _attention_tensors(model: ModelSpec, sh: ActivationShape, drop_up: bool = False) -> float:
    """Bytes per token kept for attention backward: Q, K, V and the output-projection input
    (a GEMM input: ``gemm_input_scale``). With MLA, also the compressed latents; ``drop_up``:
    Q, K and V, MLA's up-projected heads, are recomputed from them (``mla_up_proj``)."""
    a, t, q = model.num_heads, sh.tp, sh.gemm_input_scale
    if model.mla is not None:
        m = model.mla
        latent = (m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim
        heads = 0.0 if drop_up else 2 * a * (2 * m.qk_head_dim + m.v_head_dim) / t
        return heads + 2 * latent + 2 * q * a * m.v_head_dim / t
    d = model.head_dim
    return 2 * (a * d + 2 * model.num_kv_heads * d) / t + 2 * q * a * d / t


NO_MODULES: frozenset[str] = frozenset()


class FfnSaved(NamedTuple):
    """Bytes per token the FFN of one layer keeps for its backward, by the submodule whose
    selective recompute would drop them (:func:`layer_activation_bytes`; a named tuple: the
    search builds one per layer and option)."""

    dense: float = 0.0  # the dense MLP's activation input and output (``mlp``)
    shared: float = 0.0  # the shared experts' activation input and output (``shared_experts``)
    routed_act_out: float = 0.0  # the routed experts' activation outputs (``moe_act``)
    routed: float = 0.0  # their FC1 inputs and activation inputs, the router's probabilities

    def kept(self, modules: frozenset[str]) -> float:
        """What stays when ``modules`` are recomputed: ``moe`` re-runs the whole MoE layer
        from its input (normal checkpointing), the others drop their own tensors."""
        if not modules:
            return self.dense + self.shared + self.routed_act_out + self.routed
        moe = "moe" in modules
        return (self.dense * ("mlp" not in modules)
                + self.shared * (not moe and "shared_experts" not in modules)
                + self.routed_act_out * (not moe and "moe_act" not in modules)
                + self.routed * (not moe))


def _ffn_tensors(model: ModelSpec, layer: int, sh: ActivationShape) -> FfnSaved:
    """Bytes per token kept by the FFN: the activation's input (GLU 2*2f, else 2f) and its
    output (2f), which is FC2's input; routed experts also keep their FC1 input (2h), and
    the router its probabilities. GEMM inputs take ``gemm_input_scale``."""
    act_in = 4 if model.glu else 2  # bytes per FFN unit of the activation's input
    q = sh.gemm_input_scale
    if not model.is_moe_layer(layer):
        f = model.ffn_hidden_size / sh.tp
        return FfnSaved(act_in * f + 2 * q * f)  # (dense, shared, routed_act_out, routed)
    moe = model.moe
    routed = moe.top_k * sh.moe_imbalance * sh.etp / sh.tp
    shared_w = moe.shared_width / sh.tp
    # per routed copy: the FC1 input (2h) and the activation's input unless offloaded to the
    # host, and its output (2f)
    f_e = moe.expert_ffn_hidden / sh.etp
    kept = 0.0 if "moe_act" in sh.offload else act_in * f_e
    if "expert_fc1" not in sh.offload:
        kept += 2 * q * model.hidden_size
    return FfnSaved(0.0, act_in * shared_w + 2 * q * shared_w, 2 * q * routed * f_e,
                    routed * kept + 4 * moe.num_experts / sh.tp)


def _op_saved_per_token(model: ModelSpec, sh: ActivationShape) -> float:
    """Bytes per token (2-byte elements) torchtitan's per-op checkpointing keeps of a dense
    layer (``cost_models.training.stage.op_recompute_s``): the block's input, the outputs of
    the odd matmuls (Q and V; w1 and w2, or up), SDPA's output and fp32 log-sum-exp, and with
    sequence parallelism the two reduce-scatters' outputs. A matmul's output before its
    reduce-scatter covers every token of the TP group (w2's: h wide on each rank)."""
    h, t, a, d = model.hidden_size, sh.tp, model.num_heads, model.head_dim
    rep_div = t if sh.sequence_parallel else 1
    f = model.ffn_hidden_size / t
    saved = 2 * h / rep_div + 2 * a * d / t + 2 * model.num_kv_heads * d / t  # input, Q, V
    saved += 2 * a * d / t + 4 * a / t  # SDPA output and log-sum-exp
    saved += 2 * f + (2 * h if model.glu else 0)  # w1 (up) and, 7th, w2
    if sh.sequence_parallel and t > 1:
        saved += 2 * 2 * h / t
    return saved


def layer_activation_bytes(model: ModelSpec, layer: int, sh: ActivationShape,
                           recompute: str) -> float:
    """Activation bytes of one layer for one micro-batch (Korthikanti et al. 2022); under
    selective recompute without the outputs of ``sh.recompute_modules``."""
    h, t = model.hidden_size, sh.tp
    rep_div = t if sh.sequence_parallel else 1
    scale = sh.elem_bytes / 2
    if recompute == "full":
        return scale * sh.tokens * 2 * h / rep_div
    if recompute == "op":
        return scale * sh.tokens * _op_saved_per_token(model, sh)
    modules = NO_MODULES
    if recompute == "selective":
        modules = sh.recompute_modules or default_selective_modules(sh.unfused_attention)
    q = sh.gemm_input_scale
    # the two norms' inputs (2 x 2h), their outputs, which are QKV's and FC1's inputs (2 x 2h)
    # unless ``layernorm`` re-runs the norms, and the dropouts' masks
    norm_out = 0.0 if "layernorm" in modules else 4 * q * h / rep_div
    replicated = (4 * h + (2 * h if sh.dropout else 0)) / rep_div + norm_out
    per_token = (replicated + _attention_tensors(model, sh, "mla_up_proj" in modules)
                 + _ffn_tensors(model, layer, sh).kept(modules))
    if sh.unfused_attention and "core_attn" not in modules:
        keys = sh.seq_len if not model.window(layer) else min(sh.seq_len, model.window(layer))
        per_token += (5 if sh.dropout else 2) * model.num_heads * keys / t
    elif not sh.unfused_attention and "core_attn" not in modules:
        per_token += 4 * model.num_heads / t  # fp32 log-sum-exp per query and head
    return scale * sh.tokens * per_token


def interleaved_warmup_chunks(stage: int, pp: int, vpp: int) -> int:
    """Forward chunks stage ``stage`` runs before its first backward under Megatron's
    interleaved 1F1B (Megatron-Core ``pipeline_parallel/schedules.py``,
    ``num_warmup_microbatches``, with ``microbatch_group_size_per_vp_stage`` at its default,
    the pipeline size): (p - s - 1) * 2 + (v - 1) * p, before the cap at all of the stage's
    m * v chunk passes."""
    return (pp - stage - 1) * 2 + (vpp - 1) * pp


def in_flight_chunks(stage: int, pp: int, vpp: int, micro_batches: int, slices: int = 1) -> int:
    """Model chunks whose activations stage ``stage`` holds at its peak (see docstring). With
    SlimPipe's ``slices`` (1F1B, vpp = 1) the count is of slices, each 1/slices of a
    micro-batch: min(m k, k + p - s - 1) (Li et al. 2025; ``solvers.pipeline.slimpipe``)."""
    if slices > 1:
        return min(micro_batches * slices, slices + pp - stage - 1)
    if vpp == 1:
        return min(pp - stage, micro_batches)
    return min(interleaved_warmup_chunks(stage, pp, vpp) + 1, micro_batches * vpp)


def state_bytes(dense_params: float, expert_params: float, dp_shard: int, edp_shard: int,
                zero: int, per_param: tuple[int, int, int] = (2, 4, 12)
                ) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes for parameters already split by TP/PP/EP;
    ``per_param``: bytes of each per parameter (``Workload.state_bytes_per_param``)."""
    w_bytes, g_bytes, o_bytes = per_param
    def sharded(n_dense: float, n_expert: float, on: bool) -> float:
        return n_dense / dp_shard + n_expert / edp_shard if on else n_dense + n_expert
    weights = w_bytes * sharded(dense_params, expert_params, zero >= 3)
    grads = g_bytes * sharded(dense_params, expert_params, zero >= 2)
    optimizer = o_bytes * sharded(dense_params, expert_params, zero >= 1)
    return weights, grads, optimizer
