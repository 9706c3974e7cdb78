"""Terminal and PNG reports of an expert placement (they compute nothing; the numbers come
from :class:`planner.experts.plan.ExpertPlacement`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # annotations only: the result is handed in by the CLI
    from planner.experts.plan import ExpertPlacement

# The dispatch rule in words (solvers.experts.dispatch), for report titles.
DISPATCH_WORDS = {
    "even": "even split (vLLM; SGLang dynamic dispatch)",
    "sglang": "SGLang static dispatch",
    "static": "planned split ratios",
    "realtime": "real-time quotas",
}
_SHADES = ("grey23", "blue", "cyan", "green", "yellow", "dark_orange", "red", "magenta")
_EDGES = (0.5, 0.8, 0.95, 1.02, 1.1, 1.3, 2.0)
# the same eight levels without colour (piped, NO_COLOR): a glyph per level
_PLAIN = (" ", ".", ":", "-", "=", "+", "#", "@")


def render_experts(result: ExpertPlacement, max_rows: int = 12) -> Group:
    """Summary, worst layers, and before/after heatmaps."""
    return Group(_summary(result), _layers(result, max_rows),
                 _Shaded(lambda plain: _heatmap("GPU load / mean, before", result.before_gpu_load,
                                                result, plain=plain)),
                 _Shaded(lambda plain: _heatmap("GPU load / mean, after", result.after_gpu_load,
                                                result, plain=plain)),
                 _Shaded(_legend))


class _Shaded:
    """A heatmap part drawn in colour, or with a glyph per level where the console has no
    colour (piped output, NO_COLOR): ``make(plain)`` builds the text."""

    def __init__(self, make) -> None:
        self.make = make

    def __rich_console__(self, console, options):
        yield self.make(console.no_color or console.color_system is None)


def _mode(result: ExpertPlacement) -> str:
    if not result.options.robust:
        return "nominal mode"
    if result.options.dispatch in ("even", "sglang"):  # solvers.experts.plan_even says why
        return "robust mode (engine rule: the nominal placement is kept)"
    return "robust mode"


def _summary(result: ExpertPlacement) -> Table:
    lay, reps = result.layout, result.reports
    table = Table(title=f"Expert placement: {len(reps)} MoE layers, {lay.num_experts} experts on "
                        f"{lay.num_gpus} GPUs x {lay.slots_per_gpu} slots "
                        f"({lay.num_slots - lay.num_experts} redundant), "
                        f"{_mode(result)}, "
                        f"{DISPATCH_WORDS[result.options.dispatch]}, "
                        f"planned in {result.elapsed_s:.2f} s", title_justify="left")
    for col in ("", "busiest/mean (mean over layers)", "worst layer", "cross-node tokens"):
        table.add_column(col, justify="right" if col else "left")
    table.caption = f"cross-node tokens: {result.locality_model}"
    rows = (("before", [r.before for r in reps], None),
            ("EPLB-style", [r.eplb for r in reps], [r.cross_node_eplb for r in reps]),
            ("planner", [r.after for r in reps], [r.cross_node_after for r in reps]),
            ("lower bound", [r.lower_bound for r in reps], None))
    for name, ratios, cross in rows:
        table.add_row(name, f"{np.mean(ratios):.4f}", f"{np.max(ratios):.4f}",
                      "" if cross is None else f"{np.mean(cross):.1%}")
    moved = sum(r.moved for r in reps)
    if moved:
        mb = moved * result.options.expert_bytes / 1e6
        seconds = moved * result.options.expert_bytes * 8 / (result.options.migration_gbps * 1e9)
        table.caption += (f"\nmigration: {moved} replicas moved ({mb:,.0f} MB, about {seconds:.2f} s "
                         f"at {result.options.migration_gbps:g} Gb/s)")
    return table


def _layers(result: ExpertPlacement, max_rows: int) -> Table:
    reps = sorted(result.reports, key=lambda r: -r.after)[:max_rows]
    table = Table(title=f"Worst {len(reps)} layers after planning", title_justify="left")
    for col in ("layer", "before", "EPLB-style", "planner", "bound", "cross-node", "moved"):
        table.add_column(col, justify="right")
    for r in reps:
        table.add_row(str(r.layer), f"{r.before:.3f}", f"{r.eplb:.3f}", f"{r.after:.4f}",
                      f"{r.lower_bound:.4f}", f"{r.cross_node_after:.1%}", str(r.moved))
    return table


def _level(x: float) -> int:
    return int(np.searchsorted(_EDGES, x))


def _heatmap(title: str, loads: np.ndarray, result: ExpertPlacement, width: int = 64,
             height: int = 20, plain: bool = False) -> Text:
    """Layers down, GPUs across (bucketed to ``width`` columns, ``height`` rows by max)."""
    ratio = loads / np.maximum(loads.mean(1, keepdims=True), 1e-300)
    rows = np.array_split(np.arange(ratio.shape[0]), min(height, ratio.shape[0]))
    cols = np.array_split(np.arange(ratio.shape[1]), min(width, ratio.shape[1]))
    layers = result.moe_layers
    banded = (f"{len(rows)} bands of about {len(layers) / len(rows):.1f} layers, each its "
              "busiest" if len(rows) < len(layers) else "one row each")
    gpus = (f"{len(cols)} bands of about {ratio.shape[1] / len(cols):.1f}, each its busiest"
            if len(cols) < ratio.shape[1] else "one column each")
    text = Text(f"{title} (rows: MoE layers {layers[0]}..{layers[-1]}, {banded}; columns: "
                f"GPUs 0..{ratio.shape[1] - 1}, {gpus})\n")
    for r in rows:
        for c in cols:
            level = _level(float(ratio[np.ix_(r, c)].max()))
            if plain:
                text.append(_PLAIN[level])
            else:
                text.append("█", style=_SHADES[level])
        text.append(f"  max {ratio[r].max():.2f}\n")
    return text


def _legend(plain: bool = False) -> Text:
    text = Text("scale: ")
    lows = (0.0,) + _EDGES
    for i, shade in enumerate(_SHADES):
        label = f">={lows[i]:g}" if i else f"<{_EDGES[0]:g}"
        if plain:
            text.append(f"'{_PLAIN[i]}'")
        else:
            text.append("█", style=shade)
        text.append(f" {label}  ")
    return text


def heatmap_png(result: ExpertPlacement) -> bytes:
    """Before/after GPU-load heatmaps (load / layer mean) as one PNG."""
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    vmax = float(max(2.0, (result.before_gpu_load / result.before_gpu_load.mean(1, keepdims=True)).max()))
    for ax, loads, name in ((axes[0], result.before_gpu_load, "before"),
                            (axes[1], result.after_gpu_load, "after")):
        ratio = loads / np.maximum(loads.mean(1, keepdims=True), 1e-300)
        image = ax.imshow(ratio, aspect="auto", cmap="magma", vmin=0, vmax=vmax)
        ax.set_title(f"{name}: mean busiest/mean {np.mean(ratio.max(1)):.3f}")
        ax.set_xlabel("GPU")
    axes[0].set_ylabel("MoE layer (index in file order)")
    fig.colorbar(image, ax=axes, label="GPU load / layer mean")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()
