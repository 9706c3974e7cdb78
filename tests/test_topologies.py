"""Cluster specs, presets, the topology graph, group views and the ``topo show`` rendering,
inline devices and the host fabric."""
from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import networkx as nx
import pytest
from pydantic import ValidationError
from rich.console import Console
from typer.testing import CliRunner

from planner.cli.app import app
from planner.inputs.clusters import cluster_from_options, load_cluster
from planner.errors import SpecError
from planner.plan.document import cluster_to_plain
from planner.report.topo import render_presets, render_topology
from topologies.catalog import INLINE_CONFIDENCE, UnknownGpuError, gpu_catalog
from topologies.cluster import Cluster, group_view
from topologies.devices import DeviceSpec, gpu_to_plain
from topologies.graph import build_graph, path_tier, tier_summary
from topologies.presets import (UnknownPresetError, cluster_presets, load_cluster_preset,
                                preset_text)
from topologies.spec import cluster_from_dict
from topologies.standard import homogeneous_cluster

GBPS = 1e9  # bytes/s in one GB/s

# DGX H100: NVSwitch 900 GB/s bidirectional = 450 one way; 8x 400 Gb/s NICs = 50 GB/s per GPU
# (shared/data/gpu_specs.json, node_types "DGX H100").
H100_NVLINK_BYTES_PER_S = 450 * GBPS
H100_NIC_BYTES_PER_S = 400e9 / 8


def _spec(**network: object) -> dict:
    """A valid two-node DGX H100 cluster file, as parsed YAML."""
    return {
        "name": "t", "description": "test",
        "node_groups": [{"name": "dgx", "count": 2, "gpu": "H100", "gpus_per_node": 8,
                         "fabric": "nvswitch",
                         "nics": [{"count": 8, "gbps": 400, "transport": "ib"}]}],
        "network": network or {"tiers": [{"name": "leaf", "nodes_per_switch": 32},
                                         {"name": "spine", "nodes_per_switch": 64}]},
    }


def _oversubscribed() -> Cluster:
    """4 DGX H100 nodes, 2 per leaf, leaves 2:1 oversubscribed to the spine."""
    data = _spec(tiers=[{"name": "leaf", "nodes_per_switch": 2, "oversubscription": 2},
                        {"name": "spine", "nodes_per_switch": 4, "latency_us": 3}])
    data["node_groups"][0]["count"] = 4
    return cluster_from_dict(data)


# --- group_view ---------------------------------------------------------------------------


def test_tp8_inside_a_dgx_h100_node_uses_nvlink_only() -> None:
    view = group_view(homogeneous_cluster("H100", 4), range(8))
    assert (view.members_per_domain, view.num_domains, view.inter) == (8, 1, None)
    assert view.intra.bw_bytes_per_s == pytest.approx(H100_NVLINK_BYTES_PER_S)


def test_dp_across_nodes_uses_the_nic_share_only() -> None:
    view = group_view(homogeneous_cluster("H100", 4), [0, 8, 16, 24])
    assert (view.members_per_domain, view.num_domains, view.intra) == (1, 4, None)
    assert view.inter.bw_bytes_per_s == pytest.approx(8 * H100_NIC_BYTES_PER_S / 8)
    assert view.inter.latency_s == pytest.approx(5e-6 + 1e-6)  # IB NIC + leaf, no spine


def test_group_of_two_full_nodes_sees_both_tiers() -> None:
    view = group_view(homogeneous_cluster("H100", 4), range(16))
    assert (view.size, view.members_per_domain, view.num_domains) == (16, 8, 2)
    assert view.intra.bw_bytes_per_s == pytest.approx(H100_NVLINK_BYTES_PER_S)
    assert view.inter.bw_bytes_per_s == pytest.approx(H100_NIC_BYTES_PER_S)


def test_nvl72_rack_is_one_domain_without_a_scale_out_tier() -> None:
    cluster = load_cluster_preset("gb200-nvl72")
    view = group_view(cluster, range(72))
    assert (view.members_per_domain, view.num_domains, view.inter) == (72, 1, None)
    assert view.intra.bw_bytes_per_s == pytest.approx(900 * GBPS)


def test_two_nvl72_racks_are_two_domains() -> None:
    view = group_view(homogeneous_cluster("GB200", 36), range(144))
    assert (view.members_per_domain, view.num_domains) == (72, 2)
    assert view.inter.bw_bytes_per_s == pytest.approx(50 * GBPS)  # 4x 400G per 4-GPU tray


def test_oversubscription_applies_only_past_one_leaf() -> None:
    cluster = _oversubscribed()
    inside = group_view(cluster, [0, 8]).inter
    across = group_view(cluster, [0, 8, 16, 24]).inter
    assert inside.bw_bytes_per_s == pytest.approx(H100_NIC_BYTES_PER_S)
    assert across.bw_bytes_per_s == pytest.approx(H100_NIC_BYTES_PER_S / 2)
    assert across.name == "ib+leaf"
    assert inside.latency_s == pytest.approx(6e-6) and across.latency_s == pytest.approx(9e-6)


# --- graph --------------------------------------------------------------------------------


def _kinds(graph: nx.Graph) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, kind in graph.nodes(data="kind"):
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def test_graph_of_two_dgx_h100_nodes() -> None:
    graph = build_graph(homogeneous_cluster("H100", 2))
    # 16 GPUs; 2 NVSwitch domains + 8 rail leaves + 1 spine; 16 NICs
    assert _kinds(graph) == {"gpu": 16, "switch": 11, "nic": 16}
    # GPU-NVSwitch 16, GPU-NIC 16, NIC-leaf 16, leaf-spine 8
    assert graph.number_of_edges() == 56
    tiers = [t for _, _, t in graph.edges(data="tier")]
    assert {t: tiers.count(t) for t in set(tiers)} == {"nvlink": 16, "nic": 16, "leaf": 16,
                                                       "spine": 8}
    gpu = graph.nodes[("gpu", 9)]
    assert (gpu["node"], gpu["local"], gpu["gpu"]) == (1, 1, "H100-SXM5-80GB")
    assert gpu["mem_bytes"] == 80 * 2**30


def test_nvl72_domain_switch_spans_all_trays() -> None:
    graph = build_graph(load_cluster_preset("gb200-nvl72"))
    switch = ("intra", 0)
    assert graph.degree(switch) == 72
    assert {graph.nodes[n]["node"] for n in graph.neighbors(switch)} == set(range(18))


def test_max_nodes_builds_a_prefix_and_large_clusters_build() -> None:
    big = homogeneous_cluster("H100", 2048)
    assert _kinds(build_graph(big, max_nodes=4))["gpu"] == 32
    assert _kinds(build_graph(big))["gpu"] == 16384


PATH_CASES = [  # (cluster, rank pair read off the graph, group whose view should agree, tier)
    (lambda: homogeneous_cluster("H100", 2), (0, 1), range(8), "intra"),
    (lambda: homogeneous_cluster("H100", 2), (0, 8), [0, 8], "inter"),
    (lambda: homogeneous_cluster("H100", 64), (0, 40 * 8), [0, 40 * 8], "inter"),
    (_oversubscribed, (0, 8), [0, 8], "inter"),
    (_oversubscribed, (0, 24), [0, 8, 16, 24], "inter"),
    (lambda: load_cluster_preset("l40s-pcie"), (0, 8), [0, 8, 16, 24], "inter"),
    (lambda: load_cluster_preset("l40s-pcie"), (0, 7), range(8), "intra"),
    (lambda: load_cluster_preset("gb200-nvl72"), (0, 71), range(72), "intra"),
    (lambda: load_cluster_preset("mixed-nic-h100"), (64, 72), [64, 72], "inter"),
]


@pytest.mark.parametrize("make, pair, ranks, which", PATH_CASES)
def test_group_view_agrees_with_the_graph_path(make, pair, ranks, which) -> None:
    cluster = make()
    from_graph = path_tier(build_graph(cluster), *pair)
    from_view = getattr(group_view(cluster, ranks), which)
    assert from_graph.bw_bytes_per_s == pytest.approx(from_view.bw_bytes_per_s)
    assert from_graph.latency_s == pytest.approx(from_view.latency_s)


def test_group_across_nic_islands_is_bounded_by_the_graph_path() -> None:
    # IB island node 0 to TCP island node 8: same bandwidth; group_view charges the slower
    # NIC's latency at both ends, the graph path each NIC's own, so the view is the larger.
    cluster = load_cluster_preset("mixed-nic-h100")
    from_graph = path_tier(build_graph(cluster), 0, 64)
    from_view = group_view(cluster, [0, 64]).inter
    assert from_graph.bw_bytes_per_s == pytest.approx(from_view.bw_bytes_per_s)
    assert from_graph.latency_s < from_view.latency_s


# --- presets ------------------------------------------------------------------------------


REQUIRED_PRESETS = {"dgx-a100", "dgx-h100", "hgx-h800", "hgx-h20", "l40s-pcie", "gb200-nvl72",
                    "mixed-nic-h100"}


def test_required_presets_are_listed_with_descriptions() -> None:
    presets = cluster_presets()
    assert REQUIRED_PRESETS <= set(presets)
    assert all(len(description) > 20 for description in presets.values())


@pytest.mark.parametrize("name", sorted(cluster_presets()))
def test_every_preset_loads_and_builds_a_connected_graph(name: str) -> None:
    assert preset_text(name).startswith("description:")
    cluster = load_cluster_preset(name)
    assert cluster.name == name
    graph = build_graph(cluster)
    assert _kinds(graph)["gpu"] == cluster.num_gpus
    assert nx.is_connected(graph)


@pytest.mark.parametrize("name", sorted(cluster_presets()))
def test_tier_summary_switch_counts_match_the_graph(name: str) -> None:
    cluster = load_cluster_preset(name)
    graph = build_graph(cluster)
    for level, tier in enumerate(cluster.tiers):
        row = next(r for r in tier_summary(cluster) if r.name == tier.name)
        switches = [n for n, d in graph.nodes(data=True) if d.get("level") == level]
        assert row.count == len(switches)


def test_mixed_nic_preset_has_three_transports() -> None:
    cluster = load_cluster_preset("mixed-nic-h100")
    assert [g.transport for g in cluster.node_groups] == ["ib", "roce", "tcp"]
    # a group touching the TCP island gets its 2x 100G shared by 8 GPUs, then the 4:1 core
    view = group_view(cluster, [0, 64])
    assert view.inter.bw_bytes_per_s == pytest.approx(2 * 100e9 / 8 / 8 / 4)


def test_unknown_preset_suggests_close_names() -> None:
    with pytest.raises(UnknownPresetError, match="dgx-h100"):
        load_cluster_preset("dgx-h10")


# --- homogeneous clusters -----------------------------------------------------------------


BF16_GPUS = sorted(name for name, gpu in gpu_catalog().items() if "bf16" in gpu.peak_flops)


@pytest.mark.parametrize("gpu_name", BF16_GPUS)
def test_homogeneous_cluster_for_every_catalog_gpu(gpu_name: str) -> None:
    cluster = homogeneous_cluster(gpu_name, 4)
    group = cluster.node_groups[0]
    assert cluster.num_gpus == 4 * group.gpus_per_node
    assert group.intra_bw_bytes_per_s > 0 and group.nic_bw_bytes_per_s > 0
    assert _kinds(build_graph(cluster))["gpu"] == cluster.num_gpus
    assert tier_summary(cluster)


@pytest.mark.parametrize("gpu_name, gpus_per_node, fabric, nic_gbps, domain_nodes", [
    ("H100", 8, "nvswitch", 8 * 400, 1),
    ("A100", 8, "nvswitch", 8 * 200, 1),
    ("H800", 8, "nvswitch", 8 * 400, 1),
    ("H20", 8, "nvswitch", 4 * 400, 1),
    ("GB200", 4, "nvswitch", 4 * 400, 18),
    ("L40S", 8, "pcie", 2 * 200, 1),
    ("V100-SXM3-32GB", 16, "nvswitch", 8 * 100, 1),
    ("MI300X", 8, "xgmi", 8 * 400, 1),
])
def test_homogeneous_cluster_uses_the_usual_node(gpu_name, gpus_per_node, fabric, nic_gbps,
                                                 domain_nodes) -> None:
    group = homogeneous_cluster(gpu_name, 36).node_groups[0]
    assert (group.gpus_per_node, group.fabric, group.nvlink_domain_nodes) == (
        gpus_per_node, fabric, domain_nodes)
    assert group.nic_bw_bytes_per_s == pytest.approx(nic_gbps * 1e9 / 8)


def test_homogeneous_cluster_pcie_default_and_node_override() -> None:
    assert homogeneous_cluster("L40S", 1).node_groups[0].intra_bw_bytes_per_s == 25 * GBPS
    group = homogeneous_cluster("H100", 2, gpus_per_node=4).node_groups[0]
    assert (group.gpus_per_node, group.nics[0].count) == (4, 4)


def test_homogeneous_cluster_rejects_unknown_gpu() -> None:
    with pytest.raises(UnknownGpuError, match="did you mean"):
        homogeneous_cluster("H1000", 2)


# --- spec errors --------------------------------------------------------------------------


def _drop_gpus_per_node(d: dict) -> None:
    del d["node_groups"][0]["gpus_per_node"]


def _set(path: tuple, value: object):
    def mutate(d: dict) -> None:
        target = d
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return mutate


SPEC_ERRORS = [  # (change to a valid file, field path in the message, fragment of the message)
    (_drop_gpus_per_node, "node_groups.0.gpus_per_node", "required"),
    (_set(("node_groups", 0, "nics", 0, "speed"), 400), "node_groups.0.nics.0.speed",
     "allowed: count, gbps, transport"),
    (_set(("node_groups", 0, "count"), 0), "node_groups.0.count", "greater than or equal to 1"),
    (_set(("node_groups", 0, "gpu"), "H1000"), "node_groups.0.gpu", "did you mean"),
    (_set(("node_groups", 0, "nics", 0, "transport"), "eth"), "node_groups.0.nics.0.transport",
     "'ib', 'roce' or 'tcp'"),
    (_set(("node_groups", 0, "nics", 0, "gbps"), -1), "node_groups.0.nics.0.gbps",
     "greater than 0"),
    (_set(("network", "tiers", 0, "oversubscription"), 0.5),
     "network.tiers.0.oversubscription", "greater than or equal to 1"),
    (_set(("node_groups", 0, "gpu"), "L40S"), "node_groups.0", "fabric: pcie"),
    (_set(("node_groups", 0, "nics", 0, "devices"), ["mlx5_0"]), "node_groups.0.nics.0",
     "one device name per NIC"),
    (_set(("network", "tiers"), [{"name": "leaf", "nodes_per_switch": 1}]), "",
     "top tier reaches all 2 nodes"),
    (_set(("node_groups", 0, "nics"), []), "", "a nics entry for node group 'dgx'"),
]


@pytest.mark.parametrize("mutate, field, fragment", SPEC_ERRORS)
def test_spec_errors_name_the_file_field_and_fix(tmp_path: Path, mutate, field, fragment) -> None:
    data = _spec()
    mutate(data)
    with pytest.raises(ValidationError):
        cluster_from_dict(data)
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(data, indent=2))  # JSON is YAML; compose() finds the line
    with pytest.raises(SpecError) as raised:
        load_cluster(str(path))
    message = str(raised.value)
    assert message.startswith(str(path)) and fragment in message
    assert raised.value.field == field


def test_validation_error_loc_is_the_field_path() -> None:
    data = _spec()
    data["node_groups"][0]["gpu"] = "H1000"
    with pytest.raises(ValidationError) as raised:
        cluster_from_dict(data)
    assert raised.value.errors()[0]["loc"] == ("node_groups", 0, "gpu")


def test_spec_error_gives_the_yaml_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("description: x\nnode_groups:\n  - name: a\n    count: 0\n    gpu: H100\n"
                    "    gpus_per_node: 8\n    fabric: nvswitch\n")
    with pytest.raises(SpecError, match=r"c\.yaml:4: node_groups\.0\.count: expected greater"):
        load_cluster(str(path))


@pytest.mark.parametrize("text, fragment", [
    ("node_groups: [\n  {name: a\n", "valid YAML"),
    ("", "an empty file"),
    ("- 1\n- 2\n", "got 'list'"),
])
def test_malformed_files(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=fragment):
        load_cluster(str(path))


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("description: x\nnode_groups:\n  - name: a\n   count: [1\n")
    with pytest.raises(SpecError, match=r"c\.yaml:\d+: expected valid YAML"):
        load_cluster(str(path))


def test_json_file_loads_and_bad_json_names_the_line(tmp_path: Path) -> None:
    good = tmp_path / "ok.json"
    good.write_text(json.dumps(_spec()))
    assert load_cluster(str(good)).num_gpus == 16
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "name": "x",\n  oops\n}')
    with pytest.raises(SpecError, match=r"bad\.json:3: expected valid JSON"):
        load_cluster(str(bad))


def test_file_name_is_the_default_cluster_name(tmp_path: Path) -> None:
    data = _spec()
    del data["name"]
    path = tmp_path / "my-cluster.yaml"
    path.write_text(json.dumps(data))
    assert load_cluster(str(path)).name == "my-cluster"


def test_unknown_preset_and_missing_file() -> None:
    with pytest.raises(SpecError, match=r"--cluster: expected .*did you mean dgx-h100"):
        load_cluster("dgx-h10")
    with pytest.raises(SpecError, match=r"nope\.yaml: expected an existing"):
        load_cluster("nope.yaml")


def test_preset_name_loads_through_planner() -> None:
    assert load_cluster("dgx-h100").num_gpus == 64


def test_cluster_from_options() -> None:
    assert cluster_from_options("H100", 4, None).num_gpus == 32
    with pytest.raises(SpecError) as raised:
        cluster_from_options("H1000", 4)
    assert raised.value.field == "--gpu" and "did you mean" in str(raised.value)
    with pytest.raises(SpecError) as raised:
        cluster_from_options("H100", 0)
    assert raised.value.field == "--nodes"


def test_spec_is_not_changed_by_validation() -> None:
    data = _spec()
    before = copy.deepcopy(data)
    cluster_from_dict(data)
    assert data == before


# --- rendering ----------------------------------------------------------------------------


def _render(renderable) -> str:
    console = Console(file=io.StringIO(), width=120)
    console.print(renderable)
    return console.file.getvalue()


def test_render_topology_of_dgx_h100() -> None:
    text = _render(render_topology(load_cluster_preset("dgx-h100")))
    for fragment in ("dgx-h100", "H100-SXM5-80GB", "80 GiB", "989", "nvswitch", "8x 400G IB",
                     "450", "leaf", "32 nodes per switch, one per rail",
                     "Total: 64 GPUs on 8 nodes, 5,120 GiB HBM"):
        assert fragment in text, fragment


def test_render_topology_of_mixed_cluster_shows_every_group() -> None:
    text = _render(render_topology(load_cluster_preset("mixed-nic-h100")))
    for fragment in ("ib-island", "roce-island", "tcp-island", "2x 100G TCP", "3.12",
                     "4:1 oversubscribed"):
        assert fragment in text, fragment


def test_render_presets_lists_names_and_descriptions() -> None:
    text = _render(render_presets(cluster_presets()))
    assert "gb200-nvl72" in text and "single NVLink domain" in text


# --- inline devices and the host fabric ---------------------------------------------------


CPU_DEVICE = {"name": "epyc-9654", "memory_gb": 256, "memory_bw_GBps": 180,
              "peak_tflops": {"fp32": 3.1, "bf16": 1.5}, "arch": "Zen4",
              "source": "planner calibrate"}


def _host_spec(**group: object) -> dict:
    """One CPU host running 4 gloo processes, its device written inline."""
    return {"name": "cpu", "node_groups": [{
        "name": "cpu", "count": 1, "gpu": copy.deepcopy(CPU_DEVICE), "gpus_per_node": 4,
        "fabric": "host", "intra_bw_GBps": 12, **group}]}


def test_inline_device_on_the_host_fabric_builds() -> None:
    group = cluster_from_dict(_host_spec()).node_groups[0]
    gpu = group.gpu
    assert (gpu.name, gpu.arch, gpu.source, gpu.confidence) == (
        "epyc-9654", "Zen4", "planner calibrate", INLINE_CONFIDENCE)
    assert gpu.hbm_bytes == 256 * 2**30 and gpu.hbm_bw_bytes_per_s == 180 * GBPS
    assert gpu.peak_flops == {"bf16": 1.5e12, "fp32": 3.1e12}
    assert (gpu.nvlink_bw_bytes_per_s, gpu.tdp_w, gpu.nvlink_domain_gpus) == (0, None, None)
    assert group.fabric == "host" and group.intra_bw_bytes_per_s == 12 * GBPS
    assert group.intra_latency_s == pytest.approx(20e-6)  # INTRA_LATENCY_US["host"]
    view = group_view(cluster_from_dict(_host_spec()), range(4))
    assert view.intra.name == "host" and view.inter is None


def test_inline_device_round_trips_through_the_plan_form() -> None:
    cluster = cluster_from_dict(_host_spec())
    plain = cluster_to_plain(cluster)
    assert plain["node_groups"][0]["gpu"] == {**CPU_DEVICE, "memory_gb": 256.0,
                                              "memory_bw_GBps": 180.0,
                                              "peak_tflops": {"bf16": 1.5, "fp32": 3.1}}
    rebuilt = cluster_from_dict(json.loads(json.dumps(plain)))
    assert rebuilt.node_groups[0].gpu == cluster.node_groups[0].gpu
    assert cluster_to_plain(rebuilt) == plain


@pytest.mark.parametrize("memory_gb, bw, tflops", [
    (0.1, 0.3, 1e-3), (93.13225746154785, 3.3, 0.7), (1 / 3, 2 / 3, 1234.567891)])
def test_inline_device_figures_round_trip_exactly(memory_gb, bw, tflops) -> None:
    device = {"name": "odd", "memory_gb": memory_gb, "memory_bw_GBps": bw,
              "peak_tflops": {"fp16": tflops, "tf32": tflops / 7}}
    cluster = cluster_from_dict(_host_spec(gpu=device))
    rebuilt = cluster_from_dict(cluster_to_plain(cluster))
    assert rebuilt.node_groups[0].gpu == cluster.node_groups[0].gpu


def test_catalog_gpus_are_written_by_name() -> None:
    for name, gpu in gpu_catalog().items():
        assert gpu_to_plain(gpu) == name
    plain = cluster_to_plain(homogeneous_cluster("H100", 2))
    assert plain["node_groups"][0]["gpu"] == "H100-SXM5-80GB"


def test_inline_device_with_the_catalogs_figures_is_the_catalog_gpu() -> None:
    h100 = gpu_catalog()["H100-SXM5-80GB"]
    device = {"name": "H100", "memory_gb": 80, "memory_bw_GBps": 3350,
              "peak_tflops": {"bf16": 989, "fp16": 989, "fp8": 1979, "tf32": 495}}
    data = _spec()
    data["node_groups"][0]["gpu"] = device
    assert cluster_from_dict(data).node_groups[0].gpu == h100
    assert DeviceSpec.model_validate(device).to_gpu() is h100


def test_inline_device_on_a_catalog_fabric_needs_a_bandwidth() -> None:
    group = cluster_from_dict(_host_spec(fabric="pcie", intra_bw_GBps=None)).node_groups[0]
    assert group.intra_bw_bytes_per_s == 25 * GBPS  # arch unknown to pcie_generation: Gen4
    with pytest.raises(ValidationError, match="an inline device carries epyc-9654 no NVLink"):
        cluster_from_dict(_host_spec(fabric="nvswitch", intra_bw_GBps=None))
    assert cluster_from_dict(_host_spec(fabric="nvswitch")).node_groups[0].fabric == "nvswitch"


def test_missing_peak_names_where_the_figures_come_from() -> None:
    cpu = cluster_from_dict(_host_spec()).node_groups[0].gpu
    with pytest.raises(ValueError, match="no fp8 peak in the cluster file .has: bf16, fp32"):
        cpu.peak_flops_for("fp8")
    with pytest.raises(ValueError, match="no fp32 peak in the catalog"):
        gpu_catalog()["H100-SXM5-80GB"].peak_flops_for("fp32")


def _set_device(key: str, value: object):
    def mutate(d: dict) -> None:
        d["node_groups"][0]["gpu"][key] = value
    return mutate


def _drop_device(key: str):
    def mutate(d: dict) -> None:
        del d["node_groups"][0]["gpu"][key]
    return mutate


INLINE_ERRORS = [  # (change to _host_spec(), field path in the message, fragment of it)
    (_set_device("memory_gb", -1), "node_groups.0.gpu.memory_gb", "greater than 0"),
    (_set_device("peak_tflops", {"bf16": 1, "fp64": 2}), "node_groups.0.gpu.peak_tflops",
     "at least one of bf16, fp16, fp8, nvfp4, tf32, fp32 (unknown: fp64)"),
    (_set_device("peak_tflops", {}), "node_groups.0.gpu.peak_tflops", "(got none)"),
    (_set_device("peak_tflops", {"bf16": 0}), "node_groups.0.gpu.peak_tflops.bf16",
     "greater than 0"),
    (_drop_device("memory_bw_GBps"), "node_groups.0.gpu.memory_bw_GBps", "required"),
    (_set_device("name", ""), "node_groups.0.gpu.name", "at least 1 character"),
    (_set_device("colour", "red"), "node_groups.0.gpu.colour",
     "allowed: name, memory_gb, memory_bw_GBps, peak_tflops, arch, source"),
    (_set_device("name", "H100"), "node_groups.0.gpu",
     "name 'H100' is catalog GPU H100-SXM5-80GB (memory_gb 80, memory_bw_GBps 3350, "
     "peak_tflops {bf16: 989, fp16: 989, fp8: 1979, tf32: 495}), and this device's memory_gb, "
     "memory_bw_GBps, peak_tflops differ; rename the device or write gpu: H100-SXM5-80GB"),
    (_set(("node_groups", 0, "gpu"), 3), "node_groups.0.gpu",
     "a GPU catalog name (H100, A100, ...) or an inline device object"),
    (_set(("node_groups", 0, "intra_bw_GBps"), None), "node_groups.0",
     "an explicit intra_bw_GBps for fabric host"),
    (_set(("node_groups", 0, "nvlink_domain_nodes"), 2), "node_groups.0",
     "nvlink_domain_nodes: 1 for fabric host (got 2)"),
]


@pytest.mark.parametrize("mutate, field, fragment", INLINE_ERRORS)
def test_inline_device_and_host_errors_name_the_field(tmp_path: Path, mutate, field,
                                                      fragment) -> None:
    data = _host_spec()
    mutate(data)
    with pytest.raises(ValidationError):
        cluster_from_dict(data)
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(data, indent=2))
    with pytest.raises(SpecError) as raised:
        load_cluster(str(path))
    assert raised.value.field == field
    assert fragment in str(raised.value) and "Traceback" not in str(raised.value)


INLINE_YAML = """\
description: one CPU host, four gloo processes
node_groups:
  - name: cpu
    count: 2
    gpu:
      name: epyc-9654
      memory_gb: 256
      memory_bw_GBps: 180
      peak_tflops: {fp32: 3.1, bf16: 1.5}
    gpus_per_node: 4
    fabric: host
    intra_bw_GBps: 12
    nics: [{count: 1, gbps: 25, transport: tcp}]
network:
  tiers: [{name: leaf, nodes_per_switch: 2}]
"""


def test_topo_show_prints_a_cluster_with_an_inline_device(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    path.write_text(INLINE_YAML)
    result = CliRunner().invoke(app, ["topo", "show", str(path)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.stderr
    for fragment in ("epyc-9654", "256 GiB", "1.5", "host", "1x 25G TCP", "12", "20",
                     "Total: 8 GPUs on 2 nodes"):
        assert fragment in result.stdout, fragment


def test_topo_show_names_a_bad_inline_field(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    path.write_text(INLINE_YAML.replace("memory_gb: 256", "memory_gb: -256"))
    result = CliRunner().invoke(app, ["topo", "show", str(path)], env={"COLUMNS": "160"})
    assert result.exit_code == 2
    assert "cpu.yaml:7: node_groups.0.gpu.memory_gb: expected greater than 0" in result.stderr


def test_node_first_rank_agrees_with_the_rank_table():
    """Node groups of 8, 4 and 2 GPUs per node: each node's first rank is the lowest rank that
    ``locate`` puts on it; a node past the end is refused."""
    from topologies.spec import cluster_from_dict
    groups = [{"name": f"g{n}", "count": c, "gpu": "H100", "gpus_per_node": n,
               "fabric": "nvswitch", "nics": [{"count": 1, "gbps": 400, "transport": "ib"}]}
              for n, c in ((8, 2), (4, 3), (2, 1))]
    cluster = cluster_from_dict({"name": "mixed", "node_groups": groups,
                                 "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 8}]}})
    first: dict[int, int] = {}
    for rank in range(cluster.num_gpus):
        first.setdefault(cluster.locate(rank)[1], rank)
    assert [cluster.node_first_rank(x) for x in range(cluster.num_nodes)] == \
        [first[x] for x in range(cluster.num_nodes)] == [0, 8, 16, 20, 24, 28]
    with pytest.raises(ValueError, match="outside cluster"):
        cluster.node_first_rank(cluster.num_nodes)
