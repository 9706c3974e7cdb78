"""Per-GPU memory of one pipeline stage: the composition of the primitives in ``memory``.

Owns :func:`stage_memory` (weights, gradients, optimizer states, in-flight activations, the last
stage's logits, and the allowance for workspaces and fragmentation) and the terms it shares
with the layer-partition inputs (``partition``): :func:`activation_terms` (activation shape,
recompute mode, logits) and :func:`usable_bytes`, the inverse of the allowance.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cost_models.compute import Shard, low_precision_bytes
from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.context import StepContext
from cost_models.training.layers import kind_counts, layer_tables, stage_params
from cost_models.training.memory import (ActivationShape, MemoryBreakdown, in_flight_chunks,
                                         layer_activation_bytes, state_bytes)
from cost_models.training.stage import fully_recomputed

__all__ = ["ActivationTerms", "activation_terms", "other_bytes", "stage_memory",
           "state_bytes_per_param", "usable_bytes"]


@dataclass(frozen=True, kw_only=True)
class ActivationTerms:
    """What decides a stage's activation and logits bytes, the same for every stage.

    ``rest_mode``: recompute mode of the layers full recompute does not cover (past
    ``recompute_layers``: none). ``logits_bytes``: the last stage's fp32 logits and their
    gradient for one micro-batch (or SlimPipe slice), 8*s*b*V/t (Korthikanti et al. 2022,
    sec. 4.3); with a fused cross-entropy (``TrainingConfig.fused_cross_entropy``) both stay in
    the compute dtype, 2*2*s*b*V/t in bf16. ``slices``: SlimPipe's k (1 without slicing).
    """

    shape: ActivationShape
    rest_mode: str
    logits_bytes: float
    slices: int

    def layer_bytes(self, model: ModelSpec, layer: int, mode: str) -> float:
        """Activation bytes of ``layer`` for one whole micro-batch under recompute ``mode``."""
        return layer_activation_bytes(model, layer, self.shape, mode)


def saved_gemm_input_scale(cfg: TrainingConfig, sh: Shard) -> float:
    """A saved GEMM input's bytes relative to the compute dtype's (memory module docstring):
    the quantised operand's (``compute.low_precision_bytes``) with fp8/NVFP4 GEMMs under
    TransformerEngine, else 1."""
    if not (sh.fp8 and cfg.quantized_saved_inputs):
        return 1.0
    return low_precision_bytes(sh) / sh.elem_bytes


def activation_terms(ctx: StepContext) -> ActivationTerms:
    """The :class:`ActivationTerms` of ``ctx``'s configuration."""
    cfg, sh = ctx.cfg, ctx.shard
    shape = ActivationShape(tokens=sh.tokens, seq_len=ctx.workload.seq_len, tp=cfg.degrees.tp,
                            etp=cfg.degrees.expert_tp, sequence_parallel=cfg.sequence_parallel,
                            unfused_attention=sh.unfused_attention, dropout=cfg.dropout,
                            moe_imbalance=cfg.moe_imbalance, elem_bytes=sh.elem_bytes,
                            offload=cfg.offload_modules,
                            gemm_input_scale=saved_gemm_input_scale(cfg, sh),
                            recompute_modules=cfg.selective_modules())
    k = cfg.seq_slices
    # fp32 logits and their gradient (8 bytes), or both in the compute dtype with a fused loss
    per_logit = 2 * sh.elem_bytes if cfg.fused_cross_entropy else 8
    return ActivationTerms(
        shape=shape, rest_mode="none" if cfg.recompute == "full" else cfg.recompute,
        logits_bytes=per_logit * sh.tokens / k * ctx.model.vocab_size / cfg.degrees.tp, slices=k)


def state_bytes_per_param(cfg: TrainingConfig, workload: Workload) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) bytes per parameter before sharding: the workload's
    (``Workload.state_bytes_per_param``) with the config's gradient and Adam-moment widths
    (``TrainingConfig.grad_reduce_in_fp32``, ``optimizer_moment_bytes``), without the
    low-precision weight copy under ZeRO-3
    where the framework keeps none (PyTorch FSDP: the fp32 master shard, in the optimizer's
    bytes, is the only persistent copy; the low-precision weights exist as gathered units,
    which :func:`stage_memory` adds)."""
    weights, grads, optimizer = workload.state_bytes_per_param
    if not cfg.grad_reduce_in_fp32:  # main gradients in the compute dtype
        grads = workload.elem_bytes
    if workload.optimizer == "adam":  # two moments of optimizer_moment_bytes each
        optimizer -= 2 * (4 - cfg.optimizer_moment_bytes)
    if cfg.zero >= 3 and not cfg.low_precision_shard and workload.elem_bytes < 4:
        weights = 0
    return weights, grads, optimizer


def other_bytes(base_bytes: float, prof: Profile) -> float:
    """Reserved workspaces plus the fragmentation allowance on ``base_bytes`` (states,
    activations, logits)."""
    return prof.reserved_bytes + prof.fragmentation_fraction * base_bytes


def usable_bytes(capacity_bytes: float, prof: Profile) -> float:
    """The most states + activations + logits that fit in ``capacity_bytes`` once
    :func:`other_bytes` is added: the inverse of base + other <= capacity."""
    return (capacity_bytes - prof.reserved_bytes) / (1 + prof.fragmentation_fraction)


def stage_memory(ctx: StepContext, stage: int, layers: Sequence[int],
                 capacity_bytes: float) -> MemoryBreakdown:
    """Peak bytes on one GPU of ``stage`` holding ``layers`` (``memory`` module docstring)."""
    cfg, model, m = ctx.cfg, ctx.model, ctx.cfg.micro_batches(ctx.workload)
    d = cfg.degrees
    dense, expert = stage_params(model, cfg, stage, layers)
    weights, grads, optim = state_bytes(dense, expert, d.dp * d.cp, d.expert_dp, cfg.zero,
                                        state_bytes_per_param(cfg, ctx.workload))
    params = layer_tables(model)[0]
    if cfg.zero >= 3:  # one layer gathered at a time, forward and backward prefetch
        weights += 2 * ctx.rates.elem_bytes * max((sum(params[l]) for l in layers),
                                                  default=0.0) / d.tp
    terms = activation_terms(ctx)
    k = terms.slices
    n_full = fully_recomputed(cfg, layers)
    n_off = min(cfg.offload_layers, len(layers))  # their activations are on the host
    segments = (("full", 0, n_full), (terms.rest_mode, n_full, len(layers)))
    per_mb = sum(count * terms.layer_bytes(model, layer, mode)
                 for mode, lo, hi in segments
                 for _, count, layer in kind_counts(model, layers, max(lo, n_off),
                                                    max(hi, n_off)))
    if n_off:  # double buffering: one offloaded layer's activations on the GPU
        per_mb += terms.layer_bytes(model, layers[0], "full" if n_full else terms.rest_mode)
    last = stage == d.pp - 1
    if last and model.mtp_layers:  # MTP modules (DeepSeek-V3 sec. 2.2): a layer each, stored
        per_mb += model.mtp_layers * terms.layer_bytes(model, model.num_layers - 1,
                                                       terms.rest_mode)
    # chunks (or SlimPipe slices) in flight, each 1/vpp (1/k) of a micro-batch
    activations = per_mb * in_flight_chunks(stage, d.pp, cfg.vpp, m, k) / (cfg.vpp * k)
    if cfg.recompute == "full" and n_full and layers:  # one layer's full activations
        activations += terms.layer_bytes(model, layers[0], "none") / k
    logits = terms.logits_bytes * (1 + model.mtp_layers) if last else 0.0  # MTP: own logits
    base = weights + grads + optim + activations + logits
    return MemoryBreakdown(weights_bytes=weights, grads_bytes=grads, optimizer_bytes=optim,
                           activations_bytes=activations, logits_bytes=logits,
                           other_bytes=other_bytes(base, ctx.prof), capacity_bytes=capacity_bytes,
                           stage=stage)
