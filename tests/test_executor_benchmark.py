"""The executor benchmark's ranking bookkeeping (benchmarks/executor_prediction.py): which
pairs of plans changed their measured order between repetitions, on hand-made cases. Fast:
nothing is launched."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import executor_prediction as bench  # noqa: E402


def _rep(measured: dict[str, float], predicted: dict[str, float]) -> dict:
    return {"results": [{"plan": p, "measured_step_s": s, "predicted_step_s": predicted[p]}
                        for p, s in measured.items()]}


def test_a_pair_that_measured_in_both_orders_is_a_flip_and_a_steady_pair_is_not():
    pred = {"a": 1.0, "b": 1.1, "c": 2.0}
    reps = [_rep({"a": 1.0, "b": 1.05, "c": 2.0}, pred),
            _rep({"a": 1.0, "b": 0.97, "c": 2.1}, pred)]
    pairs, flips = bench.measured_flips(reps)
    assert pairs == 3
    assert flips == ["a / b (+5%, -3%)"]


def test_the_report_counts_the_wrong_predicted_pairs_among_the_flips():
    pred = {"a": 1.0, "b": 1.1, "c": 2.0}
    # the second repetition measures c first, b second: every pair flips
    reps = [_rep({"a": 1.0, "b": 1.05, "c": 2.0}, pred),
            _rep({"a": 1.0, "b": 0.97, "c": 0.9}, pred)]
    pairs, flips = bench.measured_flips(reps)
    assert {f.split(" (")[0] for f in flips} == {"a / b", "a / c", "b / c"}
    text = bench.flip_lines(reps)[1]
    assert "3 of 3 pairs" in text
    # wrong in the second repetition: a/b, a/c, b/c (3), all among the flips
    assert "Of the 3 pairs predicted in the wrong order over all repetitions, 3 are" in text


def test_one_repetition_says_nothing():
    assert bench.flip_lines([_rep({"a": 1.0}, {"a": 1.0})]) == []
