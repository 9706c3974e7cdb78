"""``planner experts``: loads files, bad input, plan / eval / synth, and the placement validator.

Every input is synthetic (``planner.inputs.expert_loads.synthetic_loads``: 16 experts, a few layers
and steps) and written under ``tmp_path``, so the file runs in seconds and reads nothing
outside the repository. Bad input follows the project's CLI contract (see ``test_cli.py``):
exit 2 (3 when the problem is well formed but infeasible), exactly one ``error: ...`` line on
stderr naming the file or option, the field and what was expected, no traceback, and no
output file left behind.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from planner.cli.app import app
from planner.inputs.expert_loads import load_expert_loads, synthetic_loads
from planner.plan.validate import InvalidPlanError, expert_placement_problems, validate_expert_placement

runner = CliRunner()
ENV = {"COLUMNS": "100"}
ROOT = Path(__file__).resolve().parents[1]

EXPERTS, LAYERS, STEPS = 16, 3, 4
GPUS, GPUS_PER_NODE = 4, 2
SLOTS = EXPERTS // GPUS + 1  # the default: experts/gpus + one redundant slot per GPU
PLAN_SHAPE = ("--gpus", str(GPUS), "--gpus-per-node", str(GPUS_PER_NODE))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --- helpers ------------------------------------------------------------------------------


def series(seed: int = 0, zipf: float = 1.0, dense_first: bool = False) -> np.ndarray:
    """Routing counts ``[steps, layers, experts]``; ``dense_first`` prepends an all-zero layer
    (a dense layer, as SGLang's DeepSeek-V3 files have)."""
    s = synthetic_loads(layers=LAYERS, experts=EXPERTS, steps=STEPS, tokens_per_step=512,
                        zipf_s=zipf, seed=seed)
    return np.insert(s, 0, 0.0, axis=1) if dense_first else s


def write_npy(path: Path, array: np.ndarray) -> Path:
    np.save(path, array)
    return path


def write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def write_sglang(path: Path, array: np.ndarray) -> Path:
    return write_json(path, {"logical_count": array.astype(int).tolist()})


def write_csv(path: Path, rows, header: bool) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        if header:
            writer.writerow([f"expert_{e}" for e in range(len(rows[0]))])
        writer.writerows(rows)
    return path


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env=ENV)


def details(result) -> str:
    tb = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
    return f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}\n{tb}"


def ok(*args):
    result = invoke(*args)
    assert result.exit_code == 0, details(result)
    return result


def one_error_line(result, exit_code: int) -> str:
    """The contract for bad input: the exit code, one ``error:`` line, no traceback."""
    assert result.exit_code == exit_code, details(result)
    assert "Traceback" not in result.stdout + result.stderr, details(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), details(result)
    return lines[0]


def read_json(path: Path):
    return json.loads(path.read_text())


def plan_files(tmp: Path, loads: Path, *extra, tag: str = "") -> dict[str, Path]:
    paths = {k: tmp / f"{k}{tag}.{ext}" for k, ext in
             (("p", "json"), ("s", "json"), ("v", "json"), ("h", "png"))}
    result = ok("experts", "plan", loads, *PLAN_SHAPE, "--out", paths["p"], "--sglang",
                paths["s"], "--vllm", paths["v"], "--heatmap", paths["h"], *extra)
    paths["stdout"] = result.stdout
    return paths


# --- 1. loads files -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def skewed() -> np.ndarray:
    """Zipf 1.2 counts with a dense layer 0: ``[4 steps, 4 layers, 16 experts]``."""
    return series(seed=3, zipf=1.2, dense_first=True)


LOAD_FORMATS = {
    "sglang json 2-D": lambda d, s: write_sglang(d / "a.json", s.sum(0)),
    "sglang json 3-D": lambda d, s: write_sglang(d / "a.json", s),
    "plain json list 2-D": lambda d, s: write_json(d / "a.json", s.sum(0).astype(int).tolist()),
    "plain json list 3-D": lambda d, s: write_json(d / "a.json", s.astype(int).tolist()),
    "csv with header": lambda d, s: write_csv(d / "a.csv", s.sum(0).astype(int).tolist(), True),
    "csv without header": lambda d, s: write_csv(d / "a.csv", s.sum(0).astype(int).tolist(), False),
    "npy 2-D": lambda d, s: write_npy(d / "a.npy", s.sum(0)),
    "npy 3-D": lambda d, s: write_npy(d / "a.npy", s),
}


@pytest.mark.parametrize("fmt", list(LOAD_FORMATS))
def test_every_loads_format_gives_the_same_totals(fmt, tmp_path, skewed):
    path = LOAD_FORMATS[fmt](tmp_path, skewed)
    loads = load_expert_loads(path)
    np.testing.assert_array_equal(loads.total, skewed.sum(0))
    assert loads.num_experts == EXPERTS
    assert loads.series.shape == ((STEPS if "3-D" in fmt else 1), LAYERS + 1, EXPERTS)
    assert loads.moe_layers == (1, 2, 3)  # the dense all-zero layer 0 is not an MoE layer
    assert loads.source == str(path)


def test_csv_header_is_detected_only_when_non_numeric(tmp_path):
    rows = [[1, 2, 3], [4, 5, 6]]
    with_header = load_expert_loads(write_csv(tmp_path / "h.csv", rows, True))
    without = load_expert_loads(write_csv(tmp_path / "n.csv", rows, False))
    np.testing.assert_array_equal(with_header.total, without.total)
    assert with_header.total.shape == (2, 3)


# --- 2. bad input -------------------------------------------------------------------------


def _good_npy(d: Path) -> Path:
    return write_npy(d / "good.npy", series(seed=1))


def _current_file(d: Path, rows) -> Path:
    return write_json(d / "cur.json", {"physical_to_logical_map": rows})


def _trivial_rows(layers: int = LAYERS) -> list[list[int]]:
    return [[p % EXPERTS for p in range(GPUS * SLOTS)] for _ in range(layers)]


def _out_of_range_current(d: Path) -> Path:
    rows = _trivial_rows()
    rows[0][0] = 99
    return _current_file(d, rows)


def _missing_expert_current(d: Path) -> Path:
    rows = _trivial_rows()
    rows[0] = [0] * (GPUS * SLOTS)
    return _current_file(d, rows)


# name -> (build(tmp) -> args after "experts plan", exit code, fragments of the error line
#          [, reason: a known product bug, so the case is a strict xfail])
BAD_PLAN_INPUTS = {
    "missing file": (lambda d: [d / "nope.json"], 2, ["nope.json", "existing expert-loads file"]),
    "wrong suffix": (lambda d: [write_text(d / "loads.txt", "1,2\n3,4\n")],
                     2, ["loads.txt", ".json, .csv or .npy", "'.txt'"]),
    "invalid JSON": (lambda d: [write_text(d / "broken.json", '{"logical_count": [[1, 2]')],
                     2, ["broken.json", "valid JSON"]),
    "JSON dict without logical_count": (
        lambda d: [write_json(d / "nolc.json", {"counts": [[1, 2], [3, 4]]})],
        2, ["nolc.json", "logical_count", "'counts'"]),
    "ragged JSON list": (lambda d: [write_json(d / "ragged.json", [[1, 2, 3], [1, 2]])],
                         2, ["ragged.json", "(top level)", "rectangular"]),
    "ragged logical_count": (
        lambda d: [write_json(d / "ragged.json", {"logical_count": [[1, 2, 3], [1, 2]]})],
        2, ["ragged.json", "logical_count", "rectangular"]),
    "ragged CSV": (
        lambda d: [write_text(d / "ragged.csv", "1,2,3\n4,5\n")],
        2, ["ragged.csv", "row 2", "columns"]),
    "negative load JSON": (
        lambda d: [write_json(d / "neg.json", {"logical_count": [[1, -2, 3], [4, 5, 6]]})],
        2, ["neg.json", "logical_count", "finite, non-negative"]),
    "NaN load JSON": (lambda d: [write_text(d / "nan.json", "[[1, NaN, 3], [4, 5, 6]]")],
                      2, ["nan.json", "(top level)", "finite"]),
    "NaN load NPY": (lambda d: [write_npy(d / "nan.npy", np.array([[1.0, np.nan], [2.0, 3.0]]))],
                     2, ["nan.npy", "array", "finite"]),
    "negative load CSV": (lambda d: [write_csv(d / "neg.csv", [[1, 2], [3, -4]], False)],
                          2, ["neg.csv", "rows", "non-negative"]),
    "non-numeric CSV cell in a later row": (
        lambda d: [write_csv(d / "cell.csv", [[1, 2, 3], [4, 5, 6], [7, "x", 9]], False)],
        2, ["cell.csv", "row 3", "numbers only"]),
    "non-numeric CSV cell after a header": (
        lambda d: [write_csv(d / "cell.csv", [[1, 2, 3], [4, "x", 6]], True)],
        2, ["cell.csv", "row 2", "numbers only"]),
    "true/false among JSON loads": (lambda d: [write_text(d / "flag.json",
                                                          "[[true, 1, 1, 1], [1, 2, 3, 4]]")],
                                    2, ["flag.json", "(top level)", "not true or false"]),
    "a text file named .npy": (lambda d: [write_text(d / "text.npy", "hello\n")],
                               2, ["text.npy", "a NumPy .npy file"]),
    "string NPY": (
        lambda d: [write_npy(d / "str.npy", np.array([["a", "b"], ["c", "d"]]))],
        2, ["str.npy", "array", "integer or float"]),
    "one expert": (lambda d: [write_csv(d / "one.csv", [[5], [6]], False)],
                   2, ["one.csv", "at least 2 experts"]),
    "all layers dense": (lambda d: [write_npy(d / "zero.npy", np.zeros((3, 8)))],
                         2, ["zero.npy", "at least one layer with non-zero loads"]),
    "empty CSV": (lambda d: [write_text(d / "empty.csv", "")],
                  2, ["empty.csv", "rows"]),
    "--gpus not dividing the experts": (lambda d: [_good_npy(d), "--gpus", "5"],
                                        2, ["--gpus", "divisor", "16 experts", "--slots-per-gpu"]),
    "too few slots (infeasible)": (
        lambda d: [_good_npy(d), "--gpus", "4", "--slots-per-gpu", "3"],
        3, ["4 GPUs x 3 slots", "12 slots < 16 experts", "--slots-per-gpu"]),
    "--current missing": (lambda d: [_good_npy(d), *PLAN_SHAPE, "--current", d / "gone.json"],
                          2, ["gone.json", "readable JSON placement"]),
    "--current not a placement": (
        lambda d: [_good_npy(d), *PLAN_SHAPE, "--current", write_json(d / "cur.json", {"x": 1})],
        2, ["cur.json", "physical_to_logical_map"]),
    "--current wrong shape": (
        lambda d: [_good_npy(d), *PLAN_SHAPE, "--current", _current_file(d, _trivial_rows(2))],
        2, ["cur.json", "physical_to_logical_map", "3 layers x 20 slots", "[2, 20]"]),
    "--current negative expert id": (
        lambda d: [_good_npy(d), *PLAN_SHAPE, "--current",
                   _current_file(d, [[-1] + r[1:] for r in _trivial_rows()])],
        2, ["cur.json", "physical_to_logical_map", "non-negative"]),
    "--current expert id out of range": (
        lambda d: [_good_npy(d), *PLAN_SHAPE, "--current", _out_of_range_current(d)],
        2, ["cur.json", "physical_to_logical_map", "expert ids 0..15"]),
    "--current leaves an expert without a replica": (
        lambda d: [_good_npy(d), *PLAN_SHAPE, "--current", _missing_expert_current(d)],
        2, ["cur.json", "physical_to_logical_map", "a replica of every expert"]),
}


def _bad_cases():
    for name, entry in BAD_PLAN_INPUTS.items():
        marks = [pytest.mark.xfail(strict=True, reason=entry[3])] if len(entry) > 3 else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_plan_input_is_one_line_and_writes_nothing(case, tmp_path):
    build, exit_code, fragments = BAD_PLAN_INPUTS[case][:3]
    out = tmp_path / "out" / "p.json"
    sglang = tmp_path / "out" / "s.json"
    result = invoke("experts", "plan", *build(tmp_path), "--out", out, "--sglang", sglang)
    line = one_error_line(result, exit_code)
    for text in fragments:
        assert text in line, (text, line)
    assert not out.exists() and not sglang.exists()


@pytest.mark.parametrize("extra, code", [([], 2), (["--gpus", "4", "--slots-per-gpu", "3"], 3)])
def test_real_process_exit_codes(extra, code, tmp_path):
    """The console entry point (not CliRunner): 2 for bad input, 3 for infeasible."""
    loads = _good_npy(tmp_path) if extra else tmp_path / "nope.npy"
    proc = subprocess.run([sys.executable, "-m", "planner", "experts", "plan", str(loads), *extra,
                           "--out", str(tmp_path / "p.json")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr
    assert not (tmp_path / "p.json").exists()


def test_bad_input_through_load_expert_loads_raises_spec_error(tmp_path):
    from planner.errors import SpecError

    with pytest.raises(SpecError, match="finite, non-negative"):
        load_expert_loads(write_json(tmp_path / "neg.json", [[1, -1], [2, 2]]))
    with pytest.raises(SpecError, match="existing"):
        load_expert_loads(tmp_path / "nope.npy")


# --- 3-5. plan: outputs, exports, determinism, JSON output --------------------------------


@pytest.fixture(scope="module")
def planned(tmp_path_factory, skewed):
    """One plan of the skewed time series (SGLang 3-D JSON, dense layer 0) with every export."""
    tmp = tmp_path_factory.mktemp("planned")
    loads = write_sglang(tmp / "loads.json", skewed)
    files = plan_files(tmp, loads)
    files["loads"] = loads
    return files


def test_plan_writes_a_valid_placement(planned):
    doc = read_json(planned["p"])
    assert validate_expert_placement(doc) is doc
    assert expert_placement_problems(doc) == []
    assert doc["schema"] == "planner.expert-placement/v1"
    assert (doc["num_experts"], doc["num_gpus"], doc["gpus_per_node"], doc["slots_per_gpu"]) == (
        EXPERTS, GPUS, GPUS_PER_NODE, SLOTS)
    assert doc["num_layers"] == LAYERS + 1 and doc["moe_layers"] == [1, 2, 3]
    assert doc["mode"] == "nominal"
    assert doc["source"] == str(planned["loads"])
    for row, counts in zip(doc["physical_to_logical"], doc["replica_counts"]):
        assert len(row) == GPUS * SLOTS
        assert sum(counts) == GPUS * SLOTS and min(counts) >= 1
    assert [r["layer"] for r in doc["layers"]] == doc["moe_layers"]


def test_plan_beats_the_eplb_baseline_on_skewed_loads(planned):
    summary = read_json(planned["p"])["summary"]
    assert summary["mean_ratio_after"] <= summary["mean_ratio_eplb"] + 1e-9
    assert summary["mean_ratio_after"] >= summary["mean_lower_bound"] - 1e-9
    assert summary["mean_lower_bound"] >= 1 - 1e-9
    assert summary["replicas_moved"] == 0 and summary["bytes_moved"] == 0
    for layer in read_json(planned["p"])["layers"]:
        assert layer["after"] <= layer["eplb"] + 1e-9
        assert layer["after"] <= layer["before"] + 1e-9


def test_sglang_export_maps_every_layer(planned):
    doc, sglang = read_json(planned["p"]), read_json(planned["s"])
    assert list(sglang) == ["physical_to_logical_map"]
    rows = sglang["physical_to_logical_map"]
    assert len(rows) == doc["num_layers"]
    assert all(len(r) == GPUS * SLOTS for r in rows)
    assert rows[0] == [p % EXPERTS for p in range(GPUS * SLOTS)]  # dense layer: trivial map
    assert [rows[i] for i in doc["moe_layers"]] == doc["physical_to_logical"]


def test_vllm_export_and_heatmap(planned):
    vllm = read_json(planned["v"])
    assert vllm["num_redundant_experts"] == GPUS * SLOTS - EXPERTS
    assert planned["h"].read_bytes()[:8] == PNG_MAGIC


def test_plan_table_output(planned):
    assert "EPLB-style" in planned["stdout"] and "planner" in planned["stdout"]
    assert "3 MoE layers" in planned["stdout"]


def test_plan_is_deterministic(planned, tmp_path):
    again = plan_files(tmp_path, planned["loads"])
    assert again["p"].read_bytes() == planned["p"].read_bytes()
    assert again["s"].read_bytes() == planned["s"].read_bytes()
    assert again["v"].read_bytes() == planned["v"].read_bytes()


def test_format_json_prints_the_out_document(planned, tmp_path):
    out = tmp_path / "p.json"
    result = ok("experts", "plan", planned["loads"], *PLAN_SHAPE, "--out", out, "--format", "json")
    assert result.stdout == out.read_text()
    assert json.loads(result.stdout) == read_json(planned["p"])


def test_plan_csv_input(tmp_path, skewed):
    path = write_csv(tmp_path / "loads.csv", skewed.sum(0).astype(int).tolist(), True)
    doc = json.loads(ok("experts", "plan", path, *PLAN_SHAPE, "--format", "json").stdout)
    validate_expert_placement(doc)
    assert doc["moe_layers"] == [1, 2, 3]


def test_plan_with_explicit_slots_per_gpu(tmp_path):
    path = _good_npy(tmp_path)
    doc = json.loads(ok("experts", "plan", path, "--gpus", "3", "--gpus-per-node", "3",
                        "--slots-per-gpu", "7", "--format", "json").stdout)
    validate_expert_placement(doc)
    assert doc["slots_per_gpu"] == 7 and len(doc["physical_to_logical"][0]) == 21


# --- 6. robust ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["3-D steps as scenarios", "2-D drift"])
def test_robust_plan(shape, tmp_path, skewed):
    data = skewed if shape.startswith("3-D") else skewed.sum(0)
    loads = write_npy(tmp_path / "loads.npy", data)
    out = tmp_path / "p.json"
    ok("experts", "plan", loads, *PLAN_SHAPE, "--robust", "--out", out)
    doc = read_json(out)
    assert validate_expert_placement(doc) is doc
    assert doc["mode"] == "robust" and doc["moe_layers"] == [1, 2, 3]
    assert doc["summary"]["mean_ratio_after"] >= 1 - 1e-9


SHARED_TRACES = sorted((ROOT / "benchmarks" / "data" / "moe_traces" / "sglang").glob("*.json"))


@pytest.mark.parametrize("dispatch", ["auto", "static"])
@pytest.mark.parametrize("trace", SHARED_TRACES, ids=lambda p: p.stem)
def test_robust_plan_of_every_shared_trace_loads_in_eval(trace, dispatch, tmp_path):
    """The real DeepSeek-V3 traces (non-integer mean loads in robust mode) plan with --robust
    at the default shape under the default rule (the even split) and under planned ratios, and
    the written placement is valid and loads in ``experts eval``."""
    assert len(SHARED_TRACES) == 6
    out = tmp_path / "p.json"
    ok("experts", "plan", trace, "--robust", "--dispatch", dispatch, "--out", out, "--format", "json")
    doc = read_json(out)
    assert doc["mode"] == "robust" and doc["dispatch"] == ("even" if dispatch == "auto" else "static")
    assert len(doc["moe_layers"]) == 58
    sums = [np.bincount(p, weights=s) for p, s in zip(doc["physical_to_logical"], doc["split"])]
    assert max(float(np.abs(x - 1).max()) for x in sums) < 1e-8
    result = json.loads(ok("experts", "eval", out, trace, "--format", "json").stdout)
    assert result["dispatch"] == doc["dispatch"] and len(result["layers"]) == 58
    rule = "static" if dispatch == "static" else "even"
    assert result["mean"][rule] == pytest.approx(doc["summary"]["mean_ratio_after"], rel=1e-6)


# --- 7. migration from a current placement ------------------------------------------------


@pytest.fixture
def other_loads(tmp_path) -> Path:
    return write_npy(tmp_path / "other.npy", series(seed=11, zipf=1.2, dense_first=True))


def test_current_with_zero_migration_weight_gives_a_valid_plan(planned, other_loads, tmp_path):
    out = tmp_path / "p.json"
    ok("experts", "plan", other_loads, *PLAN_SHAPE, "--current", planned["p"],
       "--migration-weight", "0", "--expert-mb", "10", "--out", out)
    doc = validate_expert_placement(read_json(out))
    moved = doc["summary"]["replicas_moved"]
    assert 0 <= moved <= GPUS * SLOTS * len(doc["moe_layers"])
    assert moved == sum(layer["moved"] for layer in doc["layers"])
    assert doc["summary"]["bytes_moved"] == pytest.approx(moved * 10e6)


@pytest.mark.parametrize("current", ["p", "s"])
def test_huge_migration_weight_keeps_the_current_placement(current, planned, other_loads, tmp_path):
    before = read_json(planned["p"])
    out = tmp_path / "keep.json"
    ok("experts", "plan", other_loads, *PLAN_SHAPE, "--current", planned[current],
       "--migration-weight", "1000", "--out", out)
    doc = validate_expert_placement(read_json(out))
    assert doc["physical_to_logical"] == before["physical_to_logical"]
    assert doc["summary"]["replicas_moved"] == 0
    assert all(layer["moved"] == 0 for layer in doc["layers"])
    # "before" is measured on the current placement: quotas re-planned for it cannot be worse.
    for layer in doc["layers"]:
        assert layer["after"] <= layer["before"] + 1e-9


def test_migration_weight_trades_balance_for_moves(planned, other_loads, tmp_path):
    free, keep = tmp_path / "free.json", tmp_path / "keep.json"
    for path, weight in ((free, "0"), (keep, "1000")):
        ok("experts", "plan", other_loads, *PLAN_SHAPE, "--current", planned["p"],
           "--migration-weight", weight, "--out", path)
    free_doc, keep_doc = read_json(free), read_json(keep)
    for a, b in zip(free_doc["layers"], keep_doc["layers"]):
        assert a["after"] <= b["after"] + 1e-9


# --- 8. eval ------------------------------------------------------------------------------


def _ratio(gpu_load: np.ndarray) -> float:
    return float(gpu_load.max() / gpu_load.mean())


def test_eval_json_per_layer(planned, other_loads):
    doc = read_json(planned["p"])
    result = json.loads(ok("experts", "eval", planned["p"], other_loads, "--format", "json").stdout)
    assert result["placement"] == str(planned["p"]) and result["steps"] == STEPS
    assert [r["layer"] for r in result["layers"]] == doc["moe_layers"]
    series_ = np.load(other_loads)
    for i, row in enumerate(result["layers"]):
        for key in ("static", "even", "sglang", "realtime_mean_step", "realtime_worst_step"):
            assert row[key] >= 1 - 1e-9, (key, row)
        assert row["realtime_worst_step"] >= row["realtime_mean_step"] - 1e-9
        # Real-time quotas are optimal for each step (to one token: flows are integral), so on
        # every step they are no worse than the even split or the plan's static split.
        phy = np.array(doc["physical_to_logical"][i])
        split = np.array(doc["split"][i])
        counts = np.bincount(phy, minlength=EXPERTS)
        bounds, tolerance = [], 0.0
        for step in series_[:, row["layer"]]:
            even = _ratio((step[phy] / counts[phy]).reshape(GPUS, SLOTS).sum(1))
            static = _ratio((step[phy] * split).reshape(GPUS, SLOTS).sum(1))
            bounds.append(min(even, static))
            tolerance = max(tolerance, GPUS / step.sum())  # one token over the mean GPU load
        assert row["realtime_mean_step"] <= np.mean(bounds) + tolerance + 1e-9
        assert row["realtime_worst_step"] <= max(bounds) + tolerance + 1e-9
    assert set(result["mean"]) == {"static", "even", "sglang", "realtime_mean_step", "realtime_worst_step"}
    assert result["dispatch"] == doc["dispatch"] == "even"  # planned for both engines: the even split


def test_eval_on_the_planning_loads_reproduces_the_plan(planned):
    doc = read_json(planned["p"])
    result = json.loads(ok("experts", "eval", planned["p"], planned["loads"], "--format",
                           "json").stdout)
    for row, layer in zip(result["layers"], doc["layers"]):
        assert row["static"] == pytest.approx(layer["after"], abs=1e-6)


def test_eval_table(planned, other_loads):
    result = ok("experts", "eval", planned["p"], other_loads)
    assert "static split" in result.stdout and "real-time" in result.stdout


def test_eval_mismatched_experts_is_exit_2(planned, tmp_path):
    loads = write_npy(tmp_path / "wide.npy", synthetic_loads(layers=LAYERS + 1, experts=32,
                                                             steps=2, tokens_per_step=256, seed=5))
    line = one_error_line(invoke("experts", "eval", planned["p"], loads), 2)
    assert "wide.npy" in line and "32" in line and "16 experts" in line


def test_eval_mismatched_layers_is_exit_2(planned, tmp_path):
    loads = write_npy(tmp_path / "short.npy", series(seed=5))  # 3 layers, the plan has 4
    line = one_error_line(invoke("experts", "eval", planned["p"], loads), 2)
    assert "short.npy" in line and "4 layers" in line


def test_eval_rejects_an_invalid_placement(planned, tmp_path):
    doc = read_json(planned["p"])
    doc["replica_counts"][0][0] += 1
    bad = write_json(tmp_path / "bad_plan.json", doc)
    line = one_error_line(invoke("experts", "eval", bad, planned["loads"]), 2)
    assert "bad_plan.json" in line and "replica_counts" in line


def test_eval_missing_placement_is_exit_2(planned, tmp_path):
    line = one_error_line(invoke("experts", "eval", tmp_path / "none.json", planned["loads"]), 2)
    assert "none.json" in line


# --- 9. synth -----------------------------------------------------------------------------


SYNTH_ARGS = ("--layers", "3", "--experts", "16", "--steps", "4", "--tokens-per-step", "512")


@pytest.mark.parametrize("suffix", ["npy", "json"])
def test_synth_round_trips_and_is_deterministic(suffix, tmp_path):
    a, b, c = (tmp_path / f"{n}.{suffix}" for n in ("a", "b", "c"))
    ok("experts", "synth", a, *SYNTH_ARGS, "--seed", "7")
    ok("experts", "synth", b, *SYNTH_ARGS, "--seed", "7")
    ok("experts", "synth", c, *SYNTH_ARGS, "--seed", "8")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    loads = load_expert_loads(a)
    assert loads.series.shape == (4, 3, 16)
    expected = synthetic_loads(layers=3, experts=16, steps=4, tokens_per_step=512, seed=7)
    np.testing.assert_array_equal(loads.series, expected)
    if suffix == "json":
        assert list(read_json(a)) == ["logical_count"]


def test_synth_output_plans(tmp_path):
    path = tmp_path / "s.npy"
    ok("experts", "synth", path, *SYNTH_ARGS)
    doc = json.loads(ok("experts", "plan", path, *PLAN_SHAPE, "--format", "json").stdout)
    validate_expert_placement(doc)


# --- 10. the validator --------------------------------------------------------------------


def _broken(doc: dict, how: str) -> dict:
    doc = json.loads(json.dumps(doc))
    phy = doc["physical_to_logical"][0]
    if how == "expert missing":
        gone = phy[0]
        keep = next(e for e in phy if e != gone)
        doc["physical_to_logical"][0] = [keep if e == gone else e for e in phy]
    elif how == "split sums":
        doc["split"][0][0] += 0.5
    elif how == "negative split":
        doc["split"][0][0] = -0.5
    elif how == "id out of range":
        doc["physical_to_logical"][0][0] = EXPERTS
    elif how == "negative id":
        doc["physical_to_logical"][0][0] = -1
    elif how == "replica_counts":
        doc["replica_counts"][0][0] += 1
    elif how == "logical_to_physical":
        doc["logical_to_physical"][0][0] = doc["logical_to_physical"][0][0][:-1] + [999]
    elif how == "ragged":
        doc["physical_to_logical"][0] = phy[:-1]
    elif how == "layer count":
        doc["physical_to_logical"] = doc["physical_to_logical"][:-1]
    elif how == "missing key":
        del doc["split"]
    return doc


VALIDATOR_CASES = {
    "expert missing": "have no replica",
    "split sums": "sum to 1",
    "negative split": "must be >= 0",
    "id out of range": f"outside 0..{EXPERTS - 1}",
    "negative id": f"outside 0..{EXPERTS - 1}",
    "replica_counts": "replica_counts disagree",
    "logical_to_physical": "logical_to_physical disagrees",
    "ragged": "unreadable",
    "layer count": f"expected 3 layers x {GPUS}*{SLOTS} slots",
    "missing key": "the field 'split' is missing",
}


@pytest.mark.parametrize("how", list(VALIDATOR_CASES))
def test_validator_catches(how, planned):
    doc = _broken(read_json(planned["p"]), how)
    problems = expert_placement_problems(doc)
    assert any(VALIDATOR_CASES[how] in p for p in problems), problems
    with pytest.raises(InvalidPlanError) as err:
        validate_expert_placement(doc, "mine.json")
    assert str(err.value).startswith("mine.json: invalid expert placement file:")
    assert err.value.exit_code == 2


def test_validator_names_the_layer(planned):
    doc = _broken(read_json(planned["p"]), "expert missing")
    first_moe = doc["moe_layers"][0]
    assert any(p.startswith(f"layer {first_moe}:") for p in expert_placement_problems(doc))


# --- 11. the synthetic demo ---------------------------------------------------------------


def test_plan_without_loads_runs_the_demo():
    result = ok("experts", "plan")
    assert "EPLB-style" in result.stdout and "64 experts" in result.stdout


def test_eval_of_sglangs_map_says_which_command_reads_it(tmp_path):
    """SGLang's physical_to_logical_map is a current placement (experts plan --current), not
    a plan to evaluate: the message says so, not a raw key name."""
    from typer.testing import CliRunner

    from planner.cli.app import app
    sg = tmp_path / "sg.json"
    sg.write_text(json.dumps({"physical_to_logical_map": [[0, 1], [1, 0]]}))
    loads = tmp_path / "loads.json"
    loads.write_text(json.dumps({"logical_count": [[3, 1], [2, 2]]}))
    out = CliRunner().invoke(app, ["experts", "eval", str(sg), str(loads)])
    assert out.exit_code == 2
    assert "the field 'num_experts' is missing" in out.output and "--current" in out.output


@pytest.mark.parametrize("gpus, per_node, fits", [(16, 3, False), (10, 8, False), (4, 8, True),
                                                  (32, 8, True), (8, 8, True)])
def test_experts_plan_refuses_an_ep_group_that_leaves_a_node_partly_used(gpus, per_node, fits):
    args = ("experts", "plan", "--gpus", str(gpus), "--gpus-per-node", str(per_node),
            "--format", "json")
    if fits:
        assert json.loads(ok(*args).stdout)["gpus_per_node"] == min(per_node, gpus)
    else:
        line = one_error_line(invoke(*args), 2)
        assert "--gpus" in line and f"{gpus % per_node} of its {per_node}" in line


@pytest.mark.parametrize("args, flag", [
    (("experts", "plan", "--drift", "0.5"), "--drift"),
    (("experts", "plan", "--scenarios", "4"), "--scenarios"),
    (("experts", "plan", "--robust", "--quotas", "static", "--dispatch", "even"), "--quotas"),
    (("experts", "plan", "--migration-weight", "2"), "--migration-weight"),
    (("experts", "plan", "--expert-mb", "40"), "--expert-mb"),
    (("solve", "--redundant-experts-per-gpu", "3"), "--redundant-experts-per-gpu")])
def test_an_option_the_run_would_ignore_is_refused(args, flag):
    line = one_error_line(invoke(*args), 2)
    assert f"{flag}: expected {flag} only with" in line


def test_options_that_apply_or_sit_at_their_defaults_pass():
    ok("experts", "plan", "--robust", "--drift", "0.3", "--scenarios", "4", "--format", "json")
    ok("experts", "plan", "--robust", "--quotas", "static", "--dispatch", "static",
       "--format", "json")


def test_heatmaps_without_colour_show_levels_by_glyph_and_say_how_rows_are_banded(tmp_path):
    """Piped (no colour) every cell had been the same block; now a glyph per load level, and
    the title says when rows or columns are bands of several layers or GPUs (the busiest)."""
    path = write_npy(tmp_path / "loads.npy", series(seed=3))
    text = ok("experts", "plan", path, *PLAN_SHAPE).stdout
    assert "█" not in text
    before, after = text.split("GPU load / mean, before")[1].split("GPU load / mean, after")
    grid = lambda part: "".join(line.rsplit("  max", 1)[0] for line in part.splitlines()
                                if "  max " in line)  # noqa: E731
    assert len(set(grid(before))) > 2 and set(grid(after)) <= set(" .:-=+#@")
    assert "scale: ' ' <0.5" in " ".join(text.split())
    layers = series(seed=3).shape[-2]
    assert ("one row each" in before) is (layers <= 20)
