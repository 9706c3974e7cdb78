"""The result of rendering one format."""
from __future__ import annotations

from dataclasses import dataclass

from planner.errors import PlannerError


class UnsupportedByFormat(PlannerError, ValueError):
    """A valid plan that the chosen output format cannot express (torchtitan has no fp16,
    DeepSpeed no context parallelism, ...): the message, which starts with the format's name,
    says what to use instead. A ValueError as the emitters' other refusals are; the CLI
    reports it as it is (exit 2), not as a malformed plan."""


@dataclass(frozen=True)
class Emission:
    """The files of one format, as (file name, text) pairs in a fixed order, and the notes
    (limitations, approximations) that the files also carry as comments where they can."""

    files: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, str]:
        return dict(self.files)
