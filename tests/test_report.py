"""The estimate's table view and JSON object: rendered on a fixed-width console, checked as text.

Both only format, so the checks are that every figure of the Estimate shows up, in the right
units, that the printed breakdowns cover the whole step and the whole peak (the shares add up
to 100% and the components to the peak, within the rounding of what is printed), and that the
JSON object keeps its documented keys.
"""
from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from cost_models.training.step import Estimate
from planner.training.estimate_json import estimate_to_dict
from planner.training.estimation import (ClusterChoice, ParallelChoice, checked_estimate, load_profile,
                                make_config, make_workload, resolve_cluster)
from planner.inputs.models import load_model
from planner.report.estimate import MEMORY_ROWS, TIME_ROWS, render_estimate, verdict
from topologies.catalog import GIB


def build(model: str = "llama-3.1-70b", **degrees: int) -> tuple[Estimate, object, object]:
    spec = load_model(model)
    cluster = resolve_cluster(ClusterChoice(gpu="H100", nodes=8))
    cfg = make_config(ParallelChoice(**degrees), cluster.num_gpus)
    est = checked_estimate(spec, cluster, make_workload(4096, 1024, "bf16"), cfg,
                           load_profile(cluster.slowest_gpu.name, None))
    return est, spec, cluster


def render(renderable, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def memory(peak_gib: float, capacity_gib: float = 80.0) -> dict:
    """The ``memory`` part of an estimate object (only the keys the verdict reads)."""
    return {"peak_bytes_per_gpu": peak_gib * GIB, "capacity_bytes_per_gpu": capacity_gib * GIB,
            "headroom_bytes_per_gpu": (capacity_gib - peak_gib) * GIB}


def rendered(model: str = "llama-3.1-70b", width: int = 100, **degrees: int) -> tuple[str, dict]:
    est, spec, cluster = build(model, **degrees)
    data = estimate_to_dict(est)
    return render(render_estimate(data, cluster, spec.num_layers), width), data


def table_cells(text: str, label: str) -> list[str]:
    """The cells after ``label`` in the first table row that starts with it."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("│").split("│")]
        if len(cells) > 1 and cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no row {label!r} in:\n{text}")


@pytest.mark.parametrize("peak_gib, text", [
    (67.7, "fits, 12.3 GiB headroom"),
    (80.0, "fits, 0.0 GiB headroom"),
    (93.1, "does NOT fit: needs 93.1 GiB per GPU, has 80.0 GiB"),
])
def test_verdict(peak_gib, text):
    assert verdict(memory(peak_gib)).plain == text


def test_table_shows_every_section():
    text, data = rendered(tp=8, pp=2)
    for part in ("llama-3.1-70b", "tp 8 · pp 2 · dp 4", "schedule 1f1b", "Step time",
                 "Pipeline bubble", "Tokens/s per GPU", "MFU", "Memory per GPU",
                 "Peak (pipeline stage", "Capacity", "Bottleneck tiers", "nvswitch"):
        assert part in text, part
    assert f"{data['step_time_s']:.3f}" in text
    assert verdict(data["memory"]).plain in text


def test_printed_step_shares_cover_the_step():
    """Each printed row shows its component's seconds and share; the shares add up to 100%
    (a component left out of the table, or a step that is not the sum of the printed parts,
    breaks this); the printed step is the estimate's step time."""
    text, data = rendered(tp=8, pp=2)
    time = data["time"]
    seconds, shares = [], []
    for key, label in TIME_ROWS:
        printed_s, share = table_cells(text, label)
        assert printed_s == f"{time[key]:.3f}"
        assert float(share) == pytest.approx(100 * time[key] / data["step_time_s"], abs=0.05)
        seconds.append(float(printed_s))
        shares.append(float(share))
    assert sum(shares) == pytest.approx(100.0, abs=0.05 * len(shares))
    step_s = float(table_cells(text, "Step")[0])
    assert sum(seconds) == pytest.approx(step_s, abs=0.0005 * (len(seconds) + 1))
    assert table_cells(text, "Step")[0] == f"{data['step_time_s']:.3f}"
    assert table_cells(text, "Step time")[0] == f"{data['step_time_s']:.3f} s"


def test_printed_memory_components_add_up_to_the_peak():
    text, data = rendered(tp=8, pp=2)
    parts = [float(table_cells(text, label)[0]) for _, label in MEMORY_ROWS]
    peak = float(table_cells(text, f"Peak (pipeline stage {data['memory']['stage']})")[0])
    assert peak == pytest.approx(data["memory"]["peak_bytes_per_gpu"] / GIB, abs=0.05)
    assert sum(parts) == pytest.approx(peak, abs=0.05 * (len(parts) + 1))
    assert float(table_cells(text, "Capacity")[0]) == pytest.approx(80.0, abs=0.05)


def test_table_fits_in_80_columns():
    text, _ = rendered(width=80, tp=8, pp=2)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80


def test_json_time_and_memory_parts_are_the_tables_rows():
    """Every part of the JSON breakdowns has a row in the printed tables, and no more."""
    est, _, _ = build(tp=8, pp=2)
    data = json.loads(json.dumps(estimate_to_dict(est), sort_keys=True))
    assert set(data["time"]) - {"step_s"} == {key for key, _ in TIME_ROWS}
    assert data["step_time_s"] == pytest.approx(data["time"]["step_s"])
    assert {key for key, _ in MEMORY_ROWS} <= set(data["memory"])
    mem = data["memory"]
    assert data["fits"] == (mem["peak_bytes_per_gpu"] <= mem["capacity_bytes_per_gpu"])
    assert len(data["stages"]) == 2 and data["config"]["micro_batches"] == 256


def test_json_workload_and_tiers():
    est, _, _ = build(tp=8, pp=2)
    data = estimate_to_dict(est)
    assert data["workload"] == {"seq_len": 4096, "global_batch": 1024, "precision": "bf16",
                                "optimizer": "adam", "tokens": 4096 * 1024}
    assert data["tiers"]["tp"] == "nvswitch"
    assert data["schema_version"] == 1
