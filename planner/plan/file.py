"""Reading plan files: one clear error naming the file and what is wrong, never a traceback.

Files of schema 1 are upgraded to the current schema on load (:mod:`planner.plan.migrate`).

Every plan read here passes :func:`planner.plan.validate.validate_plan` before anything uses it.
"""
from __future__ import annotations

import json
from pathlib import Path

from planner.errors import SpecError
from planner.inputs.documents import parse_json
from planner.plan.document import SCHEMA_VERSION, Plan, plan_from_dict

READABLE_SCHEMAS = (1, SCHEMA_VERSION)  # schema 1 is upgraded on load (planner.plan.migrate)
from planner.plan.validate import validate_plan


def load_plan(path: Path | str) -> Plan:
    """The validated Plan in ``path`` (exit code 2 with a one-line message otherwise)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(str(path), "", f"a readable plan file ({err.strerror})") from None
    except UnicodeDecodeError:
        raise SpecError(str(path), "", "a UTF-8 JSON plan file") from None
    try:
        data = parse_json(text, str(path))
    except json.JSONDecodeError as err:
        raise SpecError(str(path), f"line {err.lineno} column {err.colno}",
                        f"valid JSON ({err.msg})") from None
    if not isinstance(data, dict):
        raise SpecError(str(path), "", "a JSON object written by 'planner solve'",
                        type(data).__name__)
    version = data.get("schema_version")
    if version not in READABLE_SCHEMAS:
        raise SpecError(str(path), "schema_version", f"one of {list(READABLE_SCHEMAS)} (a plan "
                        "written by this planner; re-create it with 'planner solve' and the "
                        "inputs it was made from)", version)
    try:
        plan = plan_from_dict(data)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError,
            RecursionError) as err:
        how = (" (a schema-1 plan that cannot be upgraded: re-create it with 'planner solve')"
               if version == 1 else "")
        raise SpecError(str(path), "", f"a plan written by 'planner solve' ({err}){how}") from None
    try:
        return validate_plan(plan, str(path))
    except (KeyError, TypeError, IndexError, AttributeError, ValueError, OverflowError,
            RecursionError) as err:
        raise SpecError(str(path), "", f"a plan written by 'planner solve' (malformed: "
                        f"{type(err).__name__} {err})") from None
