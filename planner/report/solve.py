"""``planner solve``'s table view: the top-k plans, the winner's why, what the search did.

Built from Plans (their ``config`` and ``prediction``); formats only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Group, RenderableType
from rich.text import Text

from planner.plan.document import Plan
from planner.report.fit import Col, FitTable, Row
from planner.plan.parts import PART_NAMES, TIER_OF_PART

if TYPE_CHECKING:  # annotations only: the stats are handed in by the CLI
    from planner.training.search import SearchStats

__all__ = ["plan_bottleneck", "schedule_text", "plan_row", "top_table", "render_solve",
           "expert_placement_line", "notes_lines"]

GIB = 2**30


def plan_bottleneck(plan: Plan) -> str:
    """The largest part of the step besides compute, with the tier it crosses."""
    time = plan.prediction["time"]
    parts = {k: v for k, v in time.items() if k in PART_NAMES and k != "compute_s"}
    name, value = max(sorted(parts.items()), key=lambda kv: kv[1])
    share = value / time["step_s"]
    if share < 0.005:
        return "compute"
    tier = plan.prediction["tiers"].get(TIER_OF_PART.get(name, ""), "")
    short = PART_NAMES[name].replace("communication", "comm").replace("pipeline ", "")
    return f"{short} {share:.0%}" + (f" {tier}" if tier else "")


def _recompute_text(config: dict) -> str:
    if config["recompute"] == "full" and config["recompute_layers"] is not None:
        return f"full {config['recompute_layers']}/ch"
    return config["recompute"]


def schedule_text(plan: Plan) -> str:
    c = plan.config
    if c["vpp"] > 1:
        return f"{plan.schedule.replace('interleaved-', 'int-')} v{c['vpp']}"
    if c.get("seq_slices", 1) > 1:
        return f"slimpipe k{c['seq_slices']}"
    return plan.schedule


def plan_row(plan: Plan) -> list[str]:
    """The cells of one plan in the top-k table."""
    c, p = plan.config, plan.prediction
    ep = f"{c['ep']}/{p['config']['expert_tp']}" if c["ep"] > 1 else "-"
    layout = "even" if c["stage_layer_counts"] is None else "DP"
    placement = "listing" if plan.node_order == sorted(plan.node_order) else "CP-SAT"
    mem = p["memory"]
    return [str(c["tp"]), str(c["cp"]), str(c["pp"]), str(c["dp"]), ep, schedule_text(plan),
            str(c["micro_batch"]), _recompute_text(c), str(c["zero"]), layout, placement,
            f"{p['tokens_per_s_per_gpu']:,.0f}", f"{p['mfu']:.1%}", f"{p['step_time_s']:.2f}",
            f"{(mem['capacity_bytes_per_gpu'] - mem['peak_bytes_per_gpu']) / GIB:.1f}",
            plan_bottleneck(plan)]


HEADERS = ("tp", "cp", "pp", "dp", "ep/etp", "schedule", "mb", "recompute", "ZeRO", "layers",
           "placement", "tok/s/GPU", "MFU", "step s", "GiB free", "bottleneck")
ALWAYS_SHOWN = {"tp", "pp", "dp", "schedule", "recompute", "tok/s/GPU", "MFU", "step s",
                "GiB free", "bottleneck"}
RIGHT = {"tp", "cp", "pp", "dp", "mb", "ZeRO", "tok/s/GPU", "MFU", "step s", "GiB free"}
# Order in which columns are left out of a narrow terminal, first (highest) first; the
# degrees, the schedule, tok/s/GPU and MFU (0) are always shown.
DROP = {"placement": 10, "layers": 9, "ZeRO": 8, "bottleneck": 7, "mb": 6, "GiB free": 5,
        "step s": 4, "recompute": 3}


def top_table(plans: tuple[Plan, ...] | list[Plan], title: str) -> tuple[FitTable, Text | None]:
    """The table, and a line naming the columns left out because every plan has the same
    value there. In a narrow terminal the table leaves out its least important columns
    (:data:`DROP`) rather than cut the degrees."""
    rows = [plan_row(p) for p in plans]
    keep = [i for i, h in enumerate(HEADERS)
            if h in ALWAYS_SHOWN or len({r[i] for r in rows}) > 1]
    same = [f"{HEADERS[i]} {'none' if rows[0][i] == '-' else rows[0][i]}"
            for i in range(len(HEADERS)) if i not in keep]
    columns = [Col("#", justify="right")] + [
        Col(HEADERS[i], justify="right" if HEADERS[i] in RIGHT else "left",
            drop=DROP.get(HEADERS[i], 0), fold=HEADERS[i] == "bottleneck") for i in keep]
    table = FitTable(columns, [Row((str(n + 1), *(row[i] for i in keep)),
                                   style="bold" if n == 0 else None)
                               for n, row in enumerate(rows)],
                     box=box.SIMPLE_HEAD, title=title,
                     title_justify="left", pad_edge=False, collapse_padding=True)
    note = Text("every plan: " + ", ".join(same), style="dim") if same else None
    return table, note


def render_solve(plans: tuple[Plan, ...], stats: SearchStats) -> RenderableType:
    """Header, top-k table, the winner's why, the plans' notes, the search footer."""
    best = plans[0]
    w = best.inputs["workload"]
    head = Text(f"{best.inputs['model']['name']} on {best.inputs['cluster']['name']}", style="bold")
    head.append(f": {best.num_gpus:,} GPUs, global batch {w['global_batch']:,} x "
                f"{w['seq_len']:,} tokens, {w['precision']}", style="")
    why = Text("Why #1: ", style="bold green")
    why.append(best.prediction["why"], style="")
    footer = Text(f"searched {stats.degree_tuples} degree tuples ({stats.tuples_pruned_memory} "
                  f"pruned by the memory bound, {stats.tuples_pruned_bound} by the step-time "
                  f"bound), estimated {stats.options_estimated:,} options, "
                  f"skipped {stats.options_pruned_memory:,} that do not fit, in "
                  f"{stats.seconds:.1f} s", style="dim")
    extra = []
    if best.config["stage_layer_counts"] is not None:
        extra.append(Text(f"#1 layers per stage (DP partition): "
                          f"{best.config['stage_layer_counts']}"))
    if best.node_order != sorted(best.node_order):
        extra.append(Text(f"#1 placement (node rank -> node): {best.node_order}"))
        listed = best.prediction.get("listing_order")
        if listed:
            extra.append(Text(listing_line(best.prediction["step_time_s"], listed)))
    extra += [Text(f"#{i + 1} {expert_placement_line(p)}")
              for i, p in enumerate(plans) if p.experts is not None][:3]
    table, same = top_table(plans, f"Top {len(plans)} plans, fastest first")
    return Group(head, Text(), table, *([same] if same else []), why, *extra,
                 *notes_lines(plans), footer)


def notes_lines(plans: tuple[Plan, ...] | list[Plan]) -> list[Text]:
    """Each distinct note of the plans once, first seen first, naming the plans it concerns
    unless it concerns every plan: ``note (#2, #5): placement: ...``, ``note: batch: ...``."""
    where: dict[str, list[int]] = {}
    for n, plan in enumerate(plans, start=1):
        for note in plan.notes:
            where.setdefault(note, []).append(n)
    lines = []
    for note, numbers in where.items():
        who = "" if len(numbers) == len(plans) else " (" + ", ".join(f"#{n}" for n in numbers) + ")"
        line = Text(f"note{who}: ", style="bold yellow")
        line.append(note, style="")
        lines.append(line)
    return lines


def listing_line(step_s: float, listed: dict) -> str:
    """The placed plan against the same degrees in listing order (NIC-oblivious)."""
    def groups(d: dict) -> str:
        return ", ".join(f"{n} {k}" for k, n in sorted(d.items())) or "none"
    return (f"#1 vs listing order (Megatron, same degrees): {step_s:.3g} s vs "
            f"{listed['step_time_s']:.3g} s per step ({listed['speedup']:.2f}x); groups on TCP "
            f"sockets: {groups(listed['socket_groups_placed'])} placed, "
            f"{groups(listed['socket_groups'])} in listing order")


def expert_placement_line(plan: Plan) -> str:
    """One line on a plan's expert placement (numbers from its summary)."""
    doc = plan.experts
    m = doc["summary"]
    return (f"expert placement (EP{doc['ep_size']}, {doc['slots_per_gpu']} slots per GPU): "
            f"busiest/mean GPU load {m['mean_ratio_after']:.4f} (EPLB-style "
            f"{m['mean_ratio_eplb']:.3f}, one replica each {m['mean_ratio_before']:.3f}), mean "
            f"over {len(doc['moe_layers'])} MoE layers")
