"""Serving parameters from ``planner calibrate``'s decode benchmarks (``decode_gemm``,
``decode_attention`` in its raw record), on the serving model's own formulas.

* **Decode attention** (one query per sequence against its KV cache): the serving model prices
  it max(FLOPs / (peak * ``decode_attention_efficiency``), KV bytes / (memory bandwidth *
  ``kv_read_efficiency``)), every cached KV byte read once per step (``latency.decode_step``;
  PagedAttention, Kwon et al. SOSP 2023). One query does 4 FLOPs per 2 * elem_bytes bytes of
  KV, far below any machine's ridge point (the roofline, Williams et al. 2009), so the memory
  term is its time: one unknown, the KV read rate, least squares in relative error over the
  caches that stream from memory (:func:`cost_models.fitting.fit_bandwidth`: at least
  ``STREAM_MIN_BYTES``, smaller ones run from cache). Over the memory bandwidth the training
  fit measured (the device's ``memory_bw``, which the serving model divides by) it is
  ``kv_read_efficiency``, kept at most 1. This is what a calibration file's ``"serving"`` sets.
* **Skinny GEMMs** (``x[M, K] @ W[K, N]``, the weight beyond the caches): the serving model's
  ``latency.gemm_s``, max(FLOPs with M padded to ``MMA_ROWS`` / (peak * ``gemm_efficiency``),
  (weight + activation bytes) / (bandwidth * ``weight_read_efficiency``)). The weight-read
  rate of the GEMM with the fewest rows (M = 1 does 1 / elem_bytes FLOP per weight byte:
  memory-bound on any machine) over the bandwidth, at most 1, is ``weight_read_efficiency``:
  one case, one unknown. It is not the training fit's ``hbm_efficiency``, which a layer's
  eager element-wise kernels set (on the lent H200 0.68 against 0.86 for the weight reads).
  Every case gets a residual.

The serving model counts KV and weights in bf16 (2 bytes); the benchmarks' elements have
``elem_bytes`` each (fp32 on CPU), so each case is priced on a device whose bandwidth is scaled
by 2 / elem_bytes: the bytes actually read take the time they take at the measured bandwidth,
and the FLOPs are unchanged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from cost_models.fitting import (CalibrationFit, Residual, fit_bandwidth, median_cases,
                                 one_tier_view)
from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile
from cost_models.serving.config import PoolLayout
from cost_models.serving.latency import Costing, InstanceHardware, decode_step, gemm_s
from cost_models.serving.memory import BF16
from cost_models.serving.profile import ServingProfile

__all__ = ["ServingFit", "decode_attention_s", "decode_gemm_s", "fit_kv_read", "fit_serving",
           "weight_read"]


@dataclass(frozen=True)
class ServingFit:
    """What the decode benchmarks say; ``kv_read_efficiency`` and ``weight_read_efficiency``
    are applied."""

    kv_read_bytes_per_s: float  # achieved by the streaming decode-attention cases
    kv_read_efficiency: float  # that over the memory bandwidth, at most 1
    weight_read_bytes_per_s: float  # the skinny GEMM with the fewest rows
    weight_read_efficiency: float  # that over the memory bandwidth, at most 1
    residuals: tuple[Residual, ...]

    def profile_fields(self) -> dict[str, float]:
        """The :class:`ServingProfile` fields measured: a calibration file's ``"serving"``."""
        return {"kv_read_efficiency": self.kv_read_efficiency,
                "weight_read_efficiency": self.weight_read_efficiency}


def _probe_model(heads: int, head_dim: int) -> ModelSpec:
    """One multi-head attention layer: what a decode-attention case runs."""
    hidden = heads * head_dim
    return ModelSpec(name="decode-probe", num_layers=1, hidden_size=hidden, num_heads=heads,
                     num_kv_heads=heads, head_dim=head_dim, ffn_hidden_size=4 * hidden,
                     vocab_size=1)


def _costing(model: ModelSpec, peak_flops: float, memory_bw_bytes_per_s: float,
             elem_bytes: float, prof: Profile, sprof: ServingProfile) -> Costing:
    """One GPU running ``model`` in bf16, its bandwidth scaled so bf16 counts time
    ``elem_bytes`` elements (module docstring)."""
    alone = one_tier_view(1, "host", math.inf, 0.0)
    hw = InstanceHardware(peak_flops=peak_flops,
                          hbm_bytes_per_s=memory_bw_bytes_per_s * BF16 / elem_bytes,
                          hbm_bytes=math.inf, tp_view=alone, ep_view=alone, pp_view=None)
    return Costing(model=model, layout=PoolLayout(), hw=hw, prof=prof, sprof=sprof)


def decode_gemm_s(case: dict, peak_flops: float, memory_bw_bytes_per_s: float,
                  prof: Profile, sprof: ServingProfile = ServingProfile()) -> float:
    """``latency.gemm_s`` of a skinny-GEMM case (``m``, ``n``, ``k``, ``elem_bytes``): 2*M*N*K
    FLOPs, a K x N weight, the M x K input and M x N output as activations."""
    m, n, k = case["m"], case["n"], case["k"]
    c = _costing(_probe_model(1, 1), peak_flops, memory_bw_bytes_per_s, case["elem_bytes"],
                 prof, sprof)
    return gemm_s(c, 2.0 * m * n * k, float(k * n), float(m), (m * k + m * n) * BF16)


def decode_attention_s(case: dict, peak_flops: float, memory_bw_bytes_per_s: float,
                       prof: Profile, sprof: ServingProfile) -> float:
    """The attention term of ``latency.decode_step`` for a decode-attention case (``batch``
    requests of ``context`` tokens, ``heads`` heads of ``head_dim``, ``elem_bytes``)."""
    model = _probe_model(case["heads"], case["head_dim"])
    c = _costing(model, peak_flops, memory_bw_bytes_per_s, case["elem_bytes"], prof, sprof)
    return decode_step(c, float(case["batch"]), float(case["context"])).attention_s


def fit_kv_read(cases: Sequence[dict], memory_bw_bytes_per_s: float) -> tuple[float, float]:
    """(KV read bytes/s, ``kv_read_efficiency``) from decode-attention cases (``kv_bytes``,
    ``time_s``): the streaming fit of :func:`cost_models.fitting.fit_bandwidth` on the KV
    bytes, over the memory bandwidth, at most 1."""
    rate = fit_bandwidth([{"bytes": c["kv_bytes"], "moved_bytes": c["kv_bytes"],
                           "time_s": c["time_s"]} for c in cases])
    return rate, min(1.0, rate / memory_bw_bytes_per_s)


def weight_read(cases: Sequence[dict], memory_bw_bytes_per_s: float) -> tuple[float, float]:
    """(bytes/s, fraction of the memory bandwidth) the skinny GEMM with the fewest rows reads
    its weight and activations at (the bytes of ``decode_gemm_s``'s memory term); above 1 on
    a CPU whose caches hold part of the weight."""
    c = min(cases, key=lambda c: c["m"])
    moved = (c["k"] * c["n"] + c["m"] * c["k"] + c["m"] * c["n"]) * c["elem_bytes"]
    rate = moved / c["time_s"]
    return rate, rate / memory_bw_bytes_per_s


def _per_rank(raw: dict, key: str) -> list[dict]:
    per_rank = [r.get(key, []) for r in raw["compute"]]
    return median_cases(per_rank) if all(per_rank) else []


def fit_serving(raw: dict, training: CalibrationFit) -> ServingFit | None:
    """Fit (and check) the serving model on a ``planner.calibration-raw/v1`` record's decode
    benchmarks, with the training fit's peak, bandwidth and profile; None when the record has
    none (written before they existed)."""
    gemms, attention = _per_rank(raw, "decode_gemm"), _per_rank(raw, "decode_attention")
    if not gemms or not attention:
        return None
    peak, bw, prof = training.peak_flops, training.memory_bw_bytes_per_s, training.profile
    kv_rate, kv_eff = fit_kv_read(attention, bw)
    w_rate, w_eff = weight_read(gemms, bw)
    w_eff = min(1.0, w_eff)
    sprof = replace(ServingProfile(), kv_read_efficiency=kv_eff, weight_read_efficiency=w_eff)
    residuals = [Residual("decode_gemm", f"m{c['m']} {c['k']}x{c['n']}", c["time_s"],
                          decode_gemm_s(c, peak, bw, prof, sprof)) for c in gemms]
    residuals += [Residual("decode_attention", f"b{c['batch']} a{c['heads']} L{c['context']} "
                                               f"d{c['head_dim']} ({c['kv_bytes'] / 2**20:g} MiB)",
                           c["time_s"], decode_attention_s(c, peak, bw, prof, sprof))
                  for c in attention]
    return ServingFit(kv_rate, kv_eff, w_rate, w_eff, tuple(residuals))
