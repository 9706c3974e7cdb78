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


def test_pairs_the_calibrations_predicted_in_both_orders_are_reported_apart():
    # the same measurement twice; the second calibration puts b before a, c stays last
    reps = [_rep({"a": 1.0, "b": 1.1, "c": 2.0}, {"a": 1.0, "b": 1.2, "c": 2.0}),
            _rep({"a": 1.0, "b": 1.1, "c": 2.0}, {"a": 1.0, "b": 0.9, "c": 1.8})]
    assert bench.measured_flips(reps) == (3, [])
    assert bench.predicted_flips(reps) == (3, ["a / b (+20%, -10%)"])
    text = bench.flip_lines(reps)[1]
    assert "Measured order across the repetitions: 0 of 3 pairs" in text
    # the second repetition's a / b is the one wrong pair: not a measured flip, a predicted one
    assert "Of the 1 pairs predicted in the wrong order over all repetitions, 0 are" in text
    assert "1 of 3 pairs predicted in both orders: a / b (+20%, -10%); 1 of the" in text


def test_the_pooled_ranking_takes_each_plans_medians_over_the_repetitions():
    # b and c swap in one repetition of three (measured), a prediction keeps b before c
    pred = {"a": 1.0, "b": 1.5, "c": 1.6}
    reps = [_rep({"a": 1.0, "b": 1.4, "c": 1.6}, pred),
            _rep({"a": 1.1, "b": 1.7, "c": 1.5}, pred),
            _rep({"a": 0.9, "b": 1.5, "c": 1.7}, pred)]
    assert bench.pooled_lines(reps)[1].endswith("Kendall tau +1.00, same ranking: yes.")
    # predicted c before b in two of three: the medians disagree with the measurement
    flipped = {"a": 1.0, "b": 1.6, "c": 1.5}
    reps = [_rep({"a": 1.0, "b": 1.4, "c": 1.6}, flipped),
            _rep({"a": 1.1, "b": 1.7, "c": 1.5}, pred),
            _rep({"a": 0.9, "b": 1.5, "c": 1.7}, flipped)]
    text = bench.pooled_lines(reps)[1]
    assert "Kendall tau +0.33, same ranking: no (in the wrong order: b / c" in text
    assert bench.pooled_lines(reps[:1]) == []


def test_one_repetition_says_nothing():
    assert bench.flip_lines([_rep({"a": 1.0}, {"a": 1.0})]) == []


def test_when_every_try_drifted_the_steadiest_calibration_is_put_back(tmp_path):
    cal, machine = tmp_path / "cal.json", tmp_path / "cal.cluster.yaml"
    steadiest = bench.Steadiest(cal, machine)
    steadiest.restore()  # nothing offered: nothing written
    assert not cal.exists()
    for n, (speed, link) in enumerate([(1.30, 1.02), (1.05, 1.20), (1.02, 1.41)]):
        cal.write_text(f"cal {n}")
        machine.write_text(f"machine {n}")
        steadiest.offer({"speed_drift": speed, "link_drift": link})
    # the last try's files are on disk; the second (its worse probe 1.20x) is the steadiest
    assert cal.read_text() == "cal 2"
    steadiest.restore()
    assert (cal.read_text(), machine.read_text()) == ("cal 1", "machine 1")
    # a quality without probes counts as steady
    assert bench.probe_drift({}) == 1.0 and bench.probe_drift({"link_drift": 1.3}) == 1.3


def test_pairs_are_matched_by_plan_names_that_hold_parentheses():
    """Plan names such as "EP2 (MoE), micro-batch 1" hold " (": the report matches pairs by
    the names, so a wrong pair that is not a measured flip is not counted as one (cut at
    " (", every pair here would read "x ..." and all four wrong pairs would count)."""
    pred = {"x (1)": 1.0, "x (2)": 2.0, "y": 3.0}
    reps = [_rep({"x (1)": 1.0, "x (2)": 1.2, "y": 1.1}, pred),
            _rep({"x (1)": 1.3, "x (2)": 1.2, "y": 1.1}, pred)]
    pairs, flips = bench.measured_flips(reps)
    assert flips == ["x (1) / x (2) (+20%, -8%)", "x (1) / y (+10%, -15%)"]
    assert bench.wrong_pairs(reps[0]["results"]) == [("x (2)", "y")]
    text = bench.flip_lines(reps)[1]
    # wrong: x (2) / y in both repetitions, x (1) / x (2) and x (1) / y in the second; the
    # last two are measured flips, x (2) / y (steady: y first both times) is not
    assert "Of the 4 pairs predicted in the wrong order over all repetitions, 2 are" in text


def test_the_afd_report_sets_each_run_against_the_machines_speed_but_not_time_shared_ones():
    """benchmarks/afd_executor_prediction.py: a run's error beside its speed probe's ratio to
    the calibration's, for the plans with a core per process only (the time-shared plans'
    probes ran time-shared); the correlation is over those runs and has their sign."""
    import afd_executor_prediction as afd
    results = [
        {"plan": "own", "shared_cores": False, "runs_speed_ratio": [1.0, 1.3, None],
         "runs_error": [0.10, -0.20, -0.50]},
        {"plan": "own2", "shared_cores": False, "runs_speed_ratio": [1.1, 1.4],
         "runs_error": [0.0, -0.30]},
        {"plan": "shared", "shared_cores": True, "runs_speed_ratio": [2.2], "runs_error": [0.9]}]
    text = afd.speed_lines(results)[1]
    assert "own 1.00x +10%, 1.30x -20%;" in text and "own2 1.10x +0%, 1.40x -30%" in text
    assert "shared" not in text and "-50%" not in text
    assert "over these 4 runs: Pearson r -" in text
    assert afd.speed_lines([results[2]]) == []
