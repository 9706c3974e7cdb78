"""Serving calibration parameters, next to the training profile they extend.

The physical efficiencies (GEMM, attention, HBM, links) are the training
:class:`cost_models.profile.Profile`'s; serving adds what only an inference engine has: the
fixed time of one engine iteration (scheduling, sampling, detokenisation, the CUDA-graph replay
of a decode step) and the share of HBM the engine may take. Defaults live under ``"serving"``
in ``cost_models/data/profiles.json`` (fitted by ``benchmarks/serving_calibration.py``); a
calibration file's ``"serving"`` object overrides them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path


@dataclass(frozen=True)
class ServingProfile:
    """Times in seconds; fractions in (0, 1]."""

    decode_step_overhead_s: float = 0.004  # one decode iteration's fixed cost, CUDA graphs on
    prefill_step_overhead_s: float = 0.010  # one prefill iteration's fixed cost
    per_request_overhead_s: float = 0.0  # each running request's share of a decode iteration
    eager_kernel_overhead_s: float = 8e-6  # launch gap per kernel when CUDA graphs are off
    kv_read_efficiency: float = 0.8  # paged-attention KV reads, fraction of HBM bandwidth
    # weights streamed by decode's skinny GEMMs, fraction of HBM bandwidth; 0: the training
    # profile's hbm_efficiency (what the shipped profiles use). planner calibrate measures it
    # apart: on a GPU a layer's eager element-wise kernels (what hbm_efficiency is fitted on)
    # reached 0.68 of the bandwidth where an M = 1 GEMM read its weight at 0.86 (lent H200)
    weight_read_efficiency: float = 0.0
    # decode attention kernels when compute bound (MLA, long MTP chains): FlashMLA reaches
    # 660 of H800's 989 dense TFLOP/s (deepseek-ai/FlashMLA README)
    decode_attention_efficiency: float = 0.66
    mem_fraction: float = 0.9  # HBM share the engine takes (vLLM gpu_memory_utilization)
    kv_transfer_efficiency: float = 0.7  # prefill->decode KV transfer, fraction of link rate

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"serving profile {f.name}={value!r} must be a number >= 0")
        for name in ("kv_read_efficiency", "mem_fraction", "kv_transfer_efficiency",
                     "decode_attention_efficiency"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"serving profile {name}={getattr(self, name)} must be in (0, 1]")
        if self.weight_read_efficiency > 1:
            raise ValueError(f"serving profile weight_read_efficiency="
                             f"{self.weight_read_efficiency} must be in (0, 1], or 0 for the "
                             "training profile's hbm_efficiency")


def merge_serving(base: ServingProfile, overrides: dict) -> ServingProfile:
    if not isinstance(overrides, dict):
        raise ValueError(f"serving profile overrides must be an object, got {overrides!r}")
    known = {f.name for f in fields(ServingProfile)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown serving profile field(s) {unknown}; known: {sorted(known)}")
    return replace(base, **overrides)


@lru_cache(maxsize=1)
def _defaults() -> dict:
    text = resources.files("cost_models").joinpath("data/profiles.json").read_text()
    return json.loads(text).get("serving", {})


def default_serving_profile(gpu_name: str) -> ServingProfile:
    """The ``serving.common`` block, then ``serving.gpus[gpu_name]`` if present."""
    data = _defaults()
    prof = merge_serving(ServingProfile(), data.get("common", {}))
    return merge_serving(prof, data.get("gpus", {}).get(gpu_name, {}))


def serving_overrides(prof: ServingProfile, path: str | Path) -> ServingProfile:
    """Apply the ``"serving"`` object of a calibration JSON (absent: unchanged)."""
    data = json.loads(Path(path).read_text())
    block = data.get("serving", {}) if isinstance(data, dict) else {}
    if "common" in block or "gpus" in block:
        return merge_serving(prof, block.get("common", {}))
    return merge_serving(prof, block)
