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
from plan_helpers import holmes_spec
from planner.serving.build import island_order
from topologies.spec import cluster_from_dict as load_cluster_dict

RUNNER = CliRunner()


def _spec(islands: list[str | None]) -> dict:
    """One node group per node, in this listing order: RoCE on island ``x``, TCP for None."""
    return holmes_spec([("roce", isl) if isl else ("tcp", None) for isl in islands])


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


EXAMPLE = "examples/mixed-nic-fabric.yaml"


def _serve(tmp_path, engine: str, model: str = "deepseek-v3") -> tuple[dict, object]:
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / f"plan-{engine}.json"
    result = RUNNER.invoke(app, ["serve", "--model", model, "--cluster", str(root / EXAMPLE),
                                 "--engine", engine, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), out


def test_serving_plans_carry_each_nodes_nccl_settings_and_launchers_set_them(tmp_path):
    import shlex

    from planner.inputs.clusters import load_cluster
    from pathlib import Path

    spec = yaml.safe_load((Path(__file__).resolve().parents[1] / EXAMPLE).read_text())
    devices = {h: g for g in spec["node_groups"] for h in g["hosts"]}
    plan, path = _serve(tmp_path, "sglang")
    section = plan["fabric"]
    assert [p["role"] for p in section["pools"]] == [p["role"] for p in plan["pools"]]
    cluster = load_cluster(str(Path(__file__).resolve().parents[1] / EXAMPLE))
    host_node = {cluster.host_of_node(x): x for x in range(cluster.num_nodes)}
    # DeepSeek-V3 needs 4 nodes an instance and no network here has 4: the instance spans,
    # the section counts it and the plan says so
    spanning = {}
    for inst in plan["serving"]["instances"]:
        nets = _networks(cluster, [host_node[n["host"]] for n in inst["nodes"]])
        spanning[inst["role"]] = spanning.get(inst["role"], 0) + (len(nets) > 1)
    assert {p["role"]: p["socket_instances"] for p in section["pools"]} == spanning
    assert sum(spanning.values()) >= 1
    assert any("span RDMA networks" in n for n in plan["notes"])
    out = tmp_path / "emit"
    result = RUNNER.invoke(app, ["emit", "sglang", str(path), "--out-dir", str(out)])
    assert result.exit_code == 0, result.output
    checked, host = 0, None
    for line in (out / "serving_commands.txt").read_text().splitlines():
        if line.startswith("# host "):
            host = json.loads(line[len("# host "):].split(":", 1)[0])  # JSON-escaped
        if "CUDA_VISIBLE_DEVICES=" not in line:
            continue
        words = shlex.split(line)
        env = dict(w.split("=", 1) for w in words[:words.index("python")])
        assert env == _expected_env(devices[host]), (host, env)
        checked += 1
    assert checked == sum(len(i["nodes"]) for i in plan["serving"]["instances"])


def _expected_env(group: dict) -> dict:
    """What a node of ``group`` must be told, read from the spec by hand (NCCL env.html)."""
    rdma = [n for n in group["nics"] if n["transport"] in ("ib", "roce")]
    tcp = [n for n in group["nics"] if n["transport"] == "tcp"]
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    if rdma:
        env["NCCL_NET"] = "IB"
        env["NCCL_IB_HCA"] = "=" + ",".join(rdma[0]["devices"])
        if rdma[0]["transport"] == "roce":
            env["NCCL_IB_GID_INDEX"] = str(rdma[0]["gid_index"])
        ifnames = [n["ifname"] for n in tcp] or [rdma[0]["ifname"]]
    else:
        env["NCCL_NET"], env["NCCL_IB_DISABLE"] = "Socket", "1"
        ifnames = [d for n in tcp for d in n["devices"]]
    env["NCCL_SOCKET_IFNAME"] = "=" + ",".join(ifnames)
    return env


def test_a_serving_fabric_section_that_lies_is_refused(tmp_path):
    from planner.plan.document import plan_from_json
    from planner.plan.validate import plan_problems as validate_plan

    plan, path = _serve(tmp_path, "sglang")
    doc = plan_from_json(path.read_text())
    assert validate_plan(doc) == []
    entry = plan["fabric"]["pools"][0]["nodes"][0]
    for key, value in (("hcas", ["mlx5_1"]), ("transport", "tcp"), ("gid_index", 7)):
        bad = json.loads(json.dumps(plan))
        bad["fabric"]["pools"][0]["nodes"][0][key] = value
        problems = validate_plan(plan_from_json(json.dumps(bad)))
        assert problems and "fabric.pools[0].nodes[0]" in problems[0], (key, problems)
    bad = json.loads(json.dumps(plan))
    bad["fabric"]["pools"][0]["socket_instances"] = 3
    assert validate_plan(plan_from_json(json.dumps(bad)))
    del entry


def test_the_search_offers_vllm_exactly_the_layouts_its_emitter_can_launch():
    """``engine_launches`` against the emitter's own rule (``_vllm_layout``, the EP rule of
    ``_vllm_rules``) on every layout the search prices, placed on whole 8-GPU nodes."""
    from planner.emit._serving import Instance, InstanceNode, PoolSpec
    from planner.emit.serving_engines import _vllm_layout
    from planner.inputs.models import load_model
    from planner.serving.search import engine_launches, layouts

    seen = {True: 0, False: 0}
    for name in ("deepseek-v3", "qwen3-235b-a22b", "llama-3.1-70b"):
        model = load_model(name)
        for lay in layouts(model, 8, 128):
            g = lay.tp * lay.pp * lay.dp
            nodes = (tuple(InstanceNode(f"h{i}", tuple(range(8))) for i in range(g // 8))
                     if g >= 8 else (InstanceNode("h0", tuple(range(g))),))
            inst = Instance("colocated", 0, 30000, nodes)
            pool = PoolSpec("colocated", lay.tp, lay.pp, lay.dp, lay.ep, lay.expert_tp, 1, 1)
            try:
                _vllm_layout(inst, pool)
                emits = not (lay.ep > 1 and lay.ep != lay.tp * lay.dp)
            except ValueError:
                emits = False
            assert engine_launches("vllm", lay, 8) == emits, lay
            assert engine_launches("sglang", lay, 8)
            seen[emits] += 1
        assert {l for l in layouts(model, 8, 128, "vllm")} == {
            l for l in layouts(model, 8, 128) if engine_launches("vllm", l, 8)}
    assert seen[True] and seen[False]  # both kinds occur


def test_a_vllm_plan_of_planner_serve_emits(tmp_path):
    out = tmp_path / "plan.json"
    result = RUNNER.invoke(app, ["serve", "--model", "deepseek-v3", "--gpu", "H100", "--nodes",
                                 "8", "--engine", "vllm", "--out", str(out)])
    assert result.exit_code == 0, result.output
    result = RUNNER.invoke(app, ["emit", "vllm", str(out), "--out-dir", str(tmp_path / "e")])
    assert result.exit_code == 0, result.output


def test_estimate_prices_an_instance_on_the_nodes_the_plan_gives_it():
    """A 2-node instance (tp 8, dp 2, ep 16): on islands listed a, b, a, b it sits on nodes 0
    and 2 (one island: RoCE, as the plan's builder places it), where the listing order's
    nodes 0 and 1 would cross the islands; on islands of one node each no network holds it,
    so its expert all-to-all is priced on sockets. (Before, the estimate priced the listing
    order's nodes 0 and 1, across the islands, though the plan put the instance on one.)"""
    from cost_models.serving.config import PoolLayout
    from planner.serving.estimate import instance_hardware
    from planner.serving.sites import instance_ranks

    lay = PoolLayout(tp=8, dp=2, ep=16)
    interleaved = load_cluster_dict(_spec(["a", "b"] * 2))
    gpu = interleaved.node_groups[0].gpu
    assert instance_ranks(interleaved, 16, 0) == tuple(range(8)) + tuple(range(16, 24))
    hw = instance_hardware(interleaved, gpu, lay)
    assert hw.ep_view.inter.name.startswith("roce") and hw.tp_view.inter is None
    apart = load_cluster_dict(_spec(["a", "b", "c", "d"]))
    assert instance_ranks(apart, 16, 0) == tuple(range(16))
    hw = instance_hardware(apart, gpu, lay)
    assert hw.ep_view.inter.name.startswith("tcp")
    assert hw.ep_view.inter.bw_bytes_per_s < instance_hardware(
        interleaved, gpu, lay).ep_view.inter.bw_bytes_per_s


def test_serve_prices_instances_that_must_span_islands(tmp_path):
    """Islands of one node each: a DeepSeek-V3 instance needs several nodes, so whatever the
    search picks spans islands, and its prediction is slower than the same deployment on one
    RoCE network (the estimate prices the spanning collectives on sockets)."""
    def tpot(islands):
        path = tmp_path / f"c{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(_spec(islands)))
        out = tmp_path / f"p{len(list(tmp_path.iterdir()))}.json"
        result = RUNNER.invoke(app, ["serve", "--model", "deepseek-v3", "--cluster", str(path),
                                     "--mode", "colocated", "--out", str(out)])
        assert result.exit_code == 0, result.output
        return json.loads(out.read_text())

    one = tpot(["a"] * 4)
    apart = tpot(["a", "b", "c", "d"])
    assert any("span RDMA networks" in n and "the estimate prices them so" in n
               for n in apart["notes"])
    assert (apart["prediction"]["output_tokens_per_s_per_gpu"]
            < one["prediction"]["output_tokens_per_s_per_gpu"])
