"""Pipeline timelines drawn in the terminal or to PNG/SVG, from a simulated plan.

Formats only: the passes, the bubble and the in-flight counts come from a plan's simulation
(:func:`planner.training.timeline.plan_timeline` makes it; ``planner explain`` passes it here).
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from planner.errors import SpecError
from planner.files import write_atomic_bytes

if TYPE_CHECKING:  # annotations only: ``planner explain`` hands the simulation in
    from planner.training.timeline import PlanTimeline as Timeline

__all__ = ["TimelineView", "timeline_text", "timeline_note", "save_timeline",
           "PASS_STYLES", "PASS_COLOURS", "PASS_NAMES"]

PASS_STYLES = {"F": "bold blue", "B": "bold green", "W": "bold yellow"}
PASS_COLOURS = {"F": "#4C72B0", "B": "#55A868", "W": "#DD8452"}
PASS_NAMES = {"F": "forward", "B": "backward (input grad)", "W": "weight grad"}
TIMELINE_COLUMNS = 96  # time slices across, where the terminal has room
MIN_TIMELINE_COLUMNS = 24


def _label_width(num_stages: int) -> int:
    return len(str(num_stages - 1)) + 7  # "stage N" and a space


# Without colour (piped, NO_COLOR) a pass's kind is in its glyph: the micro-batch number mod
# 10 as a digit (forward), a lower-case letter (backward) or an upper-case one (weight grad)
PLAIN_GLYPHS = {"F": "0123456789", "B": "abcdefghij", "W": "ABCDEFGHIJ"}


def timeline_text(timeline: Timeline, width: int = TIMELINE_COLUMNS,
                  plain: bool = False) -> Text:
    """One row per stage; each of ``width`` columns shows the pass that occupies most of its
    time slice (F blue, B green, W yellow, idle ·), labelled with the micro-batch number mod 10;
    ``plain``: told apart by glyph instead of colour (:data:`PLAIN_GLYPHS`)."""
    step, num_stages = timeline.step_s, timeline.num_stages
    cols = [[(0.0, None)] * width for _ in range(num_stages)]
    for e in timeline.events:
        first, last = int(e.start_s / step * width), int(e.end_s / step * width)
        for col in range(first, min(last, width - 1) + 1):
            lo, hi = col * step / width, (col + 1) * step / width
            overlap = min(hi, e.end_s) - max(lo, e.start_s)
            if overlap > cols[e.stage][col][0]:
                cols[e.stage][col] = (overlap, e)
    text = Text()
    label_w = _label_width(num_stages)
    for s, row in enumerate(cols):
        text.append(f"stage {s}".ljust(label_w), style="bold")
        for _, e in row:
            if e is None:
                text.append("·", style="dim")
            elif plain:
                text.append(PLAIN_GLYPHS[e.kind][e.microbatch % 10])
            else:
                text.append(str(e.microbatch % 10), style=PASS_STYLES[e.kind])
        text.append("\n")
    text.append(" " * label_w + f"0 s{'':>{width - 12}}{step:.2f} s\n", style="dim")
    for kind, name in PASS_NAMES.items():
        if plain:
            glyphs = PLAIN_GLYPHS[kind]
            text.append(f"  {glyphs[0]}-{glyphs[-1]} {name}")
        else:
            text.append(f"  {kind} ", style=PASS_STYLES[kind])
            text.append(name)
    text.append("  · idle", style="dim")
    if plain:
        text.append(" (micro-batch number mod 10)")
    return text


class TimelineView:
    """:func:`timeline_text` at :data:`TIMELINE_COLUMNS` slices, or fewer where the width it
    is printed at is smaller, so a stage's row stays one line."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        room = options.max_width - _label_width(self.timeline.num_stages)
        plain = console.no_color or console.color_system is None
        yield timeline_text(self.timeline, max(MIN_TIMELINE_COLUMNS,
                                               min(TIMELINE_COLUMNS, room)), plain)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        label = _label_width(self.timeline.num_stages)
        return Measurement(label + MIN_TIMELINE_COLUMNS, label + TIMELINE_COLUMNS)


def timeline_note(timeline: Timeline) -> Text:
    """What was simulated, the bubble (and its closed form), the peak in-flight counts."""
    k = timeline.seq_slices
    if k > 1:
        head = (f"Simulated {timeline.simulated_units // k} of {timeline.plan_microbatches} "
                f"micro-batches as {timeline.simulated_units} slice units (slimpipe, {k} "
                f"slices, {timeline.num_stages} stages")
    else:
        head = (f"Simulated {timeline.simulated_units} of {timeline.plan_microbatches} "
                f"micro-batches ({timeline.schedule}, {timeline.num_stages} stages"
                + (f", {timeline.num_chunks} chunks each" if timeline.num_chunks > 1 else ""))
    text = Text(head + f"): bubble {timeline.bubble_s:.3f} s", style="dim")
    if timeline.closed_form_bubble_s is not None:
        text.append(f", closed form for uniform stages {timeline.closed_form_bubble_s:.3f} s",
                    style="dim")
    peak = ", ".join(map(str, timeline.peak_in_flight))
    unit = "slices" if k > 1 else "micro-batches"
    text.append(f"; {unit} in flight per stage: {peak}", style="dim")
    shares = timeline.replica_shares
    if shares:
        text.append(f"; DP batch shares of {min(shares)}-{max(shares)} micro-batches per "
                    f"replica: one pipeline shown at the mean count, each replica runs its own "
                    f"share at its own pace", style="dim")
    return text


def save_timeline(timeline: Timeline, path: Path, title: str) -> None:
    """Draw the timeline to ``path`` (.png or .svg, by suffix) with matplotlib, atomically."""
    suffix = path.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise SpecError(str(path), "suffix", "'.png' or '.svg'", path.suffix)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    num_stages, events = timeline.num_stages, timeline.events
    fig, ax = plt.subplots(figsize=(12, 0.5 * num_stages + 1.5))
    for kind in PASS_COLOURS:
        for s in range(num_stages):
            bars = [(e.start_s, e.end_s - e.start_s) for e in events
                    if e.kind == kind and e.stage == s]
            if bars:
                ax.broken_barh(bars, (s - 0.4, 0.8), facecolors=PASS_COLOURS[kind],
                               edgecolor="white", linewidth=0.3)
    ax.set_ylim(num_stages - 0.5, -0.5)
    ax.set_yticks(range(num_stages), [f"stage {s}" for s in range(num_stages)])
    ax.set_xlabel("time (s)")
    ax.set_xlim(0, timeline.step_s)
    ax.set_title(title)
    ax.legend(handles=[Patch(color=PASS_COLOURS[k], label=PASS_NAMES[k]) for k in PASS_COLOURS
                       if any(e.kind == k for e in events)],
              loc="upper center", bbox_to_anchor=(0.5, -0.15 if num_stages > 2 else -0.3),
              ncol=3, frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    metadata = {"Date": None} if suffix == ".svg" else {"Software": None}
    fig.savefig(buf, format=suffix[1:], dpi=120, metadata=metadata)
    plt.close(fig)
    write_atomic_bytes(path, buf.getvalue())
