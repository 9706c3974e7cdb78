"""``planner explain`` and ``planner compare`` on serving plans.

Three serving plans are written by ``planner serve --out`` (Llama-3.1-70B disaggregated,
Llama-3.1-8B colocated, Qwen3-30B-A3B disaggregated, two nodes of H100 each) and one training
plan by ``planner solve --out``. What the reports show is checked against the plan files:
the pools, their layouts and step parts, the KV transfer, the ranking by output tokens/s/GPU
and the best marker; at 80 columns the comparison keeps its decision columns whole (read by
the header's column positions, as ``tests/test_terminal_width.py`` does); and mixing a
training and a serving plan in ``compare`` is one line of error with exit code 2.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.app import app

runner = CliRunner()
# The mode is pinned: which one wins depends on the cost model's calibration.
SERVE = {"a": ("--model", "llama-3.1-70b", "--nodes", "2", "--mode", "disagg"),
         "b": ("--model", "llama-3.1-8b", "--nodes", "2", "--mode", "colocated"),
         "c": ("--model", "qwen3-30b-a3b", "--nodes", "2", "--mode", "disagg")}


def invoke(width: int | None, *args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": None if width is None else str(width)})


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, Path]:
    """Serving plans a, b, c and a training plan t, by name."""
    folder = tmp_path_factory.mktemp("serving-plans")
    out = {}
    for name, args in SERVE.items():
        out[name] = folder / f"{name}.json"
        result = invoke(None, "serve", *args, "--out", str(out[name]))
        assert result.exit_code == 0, result.output
    out["t"] = folder / "t.json"
    result = invoke(None, "solve", "--model", "llama-3.1-8b", "--gpu", "H100-SXM5-80GB",
                    "--nodes", "1", "--out", str(out["t"]))
    assert result.exit_code == 0, result.output
    return out


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def layout(pool: dict) -> str:
    """A pool's degrees as the reports write them: tp always, then pp, dp, ep above 1."""
    return "·".join([f"tp{pool['tp']}"] + [f"{k}{pool[k]}" for k in ("pp", "dp", "ep")
                                            if pool[k] > 1])


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}" if seconds < 0.1 else f"{seconds * 1e3:,.0f}"


def row_of(text: str, first: str) -> str:
    """The line of a table whose first cell is ``first``, box lines read as spaces."""
    found = [line for line in text.translate(str.maketrans("│┃", "  ")).splitlines()
             if re.match(rf"\s*{re.escape(first)}\s", line)]
    assert len(found) == 1, (first, text)
    return found[0]


# --- explain --------------------------------------------------------------------------------


def test_explain_disagg_names_both_pools_layouts_and_kv_transfer(plans):
    plan = read(plans["a"])
    assert plan["serving"]["mode"] == "disagg"
    result = invoke(None, "explain", str(plans["a"]))
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "disagg" in text and plan["serving"]["engine"] in text
    assert f"KV transfer {ms(plan['prediction']['kv_transfer_s'])} ms" in text
    pools = {p["role"]: p for p in plan["serving"]["pools"]}
    assert set(pools) == {"prefill", "decode"}
    predicted = {p["role"]: p for p in plan["prediction"]["pools"]}
    for role, pool in pools.items():
        cells = row_of(text.split("Step time")[0].split("Pools")[1], role).split()
        assert layout(pool) in cells, (role, cells)
        assert str(pool["batch"]) in cells and str(predicted[role]["gpus"]) in cells
        assert f"{predicted[role]['memory']['kv_gb']:.1f}" in cells
        step = predicted[role]["step"]
        parts = row_of(text.split("Step time")[1].split("Engine instances")[0], role).split()
        assert parts[1:7] == [ms(step[k]) for k in ("gemm_s", "attention_s", "moe_s", "comm_s",
                                                    "overhead_s", "total_s")], parts
    for instance in plan["serving"]["instances"]:
        assert re.search(rf"{instance['role']}\W+{instance['index']}\W+{instance['port']}\W+"
                         rf"{instance['nodes'][0]['host']}", text), instance


def test_explain_shows_targets_bound_and_why(plans):
    plan = read(plans["b"])
    text = invoke(None, "explain", str(plans["b"])).stdout
    p, w = plan["prediction"], plan["serving"]["workload"]
    assert plan["serving"]["mode"] == "colocated" and "ms per request (in TTFT)" not in text
    # the target holds for a share of requests (p90 by default): that TTFT is the one judged
    assert (f"TTFT p{p['ttft_quantile'] * 100:g} {ms(p['ttft_at_quantile_s'])} ms (mean "
            f"{ms(p['ttft_s'])} ms) (target {w['ttft_ms']:g}: met)") in " ".join(text.split())
    # the mean TPOT, and the one the target is judged on: every slot busy (colocated)
    assert p["tpot_full_s"] >= p["tpot_s"]
    full = f" (every slot busy {ms(p['tpot_full_s'])} ms)" if ms(p["tpot_full_s"]) != ms(
        p["tpot_s"]) else ""
    assert f"TPOT {ms(p['tpot_s'])} ms{full} (target {w['tpot_ms']:g}: met)" in " ".join(
        text.split())
    assert f"{p['output_tokens_per_s_per_gpu']:,.0f} tok/s/GPU" in text
    assert "bound by the offered load" in text if p["bound"] == "load" else p["bound"] in text
    assert " ".join(p["why"].split()[:6]) in " ".join(text.split())


def test_explain_marks_a_missed_target(plans, tmp_path):
    plan = read(plans["b"])
    plan["serving"]["workload"]["tpot_ms"] = plan["prediction"]["tpot_s"] * 1e3 * 0.5
    plan["prediction"]["meets_slo"] = False
    path = tmp_path / "missed.json"
    path.write_text(json.dumps(plan))
    text = invoke(None, "explain", str(path)).stdout
    assert "TTFT" in text and ": met)" in text and ": MISSED)" in text
    assert "targets MISSED" in text


@pytest.mark.parametrize("name", ("a", "b", "c"))
def test_explain_fits_80_columns(plans, name):
    text = invoke(80, "explain", str(plans[name])).stdout
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80, text
    for pool in read(plans[name])["serving"]["pools"]:
        assert layout(pool) in row_of(text.split("Step time")[0].split("Pools")[1],
                                      pool["role"]).split()


def test_explain_refuses_a_timeline_for_a_serving_plan(plans, tmp_path):
    result = invoke(None, "explain", str(plans["a"]), "--timeline", str(tmp_path / "t.png"))
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "training plan" in result.stderr


# --- compare --------------------------------------------------------------------------------

DECISION = ("mode", "GPUs", "tok/s/GPU", "tok/s/user", "TTFT", "TPOT", "met")
LEFT = {"plan", "mode", "met"}


def expected_cells(path: Path) -> dict[str, str]:
    plan = read(path)
    p = plan["prediction"]
    return {"mode": plan["serving"]["mode"], "GPUs": str(p["gpus"]),
            "tok/s/GPU": f"{p['output_tokens_per_s_per_gpu']:,.0f}",
            "tok/s/user": f"{p['output_tokens_per_s_per_user']:,.1f}",
            "TTFT": ms(p["ttft_s"]), "TPOT": ms(p["tpot_s"]),
            "met": "yes" if p["meets_slo"] else "NO"}


def header_spans(line: str, names) -> dict[str, tuple[int, int]]:
    spans = {}
    for name in names:
        match = re.search(rf"(?<!\S){re.escape(name)}(?!\S)", line)
        assert match, f"header {name!r} missing or cut: {line!r}"
        spans[name] = match.span()
    return spans


def cell(row: str, span: tuple[int, int], left: bool) -> str:
    start, end = span
    if left:
        return re.match(r"\S+(?: \S+)*", row[start:]).group(0)
    return re.search(r"\S+(?: \S+)*$", row[:end]).group(0)


def table_rows(text: str, names: list[str]) -> tuple[str, dict[str, str], dict[str, str]]:
    """The header line, and per plan name its first line and its block of lines (a row may
    wrap its layout onto the lines below); box lines read as spaces."""
    lines = text.translate(str.maketrans("│┃", "  ")).splitlines()
    header = next(i for i, line in enumerate(lines) if "tok/s/GPU" in line)
    starts = {}
    for i, line in enumerate(lines[header + 1:], header + 1):
        m = re.match(r"\W*(\w+)( \*)?\s", line)
        if m and m.group(1) in names:
            starts[m.group(1)] = i
    ends = sorted(starts.values())[1:] + [len(lines)]
    order = sorted(starts, key=starts.get)
    blocks = {n: "\n".join(lines[starts[n]:end]) for n, end in zip(order, ends)}
    return lines[header], {n: lines[starts[n]] for n in order}, blocks


@pytest.mark.parametrize("width", (None, 80))
def test_compare_ranks_by_tokens_per_gpu_and_marks_the_best(plans, width):
    names = ["a", "b", "c"]
    tok = {n: read(plans[n])["prediction"]["output_tokens_per_s_per_gpu"] for n in names}
    assert all(read(plans[n])["prediction"]["meets_slo"] for n in names)
    assert len(set(tok.values())) == 3  # the ranking is not a tie
    result = invoke(width, "compare", *(str(plans[n]) for n in names))
    assert result.exit_code == 0, result.output
    _, first_lines, _ = table_rows(result.stdout, names)
    assert list(first_lines) == sorted(names, key=lambda n: -tok[n])
    best = max(names, key=tok.get)
    marked = [n for n, line in first_lines.items() if re.match(rf"\W*{n} \*", line)]
    assert marked == [best]
    assert f"* best: {best}," in result.stdout


def test_compare_puts_a_plan_that_misses_its_targets_last(plans, tmp_path):
    names = ["a", "b", "c"]
    tok = {n: read(plans[n])["prediction"]["output_tokens_per_s_per_gpu"] for n in names}
    top = max(names, key=tok.get)
    plan = read(plans[top])
    plan["prediction"]["meets_slo"] = False
    paths = {n: plans[n] for n in names if n != top} | {top: tmp_path / f"{top}.json"}
    paths[top].write_text(json.dumps(plan))
    text = invoke(None, "compare", *(str(paths[n]) for n in names)).stdout
    _, first_lines, _ = table_rows(text, names)
    second = max((n for n in names if n != top), key=tok.get)
    assert list(first_lines)[-1] == top and list(first_lines)[0] == second
    assert f"* best: {second}," in text


@pytest.mark.parametrize("width", (None, 80))
def test_compare_keeps_the_decision_columns(plans, width):
    names = ["a", "b", "c"]
    text = invoke(width, "compare", *(str(plans[n]) for n in names)).stdout
    assert "…" not in text
    header, first_lines, blocks = table_rows(text, names)
    spans = header_spans(header, DECISION + ("layout",))
    for name in names:
        for column, expected in expected_cells(plans[name]).items():
            assert cell(first_lines[name], spans[column], column in LEFT) == expected, (
                name, column, first_lines[name])
        start, end = spans["layout"][0], spans["GPUs"][0]
        flat = "".join("".join(line[start:end] for line in blocks[name].splitlines()).split())
        for pool in read(plans[name])["prediction"]["pools"]:
            assert f"{layout(pool)}b{pool['batch']}x{pool['workers']}" in flat, (name, flat)
    widest = max(len(line.rstrip()) for line in text.splitlines())
    if width is None:
        assert widest > 80 and all(h in header for h in ("model", "bound", "engine"))
    else:
        assert widest <= width, text
        assert "left out at 80 columns" in text


def test_compare_refuses_mixing_training_and_serving(plans):
    result = invoke(None, "compare", str(plans["t"]), str(plans["a"]))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "t: training" in lines[0] and "a: serving" in lines[0]
    assert "Traceback" not in result.output
