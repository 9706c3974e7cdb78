"""The estimate's table view and JSON object: rendered on a fixed-width console, checked as text.

Both only format, so the checks are that every figure of the Estimate shows up, in the right
units, and that the JSON object keeps its documented keys and adds up.
"""
from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from cost_models.training.memory import MemoryBreakdown
from cost_models.training.step import Estimate
from planner.training.estimate_json import estimate_to_dict
from planner.training.estimation import (ClusterChoice, ParallelChoice, checked_estimate, load_profile,
                                make_config, make_workload, resolve_cluster)
from planner.inputs.models import load_model
from planner.report.estimate import render_estimate, verdict
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


def memory(peak_gib: float, capacity_gib: float = 80.0) -> MemoryBreakdown:
    return MemoryBreakdown(peak_gib * GIB, 0.0, 0.0, 0.0, 0.0, 0.0, capacity_gib * GIB, 0)


@pytest.mark.parametrize("peak_gib, text", [
    (67.7, "fits, 12.3 GiB headroom"),
    (80.0, "fits, 0.0 GiB headroom"),
    (93.1, "does NOT fit: needs 93.1 GiB per GPU, has 80.0 GiB"),
])
def test_verdict(peak_gib, text):
    assert verdict(memory(peak_gib)).plain == text


def test_table_shows_every_section():
    est, spec, cluster = build(tp=8, pp=2)
    text = render(render_estimate(est, spec, cluster))
    for part in ("llama-3.1-70b", "tp 8 · pp 2 · dp 4", "schedule 1f1b", "Step time",
                 "Pipeline bubble", "Tokens/s per GPU", "MFU", "Memory per GPU",
                 "Peak (pipeline stage", "Capacity", "Bottleneck tiers", "nvswitch"):
        assert part in text, part
    assert f"{est.step_time_s:.3f}" in text
    assert verdict(est.memory).plain in text


def test_table_fits_in_80_columns():
    est, spec, cluster = build(tp=8, pp=2)
    lines = render(render_estimate(est, spec, cluster), width=80).splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80


def test_json_adds_up():
    est, _, _ = build(tp=8, pp=2)
    data = json.loads(json.dumps(estimate_to_dict(est), sort_keys=True))
    parts = [v for k, v in data["time"].items() if k != "step_s"]
    assert sum(parts) == pytest.approx(data["time"]["step_s"])
    assert data["step_time_s"] == pytest.approx(data["time"]["step_s"])
    mem = data["memory"]
    components = ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                  "logits_bytes", "other_bytes")
    assert sum(mem[k] for k in components) == pytest.approx(mem["peak_bytes_per_gpu"])
    assert data["fits"] == (mem["peak_bytes_per_gpu"] <= mem["capacity_bytes_per_gpu"])
    assert len(data["stages"]) == 2 and data["config"]["micro_batches"] == 256


def test_json_workload_and_tiers():
    est, _, _ = build(tp=8, pp=2)
    data = estimate_to_dict(est)
    assert data["workload"] == {"seq_len": 4096, "global_batch": 1024, "precision": "bf16",
                                "optimizer": "adam", "tokens": 4096 * 1024}
    assert data["tiers"]["tp"] == "nvswitch"
    assert data["schema_version"] == 1
