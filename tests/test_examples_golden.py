"""Golden tests for ``examples/``: the README's commands on each example, held against stored
output that a person checked, and plan files of the previous schemas that still load.

``examples/mixed-fabric.yaml`` (examples/README.md): four H100 nodes listed fast, slow, fast,
slow. Checked by hand (2026-11-23) in the stored plan: with tp 8 and pp 2 the fast NVSwitch
nodes 0 and 2 form stage 0 (node order [0, 2, 1, 3]) and take 26 of the 32 layers (27 until
the attention curve of 2026-11-27 made attention dearer at this micro-batch), where
Megatron's order would put a PCIe node in each stage. To change the expectation deliberately,
regenerate and review the diff:

    PLANNER_UPDATE_GOLDEN=1 python -m pytest tests/test_examples_golden.py
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.app import app
from planner.plan.document import plan_to_json
from planner.plan.file import load_plan
from planner.plan.migrate import upgrade

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
V1 = Path(__file__).parent / "fixtures" / "plans_v1"
V2 = Path(__file__).parent / "fixtures" / "plans_v2"  # written by schema-2 code (commit 172c6a3)
runner = CliRunner()
EXAMPLE = str(ROOT / "examples" / "mixed-fabric.yaml")
SOLVE = ["solve", "--cluster", EXAMPLE, "--model", "llama-3.1-8b", "--global-batch", "64"]


def _check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("PLANNER_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, (
        f"{name} changed; if deliberate, regenerate with PLANNER_UPDATE_GOLDEN=1 and review")


def _without_timing(report: str) -> str:
    """The solve report minus the seconds the search took (the only varying text)."""
    return "\n".join(line.split(", in ")[0] if "degree tuples" in line or "options" in line
                     else line for line in report.splitlines()) + "\n"


def test_mixed_fabric_plan_and_report_match_the_checked_output(tmp_path):
    out = tmp_path / "plan.json"
    result = runner.invoke(app, [*SOLVE, "--tp", "8", "--pp", "2", "--out", str(out)],
                           env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    plan = json.loads(out.read_text())
    # The decisions the example is about, stated here so that a regenerated file cannot hide them.
    pool = plan["pools"][0]
    assert pool["node_order"] == [0, 2, 1, 3]
    assert [len(s["layers"]) for s in plan["training"]["stages"]] == [26, 6]
    _check("mixed-fabric-tp8-pp2.plan.json", out.read_text())
    _check("mixed-fabric-tp8-pp2.solve.txt", _without_timing(result.output))


def test_mixed_fabric_free_search_matches_the_checked_top_k():
    result = runner.invoke(app, [*SOLVE, "--format", "json"])
    assert result.exit_code == 0, result.output
    plans = json.loads(result.output)
    rows = [{"degrees": p["pools"][0]["degrees"], "schedule": p["training"]["schedule"],
             "node_order": p["pools"][0]["node_order"],
             "layers": [len(s["layers"]) for s in p["training"]["stages"]],
             "tokens_per_s_per_gpu": round(p["prediction"]["tokens_per_s_per_gpu"], 1)}
            for p in plans]
    _check("mixed-fabric-top-k.json", json.dumps(rows, indent=1) + "\n")


@pytest.mark.parametrize("name", sorted(p.name for p in V1.glob("*.json")))
def test_schema_1_plans_load_and_keep_every_decision(name):
    """Plan files written before pools (schema 1) load, validate and say the same."""
    old = json.loads((V1 / name).read_text())
    plan = load_plan(V1 / name)
    assert plan.schema_version == 3 and plan.kind == "training"
    pool = plan.pool("train")
    assert pool.nodes == old["nodes"] and pool.node_order == old["node_order"]
    assert pool.rank_rows() == [dict(zip(old["ranks"]["columns"], r))
                                for r in old["ranks"]["rows"]]
    assert pool.groups == old["groups"]
    assert plan.stages == old["stages"] and plan.prediction == old["prediction"]
    assert plan.config == {**old["config"], "etp": None if old["config"]["etp"] in
                           (None, old["config"]["tp"]) else old["config"]["etp"]}
    assert json.loads(plan_to_json(plan)) == upgrade(old)


@pytest.mark.parametrize("name", sorted(p.name for p in V2.glob("*.json")))
def test_schema_2_plans_load_to_the_same_pools_and_todays_bytes(name):
    """A schema-2 file (explicit rank table and groups; the golden training plan and a
    disaggregated serving plan of two pools) reads to the same ranks, slots and groups; the
    golden one upgrades to the document the current code writes for the same inputs (its
    prediction is the old cost model's: only its keys are compared)."""
    old = json.loads((V2 / name).read_text())
    plan = load_plan(V2 / name)
    assert plan.schema_version == 3
    for pool, before in zip(plan.pools, old["pools"], strict=True):
        assert pool.rank_rows() == [dict(zip(before["ranks"]["columns"], r))
                                    for r in before["ranks"]["rows"]]
        assert pool.groups == before["groups"] and pool.nodes == before["nodes"]
        assert pool.ranks == {"rule": "nodes-in-order/tp-cp-ep-dp-pp", "exceptions": []}
    written = plan_to_json(plan)
    assert json.loads(written) == upgrade(old)
    golden = GOLDEN / name.replace(".json", ".plan.json")
    if golden.exists():  # the same document as today's, but for the cost model's prediction
        # and the shipped profile it was made with (both move with calibration; the profile is
        # an input, so the inputs' hash moves with it)
        # (and the layers per stage, which the cost model's per-layer times decide: the
        # attention curve of 2026-11-27 moved one layer, [27, 5] -> [26, 6]; and the
        # micro-batch: the overlapped pipeline transfers and the refit of 2026-11-28 made 8
        # faster than 4)
        today, upgraded = json.loads(golden.read_text()), json.loads(written)
        assert set(today) == set(upgraded)
        moving = ("prediction", "inputs_hash", "inputs")
        totals = []
        for doc in (today, upgraded):
            training = doc.get("training", {})
            training.get("options", {}).pop("stage_layer_counts", None)
            training.get("options", {}).pop("micro_batch", None)
            training.pop("micro_batches", None)  # follows from the micro-batch
            doc.pop("notes", None)  # the batch note follows from it too
            totals.append(sum(len(stage.pop("layers")) for stage in training.get("stages", [])))
            for stage in training.get("stages", []):
                stage.pop("chunks")
        assert totals[0] == totals[1]
        assert {k: v for k, v in upgraded.items() if k not in moving} == \
            {k: v for k, v in today.items() if k not in moving}
        assert {k: v for k, v in upgraded["inputs"].items() if k not in ("profile", "model")} \
            == {k: v for k, v in today["inputs"].items() if k not in ("profile", "model")}
        # today's model may carry optional fields added since (RoPE's base and Llama 3
        # scaling, 2026-11-29, which only launch files read): the rest is the same
        old_model, new_model = upgraded["inputs"]["model"], today["inputs"]["model"]
        assert {k: new_model[k] for k in old_model} == old_model
        assert set(new_model) - set(old_model) <= {"rope_theta", "rope_llama3_factor"}
        # today's profile may carry fields added since (attention_half_keys, ...): a file
        # written before lacks them and is priced as it was (Profile's 0 defaults)
        assert set(upgraded["inputs"]["profile"]) <= set(today["inputs"]["profile"])
        assert set(upgraded["prediction"]) == set(today["prediction"])


def test_a_schema_1_plan_that_cannot_be_upgraded_says_how_to_recreate_it(tmp_path):
    old = json.loads((V1 / "llama-8b-2nodes.json").read_text())
    del old["config"]["tp"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    result = runner.invoke(app, ["explain", str(path)])
    assert result.exit_code == 2
    assert "re-create it with 'planner solve'" in result.output
    assert "Traceback" not in result.output
