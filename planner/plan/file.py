"""Reading plan files: one clear error naming the file and what is wrong, never a traceback.

Files of schemas 1 and 2 are upgraded to the current schema on load
(:mod:`planner.plan.migrate`); a schema-2 file whose rank table or groups differ from the rank
order is an invalid plan.

Every plan read here passes :func:`planner.plan.validate.validate_plan` before anything uses it.
"""
from __future__ import annotations

import json
from pathlib import Path

from planner.errors import InvalidPlanError, SpecError
from planner.inputs.documents import parse_json
from planner.plan.document import SCHEMA_VERSION, Plan, plan_from_dict
from planner.plan.validate import validate_plan

READABLE_SCHEMAS = (1, 2, SCHEMA_VERSION)  # 1 and 2 are upgraded on load (planner.plan.migrate)


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
    except InvalidPlanError as err:  # an old rank table that is not the rank order's
        raise InvalidPlanError(str(path), err.problems) from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError,
            RecursionError) as err:
        how = (f" (a schema-{version} plan that cannot be upgraded: re-create it with "
               "'planner solve')" if version != SCHEMA_VERSION else "")
        raise SpecError(str(path), "", f"a plan written by 'planner solve' ({err}){how}") from None
    try:
        return validate_plan(plan, str(path))
    except (KeyError, TypeError, IndexError, AttributeError, ValueError, OverflowError,
            RecursionError) as err:
        raise SpecError(str(path), "", f"a plan written by 'planner solve' (malformed: "
                        f"{type(err).__name__} {err})") from None
