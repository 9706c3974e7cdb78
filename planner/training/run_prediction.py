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


def estimate_record(record: dict[str, Any], profile: Profile | None) -> Estimate:
    """The cost model's estimate of the job the record describes (see module docstring)."""
    from planner.plan.document import plan_from_dict

    plan = plan_from_dict(record["plan"])
    shape, impl = record["shape"], record.get("implementation", {})
    model = job_model(shape)
    planned = plan.workload()
    workload = replace(planned, seq_len=shape["seq_len"],
                       global_batch=shape["dp"] * shape["micro_batches"] * shape["micro_batch"],
                       precision=impl.get("precision", planned.precision),
                       optimizer=impl.get("optimizer", planned.optimizer))
    cfg = plan.parallel_config()
    overrides = {k: v for k, v in impl.items() if k not in ("precision", "optimizer")
                 and hasattr(cfg, k)}
    cfg = replace(cfg, micro_batch=shape["micro_batch"], **overrides)
    return estimate(model, plan.cluster(), workload, cfg, profile or plan.profile(),
                    tuple(plan.node_order) if getattr(plan, "node_order", None) else None)


def prediction_of(est: Estimate) -> RunPrediction:
    """The figures of ``est`` that a run record can be compared with."""
    t = est.time
    degrees = est.config.degrees
    return RunPrediction(
        step_s=t.step_s, dp_comm_s=t.dp_comm_s, dp_comm_total_s=est.dp_comm_total_s,
        optimizer_s=t.optimizer_s, tp=degrees.tp, pp=degrees.pp, dp=degrees.dp, ep=degrees.ep,
        stages=tuple(StagePrediction(s.layers, s.compute_s, s.recompute_s, s.tp_comm_s,
                                     s.ep_comm_s) for s in est.stages))


def predict_run(record: dict[str, Any], profile: Profile | None) -> RunPrediction:
    """The prediction of the run ``record`` describes, with ``profile`` (else the plan's)."""
    return prediction_of(estimate_record(record, profile))
