"""NIC-aware stage placement: nodes that cannot do RDMA with each other are kept out of one
stage, so every stage's data-parallel group runs on one RDMA network (issue 20, Holmes)."""
import pytest

from cost_models.profile import default_profile
from planner.inputs.models import load_model
from planner.training import placement
from planner.training.estimation import (ParallelChoice, checked_estimate, make_config,
                                         make_workload)
from topologies.spec import cluster_from_dict


def _interleaved(nodes: int = 8) -> dict:
    """IB and RoCE nodes listed alternately (hosts sorted by name across two racks)."""
    groups = []
    for i in range(nodes):
        roce = i % 2 == 1
        nics = [{"count": 8, "gbps": 400, "transport": "roce" if roce else "ib"}]
        if roce:
            nics.append({"count": 1, "gbps": 100, "transport": "tcp"})
        groups.append({"name": f"n{i}", "count": 1, "gpu": "H100", "gpus_per_node": 8,
                       "fabric": "nvswitch", "nics": nics})
    return {"name": "interleaved", "node_groups": groups,
            "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 16}]}}


def _estimate(cluster):
    model = load_model("llama-3.1-70b")
    wl = make_workload(4096, 1024, "bf16")
    choice = ParallelChoice(tp=8, pp=2, dp=None, cp=1, ep=1, etp=None, vpp=1, micro_batch=1,
                            recompute="selective", recompute_layers=None,
                            sequence_parallel=None, zero=1, zero_bubble=False, seq_slices=1)
    prof = default_profile("H100-SXM5-80GB")
    est = checked_estimate(model, cluster, wl, make_config(choice, cluster.num_gpus), prof)
    return model, wl, est, prof


def _networks_per_stage(cluster, order, pp):
    per = len(order) // pp
    return [len({cluster.node_groups[cluster.group_of_node(n)].rdma_network
                 for n in order[s * per:(s + 1) * per]}) for s in range(pp)]


def test_interleaved_ib_roce_stages_stay_on_one_network():
    cluster = cluster_from_dict(_interleaved())
    model, wl, est, prof = _estimate(cluster)
    megatron_order = list(range(cluster.num_nodes))
    assert _networks_per_stage(cluster, megatron_order, 2) == [2, 2]  # listing order mixes
    best = placement.best_placement(model, cluster, wl, est, prof)
    assert best.node_order is not None
    assert _networks_per_stage(cluster, list(best.node_order), 2) == [1, 1]
    # the DP sync no longer falls back to sockets: clearly faster than the listing order
    assert best.step_time_s < est.step_time_s / 1.2


def test_one_network_keeps_listing_order():
    """Same nodes, all on InfiniBand: nothing to regroup, Megatron's order stays."""
    spec = _interleaved()
    for g in spec["node_groups"]:
        g["nics"] = [{"count": 8, "gbps": 400, "transport": "ib"}]
    cluster = cluster_from_dict(spec)
    model, wl, est, prof = _estimate(cluster)
    best = placement.best_placement(model, cluster, wl, est, prof)
    assert best.node_order is None
    assert best.step_time_s == pytest.approx(est.step_time_s, rel=1e-9)


def test_mixed_stage_is_priced_at_socket_speed():
    cluster = cluster_from_dict(_interleaved())
    model, wl, est, prof = _estimate(cluster)
    problem = placement.mapping_problem(model, cluster, wl, est, prof)
    assert problem.unit_network is not None and len(set(problem.unit_network)) == 2
    assert all(w <= v for w, v in zip(problem.unit_socket_speed, problem.unit_speed))
    # the RoCE nodes' sockets run on one 100G port: far slower than their RDMA
    roce = [u for u in range(cluster.num_nodes) if u % 2]
    assert max(problem.unit_socket_speed[u] / problem.unit_speed[u] for u in roce) < 0.9


def test_plan_reports_the_listing_order_it_beats(tmp_path):
    """planner solve on the interleaved cluster: the plan says what the same degrees cost in
    listing order and which groups run on sockets in each order; the report prints it."""
    import json

    import yaml
    from typer.testing import CliRunner

    from planner.cli.app import app
    spec = tmp_path / "c.yaml"
    spec.write_text(yaml.safe_dump(_interleaved()))
    out = tmp_path / "plan.json"
    res = CliRunner().invoke(app, ["solve", "--cluster", str(spec), "--model", "llama-3.1-70b",
                                   "--tp", "8", "--pp", "2", "--out", str(out)],
                             env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    listed = json.loads(out.read_text())["prediction"]["listing_order"]
    assert listed["speedup"] > 1.2
    assert listed["socket_groups"].get("dp", 0) > 0  # listing order: DP on sockets
    assert "dp" not in listed["socket_groups_placed"]  # placed: DP stays on RDMA
    assert "vs listing order" in res.output
