"""``planner solve`` end to end: plans, placement, validator, byte identity, explain/compare.

The command-line tests run the real commands through Typer's CliRunner; the small cases keep
each search under a second.
"""
from __future__ import annotations

import copy
import itertools
import json
import math
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cost_models.parallel import Degrees

from cost_models.training.config import TrainingConfig, Workload
from cost_models.profile import default_profile
from cost_models.training.step import estimate
from planner.cli.app import app
from planner.inputs.models import load_model
from planner.training.placement import best_placement
from planner.training.shares import refine_shares
from planner.training.slicing import refine_partition
from planner.plan.document import (inputs_hash, plan_from_dict, plan_from_json, plan_to_dict,
                                   plan_to_json)
from planner.training.build import build_plan
from planner.training.search import SearchSpace
from planner.training.solve import solve
from planner.plan.validate import InvalidPlanError, plan_problems, validate_plan
from topologies.cluster import first_nodes
from topologies.spec import cluster_from_dict
from topologies.standard import homogeneous_cluster

runner = CliRunner()
ENV = {"COLUMNS": "160"}
SMALL = ["--model", "llama-3.1-8b", "--gpu", "H100", "--nodes", "2", "--global-batch", "64"]


@pytest.fixture(scope="module")
def small_plans(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plans")
    result = runner.invoke(app, ["solve", *SMALL, "--top-k", "3", "--out-dir", str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    return out


def test_default_solve_prints_top_table_and_why():
    result = runner.invoke(app, ["solve"], env=ENV)
    assert result.exit_code == 0, result.output
    assert "llama-3.1-70b" in result.output.lower() and "64 GPUs" in result.output
    assert "Top 10 plans" in result.output and "Why #1" in result.output
    assert "searched" in result.output


def test_same_inputs_give_byte_identical_plans(tmp_path):
    for name in ("a.json", "b.json"):
        result = runner.invoke(app, ["solve", *SMALL, "--out", str(tmp_path / name)], env=ENV)
        assert result.exit_code == 0, result.output
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_plan_round_trips_losslessly(small_plans):
    text = (small_plans / "plan-01.json").read_text()
    plan = plan_from_json(text)
    assert plan_to_json(plan) == text
    assert plan_problems(plan) == []


def _broken(plan, change):
    data = copy.deepcopy(plan_to_dict(plan))
    change(data)
    return plan_from_dict(data)


BREAKS = {
    "duplicate slot": (lambda d: d["pools"][0]["ranks"].__setitem__("exceptions", [[0, 0, 1]]),
                       "two ranks share one GPU (node rank 0 GPU 1)"),
    "exception rank out of range": (
        lambda d: d["pools"][0]["ranks"].__setitem__("exceptions", [[16, 1, 0]]),
        "rank 16 is not one of 0..15"),
    "exception on another node": (
        lambda d: d["pools"][0]["ranks"].__setitem__("exceptions", [[0, 1, 0], [8, 0, 0]]),
        "torchrun runs it on node rank 0"),
    "exception GPU the node lacks": (
        lambda d: d["pools"][0]["ranks"].__setitem__("exceptions", [[0, 0, 8]]),
        "uses GPU 8, its node has 8"),
    "exception repeats the rule": (
        lambda d: d["pools"][0]["ranks"].__setitem__("exceptions", [[3, 0, 3]]),
        "repeats the rule"),
    "exceptions not numbers": (
        lambda d: d["pools"][0]["ranks"].__setitem__("exceptions", [[0, 0, 1.0]]),
        "whole numbers"),
    "unknown rule": (lambda d: d["pools"][0]["ranks"].__setitem__("rule", "pp-dp-tp"),
                     "ranks.rule 'pp-dp-tp'"),
    "first rank": (lambda d: d["pools"][0]["nodes"][1].__setitem__("first_rank", 7),
                   "node rank 1: first_rank 7"),
    "lost layer": (lambda d: d["training"]["stages"][-1]["layers"].pop(), "layers exactly once"),
    "memory": (lambda d: d["prediction"]["stage_memory"][0].__setitem__("peak_bytes", 1e12),
               "GiB per GPU"),
    "inputs edited": (lambda d: d["inputs"]["workload"].__setitem__("global_batch", 128),
                      "inputs_hash"),
    "batch": (lambda d: d["training"].__setitem__("micro_batches",
                                                  d["training"]["micro_batches"] + 1),
              "global batch"),
}


@pytest.mark.parametrize("name", BREAKS)
def test_validator_catches_broken_plans(small_plans, name):
    plan = plan_from_json((small_plans / "plan-01.json").read_text())
    change, message = BREAKS[name]
    problems = plan_problems(_broken(plan, change))
    assert any(message in p for p in problems), problems
    with pytest.raises(InvalidPlanError):
        validate_plan(_broken(plan, change))


def test_a_plan_with_exceptions_round_trips_and_moves_only_those_ranks(small_plans):
    """Ranks 0 and 1 swap GPUs (a hand edit): valid, the file keeps the two exceptions, and
    only their rows change; coordinates and groups stay the rank order's."""
    plan = plan_from_json((small_plans / "plan-01.json").read_text())
    edited = _broken(plan, lambda d: d["pools"][0]["ranks"].__setitem__(
        "exceptions", [[0, 0, 1], [1, 0, 0]]))
    assert plan_problems(edited) == []
    text = plan_to_json(edited)
    assert json.loads(text)["pools"][0]["ranks"]["exceptions"] == [[0, 0, 1], [1, 0, 0]]
    again = plan_from_json(text)
    assert plan_to_json(again) == text
    before, after = plan.rank_rows(), again.rank_rows()
    assert [r["local"] for r in after[:3]] == [1, 0, 2]
    assert [{**r, "local": 0} for r in after[:2]] == [{**r, "local": 0} for r in before[:2]]
    assert after[2:] == before[2:] and again.groups == plan.groups


V2 = Path(__file__).parent / "fixtures" / "plans_v2" / "mixed-fabric-tp8-pp2.json"
V2_BREAKS = {
    "duplicate rank": (lambda p: p["ranks"]["rows"].__setitem__(1, list(p["ranks"]["rows"][0])),
                       "ranks are not exactly 0..31"),
    "swapped coordinates": (lambda p: p["ranks"]["rows"][0].__setitem__(3, 1),
                            "rank 0: coordinate tp is not the rank order's"),
    "group size": (lambda p: p["groups"]["dp"].__setitem__(0, p["groups"]["dp"][0][:1]),
                   "groups.dp: 16 groups of sizes [1, 2], expected 16 of 2"),
    "group of other ranks": (lambda p: p["groups"]["tp"][0].__setitem__(0, 8) or
                             p["groups"]["tp"][1].__setitem__(0, 0),
                             "groups.tp are not the groups of the rank order"),
    "group kind missing": (lambda p: p["groups"].pop("edp"), "groups.edp missing"),
}


@pytest.mark.parametrize("name", V2_BREAKS)
def test_a_schema_2_table_that_is_not_the_rank_order_is_invalid(name):
    """The schema-2 upgrade drops coordinates and groups only when they are the rank order's."""
    data = json.loads(V2.read_text())
    change, message = V2_BREAKS[name]
    change(data["pools"][0])
    with pytest.raises(InvalidPlanError) as err:
        plan_from_dict(data)
    assert any(message in p for p in err.value.problems), err.value.problems


def test_a_schema_2_table_keeps_each_ranks_gpu_as_exceptions():
    """GPUs swapped within a node become exceptions; a rank moved to another node is read
    the same way and then refused by the validator."""
    data = json.loads(V2.read_text())
    rows = data["pools"][0]["ranks"]["rows"]
    rows[0][2], rows[1][2] = 1, 0
    plan = plan_from_dict(copy.deepcopy(data))
    assert plan.ranks == {"rule": "nodes-in-order/tp-cp-ep-dp-pp",
                          "exceptions": [[0, 0, 1], [1, 0, 0]]}
    assert plan_problems(plan) == []
    assert plan.rank_rows() == [dict(zip(data["pools"][0]["ranks"]["columns"], r)) for r in rows]
    rows[0][2], rows[1][2] = 0, 1
    rows[0][1], rows[8][1] = 1, 0  # ranks 0 and 8 trade nodes
    rows[8][2] = 0
    problems = plan_problems(plan_from_dict(data))
    assert any("torchrun runs it on node rank 0" in p for p in problems), problems


def test_validator_requires_every_expert_placed():
    model = load_model("mixtral-8x7b")
    cluster, prof = homogeneous_cluster("H100", 2), default_profile("H100-SXM5-80GB")
    est = estimate(model, cluster, Workload(4096, 64), TrainingConfig(degrees=Degrees(tp=2, pp=2, dp=4, ep=4), sequence_parallel=True), prof)
    plan = build_plan(model, cluster, est, prof)
    assert plan_problems(plan) == []
    data = copy.deepcopy(plan_to_dict(plan))
    data["inputs"]["model"]["moe"]["num_experts"] = 6  # ep=4 now leaves experts without a home
    data["inputs_hash"] = inputs_hash(data["inputs"])  # so that only the expert check can fire
    problems = plan_problems(plan_from_dict(data))
    assert any("ep: expected a divisor of the routed experts (6)" in p for p in problems), problems


def _alternating_cluster():
    """[NVSwitch, PCIe, NVSwitch, PCIe] nodes of 8 H100 under one leaf switch."""
    def group(name, fabric, gbps):
        return {"name": name, "count": 1, "gpu": "H100", "gpus_per_node": 8, "fabric": fabric,
                "nics": [{"count": 8 if fabric == "nvswitch" else 2, "gbps": gbps,
                          "transport": "ib"}]}
    return cluster_from_dict({
        "name": "alternating", "node_groups": [group("fast0", "nvswitch", 400),
                                               group("slow0", "pcie", 100),
                                               group("fast1", "nvswitch", 400),
                                               group("slow1", "pcie", 100)],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 4}]}})


def test_mapping_strictly_beats_megatron_order_on_two_link_speeds():
    """tp=8, pp=2, dp=2: Megatron's order mixes a fast and a slow node in each stage, so both
    stages run at PCIe speed; grouping like nodes gives one fast stage that takes more layers."""
    model, cluster = load_model("llama-3.1-8b"), _alternating_cluster()
    prof, work = default_profile("H100-SXM5-80GB"), Workload(4096, 64)
    cfg = TrainingConfig(degrees=Degrees(tp=8, pp=2, dp=2), sequence_parallel=True)
    megatron = estimate(model, cluster, work, cfg, prof)
    placed = best_placement(model, cluster, work, megatron, prof)
    assert placed.node_order is not None and sorted(placed.node_order) == [0, 1, 2, 3]
    assert placed.step_time_s < megatron.step_time_s * 0.99
    stage_nodes = [set(placed.node_order[:2]), set(placed.node_order[2:])]
    assert {0, 2} in stage_nodes and {1, 3} in stage_nodes


def _kinds_cluster(pattern: str):
    """One node of 8 H100 per character of ``pattern`` under one leaf switch: 0 NVSwitch with
    8 x 400 Gb/s NICs, 1 PCIe with 2 x 100, 2 PCIe with 2 x 200."""
    kinds = [("nvswitch", 8, 400), ("pcie", 2, 100), ("pcie", 2, 200)]

    def group(i, kind):
        fabric, nics, gbps = kinds[kind]
        return {"name": f"n{i}", "count": 1, "gpu": "H100", "gpus_per_node": 8, "fabric": fabric,
                "nics": [{"count": nics, "gbps": gbps, "transport": "ib"}]}
    return cluster_from_dict({
        "name": f"kinds-{pattern}",
        "node_groups": [group(i, int(k)) for i, k in enumerate(pattern)],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 8}]}})


def _brute_force_placement(model, cluster, work, cfg, prof, pattern: str) -> float:
    """The fastest of every node order (nodes of one kind interchangeable, so each distinct
    sequence of kinds once), each with its best layer partition and DP shares."""
    best = math.inf
    for kinds in sorted(set(itertools.permutations(pattern))):
        pool = {k: [n for n, c in enumerate(pattern) if c == k] for k in set(pattern)}
        order = tuple(pool[k].pop(0) for k in kinds)
        est = estimate(model, cluster, work, cfg, prof, order)
        if est.memory.fits:
            best = min(best, refine_shares(model, cluster, work, refine_partition(
                model, cluster, work, est, prof), prof).step_time_s)
    return best


@pytest.mark.parametrize("pattern, degrees, slack", [
    ("0101", Degrees(tp=8, pp=2, dp=2), 0.0), ("0101", Degrees(tp=4, pp=4, dp=2), 0.0),
    ("0101", Degrees(tp=2, pp=2, dp=8), 0.0), ("0101", Degrees(tp=8, pp=4, dp=1), 0.0),
    ("012012", Degrees(tp=8, pp=3, dp=2), 0.0), ("012012", Degrees(tp=8, pp=6, dp=1), 0.0),
    ("012012", Degrees(tp=4, pp=6, dp=2), 0.0),
    # CP-SAT minimises the slowest stage and the kind-sorted candidate puts the two fast
    # nodes together; the best order mixes a fast node into each stage's DP: 0.06% faster
    ("012012", Degrees(tp=8, pp=2, dp=3), 0.001)], ids=str)
def test_placement_against_every_node_order(pattern, degrees, slack):
    """The placement (CP-SAT's stages and like nodes together, their stage orders) against
    every node order on clusters of two and three kinds of node."""
    model, cluster = load_model("llama-3.1-8b"), _kinds_cluster(pattern)
    prof, work = default_profile("H100-SXM5-80GB"), Workload(4096, 96)
    cfg = TrainingConfig(degrees=degrees, sequence_parallel=True)
    placed = best_placement(model, cluster, work, estimate(model, cluster, work, cfg, prof), prof)
    best = _brute_force_placement(model, cluster, work, cfg, prof, pattern)
    assert best <= placed.step_time_s <= best * (1 + slack) + 1e-12


def test_solve_on_mixed_cluster_places_and_validates():
    model, cluster = load_model("llama-3.1-8b"), _alternating_cluster()
    prof = default_profile("H100-SXM5-80GB")
    result = solve(model, cluster, Workload(4096, 64), prof, SearchSpace(tp=8, pp=2), top_k=2)
    best = result.plans[0]
    assert best.node_order != sorted(best.node_order)
    assert plan_problems(best) == []


def test_explain_prints_breakdown_and_draws_timelines(small_plans, tmp_path):
    plan = small_plans / "plan-01.json"
    for suffix in (".png", ".svg"):
        picture = tmp_path / f"timeline{suffix}"
        result = runner.invoke(app, ["explain", str(plan), "--timeline", str(picture)], env=ENV)
        assert result.exit_code == 0, result.output
        assert "Step time" in result.output and "Placement" in result.output
        data = picture.read_bytes()
        if suffix == ".png":
            assert data.startswith(b"\x89PNG")
        else:
            assert ET.fromstring(data).tag.endswith("svg")


def test_explain_shows_pipeline_timeline_for_pipelined_plan(tmp_path):
    out = tmp_path / "pp.json"
    result = runner.invoke(app, ["solve", *SMALL, "--pp", "4", "--out", str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["explain", str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    assert "Pipeline timeline" in result.output and "stage 3" in result.output
    # piped, without colour, a pass's kind is in its glyph: forward digits, backward a-j,
    # weight grad A-J (the schedule here has no split weight grad: 1F1B or interleaved)
    rows = [line for line in result.output.splitlines() if line.startswith("stage ")]
    assert len(rows) == 4 and all(line[len("stage 3")] == " " for line in rows)
    cells = "".join(line[len("stage 3 "):] for line in rows)
    assert set(cells) <= set("0123456789abcdefghijABCDEFGHIJ·")
    assert any(c.isdigit() for c in cells) and any(c in "abcdefghij" for c in cells)
    assert "0-9 forward  a-j backward (input grad)  A-J weight grad" in result.output


def test_timeline_in_colour_labels_passes_by_colour_and_digit(tmp_path):
    from rich.console import Console

    from planner.plan.file import load_plan
    from planner.report.timeline import TimelineView
    from planner.training.timeline import plan_timeline
    out = tmp_path / "pp.json"
    assert runner.invoke(app, ["solve", *SMALL, "--pp", "4", "--out", str(out)],
                         env=ENV).exit_code == 0
    console = Console(force_terminal=True, color_system="truecolor", width=120)
    with console.capture() as cap:
        console.print(TimelineView(plan_timeline(load_plan(out), 8)))
    text = cap.get()
    plain = __import__("re").sub(r"\x1b\[[0-9;]*m", "", text)
    cells = "".join(line[len("stage 3 "):] for line in plain.splitlines()
                    if line.startswith("stage "))
    assert "\x1b[" in text and set(cells) <= set("0123456789·")
    assert " F forward" in plain and " B backward" in plain


def test_compare_marks_differences(small_plans):
    plans = sorted(small_plans.glob("plan-*.json"))
    result = runner.invoke(app, ["compare", *map(str, plans)], env=ENV)
    assert result.exit_code == 0, result.output
    assert "plan-01" in result.output and "plan-02" in result.output
    assert "* " in result.output and "fastest per GPU" in result.output


@pytest.mark.parametrize("content,expected", [
    (None, "readable plan file"),
    ("{not json", "valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"schema_version": 99}', "schema_version"),
    ('{"schema_version": 1, "colour": "blue"}', "plan written by"),
])
def test_explain_rejects_bad_plan_files(tmp_path, content, expected):
    path = tmp_path / "plan.json"
    if content is not None:
        path.write_text(content)
    result = runner.invoke(app, ["explain", str(path)], env=ENV)
    assert result.exit_code == 2
    assert str(path) in result.output and expected in result.output
    assert "Traceback" not in result.output


def test_explain_rejects_tampered_plan(small_plans, tmp_path):
    data = json.loads((small_plans / "plan-01.json").read_text())
    data["pools"][0]["ranks"]["exceptions"] = [[0, 0, 1]]
    old = json.loads(V2.read_text())
    old["pools"][0]["ranks"]["rows"][0][0] = 1
    for name, doc, message in (("tampered.json", data, "two ranks share one GPU"),
                               ("tampered-v2.json", old, "ranks are not exactly")):
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        result = runner.invoke(app, ["explain", str(path)], env=ENV)
        assert result.exit_code == 2 and "invalid plan" in result.output, result.output
        assert str(path) in result.output and message in result.output


def test_infeasible_solve_names_binding_constraint_and_writes_nothing(tmp_path):
    out = tmp_path / "plan.json"
    result = runner.invoke(app, ["solve", "--model", "llama-3.1-405b", "--gpu", "H100",
                                 "--nodes", "1", "--global-batch", "8", "--out", str(out)],
                           env=ENV)
    assert result.exit_code == 3
    assert "GiB per GPU" in result.output and "TiB" in result.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_solve_unwritable_out_is_a_clean_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = runner.invoke(app, ["solve", *SMALL, "--out", str(blocker / "plan.json")], env=ENV)
    assert result.exit_code == 2 and "writable" in result.output


def test_min_gpus_objective_picks_smallest_subcluster():
    model = load_model("llama-3.1-8b")
    cluster, prof = homogeneous_cluster("H100", 4), default_profile("H100-SXM5-80GB")
    full = solve(model, cluster, Workload(4096, 64), prof, top_k=1)
    per_gpu = full.estimates[0].tokens_per_s_per_gpu
    target = per_gpu * 8 * 0.9  # one node's worth of throughput
    small = solve(model, cluster, Workload(4096, 64), prof, top_k=1, objective="min-gpus",
                  target_tokens_per_s=target)
    assert small.cluster.num_gpus == 8
    assert small.estimates[0].tokens_per_s_per_gpu * 8 >= target


def test_min_gpus_equals_trying_every_node_count():
    """On 12 nodes (not a power of two: the halving ladder tries 1, 3, 6 and 12) the answer
    for each target equals the first node count, from 1 up, whose best plan reaches it. The
    best throughput falls from 8 to 9 nodes here (the global batch of 96 divides over fewer
    data-parallel replicas), so a bisection would answer 10 for a target 8 nodes reach."""
    model = load_model("llama-3.1-8b")
    cluster, prof, work = homogeneous_cluster("H100", 12), default_profile("H100-SXM5-80GB"), \
        Workload(4096, 96)
    totals = {}
    for n in range(1, 13):
        sub = first_nodes(cluster, n)
        totals[n] = solve(model, sub, work, prof, top_k=1).estimates[0].tokens_per_s_per_gpu \
            * sub.num_gpus
    assert any(totals[n + 1] < totals[n] for n in range(1, 12))  # not monotone
    targets = sorted({totals[n] for n in range(1, 13)} | {totals[n] * 1.0001 for n in range(1, 12)})
    off_ladder = 0
    for target in targets:
        expected = next((k for k in range(1, 13) if totals[k] >= target), None)
        if expected is None:
            continue
        got = solve(model, cluster, work, prof, top_k=1, objective="min-gpus",
                    target_tokens_per_s=target)
        assert got.cluster.num_nodes == expected, (target, totals)
        off_ladder += expected not in (1, 3, 6, 12)
    assert off_ladder >= 4


def test_min_gpus_beyond_the_scan_bisects_and_says_so(monkeypatch):
    """Past the scan limit (here 2 nodes instead of 64) the count is bisected between ladder
    sizes, and every plan's notes say what that assumes."""
    import planner.training.solve as solve_module
    monkeypatch.setattr(solve_module, "MIN_GPUS_SCAN_NODES", 2)
    model = load_model("llama-3.1-8b")
    cluster, prof, work = homogeneous_cluster("H100", 12), default_profile("H100-SXM5-80GB"), \
        Workload(4096, 96)
    nine = solve(model, first_nodes(cluster, 9), work, prof, top_k=1).estimates[0]
    got = solve(model, cluster, work, prof, top_k=2, objective="min-gpus",
                target_tokens_per_s=nine.tokens_per_s_per_gpu * 72 * 0.999)
    assert 6 < got.cluster.num_nodes <= 12
    assert all(any(n.startswith("min-gpus: ") and "bisection" in n for n in p.notes)
               for p in got.plans)


def test_solve_on_mixed_cluster_reconsiders_interleaving_for_the_partition():
    """Under Megatron's order the search prefers interleaving on the mixed cluster; placed on
    like nodes, 1F1B/ZB-H1 with a DP partition is faster, and solve must find that."""
    model, cluster = load_model("llama-3.1-8b"), _alternating_cluster()
    prof, work = default_profile("H100-SXM5-80GB"), Workload(4096, 64)
    best = solve(model, cluster, work, prof, SearchSpace(tp=8, pp=2), top_k=1).estimates[0]
    one_f_one_b = estimate(model, cluster, work, replace(best.config, vpp=1, zero_bubble=False,
                                                         stage_layer_counts=None), prof)
    placed = best_placement(model, cluster, work, one_f_one_b, prof)
    assert best.step_time_s <= placed.step_time_s + 1e-12
    assert best.config.vpp == 1 and best.config.stage_layer_counts is not None


def test_example_cluster_solves_with_cp_sat_placement(tmp_path):
    example = Path(__file__).resolve().parents[1] / "examples" / "mixed-fabric.yaml"
    out = tmp_path / "plan.json"
    result = runner.invoke(app, ["solve", "--cluster", str(example), "--model", "llama-3.1-8b",
                                 "--global-batch", "64", "--tp", "8", "--pp", "2", "--out",
                                 str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    plan = plan_from_json(out.read_text())
    hosts = [n["host"] for n in plan.nodes]
    # node ranks 0-1 form one stage, 2-3 the other: like nodes together
    assert {h.split("-")[1] for h in hosts[:2]} != {"fast", "slow"}
    assert {h.split("-")[1] for h in hosts[2:]} != {"fast", "slow"}
