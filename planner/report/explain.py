"""``planner explain PLAN``: everything a plan decided and predicted, with its pipeline timeline.

Formats only: figures come from the plan (its prediction and tables) and from the simulated
pipeline timeline handed in (``planner explain`` simulates it with
:func:`planner.training.timeline.plan_timeline`). The step-time and memory tables are
``planner estimate``'s (:mod:`planner.report.estimate`), read from the plan's prediction.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text

from planner.plan.document import Plan
from planner.report.estimate import GROUP_NAMES, memory_table, time_table
from planner.report.fit import Col, FitTable, Row
from planner.report.solve import expert_placement_line, plan_bottleneck
from planner.report.timeline import TimelineView, timeline_note

if TYPE_CHECKING:  # annotations only: the CLI hands the simulation in
    from planner.training.timeline import PlanTimeline as Timeline

__all__ = ["render_explain"]

GIB = 2**30


def _header(plan: Plan) -> Text:
    c, w, p = plan.config, plan.inputs["workload"], plan.prediction
    text = Text(f"{plan.inputs['model']['name']} on {plan.inputs['cluster']['name']}",
                style="bold")
    text.append(f": {plan.num_gpus:,} GPUs, plan {plan.inputs_hash[:12]} (planner "
                f"{plan.planner_version})\n", style="")
    text.append(f"tp {c['tp']} · cp {c['cp']} · pp {c['pp']} · dp {c['dp']} · ep {c['ep']} · "
                f"etp {p['config']['expert_tp']} · vpp {c['vpp']} · schedule {plan.schedule}\n")
    shares = c.get("dp_shares")
    per_replica = (f"{plan.micro_batches:,} micro-batches" if shares is None else
                   "micro-batches per DP replica " + ", ".join(
                       f"{shares.count(k)} x {k}" for k in sorted(set(shares))))
    text.append(f"global batch {w['global_batch']:,} x {w['seq_len']:,} tokens in "
                f"{per_replica} of {c['micro_batch']} · {w['precision']} "
                f"· recompute {c['recompute']}"
                + (f" ({c['recompute_layers']} layers/chunk)" if c["recompute_layers"] else "")
                + f" · ZeRO-{c['zero']} · sequence parallel "
                  f"{'on' if c['sequence_parallel'] else 'off'}\n")
    text.append(f"{p['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU · {p['mfu']:.1%} MFU · step "
                f"{p['step_time_s']:.3f} s · bottleneck {plan_bottleneck(plan)}", style="bold")
    if p.get("why"):
        text.append("\nWhy: ", style="bold green")
        text.append(p["why"])
    return text


def _layer_ranges(layers: list[int]) -> str:
    runs, start = [], layers[0]
    for prev, cur in zip(layers, layers[1:] + [None]):
        if cur != prev + 1:
            runs.append(f"{start}-{prev}" if prev > start else str(start))
            start = cur
    return ", ".join(runs)


STAGE_COLUMNS = (Col("stage", "right"), Col("layers", fold=True), Col("also", drop=4),
                 Col("compute s", "right", drop=1), Col("recompute s", "right", drop=3),
                 Col("comm s", "right", drop=2), Col("total s", "right"),
                 Col("peak GiB", "right"), Col("cap GiB", "right", drop=5))


def _stage_table(plan: Plan) -> FitTable:
    memory = {m["stage"]: m for m in plan.prediction["stage_memory"]}
    slowest = max(s["total_s"] for s in plan.prediction["stages"])
    rows = []
    for stage, cost in zip(plan.stages, plan.prediction["stages"]):
        also = ", ".join(x for x, on in (("embedding", stage["embedding"]),
                                         ("LM head", stage["head"])) if on)
        comm = sum(cost[k] for k in ("tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s"))
        mem = memory.get(stage["stage"], {})
        rows.append(Row((str(stage["stage"]),
                         f"{len(stage['layers'])}: {_layer_ranges(stage['layers'])}", also,
                         f"{cost['compute_s']:.4f}", f"{cost['recompute_s']:.4f}",
                         f"{comm:.4f}", f"{cost['total_s']:.4f}",
                         f"{mem.get('peak_bytes', 0) / GIB:.1f}",
                         f"{mem.get('capacity_bytes', 0) / GIB:.0f}"),
                        style="bold" if cost["total_s"] == slowest and len(plan.stages) > 1
                        else None))
    return FitTable(STAGE_COLUMNS, rows, title="Pipeline stages (per micro-batch)",
                    title_justify="left")


PLACEMENT_COLUMNS = (Col("node rank", "right"), Col("host"), Col("node group", drop=2),
                     Col("GPUs", "right", drop=1), Col("global ranks"), Col("pp stages", fold=True))


def _placement_table(plan: Plan, max_rows: int = 16) -> FitTable:
    stage_of = {}
    for row in plan.rank_rows():
        stage_of.setdefault(row["node_rank"], set()).add(row["pp"])
    shown = plan.nodes if len(plan.nodes) <= max_rows else plan.nodes[:max_rows - 2]
    rows = []
    for n in shown:
        stages = sorted(stage_of.get(n["node_rank"], ()))
        rows.append(Row((str(n["node_rank"]), n["host"], n["node_group"], str(n["gpus"]),
                         f"{n['first_rank']}-{n['first_rank'] + n['gpus'] - 1}",
                         ", ".join(map(str, stages)))))
    if len(shown) < len(plan.nodes):
        rows.append(Row(("...", f"({len(plan.nodes) - len(shown)} more nodes)", "", "", "", "")))
    return FitTable(PLACEMENT_COLUMNS, rows, title="Placement (torchrun node rank -> host)",
                    title_justify="left")


GROUP_COLUMNS = (Col("kind"), Col("groups", "right", drop=1), Col("size", "right"),
                 Col("slowest tier"), Col("first group", fold=True))


def _groups_table(plan: Plan) -> FitTable:
    tiers = plan.prediction["tiers"]
    rows = []
    for kind, groups in plan.groups.items():
        first = groups[0]
        shown = ", ".join(map(str, first[:8])) + (", ..." if len(first) > 8 else "")
        rows.append(Row((GROUP_NAMES.get(kind, kind.upper()), f"{len(groups):,}",
                         str(len(first)), tiers.get(kind, "-" if len(first) == 1 else ""),
                         f"[{shown}]")))
    return FitTable(GROUP_COLUMNS, rows, title="Process groups", title_justify="left")


def render_explain(plan: Plan, timeline: Timeline | None = None) -> RenderableType:
    """Header and why, time and memory breakdowns, stages, placement, groups, and the
    pipeline ``timeline`` when given (and the plan has more than one stage)."""
    memory = plan.prediction["memory"]
    parts: list[RenderableType] = [
        _header(plan), Text(), time_table(plan.prediction["time"]),
        memory_table(memory, f"Memory per GPU (most loaded: stage {memory['stage']})", "Peak"),
        _stage_table(plan), _placement_table(plan), _groups_table(plan)]
    if timeline is not None and timeline.num_stages > 1:
        parts += [Text("Pipeline timeline", style="bold italic"), TimelineView(timeline),
                  timeline_note(timeline)]
    if plan.experts is not None:
        parts.append(Text(expert_placement_line(plan)))
    for note in plan.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    return Group(*parts)
