"""Data-parallel synchronisation of one stage: gradient reduction, parameter gather, what of
them overlap hides, and the optimizer step that follows.

Overlap assumptions (explicit, each a Megatron option in ``TrainingConfig``):
* The gradient reduce-scatter (all-reduce without ZeRO) hides behind the last micro-batch's
  backward pass when ``overlap_grad_reduce`` (buckets start as their gradients are final;
  with activation recomputation the backward pass includes the recomputed forwards, which
  run layer by layer between the buckets: Megatron-Core's ``CheckpointFunction.backward``
  reruns a layer's forward inside the autograd backward, as in Chen et al. 2016); the
  parameter all-gather hides behind the first micro-batch's forward pass when
  ``overlap_param_gather``.
* FSDP / ZeRO-3 (Zhao et al. 2023, sec. 3.2): per micro-batch, weights are gathered before the
  forward and again before the backward, gradients reduce-scattered after it, each prefetched
  behind the neighbouring layers' compute (in the backward, their recomputed forwards too).
* What overlap hides still costs compute: the collective holds ``COMM_SM_SHARE`` of the SMs
  while it runs beside the compute (``stage.overlapped_exposed_s``, as for the expert
  all-to-all).
* The optimizer step is memory bound (``Workload.optimizer_bytes_per_param`` over HBM
  bandwidth at ``Profile.stream_eff``: one streaming pass over flat buffers, as fused Adam and
  foreach SGD run it) and runs after the last reduction.

The forward and backward windows split a stage's compute 1 : 2, the FLOP ratio of a
transformer's forward and backward passes (Narayanan et al., SC'21, appendix: the backward pass
costs twice the forward; Kaplan et al. 2020, sec. 2.1: C ~ 6N = 2N forward + 4N backward).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cost_models import communication as comm
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.context import StepContext
from cost_models.training.layers import stage_params
from cost_models.training.stage import StageCost, overlapped_exposed_s

__all__ = ["StageSync", "backward_window_s", "forward_window_s", "stage_sync"]


@dataclass(frozen=True, kw_only=True)
class StageSync:
    """One stage's data-parallel synchronisation per step (seconds)."""

    exposed_s: float  # communication overlap does not hide, and the compute the rest slows
    total_s: float  # communication before overlap
    optimizer_s: float


def forward_window_s(compute_s: float) -> float:
    """The forward pass's share of a micro-batch's forward + backward compute: 1/3 (SC'21
    appendix, module docstring)."""
    return compute_s / 3


def backward_window_s(compute_s: float) -> float:
    """The backward pass's share of a micro-batch's forward + backward compute: 2/3 (SC'21
    appendix, module docstring)."""
    return compute_s * 2 / 3


def _dp_comm(ctx: StepContext, stage: int, dense: float, expert: float) -> tuple[float, float]:
    """(gradient reduction, parameter gather) seconds for one stage's parameters: gradients
    in fp32 (or the compute dtype, ``TrainingConfig.grad_reduce_in_fp32``), parameters at
    ``Workload.param_bytes`` (4-bit in nvfp4)."""
    cfg, views, prof = ctx.cfg, ctx.views[stage], ctx.prof
    elem, param = ctx.rates.elem_bytes, ctx.workload.param_bytes
    g = 4 if cfg.grad_reduce_in_fp32 else elem
    if cfg.zero == 0:
        return (comm.all_reduce_s(views.dp_cp, g * dense, prof)
                + comm.all_reduce_s(views.edp, g * expert, prof)), 0.0
    grads = (comm.reduce_scatter_s(views.dp_cp, g * dense, prof)
             + comm.reduce_scatter_s(views.edp, g * expert, prof))
    params = (comm.all_gather_s(views.dp_cp, param * dense, prof)
              + comm.all_gather_s(views.edp, param * expert, prof))
    return grads, params


def optimizer_bytes_per_param(cfg: TrainingConfig, workload: Workload) -> int:
    """HBM bytes the optimizer step moves per parameter (``Workload.optimizer_bytes_per_param``)
    with the config's widths: the gradient read at its width (``grad_reduce_in_fp32``), Adam's
    two moments read and written at ``optimizer_moment_bytes``."""
    moved = workload.optimizer_bytes_per_param
    if not cfg.grad_reduce_in_fp32:
        moved -= 4 - workload.elem_bytes
    if workload.optimizer == "adam":
        moved -= 2 * 2 * (4 - cfg.optimizer_moment_bytes)
    return moved


def _since_last_sync_s(cost: StageCost, micro_batches: int) -> float:
    """Compute a stage's DP ranks run between their last blocking collective and the gradient
    reduction (what their arrival skew grows over, ``communication.arrival_skew_s``): the whole
    step's compute where the stage has no TP, EP or pipeline exchange, else one layer's
    backward (the last exchange sits in the first layer's backward)."""
    if cost.tp_comm_s == 0 and cost.ep_comm_s == 0 and cost.pp_comm_s == 0:
        return micro_batches * cost.compute_s
    return backward_window_s(cost.compute_s) / max(1, cost.layers)


def stage_sync(ctx: StepContext, stage: int, layers: Sequence[int], cost: StageCost,
               micro_batches: int) -> StageSync:
    """Data-parallel communication and optimizer step of ``stage`` (module docstring)."""
    cfg, d, m = ctx.cfg, ctx.cfg.degrees, micro_batches
    dense, expert = stage_params(ctx.model, cfg, stage, layers)
    grads, params = _dp_comm(ctx, stage, dense, expert)
    # the backward of a recomputing stage runs each layer's recomputed forward too: buckets
    # are reduced (and FSDP's next layers gathered) behind both
    bwd_compute = backward_window_s(cost.compute_s) + cost.recompute_s
    bwd_window = bwd_compute if cfg.overlap_grad_reduce else 0.0
    fwd_window = forward_window_s(cost.compute_s) if cfg.overlap_param_gather else 0.0
    exposed = overlapped_exposed_s(grads, bwd_window) + overlapped_exposed_s(params, fwd_window)
    if grads > 0:  # overlapped or not, the last bucket waits for the slowest rank
        exposed += comm.arrival_skew_s(_since_last_sync_s(cost, m), ctx.prof)
    if cfg.zero >= 3:  # every micro-batch: gather, gather again, reduce-scatter
        fwd_c = forward_window_s(cost.compute_s)
        exposed = m * (overlapped_exposed_s(params, fwd_c)
                       + overlapped_exposed_s(params + grads, bwd_compute))
        grads, params = m * grads, 2 * m * params
    shard = (dense / (d.dp * d.cp) + expert / d.expert_dp) if cfg.zero else dense + expert
    optimizer = shard * optimizer_bytes_per_param(cfg, ctx.workload) / (
        ctx.rates.hbm_bytes_per_s * ctx.prof.stream_eff)
    return StageSync(exposed_s=exposed, total_s=grads + params, optimizer_s=optimizer)
