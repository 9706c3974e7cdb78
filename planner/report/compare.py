"""``planner compare PLAN PLAN...``: plans side by side, differences highlighted.

Rows whose values differ between plans are marked and highlighted; in numeric rows the best
value (fastest, least memory, ...) is green. Plans for different inputs (model, cluster,
workload) are compared too, with a warning. Formats only.
"""
from __future__ import annotations

from typing import Callable

from rich.console import Group, RenderableType
from rich.text import Text

from planner.plan.document import Plan
from planner.report.fit import Col, FirstFit, FitTable, Row
from planner.report.solve import plan_bottleneck, schedule_text

__all__ = ["ROWS", "compare_table", "render_compare"]

GIB = 2**30

# (label, value of a plan, which is better: "min", "max" or None for categorical rows)
RowSpec = tuple[str, Callable[[Plan], object], str | None]


def _layers(plan: Plan) -> str:
    return "/".join(str(len(s["layers"])) for s in plan.stages)


def _config(key: str) -> Callable[[Plan], object]:
    return lambda p: p.config[key]


def _time(key: str) -> Callable[[Plan], float]:
    return lambda p: p.prediction["time"][key]


ROWS: tuple[RowSpec, ...] = (
    ("model", lambda p: p.inputs["model"]["name"], None),
    ("cluster", lambda p: p.inputs["cluster"]["name"], None),
    ("GPUs", lambda p: p.num_gpus, None),
    ("global batch x seq", lambda p: f"{p.inputs['workload']['global_batch']} x "
                                     f"{p.inputs['workload']['seq_len']}", None),
    ("tp", _config("tp"), None),
    ("cp", _config("cp"), None),
    ("pp", _config("pp"), None),
    ("dp", _config("dp"), None),
    ("ep / etp", lambda p: f"{_config('ep')(p)} / {p.prediction['config']['expert_tp']}", None),
    ("schedule", schedule_text, None),
    ("micro-batch", _config("micro_batch"), None),
    ("micro-batches", lambda p: p.micro_batches, None),
    ("recompute", lambda p: p.config["recompute"] + (
        f" ({p.config['recompute_layers']})" if p.config["recompute_layers"] else ""), None),
    ("sequence parallel", _config("sequence_parallel"), None),
    ("ZeRO", _config("zero"), None),
    ("layers per stage", _layers, None),
    ("node order", lambda p: "listing" if p.node_order == sorted(p.node_order)
     else ",".join(map(str, p.node_order[:12])) + ("..." if len(p.node_order) > 12 else ""),
     None),
    ("tokens/s/GPU", lambda p: p.prediction["tokens_per_s_per_gpu"], "max"),
    ("MFU", lambda p: p.prediction["mfu"], "max"),
    ("step s", lambda p: p.prediction["step_time_s"], "min"),
    ("  compute s", _time("compute_s"), "min"),
    ("  recompute s", _time("recompute_s"), "min"),
    ("  TP comm s", _time("tp_comm_s"), "min"),
    ("  CP comm s", _time("cp_comm_s"), "min"),
    ("  EP all-to-all s", _time("ep_comm_s"), "min"),
    ("  PP send/recv s", _time("pp_comm_s"), "min"),
    ("  bubble s", _time("bubble_s"), "min"),
    ("  DP comm (exposed) s", _time("dp_comm_s"), "min"),
    ("  optimizer s", _time("optimizer_s"), "min"),
    ("peak GiB/GPU", lambda p: p.prediction["memory"]["peak_bytes_per_gpu"] / GIB, "min"),
    ("headroom GiB", lambda p: p.prediction["memory"]["headroom_bytes_per_gpu"] / GIB, "max"),
    ("bottleneck", plan_bottleneck, None),
)


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3f}"
    return str(value)


def _mfu_cell(value: float) -> str:
    return f"{value:.1%}"


def _rows(plans: list[Plan]) -> list[tuple[Text, list[Text]]]:
    """Per row of :data:`ROWS`: its label (marked ``*`` where plans differ) and one styled
    cell per plan (in numeric rows the best value green)."""
    out = []
    for label, get, better in ROWS:
        values = [get(p) for p in plans]
        cells = [_mfu_cell(v) if label == "MFU" else _cell(v) for v in values]
        differs = len(set(cells)) > 1
        styles = ["yellow" if differs else None] * len(plans)
        if differs and better is not None:
            best = (min if better == "min" else max)(values)
            styles = ["bold green" if v == best else "yellow" for v in values]
        out.append((Text(("* " if differs else "  ") + label, style="bold" if differs else "dim"),
                    [Text(c, style=s or "") for c, s in zip(cells, styles)]))
    return out


def _part(rows: list[tuple[Text, list[Text]]], names: list[str], shown: range,
          title: str) -> FitTable:
    columns = [Col("")] + [Col(names[i], justify="right") for i in shown]
    return FitTable(columns, [Row((label, *(cells[i] for i in shown))) for label, cells in rows],
                    title=title, title_justify="left")


def compare_table(plans: list[Plan], names: list[str]) -> FirstFit:
    """One table, plans across; where it does not fit the width, the plans are split over
    several tables, each with the row labels."""
    rows = _rows(plans)
    title = "Plans side by side (differences marked *)"
    n = len(plans)

    def split(per_part: int) -> Group:
        starts = range(0, n, per_part)
        return Group(*(_part(rows, names, range(a, min(a + per_part, n)),
                             f"{title}: {a + 1}-{min(a + per_part, n)} of {n}") for a in starts))

    return FirstFit([lambda: _part(rows, names, range(n), title)]
                    + [lambda k=k: split(k) for k in range(n - 1, 0, -1)])


def render_compare(plans: list[Plan], names: list[str]) -> RenderableType:
    parts: list[RenderableType] = []
    keys = {(p.inputs["model"]["name"], p.inputs["cluster"]["name"],
             tuple(sorted(p.inputs["workload"].items()))) for p in plans}
    if len(keys) > 1:
        parts.append(Text("warning: these plans are for different models, clusters or "
                          "workloads; compare their per-GPU figures with care", style="yellow"))
    parts.append(compare_table(plans, names))
    fastest = min(range(len(plans)), key=lambda i: plans[i].prediction["step_time_s"])
    if len(plans) > 1:
        base = plans[fastest].prediction["tokens_per_s_per_gpu"]
        summary = Text(f"fastest per GPU: {names[fastest]}", style="bold green")
        for i, p in enumerate(plans):
            if i != fastest:
                summary.append(f"; {names[i]} is {1 - p.prediction['tokens_per_s_per_gpu'] / base:.1%}"
                               " slower per GPU", style="")
        parts.append(summary)
    return Group(*parts)
