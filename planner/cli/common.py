"""Pieces shared by the CLI modules: the output-format option and a progress bar."""
from __future__ import annotations

from enum import Enum
from typing import Callable

from rich.console import Console


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
