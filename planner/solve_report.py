"""``planner solve``'s table view: the top-k plans, the winner's why, what the search did.

Built from Plans (their ``config`` and ``prediction``); formats only.
"""
from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from planner.plan import Plan
from planner.search import SearchStats
from planner.why import PART_NAMES, TIER_OF_PART

GIB = 2**30


def plan_bottleneck(plan: Plan) -> str:
    """The largest part of the step besides compute, with the tier it crosses."""
    time = plan.prediction["time"]
    parts = {k: v for k, v in time.items() if k in PART_NAMES and k != "compute_s"}
    name, value = max(sorted(parts.items()), key=lambda kv: kv[1])
    if value <= 0:
        return "compute"
    tier = plan.prediction["tiers"].get(TIER_OF_PART.get(name, ""), "")
    share = value / time["step_s"]
    return f"{PART_NAMES[name]} {share:.0%}" + (f" ({tier})" if tier else "")


def _recompute_text(config: dict) -> str:
    if config["recompute"] == "full" and config["recompute_layers"] is not None:
        return f"full {config['recompute_layers']}/chunk"
    return config["recompute"]


def plan_row(plan: Plan) -> list[str]:
    """The cells of one plan in the top-k table."""
    c, p = plan.config, plan.prediction
    ep = f"{c['ep']}/{p['config']['expert_tp']}" if c["ep"] > 1 else "-"
    layout = "even" if c["stage_layer_counts"] is None else "DP"
    placement = "listing" if plan.node_order == sorted(plan.node_order) else "CP-SAT"
    return [str(c["tp"]), str(c["cp"]), str(c["pp"]), str(c["dp"]), ep,
            f"{plan.schedule}" + (f" v{c['vpp']}" if c["vpp"] > 1 else ""),
            str(c["micro_batch"]), _recompute_text(c), str(c["zero"]), layout, placement,
            f"{p['tokens_per_s_per_gpu']:,.0f}", f"{p['mfu']:.1%}", f"{p['step_time_s']:.2f}",
            f"{p['memory']['peak_bytes_per_gpu'] / GIB:.1f}/"
            f"{p['memory']['capacity_bytes_per_gpu'] / GIB:.0f}", plan_bottleneck(plan)]


HEADERS = ("tp", "cp", "pp", "dp", "ep/etp", "schedule", "mb", "recompute", "ZeRO", "layers",
           "placement", "tok/s/GPU", "MFU", "step s", "GiB used/cap", "bottleneck")


def top_table(plans: tuple[Plan, ...] | list[Plan], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    for h in HEADERS:
        right = h in ("tp", "cp", "pp", "dp", "mb", "ZeRO", "tok/s/GPU", "MFU", "step s",
                      "GiB used/cap")
        table.add_column(h, justify="right" if right else "left")
    for i, plan in enumerate(plans):
        table.add_row(str(i + 1), *plan_row(plan), style="bold" if i == 0 else None)
    return table


def render_solve(plans: tuple[Plan, ...], stats: SearchStats) -> RenderableType:
    """Header, top-k table, the winner's why, the search footer."""
    best = plans[0]
    w = best.inputs["workload"]
    head = Text(f"{best.inputs['model']['name']} on {best.inputs['cluster']['name']}", style="bold")
    head.append(f": {best.num_gpus:,} GPUs, global batch {w['global_batch']:,} x "
                f"{w['seq_len']:,} tokens, {w['precision']}", style="")
    why = Text("Why #1: ", style="bold green")
    why.append(best.prediction["why"], style="")
    footer = Text(f"searched {stats.degree_tuples} degree tuples ({stats.tuples_pruned_memory} "
                  f"pruned by the memory bound), estimated {stats.options_estimated:,} options, "
                  f"skipped {stats.options_pruned_memory:,} that do not fit, in "
                  f"{stats.seconds:.1f} s", style="dim")
    extra = []
    if best.config["stage_layer_counts"] is not None:
        extra.append(Text(f"#1 layers per stage (DP partition): "
                          f"{best.config['stage_layer_counts']}"))
    if best.node_order != sorted(best.node_order):
        extra.append(Text(f"#1 placement (node rank -> node): {best.node_order}"))
    return Group(head, Text(), top_table(plans, f"Top {len(plans)} plans, fastest first"),
                 why, *extra, footer)
