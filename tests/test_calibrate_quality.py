"""``planner calibrate`` knows when it is wrong: more processes than cores, a busy machine and
poor fits are warned about (``--strict``: exit 3, nothing written); the conditions it measured
under are recorded; NCCL without GPUs is refused up front."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli.app import app
from planner.run.calibrate import (RESIDUAL_WARN, available_cores, calibration_warnings,
                                   fit_quality, oversubscribed)

RUNNER = CliRunner()


def _doc(gemm_errors, comm_errors=(0.05,), **conditions) -> dict:
    res = [{"kind": "gemm", "error": e} for e in gemm_errors]
    res += [{"kind": "layer", "error": 0.02}, {"kind": "memory", "error": 3.0}]  # cached copy
    res += [{"kind": "all_reduce", "error": e} for e in comm_errors]
    cond = {"backend": "gloo", "processes": 2, "threads": 1, "cores": 2,
            "other_load_cores": 0.0, **conditions}
    return {"fit": {"residuals": res}, "conditions": cond}


def test_a_good_fit_on_an_idle_machine_has_no_warning():
    doc = _doc([0.02, -0.05, 0.08])
    assert calibration_warnings(doc) == []
    q = fit_quality(doc)
    assert q["compute_cases"] == 4 and q["median_abs_residual"] == pytest.approx(0.05)


def test_each_cause_is_named():
    assert any(w.startswith("gemm: median residual 139%")
               for w in calibration_warnings(_doc([1.39, 1.2, -1.5])))
    assert any("collectives" in w for w in calibration_warnings(_doc([0.01], (0.5, 0.6))))
    busy = calibration_warnings(_doc([0.01], other_load_cores=1.2))
    assert len(busy) == 1 and "1.20 of 2 cores busy" in busy[0]
    crowded = calibration_warnings(_doc([0.01], processes=4))
    assert len(crowded) == 1 and "4 processes x 1 thread(s) on 2 core(s)" in crowded[0]
    # the threshold is where the warning starts
    assert calibration_warnings(_doc([RESIDUAL_WARN * 0.99] * 3)) == []
    assert calibration_warnings(_doc([RESIDUAL_WARN * 1.01] * 3)) != []


def test_a_machine_whose_speed_moved_while_measuring_is_warned_about():
    from planner.run.calibrate import speed_drift

    steady = {"before": [0.00450, 0.00452], "after": [0.00475, 0.00472]}  # 1.05x at most
    moved = {"before": [0.00549, 0.00548], "after": [0.00623, 0.00420]}  # rank 1: 1.30x
    assert calibration_warnings(_doc([0.01], speed_probe_s=steady)) == []
    assert fit_quality(_doc([0.01], speed_probe_s=steady))["speed_drift"] == \
        pytest.approx(0.00475 / 0.00450)
    warned = calibration_warnings(_doc([0.01], speed_probe_s=moved))
    assert len(warned) == 1 and "rank 1 ran the speed probe" in warned[0]
    assert "5.48 ms at the start and 4.20 ms at the end (1.30x apart)" in warned[0]
    assert speed_drift({"speed_probe_s": moved})[:2] == (pytest.approx(0.00548 / 0.0042), 1)
    # a faster end counts as much as a slower one; no probe (an older file): nothing said
    assert speed_drift({"speed_probe_s": {"before": [0.002], "after": [0.004]}})[0] == 2.0
    assert speed_drift({}) is None and fit_quality(_doc([0.01]))["speed_drift"] is None


def test_a_link_whose_speed_moved_while_measuring_is_warned_about():
    from planner.run.calibrate import drifted, speed_drift

    steady = {"before": [0.00160, 0.00161], "after": [0.00170, 0.00168]}  # 1.06x at most
    moved = {"before": [0.00197, 0.00196], "after": [0.00158, 0.00159]}  # rank 0: 1.25x
    quiet = _doc([0.01], link_probe_s=steady)
    assert calibration_warnings(quiet) == [] and not drifted(fit_quality(quiet))
    assert fit_quality(quiet)["link_drift"] == pytest.approx(0.00170 / 0.00160)
    doc = _doc([0.01], link_probe_s=moved)
    warned = calibration_warnings(doc)
    assert len(warned) == 1 and "rank 0 ran the link probe" in warned[0]
    assert "1.97 ms at the start and 1.58 ms at the end (1.25x apart)" in warned[0]
    assert "collective tables describe a link that changed" in warned[0]
    assert drifted(fit_quality(doc))
    # the compute probe and the link probe are read apart: each drift is its own
    assert speed_drift({"link_probe_s": moved}) is None
    assert speed_drift({"link_probe_s": moved}, "link_probe_s")[:2] == \
        (pytest.approx(0.00197 / 0.00158), 0)
    assert drifted({"speed_drift": 1.3, "link_drift": None})
    assert not drifted({"speed_drift": None, "link_drift": None})


def test_oversubscription_is_a_cpu_matter():
    assert oversubscribed("gloo", 4, 1, 2) is not None
    assert oversubscribed("gloo", 2, 1, 2) is None
    assert oversubscribed("nccl", 8, 1, 2) is None  # GPU work: processes mostly wait


def test_strict_refuses_more_processes_than_cores_and_writes_nothing(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "cal.json"
    result = RUNNER.invoke(app, ["calibrate", "--quick", "--nproc", str(2 * available_cores()),
                                 "--strict", "--out", str(out)])
    assert result.exit_code == 3
    assert "time-share the cores" in result.output
    assert list(tmp_path.iterdir()) == []


def test_nccl_without_gpus_is_refused_before_anything_starts(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = RUNNER.invoke(app, ["calibrate", "--backend", "nccl", "--out",
                                 str(tmp_path / "c.json")])
    assert result.exit_code == 2 and "expected a machine with CUDA GPUs" in result.output
    assert list(tmp_path.iterdir()) == []


def test_oversubscribed_calibration_warns_says_why_and_records_its_conditions(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "cal.json"
    nproc = 2 * available_cores()
    result = RUNNER.invoke(app, ["calibrate", "--quick", "--nproc", str(nproc), "--out",
                                 str(out)])
    assert result.exit_code == 0, result.output
    assert f"warning: {nproc} processes x 1 thread(s) on {available_cores()} core(s)" in \
        result.output
    assert "fit quality: median |residual|" in result.output
    doc = json.loads(out.read_text())
    cond = doc["conditions"]
    assert cond["processes"] == nproc and cond["cores"] == available_cores()
    assert cond["backend"] == "gloo" and cond["torch"] and cond["other_load_cores"] is not None
    # each rank timed the speed and link probes at the start and the end
    # (planner.run.speed_probe)
    for key in ("speed_probe_s", "link_probe_s"):
        assert [len(cond[key][k]) for k in ("before", "after")] == [nproc, nproc]
        assert min(cond[key]["before"] + cond[key]["after"]) > 0
    assert doc["quality"]["compute_cases"] > 0
    # more ranks than cores: none is pinned (planner.run.affinity), and the output says so
    assert cond["pinned"] is False and "local ranks on" in cond["not_pinned"]
    assert "not pinned to cores" in " ".join(result.output.split())


def test_check_run_names_each_condition_that_differs():
    from planner.run.check_run import condition_warnings

    cal = {"backend": "gloo", "torch": "2.13.0+cpu", "cores": 2, "threads": 1,
           "processes": 2, "other_load_cores": 0.0}
    same = {"backend": "gloo", "torch": "2.13.0+cpu", "cores": 2, "threads": 1,
            "processes": 2, "other_load_cores": 0.1}
    assert condition_warnings(cal, same) == []
    assert condition_warnings({}, {}) == []  # older files say nothing: nothing to compare
    warned = condition_warnings(cal, {**same, "torch": "2.12.0", "cores": 4, "threads": 2,
                                      "processes": 4, "other_load_cores": 1.5})
    text = " | ".join(warned)
    assert "torch version 2.12.0" in text and "4 cores, the calibration 2" in text
    assert "the run had 4 processes x 2 thread(s) on 4 core(s)" in text
    assert "2 thread(s) each, the calibration's 1" in text
    assert "kept 1.50 of 4 cores busy during the run" in text
    assert len(warned) == 5
    # where the prediction models the shared cores (the AFD job's pinned ranks), it says how
    crowded = {**same, "processes": 3}
    plain = condition_warnings(cal, crowded)
    assert plain == ["the run had 3 processes x 1 thread(s) on 2 core(s): they time-share the "
                     "cores, so the timings measure contention, not the machine (use --nproc 2 "
                     "or fewer); the prediction does not model that"]
    modelled = condition_warnings(cal, crowded, "pinned one core each")
    assert len(modelled) == 1 and "does not model" not in modelled[0]
    assert "3 processes on 2 cores; the prediction models them pinned one core each" in \
        modelled[0]


def test_check_run_names_ranks_pinned_in_one_and_not_the_other():
    from planner.run.check_run import condition_warnings

    cal = {"backend": "gloo", "cores": 2, "pinned": True}
    assert condition_warnings(cal, {"backend": "gloo", "cores": 2, "pinned": True}) == []
    assert condition_warnings(cal, {"backend": "gloo", "cores": 2}) == []  # an older record
    warned = condition_warnings(cal, {"backend": "gloo", "cores": 2, "pinned": False})
    assert warned == ["the run's ranks were not pinned, the calibration's pinned to cores of "
                      "their own (planner.run.affinity)"]


def test_check_run_says_when_the_machine_computed_slower_or_faster_than_calibrated():
    from planner.run.check_run import condition_warnings, speed_ratio

    cal = {"backend": "gloo", "cores": 2,
           "speed_probe_s": {"before": [0.0048, 0.0050], "after": [0.0050, 0.0052]}}

    def run(*probe_s):
        return {"backend": "gloo", "cores": 2,
                "speed_probe_s": {"before": list(probe_s[:2]), "after": list(probe_s[2:])}}
    # the medians of all four: 5.0 ms calibrated
    assert speed_ratio(cal, run(0.0055, 0.0055, 0.0054, 0.0056)) == pytest.approx(1.1)
    assert condition_warnings(cal, run(0.0051, 0.0052, 0.0050, 0.0052)) == []  # within 5%
    slower = condition_warnings(cal, run(0.0055, 0.0055, 0.0054, 0.0056))
    assert len(slower) == 1 and "took 1.10x the calibration's time" in slower[0]
    assert "computed slower than when it was calibrated" in slower[0]
    faster = condition_warnings(cal, run(0.0044, 0.0045, 0.0045, 0.0046))
    assert "0.90x" in faster[0] and "computed faster" in faster[0]
    # more processes than cores: the run's probe was time-shared, so only that is said
    crowded = condition_warnings(cal, {**run(0.0075, 0.0075, 0.0075, 0.0075), "processes": 3,
                                       "threads": 1})
    assert len(crowded) == 1 and "3 processes x 1 thread(s) on 2 core(s)" in crowded[0]
    # files written before the probe: nothing to compare, nothing said
    assert speed_ratio(cal, {"backend": "gloo"}) is None
    assert speed_ratio({}, run(0.0055, 0.0055, 0.0054, 0.0056)) is None
    assert condition_warnings({"backend": "gloo"}, run(0.01, 0.01, 0.01, 0.01)) == []


def test_check_run_says_when_the_collectives_moved_bytes_slower_or_faster_than_calibrated():
    from planner.run.check_run import LINK_RATIO_WARN, condition_warnings, link_ratio

    cal = {"backend": "gloo", "cores": 2,
           "link_probe_s": {"before": [0.0016, 0.0016], "after": [0.0016, 0.0016]}}

    def run(ms, **extra):
        return {"backend": "gloo", "cores": 2,
                "link_probe_s": {"before": [ms / 1e3] * 2, "after": [ms / 1e3] * 2}, **extra}
    assert link_ratio(cal, run(2.4)) == pytest.approx(1.5)
    assert condition_warnings(cal, run(1.6 * LINK_RATIO_WARN * 0.99)) == []  # inside the band
    slower = condition_warnings(cal, run(2.4))
    assert len(slower) == 1 and "took 1.50x the calibration's time for the link probe" in \
        slower[0]
    assert "collectives moved bytes slower than when it was calibrated" in slower[0]
    faster = condition_warnings(cal, run(1.2))
    assert len(faster) == 1 and "0.75x" in faster[0] and "moved bytes faster" in faster[0]
    # the compute probe says nothing of the link: a steady compute probe, a slower link
    both = {**cal, "speed_probe_s": {"before": [0.005] * 2, "after": [0.005] * 2}}
    said = condition_warnings(both, {**run(2.4), "speed_probe_s": both["speed_probe_s"]})
    assert len(said) == 1 and "link probe" in said[0]
    # more processes than cores: the run's probe was time-shared, so only that is said
    crowded = condition_warnings(cal, run(3.2, processes=3, threads=1))
    assert len(crowded) == 1 and "3 processes x 1 thread(s) on 2 core(s)" in crowded[0]
    # files written before the link probe (or one rank: no link): nothing said
    assert link_ratio(cal, {"backend": "gloo"}) is None and link_ratio({}, run(2.4)) is None
    assert condition_warnings(cal, {"backend": "gloo", "cores": 2,
                                    "link_probe_s": {"before": [], "after": []}}) == []


def test_the_speed_probe_leaves_the_callers_random_stream_alone():
    torch = pytest.importorskip("torch")
    from planner.run.speed_probe import probe_block_s

    torch.manual_seed(7)
    want = torch.rand(4)
    torch.manual_seed(7)
    assert probe_block_s() > 0
    assert torch.equal(torch.rand(4), want)  # a job's seeded batches come out the same


def test_refit_fits_the_same_measurement_to_the_same_profile(tmp_path):
    pytest.importorskip("torch")
    first = tmp_path / "first.json"
    assert RUNNER.invoke(app, ["calibrate", "--quick", "--nproc", "2", "--out",
                               str(first)]).exit_code == 0
    again = tmp_path / "again.json"
    result = RUNNER.invoke(app, ["calibrate", "--refit", str(first), "--out", str(again)])
    assert result.exit_code == 0, result.output
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    assert a["profile"] == b["profile"] and a["raw"] == b["raw"]
    assert "(2 x gloo" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "planner.calibration/v1"}')
    result = RUNNER.invoke(app, ["calibrate", "--refit", str(bad), "--out",
                                 str(tmp_path / "x.json")])
    assert result.exit_code == 2 and "raw" in result.output
    assert not (tmp_path / "x.json").exists()


def _raw(rank_scales: list[float]) -> dict:
    """Compute cases as ranks at the given speeds (time scales) ran them at once."""
    base = {"gemm": [0.010, 0.020, 0.040], "attention": [0.005, 0.006], "layer": [0.030]}
    return {"compute": [{kind: [{"time_s": t * scale} for t in times]
                         for kind, times in base.items()} for scale in rank_scales]}


def test_ranks_at_different_speeds_are_measured_and_warned_about():
    from planner.run.calibrate import RANK_SPREAD_WARN, rank_speed_spread

    assert rank_speed_spread(_raw([1.0])) is None  # one rank: nothing to compare
    assert rank_speed_spread(_raw([1.0, 1.0])) == pytest.approx(1.0)
    assert rank_speed_spread(_raw([1.0, 1.7, 1.2])) == pytest.approx(1.7)
    # one rank slower on a single case only: the median over cases ignores it
    raw = _raw([1.0, 1.0])
    raw["compute"][1]["gemm"][0]["time_s"] *= 3
    assert rank_speed_spread(raw) == pytest.approx(1.0)
    fine = {**_doc([0.02]), "raw": _raw([1.0, RANK_SPREAD_WARN * 0.98])}
    assert calibration_warnings(fine) == []
    uneven = {**_doc([0.02]), "raw": _raw([1.0, 1.68])}
    warned = calibration_warnings(uneven)
    assert len(warned) == 1 and "the slowest took 1.68x the fastest's time" in warned[0]
    assert fit_quality(uneven)["rank_speed_spread"] == pytest.approx(1.68)


def test_the_spread_of_a_cases_passes_is_reported_as_the_median_over_cases_and_ranks():
    from planner.run.calibrate import pass_spread

    assert pass_spread(_raw([1.0, 1.0])) is None  # no passes recorded: nothing to say
    raw = _raw([1.0, 1.0])
    for rank, per_rank in enumerate(raw["compute"]):
        for kind, cases in per_rank.items():
            for i, case in enumerate(cases):
                # rank 0's passes 1.2x apart, rank 1's 1.4x, one case of rank 1 9x
                slow = 9.0 if (rank, kind, i) == (1, "gemm", 0) else 1.2 + 0.2 * rank
                case["pass_times_s"] = [case["time_s"], case["time_s"] * slow,
                                        case["time_s"] * 1.1]
    assert pass_spread(raw) == pytest.approx(1.3)  # 6 cases at 1.2, 5 at 1.4, one at 9
    assert fit_quality({**_doc([0.02]), "raw": raw})["pass_spread"] == pytest.approx(1.3)
    # one pass is no spread
    for case in raw["compute"][0]["gemm"]:
        case["pass_times_s"] = case["pass_times_s"][:1]
    assert pass_spread({"compute": [{"gemm": raw["compute"][0]["gemm"]}]}) is None


def _timed(rank: int, stage: int, compute_s: float) -> dict:
    steps = [{"forward": 9.0, "backward": 9.0}]  # the first step is left out
    steps += [{"forward": compute_s / 3, "backward": 2 * compute_s / 3}] * 4
    return {"rank": rank, "stage": stage, "steps": steps}


def test_check_run_warns_when_ranks_doing_the_same_work_ran_at_different_speeds():
    from planner.run.check_run import RANK_IMBALANCE_WARN, rank_imbalance, run_warnings

    even = {"rank_timings": [_timed(0, 0, 0.100), _timed(1, 0, 0.105)]}
    assert rank_imbalance(even) == (pytest.approx(1.05), 0)
    assert run_warnings(even) == []
    # pipeline stages do different work: a slower stage is not an imbalance
    stages = {"rank_timings": [_timed(0, 0, 0.100), _timed(1, 1, 0.200)]}
    assert rank_imbalance(stages) is None and run_warnings(stages) == []
    uneven = {"rank_timings": [_timed(0, 0, 0.100), _timed(1, 0, 0.100 * 1.3),
                               _timed(2, 1, 0.1), _timed(3, 1, 0.1)]}
    assert rank_imbalance(uneven) == (pytest.approx(1.3), 0)
    warned = run_warnings(uneven)
    assert len(warned) == 1 and "on stage 0 the slowest took 1.30x" in warned[0]
    edge = {"rank_timings": [_timed(0, 0, 0.1), _timed(1, 0, 0.1 * RANK_IMBALANCE_WARN * 0.99)]}
    assert run_warnings(edge) == []
