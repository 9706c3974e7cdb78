"""Reports keep their decision columns whole at any terminal width, and piped output is not cut.

``planner solve`` runs through Typer's ``CliRunner`` (stdout is not a terminal) with no
``COLUMNS`` (piped: printed at the width of its widest line), and with ``COLUMNS`` 80 and 60.
Each row of the top-k table is read by the header's column positions and compared with the
plan file written for it: tp, pp, dp, the schedule, tok/s/GPU and MFU must be there in full.
"""
from __future__ import annotations

import re
from pathlib import Path
import pytest
from typer.testing import CliRunner

from planner.cli.app import app
from planner.plan.file import load_plan

runner = CliRunner()
DECISION_COLUMNS = ("tp", "pp", "dp", "schedule", "tok/s/GPU", "MFU")
LEFT_ALIGNED = {"schedule"}
WIDTHS = (None, 80, 60)  # None: piped, no COLUMNS


def invoke(width: int | None, *args: str):
    result = runner.invoke(app, list(args), env={"COLUMNS": None if width is None else str(width)})
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def solved(tmp_path_factory) -> dict:
    """Per width: the solve output and the plans it wrote."""
    out = {}
    for width in WIDTHS:
        folder = tmp_path_factory.mktemp(f"solve{width}")
        out[width] = (invoke(width, "solve", "--out-dir", str(folder)).stdout,
                      sorted(folder.glob("plan-*.json")))
    return out


def expected_cells(path: Path) -> dict[str, str]:
    """What the table must show for a plan, read from its file (degrees nested or not)."""
    plan = load_plan(path)
    config, prediction = plan.config, plan.prediction
    degrees = config.get("degrees", config)
    schedule = plan.schedule
    if config["vpp"] > 1:
        schedule = f"{schedule.replace('interleaved-', 'int-')} v{config['vpp']}"
    elif config.get("seq_slices", 1) > 1:
        schedule = f"slimpipe k{config['seq_slices']}"
    return {"tp": str(degrees["tp"]), "pp": str(degrees["pp"]), "dp": str(degrees["dp"]),
            "schedule": schedule, "tok/s/GPU": f"{prediction['tokens_per_s_per_gpu']:,.0f}",
            "MFU": f"{prediction['mfu']:.1%}"}


def header_spans(line: str) -> dict[str, tuple[int, int]]:
    """Start and end column of each decision header in the header line (whole words)."""
    spans = {}
    for name in DECISION_COLUMNS:
        match = re.search(rf"(?<!\S){re.escape(name)}(?!\S)", line)
        assert match, f"header {name!r} missing or cut: {line!r}"
        spans[name] = match.span()
    return spans


def cell(row: str, span: tuple[int, int], left: bool) -> str:
    """The cell under a header: left-aligned cells start at the header, right-aligned ones
    end with it; a cell runs to the next two spaces (so 'int-1f1b v2' stays whole)."""
    start, end = span
    if left:
        return re.match(r"\S+(?: \S+)*", row[start:]).group(0)
    return re.search(r"\S+(?: \S+)*$", row[:end]).group(0)


@pytest.mark.parametrize("width", WIDTHS)
def test_solve_table_keeps_decision_columns(width, solved):
    text, plan_files = solved[width]
    lines = text.splitlines()
    header = next((line for line in lines if re.search(r"(?<!\S)#(?!\S)", line)), None)
    assert header is not None, text
    spans = header_spans(header)
    rows = {int(m.group(1)): line for line in lines if (m := re.match(r"\s*(\d+)\s", line))}
    assert len(plan_files) == 10 and set(rows) == set(range(1, 11)), text
    for n, path in enumerate(plan_files, start=1):
        row = rows[n]
        assert "…" not in row, row
        for name, expected in expected_cells(path).items():
            assert cell(row, spans[name], name in LEFT_ALIGNED) == expected, (name, row)
    if width is not None:
        assert max(len(line.rstrip()) for line in lines) <= width, text


def test_piped_solve_is_not_cut_at_80_columns(solved):
    text, _ = solved[None]
    assert "bottleneck" in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) > 80  # the full table is wider


def test_narrow_table_names_what_it_left_out(solved):
    assert "left out at 60 columns:" in solved[60][0]
    assert "left out at" not in solved[None][0]


@pytest.mark.parametrize("width", (80, 60))
@pytest.mark.parametrize("command", ("explain", "compare", "topo", "presets"))
def test_other_reports_cut_no_cell(width, command, solved):
    plans = [str(p) for p in solved[None][1][:3]]
    args = {"explain": ["explain", plans[0]], "compare": ["compare", *plans],
            "topo": ["topo", "show", "dgx-h100"], "presets": ["presets"]}[command]
    text = invoke(width, *args).stdout
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width, text
