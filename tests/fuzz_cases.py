"""Malformed and edge-case input files for planner's readers, as hypothesis strategies, and how
to run one through the command line. Shared by the bounded CI test (``tests/test_fuzz_inputs.py``)
and the long campaign (``benchmarks/fuzz_inputs.py``).

A case is a reader (``cluster``, ``model``, ``loads``, ``placement``, ``plan``, ``options``),
the files it writes and the command that reads them:

* ``cluster``: ``planner topo show FILE`` (YAML or JSON cluster spec);
* ``model``: ``planner estimate --model FILE`` (our model schema in YAML/JSON, or an HF config.json);
* ``loads``: ``planner experts plan FILE ... --out --sglang`` or ``planner experts eval PLACEMENT
  FILE`` (SGLang JSON, CSV or NPY);
* ``placement``: ``planner experts eval FILE LOADS``;
* ``plan``: ``planner explain FILE``, ``planner compare FILE SEED`` or ``planner emit FMT FILE
  --out-dir DIR``;
* ``options``: ``planner solve``, ``estimate``, ``topo show``, ``serve``, ``experts synth`` and
  ``experts plan`` with one to four options set to drawn values (overflowing, non-numeric, at
  and beyond the input limits, unknown GPU and model names).

Documents are valid seeds with one to three mutations at any depth (wrong types, integers of
hundreds of digits, inf/nan, nesting thousands deep, long strings, long lists, keys removed or
added), or their text damaged (truncated, bytes inserted, 5,000-digit numbers, NUL bytes), or
YAML alias bombs, or arbitrary bytes. Values stay below the sizes the input limits of issue 21
are about (node counts, layers, GPUs): huge numbers here are beyond a C long, where the readers
must refuse them, not merely large.
"""
from __future__ import annotations

import copy
import functools
import io
import json
import math
import os
import re
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unittest import mock

import numpy as np
import typer.main
import yaml
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
READERS = ("cluster", "model", "loads", "placement", "plan", "options")
CLEAN_EXIT_CODES = (0, 2, 3)  # done, bad input, infeasible

CLUSTER_SEED = {
    "description": "two test nodes",
    "node_groups": [{"name": "g", "count": 2, "gpu": "H100", "gpus_per_node": 8,
                     "fabric": "nvswitch", "nics": [{"count": 8, "gbps": 400, "transport": "ib"}]}],
    "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 32}]},
}
LOADS_SEED = {"logical_count": [[5, 1, 0, 3], [2, 2, 9, 1], [0, 0, 0, 0]]}
LOADS_SHAPE = ["--gpus", "2", "--gpus-per-node", "1"]
PLAN_SHAPE = ["--model", "llama-3.1-8b", "--gpu", "H100", "--nodes", "1", "--gpus-per-node", "4",
              "--global-batch", "8", "--seq-len", "1024", "--top-k", "1"]
EMIT_FORMATS = ("torchrun", "slurm", "kubeflow", "megatron", "deepspeed", "torchtitan")

# YAML that parses into something no reader should walk: self-containing, or a 'billion laughs'.
YAML_BOMBS = (
    "a: &a [*a]\n",
    "&a {x: *a}\n",
    "a: &a ['x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x']\n"
    + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
              for i in range(8)),
    "name: !!python/object/apply:os.system ['true']\n",
    "x: !!binary AAAA\n",
    "? [1, 2]\n: 3\n",
    "1" * 5000 + ": 2\n",
    "x: " + "9" * 5000 + "\n",
    "a:\n  " + "- " * 100_000 + "1\n",  # compact nesting: libyaml's composer would overflow the C stack
    "".join(" " * i + f"k{i}:\n" for i in range(0, 600, 2)) + " " * 600 + "v\n",
)


# --- seeds -----------------------------------------------------------------------------------


def _model_seeds() -> list[tuple[str, Any]]:
    hf = [json.loads((FIXTURES / "hf_configs" / name).read_text())
          for name in ("llama-3.1-8b.json", "mixtral-8x7b-v0.1.json", "deepseek-v3.json")]
    ours = yaml.safe_load((FIXTURES / "tiny-moe.yaml").read_text())
    return [("yaml", ours), ("json", ours)] + [("json", doc) for doc in hf]


MODEL_SEEDS = _model_seeds()


@functools.lru_cache(maxsize=1)
def _command() -> Any:
    """The click command of the app, built once: typer's CliRunner rebuilds it from the
    function signatures on every call (about 0.1 s, most of a fuzz run's time)."""
    return typer.main.get_command(app)


def _run(args: list[str]):
    with mock.patch("typer.testing._get_command", lambda _: _command()):
        return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "100"})


@functools.lru_cache(maxsize=1)
def generated_seeds() -> dict[str, Any]:
    """A small training plan (1 node of 4 H100) and an expert placement of ``LOADS_SEED``,
    made once per process by the commands themselves."""
    folder = Path(tempfile.mkdtemp(prefix="planner-fuzz-seeds-"))
    plan, placement, loads = folder / "plan.json", folder / "placement.json", folder / "loads.json"
    loads.write_text(json.dumps(LOADS_SEED))
    for args in (["solve", *PLAN_SHAPE, "--out", plan, "--format", "json"],
                 ["experts", "plan", loads, *LOADS_SHAPE, "--out", placement, "--format", "json"]):
        result = _run(args)
        assert result.exit_code == 0, result.output
    return {"plan": json.loads(plan.read_text()), "placement": json.loads(placement.read_text()),
            "plan_path": plan, "placement_path": placement, "loads_path": loads}


# --- values and mutations --------------------------------------------------------------------


@dataclass(frozen=True)
class Deep:
    """A list nested ``depth`` levels deep (written as text: no serializer recurses that far)."""

    depth: int


DELETE = object()

HUGE_INTS = st.integers(19, 400).flatmap(
    lambda k: st.sampled_from([10**k, -(10**k), 10**k - 1])) | st.sampled_from(
    [2**63, -(2**63) - 1, 2**64, 2**127])
SPECIAL_FLOATS = st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324, -0.0,
                                  0.5, 1.5, 1e19, 1e300, -1.0])
WRONG_TYPES = st.sampled_from([None, True, False, "", "x", "llama", "H100", "1", "-1", "1e400",
                               [], {}, [1, 2], {"v": "llama"}, [[1]], [None], {"": None}])
SMALL_INTS = st.integers(-3, 64)
LONG_STRINGS = st.integers(1_000, 200_000).map(lambda n: "a" * n) | st.just("\x00\u202e\ud7ff")
LONG_LISTS = st.integers(100, 5_000).flatmap(
    lambda n: st.sampled_from([[1] * n, [True] * n, ["x"] * n, [[0, 1]] * n]))
DEEP = st.integers(20, 3_000).map(Deep)

BAD_VALUES = st.one_of(WRONG_TYPES, HUGE_INTS, SPECIAL_FLOATS, SMALL_INTS, LONG_STRINGS,
                       LONG_LISTS, DEEP)
# Large but representable counts (a billion layers, 2**31 nodes): what the input limits of
# issue 21 are for. Left out by default (runs that hang or eat memory until those limits
# exist); ``benchmarks/fuzz_inputs.py --probe-limits`` adds them.
LIMIT_VALUES = st.sampled_from([2**20, 10**6, 10**9, 2**31, 2**40, 2**62, 2**63 - 1, 1e18])
PROBE_LIMITS = False


def paths_of(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into ``doc`` (containers included, the root as ``()``)."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += paths_of(value, prefix + (key,))
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:8]):  # the first entries of long lists are enough
            out += paths_of(value, prefix + (i,))
    return out


def _apply(doc: Any, path: tuple, op: str, value: Any) -> Any:
    """``doc`` with ``value`` set at ``path`` (``op`` "set"), the entry removed ("del") or an
    unknown key added next to it ("add"); paths gone after earlier mutations are skipped."""
    if not path:
        return value if op == "set" else doc
    parent = doc
    for part in path[:-1]:
        try:
            parent = parent[part]
        except (KeyError, IndexError, TypeError):
            return doc
    last = path[-1]
    if isinstance(parent, dict) or (isinstance(parent, list) and isinstance(last, int)
                                    and last < len(parent)):
        if op == "set":
            parent[last] = value
        elif op == "del":
            parent.pop(last, None) if isinstance(parent, dict) else parent.pop(last)
        elif isinstance(parent, dict):
            parent[f"unknown_{last}"] = value
    return doc


@st.composite
def mutated(draw: Any, seed: Any) -> Any:
    """``seed`` with one to three mutations at paths drawn from it."""
    doc = copy.deepcopy(seed)
    paths = paths_of(seed)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["set", "set", "set", "del", "add"]))
        doc = _apply(doc, path, op, draw(BAD_VALUES | LIMIT_VALUES if PROBE_LIMITS else BAD_VALUES))
    return doc


_DEEP_MARK = re.compile(r"""["']?DEEP_SENTINEL_(\d+)["']?""")


def _mark_deep(doc: Any) -> Any:
    if isinstance(doc, Deep):
        return f"DEEP_SENTINEL_{doc.depth}"
    if isinstance(doc, dict):
        return {k: _mark_deep(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_mark_deep(v) for v in doc]
    return doc


def serialize(doc: Any, fmt: str) -> bytes:
    """``doc`` as JSON (NaN and Infinity as Python writes them) or block YAML."""
    marked = _mark_deep(doc)
    text = json.dumps(marked) if fmt == "json" else yaml.safe_dump(marked, sort_keys=False)
    text = _DEEP_MARK.sub(lambda m: "[" * int(m.group(1)) + "1" + "]" * int(m.group(1)), text)
    return text.encode("utf-8")


@st.composite
def damaged(draw: Any, text: bytes) -> bytes:
    """``text`` with its bytes damaged: cut short, bytes inserted, a number made 5,000 digits
    long, a NUL or a byte-order mark in front, or replaced by arbitrary bytes."""
    kind = draw(st.sampled_from(["cut", "insert", "long_number", "prefix", "bytes"]))
    at = draw(st.integers(0, len(text)))
    if kind == "cut":
        return text[:at]
    if kind == "insert":
        return text[:at] + draw(st.binary(min_size=1, max_size=16)) + text[at:]
    if kind == "long_number":
        digits = draw(st.sampled_from([400, 4_300, 5_000]))
        return re.sub(rb"\d+", b"9" * digits, text, count=draw(st.integers(1, 3)))
    if kind == "prefix":
        return draw(st.sampled_from([b"\x00", b"\xef\xbb\xbf", b"\xff\xfe", b"---\n", b"%YAML 1.1\n"])) + text
    return draw(st.binary(max_size=300))


@st.composite
def document(draw: Any, seed: Any, fmt: str) -> bytes:
    """A damaged version of ``seed`` written as ``fmt``."""
    how = draw(st.sampled_from(["mutate", "mutate", "mutate", "damage", "bomb"]))
    if how == "damage":
        return draw(damaged(serialize(seed, fmt)))
    if how == "bomb":
        return draw(st.sampled_from(YAML_BOMBS)).encode() if fmt == "yaml" else \
            serialize(Deep(draw(st.integers(900, 200_000))), "json")
    return serialize(draw(mutated(seed)), fmt)


# --- cases -----------------------------------------------------------------------------------


@dataclass
class Case:
    """Files to write into a fresh folder, then the command (``{dir}`` is that folder)."""

    reader: str
    files: dict[str, bytes]
    args: list[str]
    outputs: list[str] = field(default_factory=list)  # paths the command may write

    def describe(self) -> str:
        sizes = {name: len(data) for name, data in self.files.items()}
        return f"{self.reader}: planner {' '.join(self.args)} (files {sizes})"


@st.composite
def cluster_cases(draw: Any) -> Case:
    fmt = draw(st.sampled_from(["yaml", "json"]))
    return Case("cluster", {f"cluster.{fmt}": draw(document(CLUSTER_SEED, fmt))},
                ["topo", "show", f"{{dir}}/cluster.{fmt}"])


@st.composite
def model_cases(draw: Any) -> Case:
    fmt, seed = draw(st.sampled_from(MODEL_SEEDS))
    return Case("model", {f"model.{fmt}": draw(document(seed, fmt))},
                ["estimate", "--model", f"{{dir}}/model.{fmt}", "--format", "json"])


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


@st.composite
def npy_bytes(draw: Any) -> bytes:
    """NPY files: odd shapes and dtypes, pickled objects, a header that lies about the shape."""
    kind = draw(st.sampled_from(["array", "dtype", "header", "damage"]))
    if kind == "array":
        shape = tuple(draw(st.lists(st.integers(0, 6), min_size=0, max_size=4)))
        fill = draw(st.sampled_from([1.0, 0.0, -1.0, math.inf, math.nan, 1e308]))
        return _npy(np.full(shape, fill))
    if kind == "dtype":
        return _npy(draw(st.sampled_from([
            np.array([["a", "b"], ["c", "d"]]), np.array([[1 + 2j, 3], [4, 5]]),
            np.array([[True, False], [False, True]]), np.array([[None, 1], [2, 3]], dtype=object),
            np.zeros((2, 3), dtype=[("x", "f8"), ("y", "i4")]), np.array(3.0),
            np.array([[2**62, 1], [1, 1]], dtype=np.int64), np.array([[1, 2], [3, 4]], np.uint64)])))
    valid = _npy(np.ones((3, 4)))
    if kind == "header":
        shape = draw(st.sampled_from(["(1000000000000,)", "(2**70, 2)", "(-1, 4)", "(3, 4, 5, 6)",
                                      "()", "'x'"]))
        return valid.replace(b"(3, 4)", shape.encode(), 1)
    return draw(damaged(valid))


@st.composite
def csv_bytes(draw: Any) -> bytes:
    rows = draw(mutated(LOADS_SEED["logical_count"]))
    if not isinstance(rows, list):
        rows = [[rows]]
    lines = [",".join(str(_mark_deep(v)) for v in (row if isinstance(row, list) else [row]))
             for row in rows]
    text = ("expert_a,expert_b,expert_c,expert_d\n" if draw(st.booleans()) else "") + "\n".join(lines)
    special = draw(st.sampled_from(["", "1," + "1" * 200_000 + "\n", '"unclosed,1\n', "nan,inf,1e400,-0\n",
                                    "\x00,1\n", "1;2;3;4\n"]))
    return (text + "\n" + special).encode("utf-8", "surrogatepass")


@st.composite
def loads_cases(draw: Any) -> Case:
    fmt = draw(st.sampled_from(["json", "json", "csv", "npy"]))
    data = {"json": lambda: draw(document(LOADS_SEED, "json")), "csv": lambda: draw(csv_bytes()),
            "npy": lambda: draw(npy_bytes())}[fmt]()
    name = f"loads.{fmt}"
    if draw(st.booleans()):
        return Case("loads", {name: data}, ["experts", "eval", str(generated_seeds()["placement_path"]),
                                            f"{{dir}}/{name}", "--format", "json"])
    dispatch = draw(st.sampled_from(["even", "static", "sglang"]))
    return Case("loads", {name: data},
                ["experts", "plan", f"{{dir}}/{name}", *LOADS_SHAPE, "--dispatch", dispatch,
                 "--format", "json", "--out", "{dir}/out/placement.json",
                 "--sglang", "{dir}/out/sglang.json"], outputs=["out"])


@st.composite
def placement_cases(draw: Any) -> Case:
    return Case("placement", {"placement.json": draw(document(generated_seeds()["placement"], "json"))},
                ["experts", "eval", "{dir}/placement.json", str(generated_seeds()["loads_path"]),
                 "--format", "json"])


@st.composite
def plan_cases(draw: Any) -> Case:
    files = {"plan.json": draw(document(generated_seeds()["plan"], "json"))}
    command = draw(st.sampled_from(["explain", "compare", "emit"]))
    if command == "explain":
        return Case("plan", files, ["explain", "{dir}/plan.json", "--max-microbatches", "4"])
    if command == "compare":
        return Case("plan", files, ["compare", "{dir}/plan.json", str(generated_seeds()["plan_path"])])
    return Case("plan", files, ["emit", draw(st.sampled_from(EMIT_FORMATS)), "{dir}/plan.json",
                                "--out-dir", "{dir}/launch"], outputs=["launch"])


# Command-line options: numbers that overflow, are not numbers, sit at and beyond the input
# limits (docs/limits.md), and names that do not exist.
OPTION_TEXT = st.sampled_from([
    "0", "-1", "1", "2", "3", "7", "8", "64", "1048577", "2147483648", "1" + "0" * 30,
    "9" * 5000, "inf", "-inf", "nan", "1e308", "1.5", "-0", "", " ", "abc", "1_000", "0x10",
    "\x00", "~nouser/x", "a" * 10_000])
OPTION_LIMITS = st.sampled_from(["1024", "16384", "131072", "1048576", "65536", "4096"])
OPTION_NUMBERS = st.integers(1, 16).map(str) | OPTION_TEXT
GPU_NAMES = st.sampled_from(["H100", "A100", "H800", "B200", "GB200", "V100", "MI300X", "L40S",
                             "H20", "nope", ""])
MODEL_NAMES = st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "deepseek-v3",
                               "qwen3-30b-a3b", "nope", ""])
COMMON_CLUSTER = {"--gpu": GPU_NAMES, "--nodes": OPTION_NUMBERS,
                  "--gpus-per-node": OPTION_NUMBERS}
TRAINING = {**COMMON_CLUSTER, "--model": MODEL_NAMES, "--global-batch": OPTION_NUMBERS,
            "--seq-len": OPTION_NUMBERS, "--tp": OPTION_NUMBERS, "--pp": OPTION_NUMBERS,
            "--cp": OPTION_NUMBERS, "--ep": OPTION_NUMBERS, "--micro-batch": OPTION_NUMBERS,
            "--precision": st.sampled_from(["bf16", "fp8", "fp32", "fp16", "x"])}
# command -> (fixed arguments, options to draw from, outputs it may write)
OPTION_COMMANDS: dict[str, tuple[list[str], dict[str, Any], list[str]]] = {
    "solve": (["solve", "--format", "json", "--out", "{dir}/out/plan.json"],
              {**TRAINING, "--top-k": OPTION_NUMBERS, "--objective": st.sampled_from(
                  ["throughput", "min-gpus"]), "--target-tokens-per-s": OPTION_TEXT,
               "--out-dir": st.just("{dir}/out/plans")}, ["out"]),
    "estimate": (["estimate", "--format", "json"],
                 {**TRAINING, "--dp": OPTION_NUMBERS, "--etp": OPTION_NUMBERS,
                  "--vpp": OPTION_NUMBERS, "--zero": OPTION_NUMBERS,
                  "--recompute-layers": OPTION_NUMBERS, "--seq-slices": OPTION_NUMBERS}, []),
    "topo": (["topo", "show"], COMMON_CLUSTER, []),
    "serve": (["serve", "--format", "json", "--out", "{dir}/out/serve.json"],
              {**COMMON_CLUSTER, "--model": MODEL_NAMES, "--isl": OPTION_NUMBERS,
               "--osl": OPTION_NUMBERS, "--ttft-ms": OPTION_TEXT, "--tpot-ms": OPTION_TEXT,
               "--rate": OPTION_TEXT, "--concurrency": OPTION_NUMBERS, "--mtp": OPTION_NUMBERS,
               "--top-k": OPTION_NUMBERS, "--moe-imbalance": OPTION_TEXT,
               "--prefix-hit": OPTION_TEXT}, ["out"]),
    "synth": (["experts", "synth", "--out", "{dir}/out/trace.npy"],
              {"--layers": OPTION_NUMBERS, "--experts": OPTION_NUMBERS,
               "--steps": OPTION_NUMBERS, "--tokens-per-step": OPTION_NUMBERS,
               "--top-k": OPTION_NUMBERS, "--zipf": OPTION_TEXT,
               "--drift-every": OPTION_NUMBERS, "--seed": OPTION_NUMBERS}, ["out"]),
    "experts": (["experts", "plan", "{loads}", "--format", "json",
                 "--out", "{dir}/out/placement.json"],
                {"--gpus": OPTION_NUMBERS, "--gpus-per-node": OPTION_NUMBERS,
                 "--slots-per-gpu": OPTION_NUMBERS, "--locality-slack": OPTION_TEXT,
                 "--scenarios": OPTION_NUMBERS, "--drift": OPTION_TEXT,
                 "--expert-mb": OPTION_TEXT, "--heatmap": st.sampled_from(
                     ["{dir}/out/h.png", "{dir}/out/h.txt", "/proc/nope/h.png"])}, ["out"]),
}


@st.composite
def option_cases(draw: Any) -> Case:
    """One command with one to four of its options set to a drawn value (with
    ``--probe-limits``, also large valid counts: inside the limits every command must end)."""
    fixed, options, outputs = OPTION_COMMANDS[draw(st.sampled_from(sorted(OPTION_COMMANDS)))]
    names = draw(st.lists(st.sampled_from(sorted(options)), min_size=1, max_size=4,
                          unique=True))
    args = [a.replace("{loads}", str(generated_seeds()["loads_path"])) for a in fixed]
    for name in names:
        values = options[name]
        if PROBE_LIMITS and values is OPTION_NUMBERS:
            values = values | OPTION_LIMITS
        args += [name, draw(values)]
    return Case("options", {}, args, outputs=outputs)


CASES = {"cluster": cluster_cases, "model": model_cases, "loads": loads_cases,
         "placement": placement_cases, "plan": plan_cases, "options": option_cases}


# --- running a case --------------------------------------------------------------------------


class TooSlow(BaseException):
    """Raised by the alarm in a run over its time limit (a BaseException: no handler of
    planner's may swallow it)."""


@dataclass
class Outcome:
    exit_code: int | None  # None: over the time limit
    output: str
    traceback: bool
    partial: list[str]
    seconds: float

    @property
    def clean(self) -> bool:
        return (self.exit_code in CLEAN_EXIT_CODES and not self.traceback and not self.partial
                and (self.exit_code == 0 or self.output.strip().count("\n") == 0))


def run_case(case: Case, folder: Path, time_limit_s: float = 60.0) -> Outcome:
    """Write the case's files into ``folder`` and run its command in this process under a
    SIGALRM time limit. ``partial``: files left under the case's outputs by a failed run, and
    temporary files left by any run."""
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    args = [a.replace("{dir}", str(folder)) for a in case.args]

    def on_alarm(*_: Any) -> None:
        raise TooSlow

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, time_limit_s)
    start = time.perf_counter()
    try:
        result = _run(args)
    except TooSlow:
        return Outcome(None, "", False, [], time.perf_counter() - start)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    seconds = time.perf_counter() - start
    output = result.stdout + result.stderr
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    partial = [str(p.relative_to(folder)) for p in folder.rglob(".*.tmp")]  # staged, left
    if result.exit_code != 0:
        for out in case.outputs:
            root = folder / out
            if root.exists():
                partial += [str(p.relative_to(folder)) for p in root.rglob("*")]
    return Outcome(result.exit_code, output if result.exit_code else "",
                   "Traceback" in output or crashed, partial, seconds)


def explain(case: Case, outcome: Outcome) -> str:
    """What went wrong, for an assertion message."""
    what = ("over the time limit" if outcome.exit_code is None else
            f"exit {outcome.exit_code}" + (", traceback" if outcome.traceback else "")
            + (f", partial files {outcome.partial}" if outcome.partial else ""))
    return f"{what}: {case.describe()}\n{outcome.output[-2000:]}"


def fresh_folder() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="planner-fuzz-", dir=os.environ.get("PLANNER_FUZZ_TMP"))
