"""``planner check-run``: a run record's measured times against the cost model's prediction.

The prediction is of the job *as it ran*: the model the reference job built (its recorded
``shape``: layers, hidden size, heads, FFN widths, vocabulary, experts), the plan's degrees,
layer split and cluster, and the job's ``implementation`` (fp32, SGD, one gradient bucket
all-reduced after the backward pass, no overlap; see :data:`planner.run.reference_job.IMPLEMENTATION`),
with the profile from ``--calibration`` (else the plan's own).

Measured figures are medians over the recorded steps after the first (start-up skew and
one-off allocations land in step 0), per rank, then per stage the slowest of its ranks:

* step: the slowest rank's step time;
* per stage: compute (forward + backward over all micro-batches, communication excluded),
  TP all-reduces, EP all-to-all + count all-gather, and the pipeline wait (time blocked on
  receives: bubble + transfers). Its prediction is the step minus everything the stage does
  itself, i.e. the time the model says the stage sits idle or transfers;
* DP gradient all-reduce and the optimizer step (the slowest stage's).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cost_models.model_spec import ModelSpec, MoESpec
from cost_models.parallel import ParallelConfig, Workload
from cost_models.profile import Profile
from cost_models.training.step import Estimate, estimate
from planner.errors import SpecError


@dataclass(frozen=True)
class Row:
    """One compared quantity (seconds per step)."""

    what: str
    predicted_s: float | None
    measured_s: float

    @property
    def error(self) -> float | None:
        if self.predicted_s is None or self.measured_s <= 0:
            return None
        return self.predicted_s / self.measured_s - 1.0


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


def predict_record(record: dict[str, Any], profile: Profile | None) -> Estimate:
    """The cost model's estimate of the job the record describes (see module docstring)."""
    from planner.plan.document import plan_from_dict

    plan = plan_from_dict(record["plan"])
    shape, impl = record["shape"], record.get("implementation", {})
    model = job_model(shape)
    workload = Workload(seq_len=shape["seq_len"],
                        global_batch=shape["dp"] * shape["micro_batches"] * shape["micro_batch"],
                        precision=impl.get("precision", plan.workload().precision),
                        optimizer=impl.get("optimizer", plan.workload().optimizer))
    cfg: ParallelConfig = plan.parallel_config()
    overrides = {k: v for k, v in impl.items() if k not in ("precision", "optimizer")
                 and hasattr(cfg, k)}
    cfg = replace(cfg, micro_batch=shape["micro_batch"], **overrides)
    return estimate(model, plan.cluster(), workload, cfg, profile or plan.profile(),
                    tuple(plan.node_order) if getattr(plan, "node_order", None) else None)


def _median_steps(steps: list[dict[str, float]], kind: str) -> float:
    values = [s.get(kind, 0.0) for s in (steps[1:] if len(steps) > 1 else steps)]
    return statistics.median(values) if values else 0.0


def compare(record: dict[str, Any], est: Estimate) -> list[Row]:
    """Predicted against measured, step first, then per stage, then DP and optimizer."""
    ranks = record["rank_timings"]
    m = record["shape"]["micro_batches"]
    t = est.time
    rows = [Row("step", t.step_s, _median_steps([{"step": x} for x in record["step_times_max_s"]],
                                                "step"))]
    by_stage: dict[int, list[dict]] = {}
    for r in ranks:
        by_stage.setdefault(r["stage"], []).append(r)
    for s, stage in enumerate(est.stages):
        members = by_stage.get(s, [])

        def worst(kind: str, members=members) -> float:
            return max((_median_steps(r["steps"], kind) for r in members), default=0.0)
        compute = max((_median_steps(r["steps"], "forward") + _median_steps(r["steps"], "backward")
                       for r in members), default=0.0)
        own = m * (stage.compute_s + stage.recompute_s + stage.tp_comm_s + stage.ep_comm_s)
        rows.append(Row(f"stage {s}: compute ({stage.layers} layers)", m * stage.compute_s, compute))
        if est.config.tp > 1:
            rows.append(Row(f"stage {s}: TP all-reduce", m * stage.tp_comm_s, worst("tp_comm")))
        if est.config.ep > 1 and stage.ep_comm_s > 0:
            rows.append(Row(f"stage {s}: EP all-to-all", m * stage.ep_comm_s, worst("ep_comm")))
            rows.append(Row(f"stage {s}: EP quota solve (not modelled)", None,
                            worst("quota_solve")))
        if est.config.pp > 1:
            idle = max(0.0, t.step_s - own - t.dp_comm_s - t.optimizer_s)
            rows.append(Row(f"stage {s}: pipeline wait (bubble + transfers)", idle,
                            worst("pp_wait")))
    if est.config.dp > 1:
        rows.append(Row("DP gradient all-reduce", est.dp_comm_total_s,
                        max(_median_steps(r["steps"], "dp_comm") for r in ranks)))
    rows.append(Row("optimizer step", t.optimizer_s,
                    max(_median_steps(r["steps"], "optimizer") for r in ranks)))
    return rows


def check_record(record: dict[str, Any], source: str) -> None:
    """Raise a SpecError naming the first field a comparable run record lacks."""
    if not isinstance(record, dict) or record.get("schema") != "planner.run-record/v1":
        raise SpecError(source, "schema", "a run record ('planner.run-record/v1', written by "
                        "'planner launch --record' or the reference job's --out)",
                        record.get("schema") if isinstance(record, dict) else None)
    for key, what in (("plan", "the plan the job ran"),
                      ("shape", "the reference job's model and batch"),
                      ("rank_timings", "per-rank timings (the reference job writes them)"),
                      ("step_times_max_s", "per-step times")):
        if key not in record:
            raise SpecError(source, key, what + "; a user script's launch record has none")


def load_record(path: Path) -> dict[str, Any]:
    import json

    if not path.is_file():
        raise SpecError(str(path), "", "an existing run record JSON file")
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise SpecError(f"{path}:{err.lineno}", "", f"valid JSON ({err.msg})") from None
    check_record(record, str(path))
    return record
