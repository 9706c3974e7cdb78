"""``planner experts eval``: a placement document measured on (other) loads.

Four ways a runtime can split an expert's tokens over its replicas are measured per layer
(:mod:`solvers.experts.dispatch`): the plan's static split ratios, the even split (vLLM, what
EPLB assumes), SGLang's static per-rank dispatch, and real-time quotas re-planned for every
step's exact loads (:func:`planner.experts.plan.realtime_quotas`). The plan's own rule (its
``dispatch``) is marked.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
from rich.table import Table

from planner.errors import SpecError
from planner.inputs.expert_loads import ExpertLoads
from solvers.experts import ExpertLayout, even_split, sglang_split, solve_quotas, static_gpu_loads

__all__ = ["evaluate_document", "render_evaluation"]


def _ratio(gpu_load: np.ndarray) -> float:
    mean = gpu_load.mean()
    return float(gpu_load.max() / mean) if mean > 0 else 1.0


def evaluate_document(doc: dict[str, Any], loads: ExpertLoads, source: str) -> dict[str, Any]:
    """Per-layer busiest/mean of the placement in ``doc`` on ``loads`` (all steps)."""
    layout = ExpertLayout(doc["num_experts"], doc["num_gpus"], doc["slots_per_gpu"],
                          doc["gpus_per_node"])
    if loads.num_experts != layout.num_experts or loads.series.shape[1] != doc["num_layers"]:
        raise SpecError(loads.source, "", f"{doc['num_layers']} layers x {layout.num_experts} "
                        f"experts to match {source}",
                        f"{loads.series.shape[1]} x {loads.num_experts}")
    rows, times = [], []
    for i, layer in enumerate(doc["moe_layers"]):
        phy = np.array(doc["physical_to_logical"][i], dtype=np.int64)
        split = np.array(doc["split"][i])
        w = loads.total[layer]
        realtime = []
        for step in loads.series[:, layer]:
            if step.sum() <= 0:
                continue
            start = time.perf_counter()
            sol = solve_quotas(step, phy, layout.gpu_of_slot, layout.num_gpus)
            times.append(time.perf_counter() - start)
            realtime.append(_ratio(sol.gpu_load))
        rows.append({
            "layer": layer,
            "static": _ratio(static_gpu_loads(w, phy, split, layout.num_gpus)),
            "even": _ratio(static_gpu_loads(w, phy, even_split(phy, layout.num_experts), layout.num_gpus)),
            "sglang": _ratio(static_gpu_loads(w, phy, sglang_split(phy, layout), layout.num_gpus)),
            "realtime_worst_step": max(realtime) if realtime else 1.0,
            "realtime_mean_step": float(np.mean(realtime)) if realtime else 1.0,
        })
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "layer"}
    return {"placement": source, "loads": loads.source, "steps": int(loads.series.shape[0]),
            "dispatch": doc.get("dispatch", "static"),
            "layers": rows, "mean": mean,
            "realtime_median_ms_per_layer": float(np.median(times) * 1e3) if times else 0.0}


_COLUMNS = (("static", "static split", "static"), ("even", "even split", "even"),
            ("sglang", "SGLang static", "sglang"), ("realtime_mean_step", "real-time (mean step)", "realtime"),
            ("realtime_worst_step", "real-time (worst step)", None))


def render_evaluation(result: dict[str, Any]) -> Table:
    """Per-layer busiest/mean under every rule; the plan's own rule is starred."""
    table = Table(title=f"{result['placement']} on {result['loads']} ({result['steps']} steps); "
                        f"planned for {result['dispatch']} dispatch (*); real-time quotas: median "
                        f"{result['realtime_median_ms_per_layer']:.3f} ms per layer", title_justify="left")
    table.add_column("layer", justify="right")
    for _, name, rule in _COLUMNS:
        table.add_column(name + (" *" if rule == result["dispatch"] else ""), justify="right")
    for r in result["layers"]:
        table.add_row(str(r["layer"]), *(f"{r[key]:.4f}" for key, _, _ in _COLUMNS))
    m = result["mean"]
    table.add_row("mean", *(f"{m[key]:.4f}" for key, _, _ in _COLUMNS), style="bold")
    return table
