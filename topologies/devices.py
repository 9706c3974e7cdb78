"""A node group's ``gpu`` in a cluster file: a catalog name or an inline device, both ways.

Reading: :class:`DeviceSpec` is the pydantic schema of a device the GPU catalog lacks (a CPU
host measured by ``planner calibrate``, a new GPU), written inline in place of the catalog
name; :func:`gpu_spec_of` turns either form into the frozen
:class:`~topologies.catalog.GpuSpec`. Writing: :func:`gpu_to_plain` and
:func:`device_to_plain` give the form a cluster file writes, which rebuilds the same
``GpuSpec`` (memory in GB as the catalog writes it, bandwidth in GB/s, peaks in TFLOP/s).

This module raises ``pydantic.ValidationError`` (a ``ValueError``) and never imports
``planner``.
"""
from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from topologies.catalog import (GB, GIB, INLINE_CONFIDENCE, PRECISIONS, GpuSpec,
                                 UnknownGpuError, get_gpu, gpu_catalog)

__all__ = ["DeviceSpec", "device_to_plain", "gpu_to_plain", "gpu_spec_of"]


class DeviceSpec(BaseModel):
    """A device the GPU catalog lacks, written inline as a node group's ``gpu``."""

    model_config = ConfigDict(extra="forbid", frozen=True)  # as every spec model

    name: str = Field(min_length=1, description="Device name; not a catalog name or alias "
                      "unless every figure below equals the catalog's.")
    memory_gb: float = Field(gt=0, description="Memory per device, GB as the catalog writes it "
                             "(read as GiB, what nvidia-smi reports).")
    memory_bw_GBps: float = Field(gt=0, description="Memory bandwidth per device, GB/s.")
    peak_tflops: dict[str, Annotated[float, Field(gt=0)]] = Field(
        description=f"Dense peak TFLOP/s by precision ({', '.join(PRECISIONS)}).")
    arch: str = Field(default="custom", description="Architecture (Hopper, ...); PCIe "
                      "generation for fabric pcie is read from it (default: Gen4).")
    source: str = Field(default="", description="Where the figures come from.")

    @field_validator("peak_tflops")
    @classmethod
    def _known_precisions(cls, peaks: dict[str, float]) -> dict[str, float]:
        unknown = [p for p in peaks if p not in PRECISIONS]
        if unknown or not peaks:
            got = f" (unknown: {', '.join(unknown)})" if unknown else " (got none)"
            raise ValueError(f"peak_tflops keyed by precision, at least one of "
                             f"{', '.join(PRECISIONS)}{got}")
        return peaks

    @model_validator(mode="after")
    def _name_free_or_same_figures(self) -> DeviceSpec:
        twin = self.catalog_twin()
        if twin is None:
            return self
        mine = self._build()
        differ = [label for label, a, b in (
            ("memory_gb", mine.hbm_bytes, twin.hbm_bytes),
            ("memory_bw_GBps", mine.hbm_bw_bytes_per_s, twin.hbm_bw_bytes_per_s))
            if not math.isclose(a, b, rel_tol=1e-9)]
        if mine.peak_flops.keys() != twin.peak_flops.keys() or not all(
                math.isclose(v, twin.peak_flops[k], rel_tol=1e-9)
                for k, v in mine.peak_flops.items()):
            differ.append("peak_tflops")
        if differ:
            raise ValueError(f"a device name outside the GPU catalog, or the catalog's figures: "
                             f"name '{self.name}' is catalog GPU {twin.name} "
                             f"({_figures_text(twin)}), and this device's "
                             f"{', '.join(differ)} differ; rename the device or write "
                             f"gpu: {twin.name}")
        return self

    def catalog_twin(self) -> GpuSpec | None:
        """The catalog GPU this device's name (or alias) names, if any."""
        try:
            return get_gpu(self.name)
        except UnknownGpuError:
            return None

    def _build(self) -> GpuSpec:
        return GpuSpec(
            name=self.name, arch=self.arch,
            peak_flops={p: self.peak_tflops[p] * 1e12 for p in PRECISIONS if p in self.peak_tflops},
            hbm_bytes=self.memory_gb * GIB, hbm_bw_bytes_per_s=self.memory_bw_GBps * GB,
            nvlink_bw_bytes_per_s=0.0, tdp_w=None, nvlink_domain_gpus=None,
            source=self.source, confidence=INLINE_CONFIDENCE)

    def to_gpu(self) -> GpuSpec:
        """The device as a :class:`GpuSpec` (no NVLink figure: give the fabric's
        ``intra_bw_GBps``); a device named like a catalog GPU, with its figures, is that GPU."""
        return self.catalog_twin() or self._build()


def _unscale(value: float, scale: float) -> float:
    """The float ``x`` with ``x * scale == value`` (nearest to ``value / scale``), so a figure
    written back to a file rebuilds the same bytes/s or FLOP/s."""
    x = value / scale
    for candidate in (x, math.nextafter(x, math.inf), math.nextafter(x, -math.inf)):
        if candidate * scale == value:
            return candidate
    return x


def device_to_plain(gpu: GpuSpec) -> dict[str, Any]:
    """``gpu`` as an inline device object (the :class:`DeviceSpec` fields) that rebuilds it.

    NVLink bandwidth, TDP and NVLink domain size are not device fields and are left out.
    """
    return {"name": gpu.name, "arch": gpu.arch, "memory_gb": _unscale(gpu.hbm_bytes, GIB),
            "memory_bw_GBps": _unscale(gpu.hbm_bw_bytes_per_s, GB),
            "peak_tflops": {p: _unscale(v, 1e12) for p, v in gpu.peak_flops.items()},
            "source": gpu.source}


def gpu_to_plain(gpu: GpuSpec) -> str | dict[str, Any]:
    """A node group's ``gpu`` as a cluster file writes it: the catalog name when ``gpu`` is
    the catalog's entry of that name, else its inline device object."""
    return gpu.name if gpu_catalog().get(gpu.name) == gpu else device_to_plain(gpu)


def _figures_text(gpu: GpuSpec) -> str:
    """A GPU's device figures as a cluster file writes them, for error messages."""
    plain = device_to_plain(gpu)
    peaks = ", ".join(f"{p}: {v:g}" for p, v in plain["peak_tflops"].items())
    return (f"memory_gb {plain['memory_gb']:g}, memory_bw_GBps {plain['memory_bw_GBps']:g}, "
            f"peak_tflops {{{peaks}}}")


def gpu_spec_of(gpu: str | DeviceSpec) -> GpuSpec:
    """The :class:`GpuSpec` of a node group's ``gpu``: a catalog name or an inline device."""
    return gpu.to_gpu() if isinstance(gpu, DeviceSpec) else get_gpu(gpu)
