"""Tables that fit the width they are printed at, without cutting the columns that matter.

Rich squeezes a table that is too wide by shrinking every column and cutting cells to ``…``;
in an 80-column terminal that cut ``planner solve``'s tp, pp and dp. A :class:`FitTable` is
described once (columns with a drop order, rows) and picks, when rendered, the first layout
whose full width fits: the table as designed, then a compact box, then the compact box with the
least important columns left out one by one (a dim line names them). Columns marked ``fold``
(free text) may wrap onto several lines instead; the others never wrap. Columns with
``drop=0`` are never left out. At a width where even those do not fit, rich squeezes the
last layout as before.

:class:`FirstFit` does the same for any list of candidate renderables (``planner compare``
splits its plans over several tables). Both measure at their full width, so printing to a
pipe at the width of the widest line shows everything. They format only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = ["Col", "Row", "FitTable", "FirstFit", "natural_width", "needed_width"]

UNLIMITED_WIDTH = 100_000  # measuring width: wide enough that nothing wraps
COMPACT = {"box": box.SIMPLE_HEAD, "pad_edge": False, "collapse_padding": True}
RICH_DEFAULTS = {"box": box.HEAVY_HEAD, "pad_edge": True, "collapse_padding": False}


@dataclass(frozen=True)
class Col:
    """One column: header, alignment, drop order (0: always shown; higher: left out first),
    and whether its cells may wrap (``fold``) when space is short."""

    header: str
    justify: str = "left"
    drop: int = 0
    fold: bool = False
    style: str | None = None
    header_style: str | None = None

    def __post_init__(self) -> None:
        if self.drop < 0:
            raise ValueError(f"Col({self.header!r}): drop ({self.drop}) must be >= 0")


@dataclass(frozen=True)
class Row:
    """One row's cells (strings or Text), its style, and whether a section line follows it."""

    cells: tuple[RenderableType, ...]
    style: str | None = None
    end_section: bool = False


def natural_width(console: Console, renderable: RenderableType) -> int:
    """Columns the renderable takes when nothing wraps."""
    options = console.options.update_width(UNLIMITED_WIDTH)
    return Measurement.get(console, options, renderable).maximum


def needed_width(console: Console, renderable: RenderableType) -> int:
    """Columns the renderable needs without cutting a cell (``FitTable``: folding only its
    ``fold`` columns); the natural width for anything else."""
    measure = getattr(renderable, "needed_width", None)
    if measure is not None:
        return measure(console)
    if isinstance(renderable, Group):
        return max((needed_width(console, r) for r in renderable.renderables), default=0)
    return natural_width(console, renderable)


class FitTable:
    """A table that leaves out its least important columns until it fits (module docstring).

    ``table_options`` go to every layout's :class:`rich.table.Table` (title, box, ...); the
    compact layouts replace the box with :data:`COMPACT`'s.
    """

    def __init__(self, columns: Sequence[Col], rows: Iterable[Row], **table_options) -> None:
        self.columns = tuple(columns)
        self.rows = tuple(rows)
        for row in self.rows:
            if len(row.cells) != len(self.columns):
                raise ValueError(f"a row has {len(row.cells)} cells for "
                                 f"{len(self.columns)} columns")
        self.table_options = table_options

    def table(self, keep: Sequence[int] | None = None, compact: bool = False) -> Table:
        """The table with columns ``keep`` (indices; all by default), as designed or compact."""
        keep = range(len(self.columns)) if keep is None else keep
        table = Table(**{**self.table_options, **(COMPACT if compact else {})})
        for i in keep:
            col = self.columns[i]
            table.add_column(col.header, justify=col.justify, style=col.style,
                             header_style=col.header_style, no_wrap=not col.fold,
                             overflow="fold" if col.fold else "ellipsis")
        for row in self.rows:
            table.add_row(*(row.cells[i] for i in keep), style=row.style,
                          end_section=row.end_section)
        return table

    def layouts(self) -> list[tuple[Table, tuple[str, ...]]]:
        """Candidate layouts, best first, each with the headers it leaves out."""
        every = list(range(len(self.columns)))
        layouts = [(self.table(every), ())]
        if any(self.table_options.get(k, RICH_DEFAULTS[k]) != v for k, v in COMPACT.items()):
            layouts.append((self.table(every, compact=True), ()))
        order = sorted((i for i in every if self.columns[i].drop > 0),
                       key=lambda i: (-self.columns[i].drop, -i))
        for n in range(1, len(order) + 1):
            dropped = set(order[:n])
            keep = [i for i in every if i not in dropped]
            layouts.append((self.table(keep, compact=True),
                            tuple(self.columns[i].header for i in every if i in dropped)))
        return layouts

    def needed_width(self, console: Console, table: Table | None = None) -> int:
        """Width of ``table`` with its fold columns folded to their longest word and every
        other cell whole; without ``table``, the narrowest layout that shows every column."""
        if table is None:
            return min(self.needed_width(console, t) for t, left_out in self.layouts()
                       if not left_out)
        options = console.options.update_width(UNLIMITED_WIDTH)
        slack = 0
        for column in table.columns:
            if not column.no_wrap:
                cells = [column.header, *column.cells]
                sizes = [Measurement.get(console, options, c) for c in cells]
                slack += max(s.maximum for s in sizes) - max(s.minimum for s in sizes)
        return natural_width(console, table) - slack

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        layouts = self.layouts()
        table, left_out = layouts[-1]
        for candidate, dropped in layouts:
            if self.needed_width(console, candidate) <= options.max_width:
                table, left_out = candidate, dropped
                break
        yield table
        if left_out:
            yield Text(f"left out at {options.max_width} columns: {', '.join(left_out)} (a "
                       "wider terminal, or a pipe, shows every column)", style="dim")

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table())


class FirstFit:
    """The first of ``candidates`` (built lazily, best first) that fits the width it is
    printed at without cutting a cell; the last one when none does."""

    def __init__(self, candidates: Sequence[Callable[[], RenderableType]]) -> None:
        if not candidates:
            raise ValueError("FirstFit needs at least one candidate")
        self.candidates = tuple(candidates)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for make in self.candidates:
            renderable = make()
            if needed_width(console, renderable) <= options.max_width:
                break
        yield renderable

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.candidates[0]())
