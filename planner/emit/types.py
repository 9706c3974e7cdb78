"""The result of rendering one format."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Emission:
    """The files of one format, as (file name, text) pairs in a fixed order, and the notes
    (limitations, approximations) that the files also carry as comments where they can."""

    files: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, str]:
        return dict(self.files)
