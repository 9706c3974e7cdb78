"""Limits, stated and enforced at the boundary (issue 21).

Every maximum of ``planner.inputs.limits`` (and ``topologies.limits``) is refused where it
enters: a value beyond it exits 2 with one ``error:`` line that names the option or the file
and field, the limit and its reason, writes no output file and shows no traceback. Values at
the limit pass where that is cheap to check. ``docs/limits.md`` lists every limit.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import planner.cli.app as app_module
from planner.cli.app import app
from planner.errors import SpecError
from planner.inputs import limits as L
from planner.inputs.expert_loads import load_expert_loads
from planner.inputs.models import load_model_file
from topologies.catalog import gpu_catalog
from topologies.spec import ClusterSpec
from topologies.standard import NODE_TYPES

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "tests" / "fixtures" / "hf_configs"
LIMIT_WORDS = "the limit on"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "100"})


def refused(result, *names: str) -> str:
    """Exit 2, one ``error:`` line naming the limit and every one of ``names``, no traceback."""
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert LIMIT_WORDS in lines[0], lines[0]
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# --- the limits themselves ------------------------------------------------------------------


def test_every_limit_has_a_reason_and_a_row_in_the_docs():
    docs = (ROOT / "docs" / "limits.md").read_text(encoding="utf-8")
    for limit in L.ALL_LIMITS:
        assert limit.reason and limit.what and limit.maximum > 0, limit
        shown = limit.shown or f"{limit.maximum:,}"
        row = next((line for line in docs.splitlines() if line.startswith("|")
                    and shown in line and limit.what in line), None)
        assert row is not None, f"docs/limits.md has no row for {limit.what} ({shown})"


def test_readme_links_the_limits():
    assert "docs/limits.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_gpus_per_node_covers_the_catalog_and_its_node_types():
    domains = [gpu.nvlink_domain_gpus or 0 for gpu in gpu_catalog().values()]
    assert 0 < max(domains) <= L.GPUS_PER_NODE.maximum
    assert max(n.gpus_per_node for n in NODE_TYPES.values()) <= L.GPUS_PER_NODE.maximum


def test_every_fixture_model_is_within_the_model_limits():
    for path in sorted(HF.glob("*.json")):
        spec = load_model_file(path)
        assert spec.num_layers * 8 <= L.MODEL_LAYERS.maximum, path
        assert spec.hidden_size * 8 <= L.HIDDEN_SIZE.maximum, path
        assert spec.moe is None or spec.moe.num_experts * 8 <= L.EXPERTS.maximum, path


# --- command-line options -------------------------------------------------------------------

SOLVE = ["solve", "--model", "llama-3.1-8b", "--gpu", "H100"]
OPTION_CASES = {
    "solve --nodes 10**30": (SOLVE + ["--nodes", 10**30], "--nodes", "1,048,576 nodes"),
    "solve MI300X --nodes 1e8": (["solve", "--gpu", "MI300X", "--nodes", 100_000_000], "--nodes",
                                 "1,048,576 nodes"),
    "solve --gpus-per-node 73": (SOLVE + ["--gpus-per-node", 73], "--gpus-per-node", "72 GPUs"),
    "solve --global-batch": (SOLVE + ["--global-batch", 2**20 + 1], "--global-batch",
                             "1,048,576 sequences"),
    "solve --seq-len": (SOLVE + ["--seq-len", 2**24 + 1], "--seq-len", "16,777,216 tokens"),
    "estimate --seq-len": (["estimate", "--seq-len", 2**24 + 1], "--seq-len", "16,777,216"),
    "topo show --nodes": (["topo", "show", "--gpu", "H100", "--nodes", 2**20 + 1], "--nodes",
                          "1,048,576 nodes"),
    "topo show, 8M GPUs": (["topo", "show", "--gpu", "H100", "--nodes", 1_000_000], "--nodes",
                           "1,048,576 GPUs"),
    "topo import --nodes": (["topo", "import", "x.txt", "--nodes", 2**20 + 1], "--nodes",
                            "1,048,576 nodes"),
    "experts plan --gpus": (["experts", "plan", "--gpus", 1_000_000], "--gpus", "16,384 GPUs"),
    "experts plan --slots-per-gpu 10000": (["experts", "plan", "--slots-per-gpu", 10_000],
                                           "--slots-per-gpu", "8,192 slots"),
    "experts plan, 64 x 1000 slots": (["experts", "plan", "--slots-per-gpu", 1000],
                                      "--gpus x --slots-per-gpu", "16,384 slots"),
    "experts plan --scenarios": (["experts", "plan", "--robust", "--scenarios", 1025],
                                 "--scenarios", "1,024 scenarios"),
    "experts plan --locality-slack": (["experts", "plan", "--dispatch", "static",
                                       "--locality-slack", 101], "--locality-slack", "100"),
    "experts synth --steps": (["experts", "synth", "s.npy", "--steps", 1_000_000], "--steps",
                              "65,536 steps"),
    "experts synth --layers": (["experts", "synth", "s.npy", "--layers", 1025], "--layers",
                               "1,024 layers"),
    "experts synth --experts": (["experts", "synth", "s.npy", "--experts", 4097], "--experts",
                                "4,096 experts"),
    "experts synth, values": (["experts", "synth", "s.npy", "--steps", 65_536, "--layers", 1024],
                              "--steps x --layers x --experts", "16,777,216 values"),
    "serve --isl": (["serve", "--isl", 10**8], "--isl", "16,777,216 tokens"),
    "serve estimate --osl": (["serve", "estimate", "--osl", 10**8], "--osl", "16,777,216"),
}


@pytest.mark.parametrize("case", list(OPTION_CASES))
def test_an_option_beyond_its_limit_is_refused(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, option, limit = OPTION_CASES[case]
    refused(invoke(*args), option, limit)
    assert list(tmp_path.iterdir()) == []  # no output file, no staged temporary file


def test_a_refused_plan_writes_none_of_its_files(tmp_path):
    outs = [tmp_path / name for name in ("p.json", "s.json", "v.json", "h.png")]
    refused(invoke("experts", "plan", "--slots-per-gpu", 1000, "--out", outs[0], "--sglang",
                   outs[1], "--vllm", outs[2], "--heatmap", outs[3]), "--slots-per-gpu")
    assert list(tmp_path.iterdir()) == []


def test_options_at_their_limits_pass(tmp_path):
    result = invoke("topo", "show", "--gpu", "GB200", "--nodes", 1, "--gpus-per-node", 72)
    assert result.exit_code == 0, result.output
    loads = write(tmp_path / "l.json", {"logical_count": [list(range(1, 65))]})
    result = invoke("experts", "plan", loads, "--gpus", 64, "--slots-per-gpu", 256,
                    "--dispatch", "static", "--format", "json")
    assert result.exit_code == 0, result.output  # 16,384 slots: about 1.5 s
    out = tmp_path / "s.npy"
    result = invoke("experts", "synth", out, "--steps", 65_536, "--layers", 1, "--experts", 2)
    assert result.exit_code == 0, result.output
    assert load_expert_loads(out).series.shape == (65_536, 1, 2)


def test_help_shows_the_maximum():
    result = invoke("solve", "--help")
    assert "At most 1,048,576." in " ".join(result.stdout.split())


# --- files ------------------------------------------------------------------------------------

CLUSTER = {"name": "big", "node_groups": [
    {"name": "g", "count": 4, "gpu": "H100", "gpus_per_node": 8, "fabric": "nvswitch",
     "nics": [{"count": 8, "gbps": 400, "transport": "ib"}]}],
    "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 32},
                          {"name": "spine", "nodes_per_switch": 2**40}]}}


def _cluster(**group) -> dict:
    data = json.loads(json.dumps(CLUSTER))
    data["node_groups"][0].update(group)
    return data


@pytest.mark.parametrize("data, field, limit", [
    (_cluster(count=2**31), "node_groups.0.count", "1,048,576 nodes"),
    (_cluster(gpus_per_node=73), "node_groups.0", "72 GPUs"),
    (_cluster(gpus_per_node=1025, fabric="host", intra_bw_GBps=10, nvlink_domain_nodes=1),
     "node_groups.0", "1,024 processes"),
    (_cluster(count=200_000), "node_groups.0", "1,048,576 GPUs"),
    (_cluster(nvlink_domain_nodes=2**31), "node_groups.0.nvlink_domain_nodes", "1,048,576"),
    (_cluster(nics=[{"count": 145, "gbps": 400, "transport": "ib"}]),
     "node_groups.0.nics.0.count", "144 NICs"),
    ({**CLUSTER, "node_groups": [_cluster(count=600_000, gpus_per_node=1)["node_groups"][0],
                                 {**_cluster(count=600_000, gpus_per_node=1)["node_groups"][0],
                                  "name": "h"}]}, "(top level)", "1,048,576 nodes"),
])
def test_a_cluster_file_beyond_a_limit_is_refused(data, field, limit, tmp_path):
    path = write(tmp_path / "c.json", data)
    line = refused(invoke("topo", "show", path), str(path), limit)
    assert field == "(top level)" or f": {field}:" in line, line


def test_a_cluster_at_the_limits_validates():
    ClusterSpec.model_validate(_cluster(count=2**20, gpus_per_node=1))
    ClusterSpec.model_validate(_cluster(gpus_per_node=1024, fabric="host", intra_bw_GBps=10))
    ClusterSpec.model_validate(_cluster(count=2**17, gpus_per_node=8))
    with pytest.raises(ValueError, match=LIMIT_WORDS):
        ClusterSpec.model_validate(_cluster(count=2**17 + 1, gpus_per_node=8))


def _hf(tmp_path: Path, name: str = "mixtral-8x7b-v0.1.json", **keys) -> Path:
    data = json.loads((HF / name).read_text()) | keys
    return write(tmp_path / "config.json", data)


@pytest.mark.parametrize("keys, field, limit", [
    ({"num_hidden_layers": 10**9}, "num_hidden_layers", "1,024 layers"),
    ({"hidden_size": 2**20}, "hidden_size", "131,072"),
    ({"num_local_experts": 5000}, "num_local_experts", "4,096 experts"),
    ({"vocab_size": 2**23}, "vocab_size", "4,194,304 tokens"),
    ({"intermediate_size": 2**21}, "intermediate_size", "1,048,576"),
    ({"num_attention_heads": 8192}, "num_attention_heads", "4,096 heads"),
])
def test_an_hf_config_beyond_a_limit_is_refused(keys, field, limit, tmp_path):
    path = _hf(tmp_path, **keys)
    refused(invoke("estimate", "--model", path), f"{path}: {field}:", limit)


def test_an_hf_config_at_the_layer_limit_loads(tmp_path):
    spec = load_model_file(_hf(tmp_path, num_hidden_layers=L.MODEL_LAYERS.maximum))
    assert spec.num_layers == L.MODEL_LAYERS.maximum


MODEL_YAML = ("num_layers: {layers}\nhidden_size: 256\nnum_heads: 4\nffn_hidden_size: 1024\n"
              "vocab_size: 1024\n")


@pytest.mark.parametrize("extra, field, limit", [
    ("", "num_layers", "1,024 layers"),
    ("moe: {num_experts: 5000, top_k: 2, expert_ffn_hidden: 64}\n", "moe.num_experts",
     "4,096 experts"),
    ("mla: {kv_lora_rank: 4194304, qk_nope_head_dim: 8, qk_rope_head_dim: 8, v_head_dim: 8}\n",
     "mla.kv_lora_rank", "1,048,576"),
])
def test_a_model_yaml_beyond_a_limit_is_refused(extra, field, limit, tmp_path):
    layers = 10**9 if field == "num_layers" else 2
    path = write(tmp_path / "m.yaml", MODEL_YAML.format(layers=layers) + extra)
    refused(invoke("estimate", "--model", path), f"{path}: {field}:", limit)


def _npy_header_only(path: Path, shape: tuple[int, ...]) -> Path:
    """An NPY file of ``shape`` float64 whose data is a hole (sparse): cheap at any shape."""
    with path.open("wb") as handle:
        np.lib.format.write_array_header_1_0(
            handle, {"descr": "<f8", "fortran_order": False, "shape": shape})
        handle.truncate(handle.tell() + 8 * int(np.prod(shape)))
    return path


@pytest.mark.parametrize("name, make, field, limit", [
    ("steps.npy", lambda p: _npy_header_only(p, (65_537, 1, 2)), "array: steps", "65,536 steps"),
    ("values.npy", lambda p: _npy_header_only(p, (5_000, 64, 64)),
     "array: steps x layers x experts", "16,777,216 values"),
    ("experts.json", lambda p: write(p, {"logical_count": [[1] * 4097]}), "logical_count: experts",
     "4,096 experts"),
    ("layers.csv", lambda p: write(p, "1,2\n" * 1025), "rows", "1,024 layers"),
    ("wide.csv", lambda p: write(p, ",".join(["1"] * 4097) + "\n"), "row 1: columns",
     "4,096 experts"),
])
def test_loads_beyond_a_limit_are_refused(name, make, field, limit, tmp_path):
    path = make(tmp_path / name)
    refused(invoke("experts", "plan", path, "--gpus", 2), f"{path}: {field}:", limit)


def test_a_robust_plan_refuses_a_trace_of_more_steps_than_scenarios(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, np.ones((1025, 1, 4)))
    refused(invoke("experts", "plan", path, "--gpus", 2, "--robust", "--dispatch", "static"),
            "steps (with --robust)", "1,024 scenarios")


@pytest.mark.parametrize("args", [
    lambda p: ["experts", "plan", p.with_suffix(".csv")],
    lambda p: ["experts", "plan", p.with_suffix(".json")],
    lambda p: ["topo", "show", p.with_suffix(".yaml")],
    lambda p: ["estimate", "--model", p.with_suffix(".json")],
    lambda p: ["estimate", "--model", p.with_suffix(".yaml")],
    lambda p: ["serve", "--lengths", p.with_suffix(".csv")],
])
def test_a_file_over_64_mib_is_refused_before_it_is_read(args, tmp_path):
    argv = args(tmp_path / "big")
    path = next(a for a in argv if isinstance(a, Path))
    with path.open("wb") as handle:  # sparse: nothing is written, nothing would parse
        handle.truncate(L.INPUT_FILE_BYTES.maximum + 1)
    refused(invoke(*argv), str(path), "64 MiB", "64.0 MiB")


def test_a_file_of_exactly_64_mib_passes_the_size_check(tmp_path):
    path = tmp_path / "x.csv"
    with path.open("wb") as handle:
        handle.truncate(L.INPUT_FILE_BYTES.maximum)
    L.check_file_size(path)
    with path.open("ab") as handle:
        handle.write(b"1")
    with pytest.raises(SpecError, match=LIMIT_WORDS):
        L.check_file_size(path)


def test_loads_whose_sum_overflows_give_one_line(tmp_path):
    path = tmp_path / "l.npy"
    np.save(path, np.full((1, 2, 4), 1e308))
    result = invoke("experts", "plan", path, "--gpus", 2)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {path}: array: expected loads whose sum is a finite number (below about "
        "1.8e308)"]


def test_request_lengths_beyond_the_sequence_limit_are_refused(tmp_path):
    path = write(tmp_path / "r.csv", "input_tokens,output_tokens\n100,20\n100000000,20\n")
    refused(invoke("serve", "--lengths", path), f"{path}: request 1: input_tokens",
            "16,777,216 tokens")


# --- experts plan: help and heatmap -----------------------------------------------------------


def test_experts_plan_help_keeps_its_brackets_plain_and_rich(monkeypatch):
    plain = invoke("experts", "plan", "--help")
    assert "[layers][experts]" in plain.stdout
    monkeypatch.setattr(app_module, "help_markup_mode", lambda: "rich")
    rich = runner.invoke(app, ["experts", "plan", "--help"], env={"COLUMNS": "200"})
    assert rich.exit_code == 0, rich.output
    assert "[layers][experts]" in rich.stdout and "[steps x layers x experts]" in rich.stdout


@pytest.mark.parametrize("name", ["heat.txt", "heat", "heat.svg", "heat.PNG.bak"])
def test_a_heatmap_of_another_format_is_refused_before_any_output(name, tmp_path):
    out = tmp_path / "p.json"
    result = invoke("experts", "plan", "--out", out, "--heatmap", tmp_path / name)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert re.match(r"error: --heatmap: expected a file ending in \.png", line), line
    assert list(tmp_path.iterdir()) == []
