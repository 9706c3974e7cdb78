"""The validator's independent check of a plan's fabric section (issue 20): the socket groups it
declares are recomputed from its own node transports and RDMA islands and the pool's groups."""
import json

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli.app import app
from planner.plan.document import plan_from_json, plan_to_json
from planner.plan.fabric import socket_groups
from planner.plan.file import load_plan
from planner.plan.validate import plan_problems
from planner.plan.validate_fabric import off_network_groups, socket_group_problems


def _islands() -> dict:
    """Two RoCE islands of 4 nodes listed alternately, plus 2 TCP-only nodes."""
    groups = [{"name": f"n{i}", "count": 1, "gpu": "H100", "gpus_per_node": 8,
               "fabric": "nvswitch", "rdma_island": "ab"[i % 2],
               "nics": [{"count": 8, "gbps": 400, "transport": "roce"}]} for i in range(8)]
    groups += [{"name": f"t{i}", "count": 1, "gpu": "H100", "gpus_per_node": 8,
                "fabric": "nvswitch", "nics": [{"count": 2, "gbps": 100, "transport": "tcp"}]}
               for i in range(2)]
    return {"name": "islands", "node_groups": groups,
            "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 16}]}}


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """The contained plan and a plan whose groups span networks (listing order, pp 1)."""
    tmp = tmp_path_factory.mktemp("fabric")
    spec = tmp / "c.yaml"
    spec.write_text(yaml.safe_dump(_islands()))
    out = {}
    for tag, extra in (("contained", []), ("mixed", ["--pp", "1", "--allow-mixed-networks"])):
        path = tmp / f"{tag}.json"
        res = CliRunner().invoke(app, ["solve", "--cluster", str(spec), "--global-batch", "640",
                                       *extra, "--out", str(path)])
        assert res.exit_code == 0, res.output
        out[tag] = load_plan(path)
    return out


def _edited(plan, edit):
    doc = json.loads(plan_to_json(plan))
    edit(doc["fabric"])
    return plan_from_json(json.dumps(doc))


def test_recomputed_socket_groups_agree_with_the_planner(plans):
    """On real plans the independent count equals what the planner wrote, both when groups span
    networks (dp on sockets) and when none does."""
    assert plans["mixed"].fabric["socket_groups"].get("dp", 0) > 0
    assert plans["contained"].fabric["socket_groups"].get("dp", 0) == 0
    for plan in plans.values():
        cluster, pool = plan.cluster(), plan.pool()
        assert off_network_groups(plan.fabric, pool) == socket_groups(cluster, pool)
        assert plan_problems(plan) == []


def test_a_plan_that_hides_its_socket_groups_is_refused(plans):
    lying = _edited(plans["mixed"], lambda f: f.update(socket_groups={}))
    problems = plan_problems(lying)
    assert any("fabric.socket_groups declares {}" in p and "more than one RDMA network" in p
               for p in problems), problems


def test_a_contained_plan_claiming_socket_groups_is_refused(plans):
    lying = _edited(plans["contained"], lambda f: f.update(socket_groups={"dp": 1}))
    assert any("fabric.socket_groups declares {'dp': 1}" in p for p in plan_problems(lying))


def test_the_check_reads_the_section_not_the_cluster(plans):
    """Move every node of the section onto island 'a' (a lie about the nodes that the cluster
    comparison catches): the independent check now finds no group off one network, so it
    refuses the section's unchanged socket groups on its own reading."""
    def one_island(f):
        for e in f["nodes"]:
            if e["transport"] == "roce":
                e["rdma_island"] = "a"
            elif e["transport"] == "tcp":
                e.update(transport="roce", rdma_island="a", gid_index=3)
    plan = plans["mixed"]
    lying = _edited(plan, one_island)
    assert off_network_groups(lying.fabric, lying.pool()) == {}
    found = socket_group_problems(lying.fabric, lying.pool())
    assert found and "declares" in found[0]
    assert socket_group_problems(plan.fabric, plan.pool()) == []
