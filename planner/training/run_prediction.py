"""The cost model's prediction of a reference-job run, from its run record alone.

``planner check-run`` wires it: this module predicts (it may call the cost models), then
:mod:`planner.run.check_run` compares the plain numbers of a :class:`RunPrediction` with what
the record measured (that module imports no cost model).

The prediction is of the job *as it ran*: the model the reference job built (its recorded
``shape``: layers, hidden size, heads, FFN widths, vocabulary, experts), the plan's degrees,
layer split and cluster, and the job's ``implementation`` (fp32, SGD, one gradient bucket
all-reduced after the backward pass, no overlap; see
:data:`planner.run.reference_job.shape.IMPLEMENTATION`), with the given profile (else the
plan's own).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cost_models.compute import layer_launches
from cost_models.model_spec import ModelSpec, MoESpec
from cost_models.profile import Profile
from cost_models.training.step import Estimate, estimate

__all__ = ["RunPrediction", "StagePrediction", "estimate_record", "job_model", "predict_run",
           "prediction_of"]


@dataclass(frozen=True)
class StagePrediction:
    """One pipeline stage, one micro-batch (seconds), as :class:`~cost_models.training.stage.StageCost`."""

    layers: int
    compute_s: float
    recompute_s: float
    tp_comm_s: float
    ep_comm_s: float
    quota_solve_s: float = 0.0  # the job's dispatch bookkeeping (``quota_solve_s``)


@dataclass(frozen=True)
class RunPrediction:
    """The predicted figures ``check-run`` compares (seconds per step), plain numbers only."""

    step_s: float
    dp_comm_s: float  # the part of the step spent in the DP sync (after overlap)
    dp_comm_total_s: float  # the whole DP gradient all-reduce (before overlap)
    optimizer_s: float
    tp: int
    pp: int
    dp: int
    ep: int
    stages: tuple[StagePrediction, ...]


def job_model(shape: dict[str, Any]) -> ModelSpec:
    """The reference job's model as a ModelSpec (GELU MLP, LayerNorm, biased linears)."""
    moe = None
    if shape.get("num_experts"):
        moe = MoESpec(num_experts=shape["num_experts"], top_k=shape["top_k"],
                      expert_ffn_hidden=shape["expert_ffn"], expert_bias=True)
    h, heads = shape["hidden"], shape["heads"]
    return ModelSpec(name="reference-job", num_layers=shape["num_layers"], hidden_size=h,
                     num_heads=heads, num_kv_heads=heads, head_dim=h // heads,
                     ffn_hidden_size=shape["ffn"], vocab_size=shape["vocab"], glu=False,
                     activation="gelu", norm="layernorm", qkv_bias=True, attn_out_bias=True,
                     mlp_bias=True, moe=moe,
                     moe_layers=tuple(shape.get("moe_layers") or ()) if moe else ())


def estimate_record(record: dict[str, Any], profile: Profile | None, plan=None) -> Estimate:
    """The cost model's estimate of the job the record describes (see module docstring);
    ``plan``: the record's plan when already read."""
    from planner.plan.document import plan_from_dict

    plan = plan or plan_from_dict(record["plan"])
    shape, impl = record["shape"], record.get("implementation", {})
    model = job_model(shape)
    planned = plan.workload()
    workload = replace(planned, seq_len=shape["seq_len"],
                       global_batch=shape.get("global_batch") or (
                           shape["dp"] * shape["micro_batches"] * shape["micro_batch"]),
                       precision=impl.get("precision", planned.precision),
                       optimizer=impl.get("optimizer", planned.optimizer))
    cfg = plan.parallel_config()
    overrides = {k: v for k, v in impl.items() if k not in ("precision", "optimizer")
                 and hasattr(cfg, k)}
    cfg = replace(cfg, micro_batch=shape["micro_batch"], **overrides)
    return estimate(model, plan.cluster(), workload, cfg, profile or plan.profile(),
                    tuple(plan.node_order) if getattr(plan, "node_order", None) else None)


def prediction_of(est: Estimate, extra_dp_s: float = 0.0, extra_compute_s: float = 0.0,
                  quota_s: tuple[float, ...] = ()) -> RunPrediction:
    """The figures of ``est`` that a run record can be compared with; ``extra_dp_s``: DP
    synchronisation the job does beyond the step model's (exposed, no overlap), added to the
    DP all-reduce and the step; ``extra_compute_s``: per step, compute the job does beyond
    the step model's on its most loaded stage (one stage: added to it and to the step);
    ``quota_s``: per stage, the job's dispatch bookkeeping per micro-batch
    (:func:`quota_solve_s`), the slowest stage's step total added to the step."""
    t = est.time
    degrees = est.config.degrees
    m = est.config.micro_batches(est.workload)
    quota_s = quota_s or (0.0,) * len(est.stages)
    stages = tuple(StagePrediction(s.layers, s.compute_s, s.recompute_s, s.tp_comm_s,
                                   s.ep_comm_s, q) for s, q in zip(est.stages, quota_s))
    if extra_compute_s and len(stages) == 1:
        stages = (replace(stages[0], compute_s=stages[0].compute_s + extra_compute_s / m),)
    solve = m * max(quota_s, default=0.0)
    return RunPrediction(
        step_s=t.step_s + extra_dp_s + extra_compute_s + solve,
        dp_comm_s=t.dp_comm_s + extra_dp_s,
        dp_comm_total_s=est.dp_comm_total_s + extra_dp_s,
        optimizer_s=t.optimizer_s, tp=degrees.tp, pp=degrees.pp, dp=degrees.dp, ep=degrees.ep,
        stages=stages)


def expert_sync_extra_s(record: dict[str, Any], est: Estimate, plan, prof: Profile) -> float:
    """What the job's expert-gradient sync costs beyond the step model's, on the slowest
    stage. The job (``implementation.expert_grad_sync == "all-experts-over-dp"``,
    ``reference_job/ep.py``) all-reduces, per MoE layer, one fp32 buffer of every logical
    expert's gradient over the whole DP group; the step model all-reduces each rank's own
    experts over the expert-DP group (Megatron's way). Both priced by
    :func:`cost_models.communication.all_reduce_s` on the plan's groups with ``prof``. Around
    its all-reduce the job zeroes the buffer (E x W fp32 written), adds each local slot's
    gradient into it (its W read twice, written once) and copies the sum back into the slot's
    gradient (read, write): :func:`expert_pack_bytes`, at the GPU's memory bandwidth times
    ``Profile.stream_eff`` (streaming passes over flat buffers)."""
    from cost_models import communication as comm
    from cost_models.groups import stage_views
    from cost_models.model_spec import mlp_params
    from cost_models.training.layers import stage_params

    shape = record["shape"]
    impl = record.get("implementation", {})
    d = est.config.degrees
    if impl.get("expert_grad_sync") != "all-experts-over-dp" or d.ep <= 1 or d.dp <= 1 \
            or not shape.get("num_experts"):
        return 0.0
    model = job_model(shape)
    per_expert = mlp_params(model.hidden_size, model.moe.expert_ffn_hidden, model.glu,
                            model.moe.expert_bias)
    views = stage_views(plan.cluster(), d, tuple(plan.node_order)
                        if getattr(plan, "node_order", None) else None)
    slots = _slots_per_gpu(record, d.ep)
    stream = plan.cluster().slowest_gpu.hbm_bw_bytes_per_s * prof.stream_eff
    pack_s = expert_pack_bytes(model.moe.num_experts, slots, per_expert) / stream
    extra = 0.0
    for stage, s in enumerate(est.stages):
        layers = _stage_layers(record, stage)
        moe_layers = sum(1 for i in layers if model.moe_layers and model.moe_layers[i])
        job = moe_layers * (comm.all_reduce_s(views[stage].dp_cp,
                                              4.0 * model.moe.num_experts * per_expert, prof)
                            + pack_s)
        _, expert = stage_params(model, est.config, stage, layers)
        modelled = comm.all_reduce_s(views[stage].edp, 4.0 * expert, prof)
        extra = max(extra, job - modelled)
    return extra


def expert_pack_bytes(num_experts: int, slots: int, per_expert: int) -> float:
    """Memory traffic of one MoE layer's expert-gradient sync in the job around its
    all-reduce (``reference_job/ep.py`` ``sync_expert_grads``), fp32: ``total.zero_()`` writes
    every logical expert's W values, each local slot's ``total[e] += grad`` reads both and
    writes one (3W), and its ``grad.copy_(total[e])`` reads and writes W (2W)."""
    return 4.0 * per_expert * (num_experts + 5 * slots)


def _slots_per_gpu(record: dict[str, Any], ep: int) -> int:
    """Expert slots each GPU of the record's plan holds (as ``runtime.expert_maps``): the
    placement's, else one replica per expert split over ``ep``."""
    placement = record["plan"].get("experts") or {}
    return placement.get("slots_per_gpu", record["shape"]["num_experts"] // ep)


def _stage_layers(record: dict[str, Any], stage: int) -> tuple[int, ...]:
    """The model layers of pipeline stage ``stage`` in the record's plan."""
    return tuple(record["plan"]["training"]["stages"][stage]["layers"])


# The reference job's expert-parallel MoE forward (reference_job/ep.py ExpertDispatch), in
# torch calls: routing and bookkeeping (router linear, top-k, softmax, bincount, the count
# buffers, token gather, the gather grouping the received rows by slot, the cat of the
# experts' outputs and the gather restoring arrival order, gate gather and multiply, output
# buffer, the final index_add: 14) and, per local slot that receives tokens, 3 (fc1, GELU,
# fc2 on its contiguous rows); around them the block's attention half and norms as the step
# model counts a dense layer's (14). Its backward launches twice as many. (Until 2026-11-27
# each slot gathered its rows and added its output into a fresh copy of the whole buffer:
# 12 + 6 per slot.)
JOB_MOE_FIXED_CALLS = 14
JOB_MOE_CALLS_PER_SLOT = 3
JOB_LAYER_OTHER_CALLS = 14


def expert_loop_extra_s(record: dict[str, Any], est: Estimate, prof: Profile) -> float:
    """The job's expert-parallel MoE layers launch other kernels than the Megatron layer the
    step model counts (``cost_models.compute.layer_launches``): the difference, forward and
    backward, of the most loaded stage over the step's micro-batches, at ``prof``'s
    ``kernel_overhead_s`` (none when the model counts more)."""
    from cost_models.training.context import config_shard

    shape = record["shape"]
    d = est.config.degrees
    if d.ep <= 1 or not shape.get("num_experts"):
        return 0.0
    slots = _slots_per_gpu(record, d.ep)
    moe = shape.get("moe_layers") or ()
    first_moe = next(i for i, on in enumerate(moe) if on) if any(moe) else 0
    model = job_model(shape)
    counted = layer_launches(model, first_moe, config_shard(est.config, est.workload))
    job = 3 * (JOB_LAYER_OTHER_CALLS + JOB_MOE_FIXED_CALLS + JOB_MOE_CALLS_PER_SLOT * slots)
    extra_calls = max(0, job - counted.fwd - counted.bwd)
    worst = max(sum(1 for i in _stage_layers(record, s) if i < len(moe) and moe[i])
                for s in range(len(est.stages)))
    busiest = max(shape.get("replica_micro_batches") or [shape["micro_batches"]])
    return extra_calls * worst * busiest * prof.kernel_overhead_s


def quota_solve_s(record: dict[str, Any], est: Estimate, prof: Profile) -> tuple[float, ...]:
    """Per stage, per micro-batch: the host time of the job's expert dispatches
    (``reference_job/ep.py`` ``dispatch_bookkeeping``, once per MoE layer and micro-batch on
    every EP rank: the real-time quotas and the dispatch's splits) at ``prof``'s calibrated
    ``dispatch_solve_s + dispatch_solve_per_expert_s * experts``; 0 without EP."""
    shape = record["shape"]
    d = est.config.degrees
    if d.ep <= 1 or not shape.get("num_experts"):
        return (0.0,) * len(est.stages)
    moe = shape.get("moe_layers") or ()
    one = prof.dispatch_solve_s + prof.dispatch_solve_per_expert_s * shape["num_experts"]
    return tuple(one * sum(1 for i in _stage_layers(record, s) if i < len(moe) and moe[i])
                 for s in range(len(est.stages)))


def predict_run(record: dict[str, Any], profile: Profile | None) -> RunPrediction:
    """The prediction of the run ``record`` describes, with ``profile`` (else the plan's)."""
    from planner.plan.document import plan_from_dict

    plan = plan_from_dict(record["plan"])
    prof = profile or plan.profile()
    est = estimate_record(record, prof, plan)
    return prediction_of(est, expert_sync_extra_s(record, est, plan, prof),
                         expert_loop_extra_s(record, est, prof), quota_solve_s(record, est, prof))
