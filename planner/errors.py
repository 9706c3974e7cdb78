"""The error family the CLI catches once at the top and maps to an exit code.

Every message is one line a person can act on: which file, which field, what was expected.
"""
from __future__ import annotations


class PlannerError(Exception):
    """Base of every error planner reports without a traceback."""

    exit_code = 2


class SpecError(PlannerError):
    """Bad input: a file, preset name or option that does not describe something valid."""

    def __init__(self, source: str, field: str, expected: str, got: object = None) -> None:
        self.source, self.field, self.expected, self.got = source, field, expected, got
        got_text = "" if got is None else f", got {_short_repr(got)}"
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: expected {expected}{got_text}")


class InfeasibleError(PlannerError):
    """A well-formed problem with no solution; the message names the binding constraint."""

    exit_code = 3


class InvalidPlanError(PlannerError):
    """A plan that breaks an invariant; lists every broken one."""

    def __init__(self, source: str, problems: list[str], what: str = "plan") -> None:
        self.problems = problems
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more"
                                           if len(problems) > 5 else "")
        super().__init__(f"{source}: invalid {what}: {shown}")


MAX_GOT_CHARS = 200  # a value quoted in an error is cut to this many characters


def _short_repr(value: object) -> str:
    """``repr(value)`` cut to :data:`MAX_GOT_CHARS`: a 100,000-character string or a huge
    list in a file still gives one readable line."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 600:
        return f"a number of about {round(value.bit_length() * 0.30103)} digits"
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 50:
        return f"a {type(value).__name__} of {len(value)} items"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # ints over 4,300 digits; self-containing lists
        return f"a {type(value).__name__}"
    return text if len(text) <= MAX_GOT_CHARS else text[:MAX_GOT_CHARS - 3] + "..."
