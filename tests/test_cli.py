"""The ``planner`` command line: each command's happy path, and one test per kind of bad input.

Bad input must exit 2 with exactly one line on stderr (``error: ...``) that names the file or
option, the field and what was expected, and never a traceback. Most tests use Typer's
``CliRunner``; the subprocess tests check the same through ``python -m planner``, where the
exit code and streams are the real ones.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.app import app

runner = CliRunner()
ENV = {"COLUMNS": "100"}
ROOT = Path(__file__).resolve().parents[1]

GOOD_CLUSTER = """\
description: two test nodes
node_groups:
  - name: g
    count: 2
    gpu: H100
    gpus_per_node: 8
    fabric: nvswitch
    nics: [{count: 8, gbps: 400, transport: ib}]
network:
  tiers: [{name: leaf, nodes_per_switch: 32}]
"""
MISSING_FIELD = GOOD_CLUSTER.replace("    gpu: H100\n", "")
EXTRA_FIELD = GOOD_CLUSTER.replace("    fabric: nvswitch\n", "    fabric: nvswitch\n    colour: blue\n")
MALFORMED = "node_groups:\n  - name: g\n   count: [2\n"


def invoke(*args: str):
    return runner.invoke(app, list(args), env=ENV)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def estimate_json(*args: str) -> dict:
    result = invoke("estimate", "--format", "json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# --- happy paths --------------------------------------------------------------------------


@pytest.mark.parametrize("args, fits_expected", [(("--tp", "8", "--pp", "2"), True), ((), False)])
def test_estimate_prints_step_time_and_the_exact_verdict(args, fits_expected):
    """The verdict line agrees with the JSON's peak and capacity: ``fits, X GiB headroom``
    (and no ``does NOT fit``) when the peak fits, the other line when it does not (the
    default, tp 1 for a 70B model, does not fit)."""
    result = invoke("estimate", *args)
    assert result.exit_code == 0, result.stderr
    assert "llama-3.1-70b" in result.stdout and "Step time" in result.stdout
    mem = estimate_json(*args)["memory"]
    gib = 2**30
    fits = f"fits, {mem['headroom_bytes_per_gpu'] / gib:.1f} GiB headroom"
    does_not = (f"does NOT fit: needs {mem['peak_bytes_per_gpu'] / gib:.1f} GiB per GPU, has "
                f"{mem['capacity_bytes_per_gpu'] / gib:.1f} GiB")
    lines = result.stdout.splitlines()
    assert (mem["peak_bytes_per_gpu"] <= mem["capacity_bytes_per_gpu"]) == fits_expected
    if fits_expected:
        assert fits in lines and "does NOT fit" not in result.stdout
    else:
        assert does_not in lines and "fits," not in result.stdout


def test_estimate_json_has_documented_keys():
    data = estimate_json("--tp", "8", "--pp", "2")
    for key in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "model_tflops_per_gpu", "fits",
                "memory", "time", "config", "workload", "model", "cluster", "num_gpus", "tiers"):
        assert key in data
    for key in ("peak_bytes_per_gpu", "capacity_bytes_per_gpu", "weights_bytes", "grads_bytes",
                "optimizer_bytes", "activations_bytes", "logits_bytes", "other_bytes", "stage"):
        assert key in data["memory"]
    assert data["model"] == "llama-3.1-70b" and data["num_gpus"] == 64


def test_estimate_defaults_fill_dp_and_sequence_parallel():
    config = estimate_json("--tp", "8", "--pp", "2")["config"]
    assert (config["tp"], config["pp"], config["dp"], config["cp"]) == (8, 2, 4, 1)
    assert config["sequence_parallel"] is True
    assert estimate_json("--tp", "1")["config"]["sequence_parallel"] is False


def test_estimate_on_cluster_file(tmp_path):
    data = estimate_json("--cluster", write(tmp_path, "two.yaml", GOOD_CLUSTER), "--tp", "8",
                         "--model", "llama-3.1-8b", "--global-batch", "64")
    assert data["num_gpus"] == 16 and data["config"]["dp"] == 2


def test_calibration_file_changes_the_estimate(tmp_path):
    args = ("--tp", "8", "--pp", "2")
    slow = write(tmp_path, "slow.json", json.dumps({"gemm_efficiency": 0.3}))
    assert (estimate_json(*args, "--calibration", slow)["step_time_s"]
            > estimate_json(*args)["step_time_s"])


def test_presets_lists_models_clusters_and_gpus():
    result = invoke("presets")
    assert result.exit_code == 0, result.stderr
    for name in ("llama-3.1-70b", "deepseek-v3", "dgx-h100", "gb200-nvl72", "H100-SXM5-80GB"):
        assert name in result.stdout


def test_presets_one_kind():
    result = invoke("presets", "gpus")
    assert result.exit_code == 0 and "H100-SXM5-80GB" in result.stdout
    assert "llama" not in result.stdout


def test_topo_show_preset():
    result = invoke("topo", "show", "dgx-h100")
    assert result.exit_code == 0, result.stderr
    assert "nvswitch" in result.stdout and "64 GPUs" in result.stdout


def test_topo_show_from_options():
    result = invoke("topo", "show", "--gpu", "A100", "--nodes", "2")
    assert result.exit_code == 0, result.stderr
    assert "16 GPUs" in result.stdout


# --- bad input: exit 2, one line on stderr naming where and what --------------------------


BAD_INPUTS = {
    "unknown model preset": (["estimate", "--model", "llama-9"], ["--model", "llama-3.1-8b"]),
    "unknown GPU": (["estimate", "--gpu", "X100"], ["--gpu", "X100", "catalog"]),
    "unknown cluster preset": (["estimate", "--cluster", "dgx-z100"], ["--cluster", "dgx-h100"]),
    "missing cluster file": (["estimate", "--cluster", "{tmp}/nope.yaml"],
                             ["nope.yaml", "existing"]),
    "missing model file": (["estimate", "--model", "{tmp}/nope.json"], ["nope.json", "existing"]),
    "cluster missing field": (["estimate", "--cluster", "{missing}"],
                              ["missing.yaml", "node_groups.0.gpu", "required"]),
    "cluster extra field": (["estimate", "--cluster", "{extra}"],
                            ["extra.yaml", "node_groups.0.colour", "allowed"]),
    "malformed cluster YAML": (["topo", "show", "{malformed}"], ["malformed.yaml:3", "YAML"]),
    "tp not dividing heads": (["estimate", "--nodes", "3", "--tp", "3"],
                              ["--tp", "attention heads (64)", "3"]),
    "degrees not the GPU count": (["estimate", "--tp", "8", "--pp", "2", "--dp", "2"],
                                  ["--tp/--pp/--dp/--cp", "64 GPUs", "32"]),
    "default dp does not divide": (["estimate", "--tp", "8", "--pp", "3"],
                                   ["--tp/--pp/--cp", "64 GPUs", "24"]),
    "tp zero": (["estimate", "--tp", "0"], ["--tp", "1"]),
    "nodes zero": (["estimate", "--nodes", "0"], ["--nodes", "1"]),
    "tp negative": (["estimate", "--tp", "-1"], ["--tp", "1"]),
    "tp not a number": (["estimate", "--tp", "abc"], ["--tp", "integer"]),
    "topo nodes zero": (["topo", "show", "--gpu", "H100", "--nodes", "0"], ["--nodes", "1"]),
    "cluster and gpu": (["estimate", "--cluster", "dgx-h100", "--gpu", "H100"],
                        ["--cluster", "not both"]),
    "topo without cluster": (["topo", "show"], ["CLUSTER", "--gpu"]),
    "ep on dense model": (["estimate", "--ep", "8"], ["--ep", "dense"]),
    "global batch": (["estimate", "--global-batch", "100"], ["--global-batch", "dp*micro_batch"]),
    "recompute layers without full": (["estimate", "--recompute-layers", "2"],
                                      ["--recompute-layers", "--recompute full"]),
    "missing calibration": (["estimate", "--calibration", "{tmp}/nope.json"],
                            ["nope.json", "calibration"]),
    "calibration bad JSON": (["estimate", "--calibration", "{bad_json}"],
                             ["bad.json:1", "valid JSON"]),
    "calibration unknown field": (["estimate", "--calibration", "{unknown_field}"],
                                  ["unknown.json", "gemm_eff"]),
}


@pytest.fixture
def bad_files(tmp_path) -> dict[str, str]:
    return {"tmp": str(tmp_path),
            "missing": write(tmp_path, "missing.yaml", MISSING_FIELD),
            "extra": write(tmp_path, "extra.yaml", EXTRA_FIELD),
            "malformed": write(tmp_path, "malformed.yaml", MALFORMED),
            "bad_json": write(tmp_path, "bad.json", '{"gemm_efficiency": 0.5,'),
            "unknown_field": write(tmp_path, "unknown.json", '{"gemm_eff": 0.5}')}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2(case, bad_files):
    args, expected = BAD_INPUTS[case]
    result = invoke(*(arg.format(**bad_files) for arg in args))
    assert result.exit_code == 2, (case, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert "Traceback" not in result.stdout + result.stderr


# --- the real process: exit codes and streams ---------------------------------------------


def run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_module_json_output_parses():
    proc = run_module("estimate", "--tp", "8", "--pp", "2", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["config"]["dp"] == 4


@pytest.mark.parametrize("args", [["estimate", "--tp", "0"], ["estimate", "--model", "nope"],
                                  ["estimate", "--tp", "3", "--nodes", "3"]])
def test_module_bad_input_exit_code(args):
    proc = run_module(*args)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_installed_script_runs_outside_the_checkout(tmp_path):
    """The console script works from any directory: presets and profiles ship as package data."""
    exe = Path(sys.executable).parent / "planner"
    if not exe.exists():
        pytest.skip("planner is not installed in this interpreter's environment")
    proc = subprocess.run([str(exe), "estimate", "--model", "qwen3-30b-a3b", "--cluster",
                           "dgx-h100", "--ep", "8", "--format", "json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["step_time_s"] > 0
