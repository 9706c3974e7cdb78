"""Checks of a plan's ``training`` section: the training options fit the model, workload and
cluster, every layer sits on exactly one stage, the batch adds up (and so do unequal DP
batch shares), the schedule is the one the
options run, and the prediction holds what the reports read with every stage's memory fitting.
"""
from __future__ import annotations

import math

from typing import Any

from cost_models.parallel import ConfigError
from cost_models.training.config import check_config
from planner.plan.document import Plan


def training_problems(plan: Plan, model, cluster) -> list[str]:
    """Every broken invariant of the training section of ``plan``."""
    try:
        workload, cfg = plan.workload(), plan.parallel_config()
    except (TypeError, ValueError, KeyError) as err:
        return [f"workload or training options unreadable ({err})"]
    problems: list[str] = []
    try:
        check_config(model, workload, cfg, plan.pool("train").num_gpus)
    except ConfigError as err:
        problems.append(f"config {err}")
    problems += _stage_problems(plan, model.num_layers, cfg.degrees.pp)
    problems += _prediction_problems(plan.prediction)
    problems += _memory_problems(plan.prediction)
    if plan.micro_batches * cfg.micro_batch * cfg.degrees.dp != workload.global_batch:
        problems.append(f"micro_batches {plan.micro_batches} x micro_batch {cfg.micro_batch} x "
                        f"dp {cfg.degrees.dp} != global batch {workload.global_batch}")
    problems += _share_problems(plan.training["options"].get("dp_shares"), cfg.degrees.dp,
                                plan.micro_batches)
    if plan.schedule != cfg.schedule:
        problems.append(f"schedule '{plan.schedule}' but the config runs '{cfg.schedule}'")
    return problems


def _share_problems(shares: Any, dp: int, micro_batches: int) -> list[str]:
    """Unequal DP batch shares: one count >= 1 per replica, summing to dp x micro_batches."""
    if shares is None:
        return []
    if (not isinstance(shares, list) or len(shares) != dp
            or any(type(k) is not int or k < 1 for k in shares)):
        return [f"dp_shares must be {dp} integers >= 1, one per DP replica, got {shares!r}"]
    if sum(shares) != dp * micro_batches:
        return [f"dp_shares sum to {sum(shares)}, the step has dp {dp} x micro_batches "
                f"{micro_batches} = {dp * micro_batches}"]
    return []


def _stage_problems(plan: Plan, num_layers: int, pp: int) -> list[str]:
    if len(plan.stages) != pp:
        return [f"{len(plan.stages)} stages for pp={pp}"]
    layers = sorted(layer for s in plan.stages for layer in s["layers"])
    if layers != list(range(num_layers)):
        return [f"stages do not hold each of the {num_layers} layers exactly once"]
    for s in plan.stages:
        chunk_layers = [l for first, n in s["chunks"] for l in range(first, first + n)]
        if chunk_layers != s["layers"]:
            return [f"stage {s['stage']}: chunks do not match its layers"]
    return []


PREDICTION_KEYS = ("config", "memory", "mfu", "stage_memory", "stages", "step_time_s", "tiers",
                   "time", "tokens_per_s_per_gpu")
TIME_KEYS = ("bubble_s", "compute_s", "cp_comm_s", "dp_comm_s", "ep_comm_s", "optimizer_s",
             "pp_comm_s", "recompute_s", "step_s", "tp_comm_s")


def _prediction_problems(prediction: Any) -> list[str]:
    """The prediction holds what the reports read (``planner estimate``'s JSON keys)."""
    if not isinstance(prediction, dict):
        return ["prediction is not an object"]
    missing = [k for k in PREDICTION_KEYS if k not in prediction]
    if missing:
        return [f"prediction lacks {missing}"]
    time = prediction["time"]
    if not isinstance(time, dict) or any(not finite_number(time.get(k)) for k in TIME_KEYS):
        return [f"prediction.time needs numbers for {list(TIME_KEYS)}"]
    wrong = [k for k in PREDICTION_NUMBERS if not finite_number(prediction[k])]
    if wrong:
        return [f"prediction needs finite numbers for {wrong}"]
    return []


PREDICTION_NUMBERS = ("mfu", "step_time_s", "tokens_per_s_per_gpu")


def finite_number(value: Any) -> bool:
    """A finite int or float (JSON's true/false are not numbers here)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _memory_problems(prediction: dict[str, Any]) -> list[str]:
    if not isinstance(prediction, dict):
        return []
    return [f"stage {m['stage']} needs {m['peak_bytes'] / 2**30:.1f} GiB per GPU, it has "
            f"{m['capacity_bytes'] / 2**30:.1f} GiB" for m in prediction.get("stage_memory", [])
            if m["peak_bytes"] > m["capacity_bytes"]]
