"""One error path for everything a file or option can do wrong (issue 21).

Each input that used to end in a traceback (OverflowError, TypeError, RecursionError,
``_csv.Error``, RuntimeError, a segfault in libyaml, ...) now exits 2 with one ``error:``
line naming the file and what was expected. An unexpected internal error prints one line
with a bug-report hint and exits 1; ``planner --debug`` (or ``PLANNER_DEBUG=1``) shows its
traceback instead.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import planner.cli.app as app_module
from planner.cli.app import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
HUGE = 10**400
LOADS = {"logical_count": [[5, 1, 0, 3], [2, 2, 9, 1]]}
MODEL_YAML = ("num_layers: {layers}\nhidden_size: 256\nnum_heads: 4\nffn_hidden_size: 1024\n"
              "vocab_size: 1024\n")
HF_LLAMA = ROOT / "tests" / "fixtures" / "hf_configs" / "llama-3.1-8b.json"
SMALL_SOLVE = ["solve", "--model", "llama-3.1-8b", "--gpu", "H100", "--nodes", "1",
               "--gpus-per-node", "4", "--global-batch", "8", "--seq-len", "1024", "--top-k", "1"]


def invoke(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "100", **(env or {})})


def one_error_line(result, exit_code: int = 2) -> str:
    """The contract: the exit code, one ``error:`` line on stderr, no traceback."""
    assert result.exit_code == exit_code, (result.output, result.exception)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert len(lines[0]) < 1000, lines[0]
    return lines[0]


def write(path: Path, data) -> Path:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.fixture(scope="module")
def plan_doc(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    result = invoke(*SMALL_SOLVE, "--out", out)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def placement(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("placement")
    out = folder / "placement.json"
    result = invoke("experts", "plan", write(folder / "loads.json", LOADS), "--gpus", "2",
                    "--gpus-per-node", "1", "--out", out)
    assert result.exit_code == 0, result.output
    return out


# --- numbers that overflow a C long or a float ------------------------------------------------


def test_loads_with_a_400_digit_count(tmp_path):
    loads = write(tmp_path / "l.json", {"logical_count": [[HUGE, 1], [2, 3]]})
    line = one_error_line(invoke("experts", "plan", loads, "--gpus", "2"))
    assert "l.json: logical_count.0.0: expected a whole number of at most 2**63 - 1" in line
    assert "about 400 digits" in line


def test_a_number_of_5000_digits_is_refused_by_every_parser(tmp_path):
    digits = "9" * 5000
    loads = write(tmp_path / "l.json", '{"logical_count": [[%s, 1], [2, 3]]}' % digits)
    assert "numbers of at most" in one_error_line(invoke("experts", "plan", loads))
    model = write(tmp_path / "m.yaml", MODEL_YAML.format(layers=digits))
    assert "numbers of at most" in one_error_line(invoke("estimate", "--model", model))


@pytest.mark.parametrize("kind", ["yaml", "hf"])
def test_model_file_with_a_400_digit_integer(tmp_path, kind):
    if kind == "yaml":
        model = write(tmp_path / "m.yaml", MODEL_YAML.format(layers=HUGE))
    else:
        model = write(tmp_path / "m.json", {**json.loads(HF_LLAMA.read_text()),
                                            "num_hidden_layers": HUGE})
    line = one_error_line(invoke("estimate", "--model", model))
    assert "expected a whole number of at most 2**63 - 1" in line


@pytest.mark.parametrize("path, value", [
    (("pools", 0, "ranks", "exceptions"), [[0, HUGE, 1]]),
    (("training", "micro_batches"), HUGE),
    (("pools", 0, "ranks", "exceptions"), [[float("inf"), 0, 1]]),
    (("pools", 0, "nodes", 0, "first_rank"), float("nan")),
])
@pytest.mark.parametrize("command", ["compare", "explain", "emit"])
def test_plan_with_a_huge_or_infinite_number(tmp_path, plan_doc, path, value, command):
    doc = copy.deepcopy(plan_doc)
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    plan = write(tmp_path / "p.json", json.dumps(doc))
    args = {"compare": ["compare", plan, plan], "explain": ["explain", plan],
            "emit": ["emit", "megatron", plan, "--out-dir", tmp_path / "launch"]}[command]
    assert "p.json" in one_error_line(invoke(*args))
    assert not (tmp_path / "launch").exists()


@pytest.mark.parametrize("value", ["inf", "1e300", "nan", "101"])
def test_locality_slack_out_of_range(value):
    line = one_error_line(invoke("experts", "plan", "--dispatch", "static",
                                 "--locality-slack", value))
    assert "--locality-slack" in line


# --- wrong types, recursion, parser limits ----------------------------------------------------


def test_unhashable_model_type(tmp_path):
    model = write(tmp_path / "m.json", {"model_type": {"v": "llama"}})
    assert "model_type: expected one of llama" in one_error_line(invoke("estimate", "--model", model))


DEEP_DOCUMENTS = {
    "deep.json": "[" * 100_000 + "]" * 100_000,
    "deep.yaml": "a: " + "[" * 100_000 + "]" * 100_000,
    "deep2.yaml": "a: " + "{a: " * 5_000 + "1" + "}" * 5_000,
    "dash.yaml": "a:\n  " + "- " * 100_000 + "1\n",  # crashed libyaml (a segfault)
    "indent.yaml": "".join(" " * i + f"k{i}:\n" for i in range(0, 600, 2)) + " " * 600 + "v\n",
    "json101.json": json.dumps({"a": json.loads("[" * 101 + "]" * 101)}),
}
READERS_OF = {"model": ("json", "yaml"), "cluster": ("json", "yaml"), "loads": ("json",),
              "plan": ("json",)}  # loads files are JSON, CSV or NPY; plans JSON


@pytest.mark.parametrize("command, name", [(c, n) for c, kinds in READERS_OF.items()
                                           for n in DEEP_DOCUMENTS if n.endswith(kinds)])
def test_deeply_nested_documents(tmp_path, command, name):
    path = write(tmp_path / name, DEEP_DOCUMENTS[name])
    args = {"model": ["estimate", "--model", path], "cluster": ["topo", "show", path],
            "loads": ["experts", "plan", path], "plan": ["explain", path]}[command]
    assert "nested at most 100 levels deep" in one_error_line(invoke(*args))


@pytest.mark.parametrize("text, expected", [
    ("a: &a [*a]\n", "contains itself"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
        for i in range(8)), "YAML aliases that expand to at most"),
    ("when: 2023-02-30\n", "values the parser can convert"),
])
def test_yaml_alias_bombs_and_bad_values(tmp_path, text, expected):
    path = write(tmp_path / "c.yaml", text)
    assert expected in one_error_line(invoke("topo", "show", path))
    assert expected in one_error_line(invoke("estimate", "--model", path))


def test_csv_field_over_the_csv_limit(tmp_path):
    loads = write(tmp_path / "l.csv", "1," + "1" * 200_000 + "\n1,2\n")
    assert "field larger than field limit" in one_error_line(invoke("experts", "plan", loads))


@pytest.mark.parametrize("header", [b"'<f9999999999999999999999'", b"'<f8', 'shape': (2**70, 2)"])
def test_npy_with_a_broken_header(tmp_path, header):
    import io
    buffer = io.BytesIO()
    np.save(buffer, np.ones((3, 4)))
    data = buffer.getvalue().replace(b"'<f8'", header, 1)
    loads = write(tmp_path / "l.npy", data)
    assert "expected a numeric NPY array" in one_error_line(invoke("experts", "plan", loads))


def test_home_of_an_unknown_user():
    line = one_error_line(invoke("estimate", "--model", "~no-such-user-here/x.yaml"))
    assert "--model: expected a path whose ~user has a home directory" in line


def test_long_values_are_cut_in_the_message(tmp_path):
    model = write(tmp_path / "m.yaml", MODEL_YAML.format(layers="a" * 100_000))
    assert len(one_error_line(invoke("estimate", "--model", model))) < 600


# --- documents that pass their validator but break the code that uses them ---------------------


@pytest.mark.parametrize("path, value", [
    (("prediction", "config"), "x"),
    (("prediction", "stage_memory"), 3),
    (("training", "stages", 0), []),
])
def test_plan_malformed_beyond_its_validator(tmp_path, plan_doc, path, value):
    doc = copy.deepcopy(plan_doc)
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    plan = write(tmp_path / "p.json", doc)
    good = write(tmp_path / "good.json", plan_doc)
    for args in (["explain", plan], ["compare", plan, good]):
        result = invoke(*args)
        assert "p.json: expected a plan written by" in one_error_line(result)
        assert result.stdout == ""  # no half report before the error
    result = invoke("emit", "torchtitan", plan, "--out-dir", tmp_path / "launch")
    if result.exit_code:  # emit reads less of the plan: some of these it can still use
        assert "p.json" in one_error_line(result)
        assert not (tmp_path / "launch").exists()


@pytest.mark.parametrize("key", ["num_layers", "gpus_per_node"])
def test_placement_without_a_key_eval_needs(tmp_path, placement, key):
    doc = json.loads(placement.read_text())
    del doc[key]
    bad = write(tmp_path / "p.json", doc)
    loads = write(tmp_path / "l.json", LOADS)
    assert "p.json" in one_error_line(invoke("experts", "eval", bad, loads))


def test_placement_with_a_wrong_type_deep_inside(tmp_path, placement):
    doc = json.loads(placement.read_text())
    doc["logical_to_physical"][0][0] = 1.5
    bad = write(tmp_path / "p.json", doc)
    loads = write(tmp_path / "l.json", LOADS)
    assert "p.json" in one_error_line(invoke("experts", "eval", bad, loads))


# --- internal errors ----------------------------------------------------------------------------


def _boom(*_args, **_kwargs):
    raise ZeroDivisionError("division by zero")


def test_an_internal_error_is_one_line_and_exit_1(monkeypatch):
    monkeypatch.setattr(app_module, "resolve_cluster", _boom)
    line = one_error_line(invoke("topo", "show", "dgx-h100-8"), exit_code=1)
    assert line == ("error: internal error: ZeroDivisionError: division by zero — please report "
                    "it (rerun with --debug for the traceback)")


@pytest.mark.parametrize("how", [["--debug"], "env"])
def test_debug_lets_the_internal_error_through(monkeypatch, how):
    monkeypatch.setattr(app_module, "resolve_cluster", _boom)
    args = [*(how if how != "env" else []), "topo", "show", "dgx-h100-8"]
    result = invoke(*args, env={"PLANNER_DEBUG": "1"} if how == "env" else None)
    assert result.exit_code == 1 and isinstance(result.exception, ZeroDivisionError)


@pytest.mark.parametrize("debug", [False, True])
def test_internal_error_in_the_console_script(debug):
    """The real process: one line without --debug; the traceback with it."""
    argv = ["planner", *(["--debug"] if debug else []), "topo", "show", "dgx-h100-8"]
    code = ("import sys; import planner.cli.app as a\n"
            "def boom(*x, **k): raise ZeroDivisionError('division by zero')\n"
            "a.resolve_cluster = boom\n"
            f"sys.argv = {argv!r}\n"
            "a.main()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "100"}, timeout=120)
    assert proc.returncode == 1
    if debug:
        assert "ZeroDivisionError" in proc.stderr and len(proc.stderr.splitlines()) > 3
    else:
        assert proc.stderr.strip().splitlines() == [
            "error: internal error: ZeroDivisionError: division by zero — please report it "
            "(rerun with --debug for the traceback)"]


@pytest.mark.parametrize("fmt", ["slurm", "astra-sim", "auto"])
@pytest.mark.parametrize("text", [DEEP_DOCUMENTS["deep.yaml"], DEEP_DOCUMENTS["dash.yaml"]])
def test_topology_import_of_deeply_nested_yaml(tmp_path, fmt, text):
    """``topo import`` parses YAML with libyaml, whose composer crashed the process here."""
    path = write(tmp_path / "topo.yaml", text)
    line = one_error_line(invoke("topo", "import", path, "--format", fmt))
    assert "nested at most 100 levels deep" in line


def test_a_format_that_cannot_express_the_plan_says_so_not_malformed(tmp_path):
    """torchtitan has no fp16: a correct fp16 plan gets the format's own one-line refusal
    (which format to use instead), not "malformed ... please report it", and no files."""
    plan = tmp_path / "fp16.json"
    result = invoke("solve", "--model", "llama-3.1-8b", "--gpu", "V100", "--nodes", "1",
                    "--precision", "fp16", "--top-k", "1", "--out", plan)
    assert result.exit_code == 0, result.output
    line = one_error_line(invoke("emit", "torchtitan", plan, "--out-dir", tmp_path / "launch"))
    assert line.startswith("error: torchtitan: fp16 is not offered")
    assert "megatron" in line and "malformed" not in line and "report" not in line
    assert not (tmp_path / "launch").exists()


def test_compare_needs_two_distinct_plan_files(tmp_path, plan_doc):
    plan = write(tmp_path / "p.json", plan_doc)
    other = write(tmp_path / "q.json", plan_doc)  # the same plan in another file: fine
    assert "two or more plan files" in one_error_line(invoke("compare", plan))
    line = one_error_line(invoke("compare", plan, tmp_path / "." / "p.json"))
    assert "distinct plan files" in line and "the same file" in line
    assert invoke("compare", plan, other).exit_code == 0


@pytest.mark.parametrize("key, value", [("step_time_s", "fast"), ("mfu", True),
                                        ("tokens_per_s_per_gpu", None)])
def test_a_training_prediction_of_the_wrong_type_is_an_invalid_plan(tmp_path, plan_doc, key,
                                                                    value):
    """explain, compare and emit refuse it naming the key (explain and compare had failed
    inside their reports, emit had written launch files for it)."""
    _refused_with_its_key(tmp_path, plan_doc, write(tmp_path / "good.json", plan_doc), key,
                          value, "torchrun")


def _refused_with_its_key(tmp_path, doc, good, key, value, fmt) -> None:
    """``doc`` with ``prediction[key] = value``: explain, compare (beside ``good``) and emit
    ``fmt`` each refuse it in one line naming the key, and emit writes nothing."""
    bad = copy.deepcopy(doc)
    bad["prediction"][key] = value
    plan = write(tmp_path / "p.json", bad)
    for args in (["explain", plan], ["compare", plan, good],
                 ["emit", fmt, plan, "--out-dir", tmp_path / "launch"]):
        line = one_error_line(invoke(*args))
        assert "p.json: invalid plan" in line and key in line
    assert not (tmp_path / "launch").exists()


def test_a_serving_prediction_of_the_wrong_type_is_an_invalid_plan(tmp_path):
    out = tmp_path / "s.json"
    assert invoke("serve", "--model", "llama-3.1-8b", "--gpu", "H100", "--nodes", "1",
                  "--out", out).exit_code == 0
    doc = json.loads(out.read_text())
    for key, value in (("tpot_s", "fast"), ("output_tokens_per_s_per_gpu", True),
                       ("meets_slo", 1)):
        _refused_with_its_key(tmp_path, doc, out, key, value, "sglang")
