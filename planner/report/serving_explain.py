"""``planner explain`` and ``planner compare`` for serving plans (``kind: "serving"``).

They format what they are handed: the plan's ``serving`` section (mode, engine, workload and
targets, pools, instances) and its ``prediction`` (the deployment estimate: TTFT, TPOT,
throughput, what bounds the rate, memory and step time by part per pool, the why line). What
the plan does not hold, whether each target is met and the order of plans in a comparison, the
CLI works out and hands in (:mod:`planner.cli.plans`).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from planner.plan.document import Plan
from planner.report.fit import Col, FitTable, Row

__all__ = ["render_serving_explain", "render_serving_compare", "pool_layout", "STEP_PARTS"]

# The named parts of a pool's step time (prediction["pools"][i]["step"]), with a bar letter.
STEP_PARTS = (("gemm_s", "GEMM", "G"), ("attention_s", "attention", "A"), ("moe_s", "MoE", "M"),
              ("comm_s", "comm", "C"), ("overhead_s", "overhead", "o"))
BAR_CELLS = 16
BOUND_TEXT = {
    "load": "the offered load (the rate or concurrency the TTFT target allows), not capacity",
    "decode": "decode capacity",
    "prefill": "prefill capacity",
}
ROLE_SHORT = {"prefill": "pre", "decode": "dec", "colocated": "col"}


def pool_layout(pool: Mapping) -> str:
    """``tp2·pp4``: the degrees above 1 (tp always) of one pool."""
    parts = [f"tp{pool['tp']}"]
    parts += [f"{k}{pool[k]}" for k in ("pp", "dp", "ep") if pool.get(k, 1) > 1]
    return "·".join(parts)


def _ms(seconds: float | None) -> str:
    """Milliseconds: one decimal below 100 ms, none above; an unbounded wait is "inf"."""
    if seconds is None:
        return "inf"
    return f"{seconds * 1e3:.1f}" if seconds < 0.1 else f"{seconds * 1e3:,.0f}"


def _met(met: bool | None) -> str:
    return "-" if met is None else ("met" if met else "MISSED")


# --- explain --------------------------------------------------------------------------------


def _workload_line(serving: Mapping) -> str:
    w = serving["workload"]
    load = (f"rate {w['rate_per_s']:g} req/s" if w.get("rate_per_s") is not None
            else f"concurrency {w['concurrency']}" if w.get("concurrency") is not None
            else "load: as much as the targets allow")
    targets = [f"{name} <= {w[key]:g} ms" for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"))
               if w.get(key) is not None]
    return (f"workload: ISL {w['isl']:,} · OSL {w['osl']:,} · {load} · prefix hit "
            f"{w.get('prefix_hit', 0):.0%} · targets " + (", ".join(targets) or "none"))


def _header(plan: Plan, met: Mapping[str, bool | None]) -> Text:
    s, p, w = plan.serving, plan.prediction, plan.serving["workload"]
    text = Text(f"{plan.inputs['model']['name']} on {plan.inputs['cluster']['name']}",
                style="bold")
    text.append(f": serving, {s['mode']} on {s['engine']}, {p['gpus']:,} GPUs, plan "
                f"{plan.inputs_hash[:12]} (planner {plan.planner_version})\n", style="")
    text.append(f"loads {s['model_path']} · {s['precision']} weights · KV {s['kv_dtype']} · "
                f"max model len {s['max_model_len']:,}\n")
    text.append(_workload_line(s) + "\n")
    q = p.get("ttft_quantile")
    if q is not None and "ttft_at_quantile_s" in p:  # the target holds for this share
        text.append(f"TTFT p{q * 100:g} {_ms(p['ttft_at_quantile_s'])} ms", style="bold")
        text.append(f" (mean {_ms(p['ttft_s'])} ms)")
    else:
        text.append(f"TTFT {_ms(p['ttft_s'])} ms", style="bold")
    if w.get("ttft_ms") is not None:
        text.append(f" (target {w['ttft_ms']:g}: {_met(met.get('ttft'))})")
    text.append(f" · TPOT {_ms(p['tpot_s'])} ms", style="bold")
    full = p.get("tpot_full_s")
    if full is not None and _ms(full) != _ms(p["tpot_s"]):  # colocated: judged slots full
        text.append(f" (every slot busy {_ms(full)} ms)")
    if w.get("tpot_ms") is not None:
        text.append(f" (target {w['tpot_ms']:g}: {_met(met.get('tpot'))})")
    text.append(f" · {p['output_tokens_per_s_per_gpu']:,.0f} tok/s/GPU · "
                f"{p['output_tokens_per_s_per_user']:,.1f} tok/s/user · "
                f"{p['request_rate_per_s']:,.2f} req/s", style="bold")
    if s["mode"] == "disagg":
        text.append(f" · KV transfer {_ms(p['kv_transfer_s'])} ms per request (in TTFT)")
    verdict = "targets met" if p["meets_slo"] else "targets MISSED"
    if not p["fits"]:
        verdict += "; does NOT fit in memory"
    text.append(f"\n{verdict}", style="bold green" if p["meets_slo"] else "bold red")
    text.append(f"; the rate is bound by {BOUND_TEXT.get(p['bound'], p['bound'])}")
    if p.get("why"):
        text.append("\nWhy: ", style="bold green")
        text.append(p["why"])
    return text


POOL_COLUMNS = (Col("role"), Col("GPU", drop=4), Col("layout"), Col("inst.", "right"),
                Col("GPUs", "right"), Col("batch", "right"), Col("weights GB", "right", drop=2),
                Col("KV GB", "right", drop=1), Col("cap GB", "right", drop=3),
                Col("step ms", "right"), Col("busy", "right", drop=5))


def _pools_table(plan: Plan) -> FitTable:
    rows = []
    for pool in plan.prediction["pools"]:
        m = pool["memory"]
        rows.append(Row((pool["role"], pool["gpu"], pool_layout(pool), str(pool["workers"]),
                         str(pool["gpus"]), str(pool["batch"]), f"{m['weights_gb']:.1f}",
                         f"{m['kv_gb']:.1f}", f"{m['capacity_gb']:.1f}",
                         _ms(pool["step"]["total_s"]), f"{pool['utilisation']:.0%}"),
                        style=None if m["fits"] else "red"))
    return FitTable(POOL_COLUMNS, rows, title="Pools (memory per GPU; batch: running requests "
                                              "per attention rank)", title_justify="left")


def _bar(step: Mapping) -> Text:
    """A fixed-width bar of the step's parts, one letter per part (GEMM G, attention A, ...)."""
    total = step["total_s"] or 1.0
    bar = "".join(letter * round(step[key] / total * BAR_CELLS) for key, _, letter in STEP_PARTS)
    return Text(bar[:BAR_CELLS].ljust(BAR_CELLS, "·"))


STEP_COLUMNS = (Col("role"), *(Col(name, "right") for _, name, _ in STEP_PARTS),
                Col("total", "right"), Col("bar: " + " ".join(l for _, _, l in STEP_PARTS), drop=1))


def _step_table(plan: Plan) -> FitTable:
    rows = [Row((pool["role"], *(_ms(pool["step"][key]) for key, _, _ in STEP_PARTS),
                 _ms(pool["step"]["total_s"]), _bar(pool["step"])))
            for pool in plan.prediction["pools"]]
    return FitTable(STEP_COLUMNS, rows, title="Step time by part, ms (prefill: one batch of prompts; "
                                              "decode: one token for the batch)",
                    title_justify="left")


def _ranges(gpus: Sequence[int]) -> str:
    runs, start = [], gpus[0]
    for prev, cur in zip(gpus, list(gpus[1:]) + [None]):
        if cur != prev + 1:
            runs.append(f"{start}-{prev}" if prev > start else str(start))
            start = cur
    return ",".join(runs)


INSTANCE_COLUMNS = (Col("role"), Col("#", "right"), Col("port", "right"),
                    Col("hosts: GPUs", fold=True))


def _instances_table(plan: Plan, max_rows: int = 16) -> FitTable:
    instances = plan.serving["instances"]
    shown = instances if len(instances) <= max_rows else instances[:max_rows - 1]
    rows = [Row((i["role"], str(i["index"]), str(i["port"]),
                 " + ".join(f"{n['host']}: {_ranges(n['gpus'])}" for n in i["nodes"])))
            for i in shown]
    if len(shown) < len(instances):
        rows.append(Row(("...", "", "", f"({len(instances) - len(shown)} more instances)")))
    router = plan.serving.get("router")
    title = "Engine instances" + (f" (router {router['host']}:{router['port']})" if router else "")
    return FitTable(INSTANCE_COLUMNS, rows, title=title, title_justify="left")


def render_serving_explain(plan: Plan, met: Mapping[str, bool | None]) -> RenderableType:
    """Header (mode, engine, model, workload, targets, results, bound, why), pools, step time
    by part and engine instances. ``met``: per target (``ttft``, ``tpot``) whether the
    prediction meets it, ``None`` without a target."""
    parts: list[RenderableType] = [_header(plan, met), Text(), _pools_table(plan),
                                   _step_table(plan), _instances_table(plan)]
    for note in plan.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    return Group(*parts)


# --- compare --------------------------------------------------------------------------------


def compare_layout(plan: Plan) -> str:
    """One line per pool: ``dec tp2·pp4 b256 x1`` (batch per attention rank, instances)."""
    return "\n".join(f"{ROLE_SHORT.get(p['role'], p['role'])} {pool_layout(p)} b{p['batch']} "
                     f"x{p['workers']}" for p in plan.prediction["pools"])


# The decision columns (drop=0) fit 80 columns with plan names of up to 7 characters.
COMPARE_COLUMNS = (Col("plan", fold=True), Col("model", drop=3, fold=True), Col("mode"),
                   Col("layout", fold=True), Col("GPUs", "right"), Col("tok/s/GPU", "right"),
                   Col("tok/s/user", "right"), Col("TTFT", "right"), Col("TPOT", "right"),
                   Col("met"), Col("bound", drop=1), Col("engine", drop=2))
BEST_MARK = " *"


def render_serving_compare(plans: Sequence[Plan], names: Sequence[str], best: int | None,
                           mixed_inputs: bool = False) -> RenderableType:
    """One row per plan, in the order handed in (the CLI ranks them), ``best`` (an index, or
    ``None``) marked; a warning first when ``mixed_inputs`` (different models or workloads)."""
    rows = []
    for i, (plan, name) in enumerate(zip(plans, names)):
        p = plan.prediction
        rows.append(Row((name + (BEST_MARK if i == best else ""), plan.inputs["model"]["name"],
                         plan.serving["mode"], compare_layout(plan), f"{p['gpus']:,}",
                         f"{p['output_tokens_per_s_per_gpu']:,.0f}",
                         f"{p['output_tokens_per_s_per_user']:,.1f}", _ms(p["ttft_s"]),
                         _ms(p["tpot_s"]), "yes" if p["meets_slo"] else "NO", p["bound"],
                         plan.serving["engine"]),
                        style="bold green" if i == best else None))
    parts: list[RenderableType] = []
    if mixed_inputs:
        parts.append(Text("warning: these plans are for different models or workloads; compare "
                          "their per-GPU figures with care", style="yellow"))
    parts.append(FitTable(COMPARE_COLUMNS, rows, title="Serving plans by output tokens/s/GPU, "
                                                       "those meeting their targets first "
                                                       "(TTFT, TPOT in ms)",
                          title_justify="left"))
    if any(plan.serving["mode"] == "colocated" for plan in plans):
        parts.append(Text("TPOT: the mean at the plan's rate; a colocated TPOT target is "
                          "judged with every slot busy ('planner explain' shows both)",
                          style="dim"))
    if best is not None:
        parts.append(Text(f"{BEST_MARK.strip()} best: {names[best]}, the most output tokens/s "
                          "per GPU among plans that meet their targets", style="bold green"))
    else:
        parts.append(Text("no plan meets its targets", style="bold red"))
    return Group(*parts)
