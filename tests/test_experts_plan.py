"""``planner solve --expert-loads``: the Plan's expert-placement section, validated."""
from __future__ import annotations

import io
import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from planner.cli.app import app
from planner.inputs.expert_loads import synthetic_loads
from planner.plan.document import plan_from_json
from planner.plan.validate import InvalidPlanError, validate_plan

SOLVE = ["solve", "--model", "qwen3-30b-a3b", "--gpu", "H100", "--nodes", "2",
         "--global-batch", "64", "--seq-len", "2048", "--ep", "8", "--top-k", "2"]


@pytest.fixture(scope="module")
def loads_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("loads") / "loads.npy"
    buffer = io.BytesIO()
    np.save(buffer, synthetic_loads(layers=48, experts=128, steps=1, tokens_per_step=2048, seed=3)[0])
    path.write_bytes(buffer.getvalue())
    return path


@pytest.fixture(scope="module")
def solved(tmp_path_factory, loads_file):
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    result = CliRunner().invoke(app, SOLVE + ["--expert-loads", str(loads_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_plan_gets_a_valid_expert_section(solved):
    out, text = solved
    plan = validate_plan(plan_from_json(out.read_text()))
    doc = plan.experts
    assert doc["ep_size"] == plan.config["ep"] == 8 == doc["num_gpus"]
    assert doc["slots_per_gpu"] == 128 // 8 + 1
    assert len(doc["moe_layers"]) == 48
    assert doc["summary"]["mean_ratio_after"] <= doc["summary"]["mean_ratio_eplb"] + 1e-9
    assert "expert placement (EP8" in text


def test_plan_with_expert_section_is_deterministic(tmp_path, loads_file, solved):
    out = tmp_path / "again.json"
    result = CliRunner().invoke(app, SOLVE + ["--expert-loads", str(loads_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == solved[0].read_bytes()


def test_validator_rejects_a_broken_expert_section(solved):
    plan = plan_from_json(solved[0].read_text())
    doc = json.loads(json.dumps(plan.experts))
    layer = doc["physical_to_logical"][0]
    layer[layer.index(0)] = 1 if layer[0] != 1 else 2  # expert 0 may lose its only replica
    doc["physical_to_logical"][0] = [e if e != 0 else 1 for e in layer]
    with pytest.raises(InvalidPlanError, match="no replica|disagree"):
        validate_plan(replace(plan, experts=doc))


def test_loads_that_do_not_match_the_model_exit_2(tmp_path):
    path = tmp_path / "bad.npy"
    np.save(path, np.ones((48, 64)))
    result = CliRunner().invoke(app, SOLVE + ["--expert-loads", str(path)])
    assert result.exit_code == 2
    assert "128 experts" in result.output


def test_plan_without_expert_section_keeps_its_old_keys(tmp_path):
    out = tmp_path / "plain.json"
    result = CliRunner().invoke(app, SOLVE + ["--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "experts" not in json.loads(out.read_text())


def test_rounded_split_keeps_each_experts_fractions_summing_to_one():
    """Placement files round split fractions to 9 decimals; rounded one by one, a few thousand
    replicas of one expert sharing evenly miss 1 by more than the validator's 1e-6. Largest-remainder rounding keeps
    every expert's sum at 1 (to float error) and moves no fraction by a unit or more."""
    import numpy as np

    from planner.experts.plan import rounded_split
    rng = np.random.default_rng(7)
    n = max(range(2000, 4000), key=lambda n: abs(round(1 / n, 9) * n - 1))  # worst for naive
    phy = np.concatenate([np.zeros(n, dtype=np.int64), 1 + rng.integers(0, 2, 500)])
    raw = np.where(phy == 0, 1.0, rng.random(len(phy)))  # expert 0: n replicas, 1/n each
    split = raw / np.bincount(phy, raw)[phy]
    naive = np.array([round(float(x), 9) for x in split])
    assert abs(np.bincount(phy, naive)[0] - 1) > 1e-6  # the failure this guards against
    got = np.array(rounded_split(split, phy))
    assert np.abs(np.bincount(phy, got) - 1).max() < 1e-9
    assert np.abs(got - split).max() < 1e-9
    assert all(x == round(x, 9) for x in got)
