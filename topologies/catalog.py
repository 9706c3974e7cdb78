"""GPU catalog: peak compute, memory and link figures per GPU type.

The data file ``data/gpu_specs.json`` is a verbatim copy of the project's reference table
(``shared/data/gpu_specs.json``); every entry there carries its own ``source`` and ``confidence``.
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

# Precisions we know how to cost, and the catalog keys that give their dense peak.
_PEAK_KEYS: dict[str, tuple[str, ...]] = {
    "bf16": ("bf16_tflops_dense", "fp16_tflops_dense", "fp16_tensor_tflops_dense"),
    "fp16": ("fp16_tflops_dense", "fp16_tensor_tflops_dense", "bf16_tflops_dense"),
    "fp8": ("fp8_tflops_dense",),
    "tf32": ("tf32_tflops_dense",),
    "fp32": ("fp32_tflops_dense",),  # no catalog entry carries it yet; inline devices may
}
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
    return GpuSpec(
        name=name,
        arch=entry.get("arch", "unknown"),
        peak_flops=_peaks(entry),
        hbm_bytes=float(entry["hbm_gb"]) * GIB,
        hbm_bw_bytes_per_s=float(entry["hbm_bw_GBps"]) * GB,
        nvlink_bw_bytes_per_s=float(link_bidir_GBps) * GB / 2,
        tdp_w=entry.get("tdp_w"),
        nvlink_domain_gpus=entry.get("nvlink_domain_gpus"),
        source=entry.get("source", ""),
        confidence=entry.get("confidence", ""),
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
