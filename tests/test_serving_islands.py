"""Serving pools on RDMA islands: an engine instance's nodes share one RDMA network where the
free nodes allow (planner/serving/build.py ``island_order``), checked against brute force and
on a plan of ``planner serve``."""
from __future__ import annotations

import itertools
import json
import random

import yaml
from typer.testing import CliRunner

from planner.cli.app import app
from planner.serving.build import island_order
from topologies.spec import cluster_from_dict as load_cluster_dict

RUNNER = CliRunner()


def _spec(islands: list[str | None]) -> dict:
    """One node group per node, in this listing order: RoCE on island ``x``, TCP for None."""
    groups = []
    for i, isl in enumerate(islands):
        nics = [{"count": 8, "gbps": 400 if isl else 100, "transport": "roce" if isl else "tcp"}]
        g = {"name": f"n{i:02d}", "count": 1, "gpu": "H100", "gpus_per_node": 8,
             "fabric": "nvswitch", "nics": nics}
        if isl:
            g["rdma_island"] = isl
        groups.append(g)
    return {"name": "islands", "node_groups": groups,
            "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 16}]}}


def _networks(cluster, nodes):
    return {cluster.node_groups[cluster.group_of_node(x)].rdma_network for x in nodes}


def _spanning(cluster, order, sets) -> int:
    return sum(len(_networks(cluster, [order[p] for p in s])) > 1 for s in sets)


def test_island_order_spans_as_few_instances_as_brute_force():
    rng = random.Random(3)
    for _ in range(120):
        islands = [rng.choice(["a", "b", None]) for _ in range(rng.randint(2, 7))]
        cluster = load_cluster_dict(_spec(islands))
        free = sorted(rng.sample(range(len(islands)), rng.randint(2, len(islands))))
        k = rng.randint(1, 3)
        count = (len(free) // k) * k
        if count == 0:
            continue
        sets = [list(range(i, i + k)) for i in range(0, count, k)]
        order, spanning = island_order(cluster, free, sets)
        assert len(order) == count and len(set(order)) == count and set(order) <= set(free)
        assert spanning == _spanning(cluster, order, sets)
        best = min(_spanning(cluster, perm, sets)
                   for perm in itertools.permutations(free, count))
        assert spanning == best, (islands, free, k)
        if _spanning(cluster, free[:count], sets) == 0:
            assert order == free[:count]  # a contained listing order is kept as it is


def test_serve_keeps_each_multi_node_instance_on_one_island(tmp_path):
    spec = _spec(["a", "b"] * 4)  # interleaved: listing order would mix the islands
    path = tmp_path / "islands.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "plan.json"
    result = RUNNER.invoke(app, ["serve", "--model", "deepseek-v3", "--cluster", str(path),
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    plan = json.loads(out.read_text())
    cluster = load_cluster_dict(spec)
    host_node = {cluster.host_of_node(x): x for x in range(cluster.num_nodes)}
    multi = [i for i in plan["serving"]["instances"] if len(i["nodes"]) > 1]
    assert multi  # DeepSeek-V3 does not fit one node of 8 H100s
    for inst in multi:
        nodes = [host_node[n["host"]] for n in inst["nodes"]]
        assert len(_networks(cluster, nodes)) == 1, inst
