"""Pieces shared by the CLI modules: the output-format option, a progress bar, how reports
are printed (:func:`print_report`) and how help pages are laid out (:func:`help_markup_mode`).

Width policy. In a terminal, reports and help use its width; the report tables leave out
their least important columns rather than cut the ones that matter
(:mod:`planner.report.fit`). Sent to a pipe or a file (stdout not a terminal), a report is
printed at the width of its widest line, so nothing is cut or wrapped, unless ``COLUMNS`` is
set, which then wins. Help is rich (panels, colour) in a terminal of at least
:data:`RICH_HELP_MIN_COLUMNS`; narrower, or piped, it is click's plain layout, which wraps
readably at any width.
"""
from __future__ import annotations

import os
import sys
from enum import Enum
from contextlib import contextmanager
from typing import Annotated, Any, Callable, Iterator, NoReturn, Optional

import typer

from rich.console import Console, RenderableType
from rich.errors import NotRenderableError
from rich.markup import escape

from planner.errors import PlannerError, SpecError
from planner.inputs.limits import (CLUSTER_NODES, GLOBAL_BATCH, GPUS_PER_NODE, SEQUENCE_TOKENS,
                                   Limit)

__all__ = ["ClusterOpt", "GpuOpt", "GpusPerNodeOpt", "nodes_option", "GlobalBatchOpt",
           "SeqLenOpt", "within", "up_to", "OutputFormat", "progress_bar", "print_report",
           "report_width", "help_markup_mode", "plain_help_width", "set_help_markup_mode", "fail",
           "RICH_HELP_MIN_COLUMNS", "PIPED_HELP_COLUMNS", "using_document", "set_debug",
           "debug_requested"]

RICH_HELP_MIN_COLUMNS = 100
PIPED_HELP_COLUMNS = 120


def within(limit: Limit) -> Callable[[Any], Any]:
    """An option callback refusing a value beyond ``limit`` (planner.inputs.limits): click's
    'Invalid value for --option' followed by the limit and its reason, exit code 2. The lower
    bound stays the option's own ``min``."""
    def check(value: Any) -> Any:
        values = value if isinstance(value, (list, tuple)) else (value,)
        bad = next((v for v in values if limit.exceeded_by(v)), None)
        if bad is not None:
            raise typer.BadParameter(limit.refused(bad))
        return value
    return check


def refuse_unused(ctx: typer.Context, needs: dict[str, tuple[bool, str]]) -> None:
    """Refuse an option given on the command line that this run would ignore: ``needs`` maps
    a parameter name to (whether it applies, what it needs, e.g. "--robust"). An option left
    at its default is not checked."""
    from planner.inputs.clusters import OPTIONS_SOURCE
    for name, (applies, what) in needs.items():
        source = ctx.get_parameter_source(name)  # click's ParameterSource (typer vendors click)
        if not applies and source is not None and source.name == "COMMANDLINE":
            flag = "--" + name.replace("_", "-")
            got = ctx.params.get(name)
            raise SpecError(OPTIONS_SOURCE, flag, f"{flag} only with {what} (without it the "
                            "option is ignored)", got.value if isinstance(got, Enum) else got)


def up_to(help_text: str, limit: Limit) -> str:
    """``help_text`` with the option's maximum appended."""
    return f"{help_text} At most {limit.maximum:,}."


# How every command names its hardware: a cluster file or preset, or a standard cluster of
# --nodes x --gpus-per-node of one --gpu type (planner.training.estimation.resolve_cluster).
ClusterOpt = Annotated[Optional[str], typer.Option(
    "--cluster", help="Cluster preset name (see 'planner presets clusters') or YAML/JSON file.")]
GpuOpt = Annotated[Optional[str], typer.Option(
    help="GPU type for a standard cluster (see 'planner presets gpus').")]
GpusPerNodeOpt = Annotated[Optional[int], typer.Option(
    min=1, callback=within(GPUS_PER_NODE),
    help=up_to("GPUs per node (default: the GPU's usual node).", GPUS_PER_NODE))]


def nodes_option(default_help: str) -> Any:
    """``--nodes`` of a standard cluster; commands differ only in what they default to."""
    return Annotated[Optional[int], typer.Option(
        min=1, callback=within(CLUSTER_NODES),
        help=up_to(f"Nodes of --gpu ({default_help}).", CLUSTER_NODES))]


# The training workload: sequences per step and tokens per sequence.
GlobalBatchOpt = Annotated[int, typer.Option(
    min=1, callback=within(GLOBAL_BATCH), help=up_to("Sequences per step.", GLOBAL_BATCH))]
SeqLenOpt = Annotated[int, typer.Option(
    min=1, callback=within(SEQUENCE_TOKENS),
    help=up_to("Tokens per sequence.", SEQUENCE_TOKENS))]


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


class progress_bar:
    """A rich progress bar on stderr (off when ``enabled`` is false, e.g. for JSON output).

    ``with progress_bar("searching", True) as update`` gives ``update(done, total)``;
    with ``total`` set up front, ``update()`` advances by one.
    """

    def __init__(self, label: str, enabled: bool, total: int | None = None) -> None:
        self.label, self.enabled, self.total = label, enabled, total
        self.bar = None
        self.task = None

    def __enter__(self) -> Callable[..., None] | None:
        if not self.enabled:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
        self.bar = Progress(self.label, BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
        self.bar.__enter__()
        self.task = self.bar.add_task(self.label, total=self.total)
        return self.update

    def update(self, done: int | None = None, total: int | None = None) -> None:
        if done is None:
            self.bar.update(self.task, advance=1)
        else:
            self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def report_width(console: Console, renderable: RenderableType) -> int | None:
    """The width to print ``renderable`` at: ``None`` (the console's own: the terminal's, or
    ``COLUMNS``) in a terminal or with ``COLUMNS`` set; else the renderable's widest line."""
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return None
    from planner.report.fit import natural_width

    return max(natural_width(console, renderable), 1)


def print_report(renderable: RenderableType, console: Console | None = None) -> None:
    """Print a report on stdout at :func:`report_width`."""
    console = console or Console()
    width = report_width(console, renderable)
    if width is not None:
        console.width = width
    console.print(renderable)


def help_markup_mode() -> str | None:
    """``"rich"`` for a terminal of at least :data:`RICH_HELP_MIN_COLUMNS`, else ``None``
    (click's plain help)."""
    if not sys.stdout.isatty():
        return None
    return "rich" if Console().width >= RICH_HELP_MIN_COLUMNS else None


def plain_help_width() -> dict[str, int]:
    """Click context settings for plain help: piped (no terminal, no ``COLUMNS``) it is laid
    out :data:`PIPED_HELP_COLUMNS` wide, so that command summaries are not cut to 80 columns;
    in a terminal click's own width stands."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return {}
    return {"terminal_width": PIPED_HELP_COLUMNS, "max_content_width": PIPED_HELP_COLUMNS}


def set_help_markup_mode(command: Any, mode: str | None) -> None:
    """Give ``command`` and its sub-commands the help ``mode``. Our help strings are plain
    text, so in rich mode their square brackets (``[layers][experts]``) are escaped rather
    than read as markup."""
    command.rich_markup_mode = mode
    if mode == "rich" and not getattr(command, "_help_escaped", False):
        command.help = escape(command.help) if command.help else command.help
        for param in getattr(command, "params", ()):
            if getattr(param, "help", None):
                param.help = escape(param.help)
        command._help_escaped = True
    for sub in getattr(command, "commands", {}).values():
        set_help_markup_mode(sub, mode)


# Python's own errors that a document which passed its validator can still cause in the code
# that uses it: a wrong type, a missing key or index, a value out of a function's domain.
MALFORMED_DOCUMENT_ERRORS = (TypeError, KeyError, IndexError, AttributeError, ValueError,
                             ArithmeticError, NotRenderableError)


_debug = {"on": False}  # set by the top-level group's --debug option on every invocation


def set_debug(on: bool) -> None:
    _debug["on"] = on


def debug_requested() -> bool:
    """Whether ``planner --debug`` (or ``PLANNER_DEBUG``) asked for tracebacks."""
    return _debug["on"]


@contextmanager
def using_document(source: str, expected: str) -> Iterator[None]:
    """Use a document read from ``source`` (a plan, a placement) after its validator passed
    it: an error of Python's own raised meanwhile (:data:`MALFORMED_DOCUMENT_ERRORS`) means
    the file is malformed in a way the validator does not check, and becomes one
    :class:`SpecError` naming the file (with ``--debug``: the traceback)."""
    try:
        yield
    except PlannerError:  # already one line a person can act on (a format's refusal, ...)
        raise
    except MALFORMED_DOCUMENT_ERRORS as err:
        if debug_requested():
            raise
        detail = " ".join(str(err).split())[:200]
        raise SpecError(source, "", f"{expected} (malformed: {type(err).__name__}: {detail}; "
                        "if planner wrote it unchanged, please report it)") from None


def fail(message: str, exit_code: int) -> NoReturn:
    """Print ``error: message`` as one line on stderr and exit with ``exit_code``."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    raise typer.Exit(exit_code)
