"""Pipeline timelines of a plan: simulate its schedule, draw it in the terminal or to PNG/SVG.

The per-stage times come from the plan's prediction (one micro-batch, per stage: compute,
recompute and communication, ``prediction.stages``); the event-driven simulator
(:mod:`solvers.pipeline.sim`) orders the forward, backward and (ZB-H1) weight-gradient passes
of every micro-batch by the plan's schedule. Forward is a third of the compute (backward costs
twice the forward: Narayanan et al. 2021, §3.2); recomputation runs in the backward pass.
A SlimPipe plan (k sequence slices) is simulated as ``m k`` balanced slice units in SlimPipe's
order (``solvers.pipeline.slimpipe.slimpipe_orders``: warm-up over all slices of a micro-batch,
backwards in reverse slice order), each a k-th of a micro-batch's time.
"""
from __future__ import annotations

import io
from pathlib import Path

from rich.text import Text

from planner.errors import SpecError
from planner.files import write_atomic_bytes
from planner.plan.document import Plan
from solvers.pipeline.sim import (PipelineProblem, PipelineResult, op_duration_s, simulate,
                                  simulate_orders)
from solvers.pipeline.slimpipe import slimpipe_orders

PASS_STYLES = {"F": "bold blue", "B": "bold green", "W": "bold yellow"}
PASS_COLOURS = {"F": "#4C72B0", "B": "#55A868", "W": "#DD8452"}
PASS_NAMES = {"F": "forward", "B": "backward (input grad)", "W": "weight grad"}
MAX_SIMULATED_MICROBATCHES = 64


def pipeline_problem(plan: Plan, max_microbatches: int | None = None) -> PipelineProblem:
    """The plan's schedule as a simulator problem, per-chunk times per stage.

    ``max_microbatches`` caps the micro-batches simulated (a multiple of pp is kept), so a
    picture of a 1,024-micro-batch step stays readable; the warm-up and cool-down, where the
    bubble lives, are the same.
    """
    c = plan.config
    v = c["vpp"]
    forward, backward, wgrad = [], [], []
    for stage in plan.prediction["stages"]:
        f = (stage["total_s"] - stage["recompute_s"] - stage["pp_comm_s"]) / 3
        forward.append(f / v)
        backward.append((stage["total_s"] - stage["pp_comm_s"] - f) / v)
        wgrad.append(stage["weight_grad_s"] / v)
    m = plan.micro_batches
    if max_microbatches is not None and m > max_microbatches:
        m = max(c["pp"], max_microbatches // c["pp"] * c["pp"])
    share = sum(wgrad) / sum(backward) if sum(backward) > 0 else 0.0
    p2p = max(s["pp_comm_s"] for s in plan.prediction["stages"]) / 2 if c["pp"] > 1 else 0.0
    k = c.get("seq_slices", 1)
    if k > 1:  # SlimPipe: m k slice units of 1/k each, one send per slice unit and direction
        return PipelineProblem(schedule="1f1b", num_stages=c["pp"], num_microbatches=m * k,
                               forward_s=tuple(f / k for f in forward),
                               backward_s=tuple(b / k for b in backward), p2p_s=p2p / k)
    return PipelineProblem(schedule=plan.schedule, num_stages=c["pp"], num_microbatches=m,
                           forward_s=tuple(forward), backward_s=tuple(backward), num_chunks=v,
                           weight_grad_fraction=min(share, 1.0) if plan.schedule == "zb-h1"
                           else 0.5, p2p_s=p2p / v)


def simulate_plan(plan: Plan, max_microbatches: int | None = MAX_SIMULATED_MICROBATCHES
                  ) -> tuple[PipelineProblem, PipelineResult]:
    problem = pipeline_problem(plan, max_microbatches)
    k = plan.config.get("seq_slices", 1)
    if k > 1:
        orders = slimpipe_orders(problem.num_stages, problem.num_microbatches // k, k)
        return problem, simulate_orders(orders, lambda s, kind, mb, chunk: op_duration_s(
            problem, s, kind), p2p_s=problem.p2p_s)
    return problem, simulate(problem)


def timeline_text(result: PipelineResult, num_stages: int, width: int = 96) -> Text:
    """One row per stage; each column shows the pass that occupies most of its time slice
    (F blue, B green, W yellow, idle ·), labelled with the micro-batch number mod 10."""
    step = result.step_s
    cols = [[(0.0, None)] * width for _ in range(num_stages)]
    for e in result.events:
        first, last = int(e.start_s / step * width), int(e.end_s / step * width)
        for col in range(first, min(last, width - 1) + 1):
            lo, hi = col * step / width, (col + 1) * step / width
            overlap = min(hi, e.end_s) - max(lo, e.start_s)
            if overlap > cols[e.stage][col][0]:
                cols[e.stage][col] = (overlap, e)
    text = Text()
    label_w = len(str(num_stages - 1)) + 6
    for s, row in enumerate(cols):
        text.append(f"stage {s}".ljust(label_w), style="bold")
        for _, e in row:
            if e is None:
                text.append("·", style="dim")
            else:
                text.append(str(e.microbatch % 10), style=PASS_STYLES[e.kind])
        text.append("\n")
    text.append(" " * label_w + f"0 s{'':>{width - 12}}{step:.2f} s\n", style="dim")
    for kind, name in PASS_NAMES.items():
        text.append(f"  {kind} ", style=PASS_STYLES[kind])
        text.append(name)
    text.append("  · idle", style="dim")
    return text


def save_timeline(result: PipelineResult, num_stages: int, path: Path, title: str) -> None:
    """Draw the timeline to ``path`` (.png or .svg, by suffix) with matplotlib, atomically."""
    suffix = path.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise SpecError(str(path), "suffix", "'.png' or '.svg'", path.suffix)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(12, 0.5 * num_stages + 1.5))
    for kind in PASS_COLOURS:
        for s in range(num_stages):
            bars = [(e.start_s, e.end_s - e.start_s) for e in result.events
                    if e.kind == kind and e.stage == s]
            if bars:
                ax.broken_barh(bars, (s - 0.4, 0.8), facecolors=PASS_COLOURS[kind],
                               edgecolor="white", linewidth=0.3)
    ax.set_ylim(num_stages - 0.5, -0.5)
    ax.set_yticks(range(num_stages), [f"stage {s}" for s in range(num_stages)])
    ax.set_xlabel("time (s)")
    ax.set_xlim(0, result.step_s)
    ax.set_title(title)
    ax.legend(handles=[Patch(color=PASS_COLOURS[k], label=PASS_NAMES[k]) for k in PASS_COLOURS
                       if any(e.kind == k for e in result.events)],
              loc="upper center", bbox_to_anchor=(0.5, -0.15 if num_stages > 2 else -0.3),
              ncol=3, frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    metadata = {"Date": None} if suffix == ".svg" else {"Software": None}
    fig.savefig(buf, format=suffix[1:], dpi=120, metadata=metadata)
    plt.close(fig)
    write_atomic_bytes(path, buf.getvalue())
