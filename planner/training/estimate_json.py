"""``planner estimate --format json``: one Estimate as a plain, stable JSON object.

Other tools read this output; keys are only ever added, never renamed or removed without
raising ``schema_version``. Formats only: every number comes from the Estimate.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping

from cost_models.training.memory import MemoryBreakdown
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.step import Estimate, TimeBreakdown

SCHEMA_VERSION = 1


def _time(time: TimeBreakdown) -> dict[str, float]:
    return {**asdict(time), "step_s": time.step_s}


def _memory(memory: MemoryBreakdown) -> dict[str, Any]:
    return {
        "peak_bytes_per_gpu": memory.peak_bytes,
        "capacity_bytes_per_gpu": memory.capacity_bytes,
        "headroom_bytes_per_gpu": memory.headroom_bytes,
        "weights_bytes": memory.weights_bytes,
        "grads_bytes": memory.grads_bytes,
        "optimizer_bytes": memory.optimizer_bytes,
        "activations_bytes": memory.activations_bytes,
        "logits_bytes": memory.logits_bytes,
        "other_bytes": memory.other_bytes,
        "stage": memory.stage,
    }


def _config(cfg: TrainingConfig, workload: Workload) -> dict[str, Any]:
    return {**cfg.flat_dict(), "expert_tp": cfg.degrees.expert_tp, "expert_dp": cfg.degrees.expert_dp,
            "micro_batches": cfg.micro_batches(workload), "schedule": cfg.schedule}


def _stages(est: Estimate) -> list[dict[str, Any]]:
    return [{**asdict(stage), "total_s": stage.total_s} for stage in est.stages]


def estimate_to_dict(est: Estimate, chosen: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON object of one estimate. Units are in the key names (``_s``, ``_bytes``).

    Keys (stable; print with ``sort_keys=True``):

    * ``schema_version`` (int, now 1), ``model``, ``cluster`` (names), ``num_gpus``.
    * ``step_time_s``, ``tokens_per_s_per_gpu``, ``model_tflops_per_gpu`` (model FLOPs, no
      recompute), ``mfu`` (fraction, 0-1), ``fits`` (bool: peak memory <= capacity).
    * ``time``: ``compute_s``, ``recompute_s``, ``tp_comm_s``, ``cp_comm_s``, ``ep_comm_s``,
      ``pp_comm_s``, ``bubble_s``, ``dp_comm_s`` (exposed part), ``optimizer_s`` (these add up
      to) ``step_s``.
    * ``dp_comm_total_s``: data-parallel communication before overlap.
    * ``memory`` (the most loaded GPU): ``peak_bytes_per_gpu``, ``capacity_bytes_per_gpu``,
      ``headroom_bytes_per_gpu`` (negative when it does not fit), ``weights_bytes``,
      ``grads_bytes``, ``optimizer_bytes``, ``activations_bytes``, ``logits_bytes``,
      ``other_bytes``, ``stage`` (its pipeline stage, from 0).
    * ``config``: the degrees and every training option of
      ``cost_models.training.config.TrainingConfig``, flat (``TrainingConfig.flat_dict``:
      ``tp``, ``pp``, ``dp``, ``cp``, ``ep``, ``etp`` (null: equal to tp), ``vpp``, ``micro_batch``,
      ``recompute``, ``recompute_layers``, ``sequence_parallel``, ``zero``, ...) plus
      ``expert_tp``, ``expert_dp``, ``micro_batches`` (per step) and ``schedule``.
    * ``workload``: ``seq_len``, ``global_batch`` (sequences), ``precision``, ``optimizer``,
      ``tokens`` (per step).
    * ``tiers``: communicating group (``tp``, ``cp``, ``dp_cp``, ``pp``, ``ep``) -> name of the
      slowest link tier it crosses; groups of one GPU are left out.
    * ``stages``: per pipeline stage, one micro-batch: ``stage``, ``layers``, ``compute_s``,
      ``recompute_s``, ``tp_comm_s``, ``cp_comm_s``, ``ep_comm_s``, ``pp_comm_s``, ``total_s``.
    * ``chosen`` (only when ``chosen`` is given, as ``planner estimate`` does): each setting
      left to auto (``recompute``, ``micro_batch``, ``etp``) -> the value picked, the fastest
      that fits (``{}`` when every setting was given). The same values are in ``config``.
    """
    out = {
        "schema_version": SCHEMA_VERSION,
        "model": est.model,
        "cluster": est.cluster,
        "num_gpus": est.num_gpus,
        "step_time_s": est.step_time_s,
        "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
        "model_tflops_per_gpu": est.model_tflops_per_gpu,
        "mfu": est.mfu,
        "fits": est.memory.fits,
        "time": _time(est.time),
        "dp_comm_total_s": est.dp_comm_total_s,
        "memory": _memory(est.memory),
        "config": _config(est.config, est.workload),
        "workload": {**asdict(est.workload), "tokens": est.workload.tokens},
        "tiers": dict(est.tiers),
        "stages": _stages(est),
    }
    if chosen is not None:
        out["chosen"] = dict(chosen)
    return out
