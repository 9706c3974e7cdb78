"""The command-line surface is frozen: commands, sub-commands, arguments and option names.

Scripts and docs call ``planner``; renaming or dropping a command or an option breaks them.
The surface read from the Typer app is compared with ``tests/golden/cli_surface.json``. To
change it deliberately, regenerate the file and review the diff:

    PLANNER_UPDATE_GOLDEN=1 python -m pytest tests/test_cli_surface.py
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer.main

from planner.cli.app import app

GOLDEN = Path(__file__).parent / "golden" / "cli_surface.json"


def surface(command: Any) -> dict[str, Any]:
    """A (click) command's arguments, its options (every spelling, ``--x/--no-x`` both), and
    its sub-commands, recursively. Typer vendors click, so the kinds are read by name."""
    params = command.params
    out: dict[str, Any] = {
        "arguments": [p.name for p in params if p.param_type_name == "argument"],
        "options": sorted(" / ".join(p.opts + p.secondary_opts) for p in params
                          if p.param_type_name == "option"),
    }
    if hasattr(command, "commands"):
        out["commands"] = {name: surface(sub) for name, sub in sorted(command.commands.items())}
    return out


def test_cli_surface_matches_golden():
    current = surface(typer.main.get_command(app))
    text = json.dumps(current, indent=2, sort_keys=True) + "\n"
    if os.environ.get("PLANNER_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text, encoding="utf-8")
    assert GOLDEN.exists(), f"{GOLDEN} is missing; write it with PLANNER_UPDATE_GOLDEN=1"
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert current == golden, (
        "the planner command line changed (commands, arguments or options). If that is "
        "deliberate, regenerate tests/golden/cli_surface.json with PLANNER_UPDATE_GOLDEN=1 "
        "python -m pytest tests/test_cli_surface.py and review its diff.")
