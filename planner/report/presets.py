"""``planner presets``: tables of the model presets and the GPU catalog.

The cluster preset table is :func:`planner.report.topo.render_presets`. These only format the
registries they are given.
"""
from __future__ import annotations

from typing import Mapping

from rich.table import Table

from planner.report.topo import render_presets
from topologies.catalog import GIB, GpuSpec


def render_model_presets(rows: Mapping[str, str]) -> Table:
    """Model preset name and what it is."""
    return render_presets(rows, title="Model presets (--model NAME)")


def _gpu_row(gpu: GpuSpec) -> list[str]:
    bf16_flops = gpu.peak_flops.get("bf16")
    return [gpu.name, f"{bf16_flops / 1e12:,.0f}" if bf16_flops else "-",
            f"{gpu.hbm_bytes / GIB:,.0f}", f"{gpu.hbm_bw_bytes_per_s / 1e12:.2f}"]


def render_gpu_catalog(gpus: Mapping[str, GpuSpec]) -> Table:
    """GPU name, dense bf16 TFLOP/s, HBM GiB and HBM TB/s."""
    table = Table(title="GPUs (--gpu NAME)", title_justify="left",
                  caption="--gpu takes these names in any case, or a short alias such as H100, "
                          "A100, H200", caption_justify="left")
    table.add_column("Name", style="bold", no_wrap=True)
    for header in ("BF16 TFLOP/s", "HBM GiB", "HBM TB/s"):
        table.add_column(header, justify="right")
    for gpu in gpus.values():
        table.add_row(*_gpu_row(gpu))
    return table
