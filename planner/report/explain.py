"""``planner explain PLAN``: everything a plan decided and predicted, with its pipeline timeline.

Formats only: figures come from the plan (its prediction and tables) and from the pipeline
simulator run on the plan's per-stage times (:mod:`planner.training.timeline`).
"""
from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from planner.plan.document import Plan
from planner.report.estimate import GROUP_NAMES, MEMORY_ROWS, TIME_ROWS
from planner.report.solve import plan_bottleneck
from solvers.pipeline.sim import PipelineProblem, PipelineResult, bubble_closed_form_s

GIB = 2**30


def _header(plan: Plan) -> Text:
    c, w, p = plan.config, plan.inputs["workload"], plan.prediction
    text = Text(f"{plan.inputs['model']['name']} on {plan.inputs['cluster']['name']}",
                style="bold")
    text.append(f": {plan.num_gpus:,} GPUs, plan {plan.inputs_hash[:12]} (planner "
                f"{plan.planner_version})\n", style="")
    text.append(f"tp {c['tp']} · cp {c['cp']} · pp {c['pp']} · dp {c['dp']} · ep {c['ep']} · "
                f"etp {p['config']['expert_tp']} · vpp {c['vpp']} · schedule {plan.schedule}\n")
    text.append(f"global batch {w['global_batch']:,} x {w['seq_len']:,} tokens in "
                f"{plan.micro_batches:,} micro-batches of {c['micro_batch']} · {w['precision']} "
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


def _time_table(plan: Plan) -> Table:
    time = plan.prediction["time"]
    table = Table(title="Step time", title_justify="left")
    table.add_column("Component")
    table.add_column("Seconds", justify="right")
    table.add_column("% of step", justify="right")
    for key, label in TIME_ROWS:
        table.add_row(label, f"{time[key]:.3f}", f"{100 * time[key] / time['step_s']:.1f}",
                      style="dim" if time[key] == 0 else None)
    table.add_section()
    table.add_row("Step", f"{time['step_s']:.3f}", "100.0", style="bold")
    return table


def _memory_table(plan: Plan) -> Table:
    mem = plan.prediction["memory"]
    table = Table(title=f"Memory per GPU (most loaded: stage {mem['stage']})",
                  title_justify="left")
    table.add_column("Component")
    table.add_column("GiB", justify="right")
    for key, label in MEMORY_ROWS:
        table.add_row(label, f"{mem[key] / GIB:.1f}")
    table.add_section()
    table.add_row("Peak", f"{mem['peak_bytes_per_gpu'] / GIB:.1f}", style="bold")
    table.add_row("Capacity", f"{mem['capacity_bytes_per_gpu'] / GIB:.1f}")
    return table


def _layer_ranges(layers: list[int]) -> str:
    runs, start = [], layers[0]
    for prev, cur in zip(layers, layers[1:] + [None]):
        if cur != prev + 1:
            runs.append(f"{start}-{prev}" if prev > start else str(start))
            start = cur
    return ", ".join(runs)


def _stage_table(plan: Plan) -> Table:
    table = Table(title="Pipeline stages (per micro-batch)", title_justify="left")
    for name in ("stage", "layers", "also", "compute s", "recompute s", "comm s", "total s",
                 "peak GiB", "cap GiB"):
        table.add_column(name, justify="left" if name in ("layers", "also") else "right")
    memory = {m["stage"]: m for m in plan.prediction["stage_memory"]}
    slowest = max(s["total_s"] for s in plan.prediction["stages"])
    for stage, cost in zip(plan.stages, plan.prediction["stages"]):
        also = ", ".join(x for x, on in (("embedding", stage["embedding"]),
                                         ("LM head", stage["head"])) if on)
        comm = sum(cost[k] for k in ("tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s"))
        mem = memory.get(stage["stage"], {})
        table.add_row(str(stage["stage"]),
                      f"{len(stage['layers'])}: {_layer_ranges(stage['layers'])}", also,
                      f"{cost['compute_s']:.4f}", f"{cost['recompute_s']:.4f}", f"{comm:.4f}",
                      f"{cost['total_s']:.4f}",
                      f"{mem.get('peak_bytes', 0) / GIB:.1f}",
                      f"{mem.get('capacity_bytes', 0) / GIB:.0f}",
                      style="bold" if cost["total_s"] == slowest and len(plan.stages) > 1
                      else None)
    return table


def _placement_table(plan: Plan, max_rows: int = 16) -> RenderableType:
    stage_of = {}
    for row in plan.rank_rows():
        stage_of.setdefault(row["node_rank"], set()).add(row["pp"])
    table = Table(title="Placement (torchrun node rank -> host)", title_justify="left")
    for name in ("node rank", "host", "node group", "GPUs", "global ranks", "pp stages"):
        table.add_column(name, justify="right" if name in ("node rank", "GPUs") else "left")
    shown = plan.nodes if len(plan.nodes) <= max_rows else plan.nodes[:max_rows - 2]
    for n in shown:
        stages = sorted(stage_of.get(n["node_rank"], ()))
        table.add_row(str(n["node_rank"]), n["host"], n["node_group"], str(n["gpus"]),
                      f"{n['first_rank']}-{n['first_rank'] + n['gpus'] - 1}",
                      ", ".join(map(str, stages)))
    if len(shown) < len(plan.nodes):
        table.add_row("...", f"({len(plan.nodes) - len(shown)} more nodes)", "", "", "", "")
    return table


def _groups_table(plan: Plan) -> Table:
    table = Table(title="Process groups", title_justify="left")
    for name in ("kind", "groups", "size", "slowest tier", "first group"):
        table.add_column(name, justify="right" if name in ("groups", "size") else "left")
    tiers = plan.prediction["tiers"]
    for kind, groups in plan.groups.items():
        first = groups[0]
        shown = ", ".join(map(str, first[:8])) + (", ..." if len(first) > 8 else "")
        table.add_row(GROUP_NAMES.get(kind, kind.upper()), f"{len(groups):,}",
                      str(len(first)), tiers.get(kind, "-" if len(first) == 1 else ""),
                      f"[{shown}]")
    return table


def _timeline_note(plan: Plan, problem: PipelineProblem, result: PipelineResult) -> Text:
    k = plan.config.get("seq_slices", 1)
    if k > 1:
        head = (f"Simulated {problem.num_microbatches // k} of {plan.micro_batches} micro-batches"
                f" as {problem.num_microbatches} slice units (slimpipe, {k} slices, "
                f"{problem.num_stages} stages")
    else:
        head = (f"Simulated {problem.num_microbatches} of {plan.micro_batches} micro-batches "
                f"({plan.schedule}, {problem.num_stages} stages"
                + (f", {problem.num_chunks} chunks each" if problem.num_chunks > 1 else ""))
    text = Text(head + f"): bubble {result.bubble_s:.3f} s", style="dim")
    try:
        closed = bubble_closed_form_s(problem)
        text.append(f", closed form for uniform stages {closed:.3f} s", style="dim")
    except ValueError:
        pass
    peak = ", ".join(map(str, result.peak_in_flight))
    unit = "slices" if k > 1 else "micro-batches"
    text.append(f"; {unit} in flight per stage: {peak}", style="dim")
    return text


def render_explain(plan: Plan, problem: PipelineProblem | None = None,
                   result: PipelineResult | None = None) -> RenderableType:
    """Header and why, time and memory breakdowns, stages, placement, groups, timeline."""
    from planner.training.timeline import timeline_text

    parts: list[RenderableType] = [_header(plan), Text(), _time_table(plan),
                                   _memory_table(plan), _stage_table(plan),
                                   _placement_table(plan), _groups_table(plan)]
    if result is not None and problem is not None and problem.num_stages > 1:
        parts += [Text("Pipeline timeline", style="bold italic"),
                  timeline_text(result, problem.num_stages),
                  _timeline_note(plan, problem, result)]
    if plan.expert_placement is not None:
        from planner.report.solve import expert_placement_line
        parts.append(Text(expert_placement_line(plan)))
    for note in plan.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    return Group(*parts)
