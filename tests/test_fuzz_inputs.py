"""Property-based fuzzing of planner's file readers through the command line (issue 21).

For every reader (cluster spec, model file, expert loads, expert placement, plan), generated
malformed documents (``tests/fuzz_cases.py``: wrong types at any depth, integers of hundreds of
digits, inf/nan, nesting thousands deep, long strings, damaged text, YAML alias bombs) must end
cleanly: exit 0, 2 (bad input) or 3 (infeasible), one ``error:`` line when not 0, never a
traceback, and no file left behind by a command that failed. The budget is bounded for CI
(``FUZZ_EXAMPLES`` per reader); ``benchmarks/fuzz_inputs.py`` runs the same strategies with a
large budget.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz_cases import CASES, explain, fresh_folder, generated_seeds, run_case

FUZZ_EXAMPLES = int(os.environ.get("PLANNER_FUZZ_EXAMPLES", "150"))
TIME_LIMIT_S = 20.0  # one run; far above the slowest clean answer (about 0.2 s)


@pytest.fixture(scope="module", autouse=True)
def seeds():
    generated_seeds()  # made before hypothesis times anything


def _check(case) -> None:
    with fresh_folder() as folder:
        outcome = run_case(case, Path(folder), TIME_LIMIT_S)
    assert outcome.clean, explain(case, outcome)


@pytest.mark.parametrize("reader", sorted(CASES))
def test_malformed_inputs_end_cleanly(reader):
    fuzz = settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))(given(CASES[reader]())(_check))
    fuzz()
