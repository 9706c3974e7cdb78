"""GPU catalog: peak compute, memory and link figures per GPU type.

The data file ``data/gpu_specs.json`` is a copy of the project's reference table
(``shared/data/gpu_specs.json``); every entry there carries its own ``source`` and ``confidence``.
Figures added here that the reference table lacks (the H100 96 GB part's peak, Blackwell MXFP8
peaks and NVLink domains) say so in the entry's ``catalog_additions``, with their source.
Units in the file: TFLOP/s dense (no 2:4 sparsity), HBM in GB as marketed (we read it as GiB,
which is what ``nvidia-smi`` reports for the 80 GB parts: 81,920 MiB on A100-80GB), bandwidths in
GB/s with NVLink given as total bidirectional per GPU (we store one direction: half).
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

GIB = 2**30
GB = 1e9

# Precisions we know how to cost, and the catalog keys that give their dense peak. "bf16" is
# also the 16-bit tensor peak the training cost model reads for fp16 and fp8 (which scales it,
# ``Profile.fp8_speedup``), so a part without bf16 (V100) gives its fp16 figure there; whether
# the hardware computes in a precision is :meth:`GpuSpec.supports`, not the presence of a peak.
_PEAK_KEYS: dict[str, tuple[str, ...]] = {
    "bf16": ("bf16_tflops_dense", "fp16_tflops_dense", "fp16_tensor_tflops_dense"),
    "fp16": ("fp16_tflops_dense", "fp16_tensor_tflops_dense", "bf16_tflops_dense"),
    "fp8": ("fp8_tflops_dense",),
    "nvfp4": ("fp4_tflops_dense",),  # Blackwell's NVFP4 (E2M1, E4M3 scale per 16 values)
    "tf32": ("tf32_tflops_dense",),
    "fp32": ("fp32_tflops_dense",),  # no catalog entry carries it yet; inline devices may
}
# A precision the hardware computes in needs its own key: bf16 only where the catalog gives
# ``bf16_tflops_dense`` (every tensor-core part computes fp16 at its 16-bit rate). MXFP8
# (Blackwell's block-scaled FP8, OCP Microscaling: 32-element blocks, E8M0 scales) runs at the
# FP8 rate, so it is a capability here, not a peak of its own.
_NATIVE_KEYS: dict[str, tuple[str, ...]] = {"bf16": ("bf16_tflops_dense",),
                                             "mxfp8": ("mxfp8_tflops_dense",)}
PRECISIONS: tuple[str, ...] = tuple(_PEAK_KEYS)

# ``confidence`` of a device described inline in a cluster file (topologies.devices.DeviceSpec)
# rather than taken from the catalog: its figures are whatever that file gives.
INLINE_CONFIDENCE = "cluster file"


class UnknownGpuError(KeyError):
    """A GPU name that is not in the catalog; the message lists close matches."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want plain text
        return str(self.args[0])


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type. Bandwidths are unidirectional bytes/s per GPU."""

    name: str
    arch: str
    peak_flops: dict[str, float] = field(hash=False)  # precision -> dense FLOP/s
    hbm_bytes: float
    hbm_bw_bytes_per_s: float
    nvlink_bw_bytes_per_s: float  # one direction, per GPU (0 for PCIe-only parts)
    tdp_w: float | None
    nvlink_domain_gpus: int | None
    source: str
    confidence: str
    native_precisions: frozenset[str] = frozenset()  # empty: every precision with a peak
    # dense bf16 tensor-core FLOPs per exponential (MUFU.EX2) in the same time, per SM and
    # clock: what bounds a fused attention forward at small head dims; 0: not known
    tensor_flops_per_exp2: float = 0.0

    def __post_init__(self) -> None:
        if self.hbm_bytes <= 0 or self.hbm_bw_bytes_per_s <= 0:
            raise ValueError(f"GPU {self.name}: memory {self.hbm_bytes} B and bandwidth "
                             f"{self.hbm_bw_bytes_per_s} B/s must be positive")

    def peak_flops_for(self, precision: str) -> float:
        """Dense peak FLOP/s for ``precision``; raises ValueError when the GPU lacks it."""
        try:
            return self.peak_flops[precision]
        except KeyError:
            have = ", ".join(sorted(self.peak_flops)) or "none"
            where = "cluster file" if self.confidence == INLINE_CONFIDENCE else "catalog"
            raise ValueError(f"GPU {self.name} has no {precision} peak in the {where} "
                             f"(has: {have})") from None


    def supports(self, precision: str) -> bool:
        """Whether the GPU computes in ``precision`` (``fp16``, ``bf16``, ``fp8``, ``mxfp8``
        ...): V100 has no bf16, A100 no fp8, only Blackwell MXFP8. A device described inline
        (no catalog entry) computes in what it gives a peak for, fp16 where it gives bf16."""
        if self.native_precisions:
            return precision in self.native_precisions
        return precision in self.peak_flops or (precision == "fp16" and "bf16" in self.peak_flops)


def _native(entry: dict, peaks: dict[str, float]) -> frozenset[str]:
    keyed = {p for p, keys in _NATIVE_KEYS.items() if any(entry.get(k) for k in keys)}
    return frozenset({p for p in peaks if p not in _NATIVE_KEYS} | keyed)


def _peaks(entry: dict) -> dict[str, float]:
    peaks: dict[str, float] = {}
    for precision, keys in _PEAK_KEYS.items():
        for key in keys:
            if entry.get(key):
                peaks[precision] = float(entry[key]) * 1e12
                break
    return peaks


def _gpu_from_entry(name: str, entry: dict) -> GpuSpec:
    link_bidir_GBps = entry.get("nvlink_bw_GBps_bidir") or entry.get("xgmi_bw_GBps_bidir") or 0
    peaks = _peaks(entry)
    return GpuSpec(
        name=name,
        arch=entry.get("arch", "unknown"),
        peak_flops=peaks,
        hbm_bytes=float(entry["hbm_gb"]) * GIB,
        hbm_bw_bytes_per_s=float(entry["hbm_bw_GBps"]) * GB,
        nvlink_bw_bytes_per_s=float(link_bidir_GBps) * GB / 2,
        tdp_w=entry.get("tdp_w"),
        nvlink_domain_gpus=entry.get("nvlink_domain_gpus"),
        source=entry.get("source", ""),
        confidence=entry.get("confidence", ""),
        native_precisions=_native(entry, peaks),
        tensor_flops_per_exp2=float(entry.get("tensor_flops_per_exp2") or 0.0),
    )


@lru_cache(maxsize=1)
def _raw() -> dict:
    text = resources.files("topologies").joinpath("data/gpu_specs.json").read_text()
    return json.loads(text)


@lru_cache(maxsize=1)
def gpu_catalog() -> dict[str, GpuSpec]:
    """All GPU types by the names users type (the catalog's keys)."""
    return {name: _gpu_from_entry(name, e) for name, e in _raw()["gpus"].items()}


def nic_catalog() -> dict[str, dict]:
    """NIC types from the catalog (``gbps`` is Gbit/s per port)."""
    return dict(_raw()["nics"])


_ALIASES = {
    "H100": "H100-SXM5-80GB", "H100-SXM": "H100-SXM5-80GB", "A100": "A100-SXM4-80GB",
    "A100-80GB": "A100-SXM4-80GB", "A100-40GB": "A100-SXM4-40GB", "H800": "H800-SXM5-80GB",
    "H200": "H200-SXM-141GB", "H20": "H20-96GB", "V100": "V100-SXM2-32GB",
}


def get_gpu(name: str) -> GpuSpec:
    """Look up a GPU by catalog name or a short alias (``H100``, ``A100``, ``H800`` ...)."""
    catalog = gpu_catalog()
    key = _ALIASES.get(name, name)
    if key in catalog:
        return catalog[key]
    folded = {k.lower(): k for k in catalog}
    if key.lower() in folded:
        return catalog[folded[key.lower()]]
    close = difflib.get_close_matches(name, list(catalog) + list(_ALIASES), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownGpuError(f"unknown GPU '{name}'{hint} (known: {', '.join(catalog)})")
