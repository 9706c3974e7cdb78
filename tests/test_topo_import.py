"""``planner topo import``: nvidia-smi topo -m text, NCCL topology XML, Slurm topology.yaml and
ASTRA-sim network YAML into cluster specs (``planner.inputs.topo_import``).

The fixtures in ``tests/fixtures/topology/`` are real files (``ORIGINS.md`` there says where
each comes from); each parses to the node, GPU and NIC counts and device names it shows, and the
spec written with ``--out`` loads with ``load_cluster`` and ``planner topo show``. Malformed
input exits 2 with one ``error:`` line naming the file, no traceback and no output file.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli.app import app
from planner.errors import SpecError
from planner.inputs.clusters import load_cluster
from planner.inputs.topo_import import (MAX_INPUT_BYTES, ImportOptions, detect_format,
                                        expand_hostlist, import_topology)

FIXTURES = Path(__file__).parent / "fixtures" / "topology"
H100 = FIXTURES / "nvidia-smi-topo-h100.txt"
H800 = FIXTURES / "nvidia-smi-topo-h800.txt"
NDV5 = FIXTURES / "ndv5-topo.xml"
SLURM = FIXTURES / "slurm_topology.yaml"
runner = CliRunner()
ENV = {"COLUMNS": "100"}


def invoke(*args: str):
    return runner.invoke(app, list(args), env=ENV)


def group_of(path: Path, **options) -> dict:
    imported = import_topology(path, options=ImportOptions(**options))
    (group,) = imported.spec["node_groups"]
    return group


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# --- the fixtures --------------------------------------------------------------------------------


def test_nvidia_smi_h100_capture():
    imported = import_topology(H100)
    assert imported.format == "nvidia-smi"
    (group,) = imported.spec["node_groups"]
    assert (group["count"], group["gpus_per_node"], group["fabric"]) == (1, 8, "nvswitch")
    assert group["gpu"] == "H100-SXM5-80GB"  # the default, and said so
    (nic,) = group["nics"]
    assert nic["count"] == 8 and (nic["gbps"], nic["transport"]) == (400, "ib")
    assert nic["devices"] == [f"mlx5_{i}" for i in range(8)]  # NIC k is PIX to GPU k
    notes = " | ".join(imported.notes)
    assert "GPU model assumed H100-SXM5-80GB" in notes and "NV18" in notes
    assert "node 0: GPU0 GPU1 GPU2 GPU3; node 1: GPU4 GPU5 GPU6 GPU7" in notes
    assert "400 Gbit/s" in notes and "transport ib" in notes


def test_nvidia_smi_h800_capture_keeps_rails_and_leaves_out_the_bond():
    imported = import_topology(H800, options=ImportOptions(gpu="H800", nic_gbps=400,
                                                           transport="ib"))
    (group,) = imported.spec["node_groups"]
    assert (group["gpu"], group["gpus_per_node"], group["fabric"]) == \
        ("H800-SXM5-80GB", 8, "nvswitch")  # NV8 on every pair: 8 x 7 links > 18 direct ones
    (nic,) = group["nics"]
    assert nic["devices"] == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7",
                              "mlx5_8", "mlx5_9"]
    notes = " | ".join(imported.notes)
    assert "mlx5_bond_0" in notes and "GPU model assumed" not in notes
    assert "NIC 400" not in notes  # given on the command line: nothing assumed


def test_nccl_xml_ndv5_skeleton():
    imported = import_topology(NDV5)
    assert imported.format == "nccl-xml"
    (group,) = imported.spec["node_groups"]
    assert (group["count"], group["gpus_per_node"]) == (1, 8)
    assert group["fabric"] == "nvswitch"  # no <nvlink>: H100's usual, noted
    assert group["nics"] == [{"count": 8, "gbps": 400.0, "transport": "ib"}]  # class 0x020700
    notes = " | ".join(imported.notes)
    assert "no <nvlink> elements" in notes and "names no devices" in notes


NCCL_DUMP = """\
<system version="1">
  <cpu numaid="0" affinity="ffffffff" arch="x86_64" vendor="GenuineIntel">
    <pci busid="0000:07:00.0" class="0x030200" vendor="0x10de" device="0x20b2">
      <gpu dev="0" sm="80" rank="0" gdr="1">
        <nvlink target="0000:c7:00.0" count="2" tclass="0x068000"/>
        <nvlink target="0000:c4:00.0" count="2" tclass="0x068000"/>
      </gpu>
    </pci>
    <pci busid="0000:0f:00.0" class="0x030200" vendor="0x10de" device="0x20b2">
      <gpu dev="1" sm="80" rank="1" gdr="1">
        <nvlink target="0000:c7:00.0" count="2" tclass="0x068000"/>
      </gpu>
    </pci>
    <pci busid="0000:0c:00.0" class="0x020700" vendor="0x15b3" device="0x101b">
      <nic>
        <net name="mlx5_0" dev="0" speed="200000" port="1" gdr="1"/>
      </nic>
    </pci>
    <pci busid="0000:0d:00.0" class="0x020000" vendor="0x15b3" device="0x101d">
      <nic>
        <net name="mlx5_1" dev="1" speed="100000" port="1" gdr="1"/>
      </nic>
    </pci>
  </cpu>
</system>
"""


def test_nccl_xml_with_gpu_nvlink_and_net_elements(tmp_path):
    imported = import_topology(write(tmp_path, "dump.xml", NCCL_DUMP))
    (group,) = imported.spec["node_groups"]
    assert (group["gpu"], group["gpus_per_node"], group["fabric"]) == \
        ("A100-SXM4-80GB", 2, "nvswitch")  # device 0x20b2; nvlinks to tclass 0x068000
    assert group["nics"] == [
        {"count": 1, "gbps": 200.0, "transport": "ib", "devices": ["mlx5_0"]},
        {"count": 1, "gbps": 100.0, "transport": "roce", "devices": ["mlx5_1"]}]


def test_slurm_tree_default_topology():
    imported = import_topology(SLURM, options=ImportOptions(gpu="A100"))
    assert imported.format == "slurm"
    (group,) = imported.spec["node_groups"]
    assert group["hosts"] == ["node01", "node02", "node03", "node04"]
    assert (group["count"], group["gpu"], group["gpus_per_node"]) == (4, "A100-SXM4-80GB", 8)
    assert group["nics"] == [{"count": 8, "gbps": 200, "transport": "ib"}]  # DGX A100's NICs
    assert imported.spec["network"]["tiers"] == [{"name": "leaf", "nodes_per_switch": 2},
                                                 {"name": "spine", "nodes_per_switch": 4}]
    assert "topology 'topo1' (cluster default); also in the file: topo2, topo3" in imported.notes


def test_slurm_block_topology(tmp_path):
    text = SLURM.read_text().replace("cluster_default: true", "cluster_default: false") \
        .replace("  cluster_default: false\n  block:", "  cluster_default: true\n  block:")
    imported = import_topology(write(tmp_path, "topology.yaml", text))
    (group,) = imported.spec["node_groups"]
    assert group["hosts"] == [f"node{i:02d}" for i in range(1, 17)]
    assert imported.spec["network"]["tiers"] == [{"name": "block", "nodes_per_switch": 4},
                                                 {"name": "block16", "nodes_per_switch": 16}]


def test_astra_sim_network(tmp_path):
    text = ("topology: [ Switch, Switch ]\nnpus_count: [ 8, 4 ]\nbandwidth: [ 400.0, 50.0 ]\n"
            "latency: [ 936.25, 5000.0 ]\n")
    imported = import_topology(write(tmp_path, "net.yml", text))
    assert imported.format == "astra-sim"
    (group,) = imported.spec["node_groups"]
    assert (group["count"], group["gpus_per_node"], group["fabric"]) == (4, 8, "nvswitch")
    assert group["intra_bw_GBps"] == 400.0 and group["intra_latency_us"] == pytest.approx(0.93625)
    assert group["nics"] == [{"count": 8, "gbps": 400.0, "transport": "ib"}]


@pytest.mark.parametrize("path, fmt", [(H100, "nvidia-smi"), (H800, "nvidia-smi"),
                                       (NDV5, "nccl-xml"), (SLURM, "slurm")])
def test_auto_detects_each_fixture(path, fmt):
    assert detect_format(path.read_text(), str(path)) == fmt
    result = invoke("topo", "import", str(path))
    assert result.exit_code == 0, result.stderr
    assert f"({fmt})" in result.stdout.splitlines()[0]


# --- variants of the nvidia-smi text -------------------------------------------------------------


ANSI_TABS = (
    "\t\x1b[4mGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV4\tPXB\tSYS\t0-31\t0\t\tN/A\n"
    "GPU1\tNV4\t X \tSYS\tPXB\t\t1\t\tN/A\n"
    "NIC0\tPXB\tSYS\t X \tSYS\t\t\t\t\n"
    "NIC1\tSYS\tPXB\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n\n"
    "NIC Legend:\n\n  NIC0: mlx5_4\n  NIC1: mlx5_2\n")

OLD_STYLE = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tmlx5_0\tmlx5_1\tCPU Affinity
GPU0\t X \tNV2\tNV1\tSYS\tPIX\tSYS\t0-15
GPU1\tNV2\t X \tSYS\tNV1\tPIX\tSYS\t0-15
GPU2\tNV1\tSYS\t X \tNV2\tSYS\tPIX\t16-31
GPU3\tSYS\tNV1\tNV2\t X \tSYS\tPIX\t16-31
mlx5_0\tPIX\tPIX\tSYS\tSYS\t X \tSYS\t
mlx5_1\tSYS\tSYS\tPIX\tPIX\tSYS\t X \t
"""


def test_tabs_and_underline_escape_codes(tmp_path):
    group = group_of(write(tmp_path, "topo.txt", ANSI_TABS))
    assert (group["gpus_per_node"], group["fabric"]) == (2, "nvlink")  # NV4 x 1 pair: direct
    assert group["nics"][0]["devices"] == ["mlx5_4", "mlx5_2"]  # legend names, GPU order


def test_old_style_device_headers_and_partial_nvlink(tmp_path):
    imported = import_topology(write(tmp_path, "topo.txt", OLD_STYLE))
    (group,) = imported.spec["node_groups"]
    assert (group["gpus_per_node"], group["fabric"]) == (4, "nvlink")
    assert group["nics"][0]["devices"] == ["mlx5_0", "mlx5_1"]
    assert any("only 4 of 6 GPU pairs have NVLink" in n for n in imported.notes)


def test_nodes_option_adds_a_network():
    imported = import_topology(H100, options=ImportOptions(nodes=64))
    assert imported.spec["node_groups"][0]["count"] == 64
    assert imported.spec["network"]["tiers"] == [{"name": "leaf", "nodes_per_switch": 32},
                                                 {"name": "spine", "nodes_per_switch": 64}]


def test_expand_hostlist():
    assert expand_hostlist("node[01-03,07],gpu5") == ["node01", "node02", "node03", "node07",
                                                      "gpu5"]
    assert expand_hostlist("r[1-2]n[9-10]") == ["r1n9", "r1n10", "r2n9", "r2n10"]
    for bad in ("node[04-01]", "node[01-04", "node]", "node[a-b]", "a,,b", "node[]"):
        with pytest.raises(SpecError):
            expand_hostlist(bad)


def test_slurm_tree_deeper_than_the_recursion_limit(tmp_path):
    depth = 1500  # a chain of switches: levels are found without recursion
    switches = ["      - switch: s0\n        nodes: n[1-2]\n"] + [
        f"      - switch: s{i}\n        children: s{i - 1}\n" for i in range(1, depth)]
    text = "- topology: chain\n  tree:\n    switches:\n" + "".join(switches)
    imported = import_topology(write(tmp_path, "chain.yaml", text))
    tiers = imported.spec["network"]["tiers"]
    assert len(tiers) == depth and tiers[-1]["nodes_per_switch"] == 2


@pytest.mark.parametrize("switches, expected", [
    ("      - {switch: a, children: b}\n      - {switch: b, children: a}\n"
     "      - {switch: c, nodes: n1}\n", "without cycles"),
    ("      - {switch: a, children: c}\n      - {switch: b, children: c}\n"
     "      - {switch: c, nodes: n1}\n", "below one other switch"),
    ("      - {switch: a, nodes: 'n[1-999999]'}\n      - {switch: b, nodes: 'm[1-999999]'}\n",
     "host names in all"),
    ("      - {switch: a, nodes: 'n[1-1000]x[1-1000]y[1-1000]'}\n", "host names in all"),
])
def test_slurm_tree_errors(tmp_path, switches, expected):
    path = write(tmp_path, "t.yaml", "- topology: t\n  tree:\n    switches:\n" + switches)
    with pytest.raises(SpecError, match=expected) as err:
        import_topology(path)
    assert str(err.value).startswith(str(path))


# --- round trip through the command line ---------------------------------------------------------


@pytest.mark.parametrize("path, args", [(H100, ["--nodes", "4"]), (H800, ["--gpu", "H800"]),
                                        (NDV5, ["--nic-gbps", "400"]), (SLURM, [])])
def test_round_trip_import_then_show(tmp_path, path, args):
    out = tmp_path / "spec.yaml"
    result = invoke("topo", "import", str(path), "--out", str(out), *args)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert f"wrote {out}" in result.stderr and "note: " in result.stderr
    cluster = load_cluster(str(out))
    spec = yaml.safe_load(out.read_text())
    group = spec["node_groups"][0]
    assert cluster.num_gpus == group["count"] * group["gpus_per_node"]
    shown = invoke("topo", "show", str(out))
    assert shown.exit_code == 0, shown.stderr
    assert group["gpu"] in shown.stdout


# --- malformed input -----------------------------------------------------------------------------


H100_LINES = H100.read_text().splitlines(keepends=True)
MALFORMED = {
    "truncated.txt": "".join(H100_LINES[:12]),  # rows stop at NIC2 of 16 devices
    "bad-cell.txt": "".join(H100_LINES).replace("NV18", "NVX", 1),
    "asymmetric.txt": "".join(H100_LINES).replace("GPU1    NV18     X      NV18",
                                                  "GPU1    NV18     X      SYS ", 1),
    "bad.xml": '<system version="1">\n  <cpu numaid="0">\n    <pci class="0x030200">\n',
    "entity.xml": ('<?xml version="1.0"?>\n<!DOCTYPE system [\n  <!ENTITY a "aaaaaaaaaa">\n'
                   '  <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">\n]>\n<system>&b;</system>\n'),
    "not-system.xml": "<topology><gpu/></topology>\n",
    "bad-hostlist.yaml": SLURM.read_text().replace("node[01-02]", "node[02-x1]"),
    "unknown-child.yaml": SLURM.read_text().replace("children: s[1-2]", "children: s[1-3]"),
    "empty.txt": "",
    "blank.txt": "\n  \n\t\n",
    "junk.bin": bytes(range(256)) * 4,
    "latin1.txt": "GPU0\tGPU1\n\xe9t\xe9\n".encode("latin-1"),
    "unknown.txt": "hello: world\nthis is not a topology\n",
}
WHERE = {"truncated.txt": ":12:", "bad-cell.txt": ":2:", "asymmetric.txt": ":4:",
         "bad.xml": ":4:", "entity.xml": ":2:", "bad-hostlist.yaml": ":9:",
         "unknown-child.yaml": ":7:"}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_input_exits_2_with_one_line(tmp_path, name):
    path = write(tmp_path, name, MALFORMED[name])
    out = tmp_path / "spec.yaml"
    result = invoke("topo", "import", str(path), "--out", str(out))
    assert result.exit_code == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert name not in WHERE or lines[0].startswith(f"error: {path}{WHERE[name]}"), lines[0]
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left beside it either


def test_oversized_input_is_refused(tmp_path):
    path = tmp_path / "huge.txt"
    with path.open("wb") as handle:
        handle.truncate(MAX_INPUT_BYTES + 1)
    result = invoke("topo", "import", str(path))
    assert result.exit_code == 2
    assert "at most 16 MiB" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_nccl_topo_file_goes_to_every_group_and_an_xml_without_it_gets_a_note(tmp_path):
    bare = import_topology(NDV5)
    assert "nccl_topo_file" not in bare.spec["node_groups"][0]
    assert any("--nccl-topo-file" in n and "NCCL_TOPO_FILE" in n for n in bare.notes)
    assert not any("--nccl-topo-file" in n for n in import_topology(H100).notes)
    path = "/opt/microsoft/ndv5-topo.xml"
    out = tmp_path / "spec.yaml"
    result = invoke("topo", "import", str(NDV5), "--nodes", "2", "--nccl-topo-file", path,
                    "--out", str(out))
    assert result.exit_code == 0, result.stderr
    assert "--nccl-topo-file" not in result.stderr  # given: no note
    assert [g.nccl_topo_file for g in load_cluster(str(out)).node_groups] == [path]
    slurm = import_topology(SLURM, options=ImportOptions(nccl_topo_file=path))
    groups = slurm.spec["node_groups"]
    assert groups and all(g["nccl_topo_file"] == path for g in groups)


@pytest.mark.parametrize("path", ["relative/topo.xml", "/opt/a b.xml", "/opt/$(id).xml",
                                  "/opt/x;y.xml", "/" + "a" * 255, "/opt/'q'.xml", "/"])
def test_hostile_nccl_topo_file_option_exits_2(tmp_path, path):
    out = tmp_path / "spec.yaml"
    result = invoke("topo", "import", str(NDV5), "--nccl-topo-file", path, "--out", str(out))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--nccl-topo-file" in lines[0] and "absolute path" in lines[0]
    assert not out.exists()


@pytest.mark.parametrize("args, field", [
    (["--gpu", "NOPE"], "--gpu"), (["--nic-gbps", "0"], "--nic-gbps"),
    (["--format", "slurm", "--nodes", "9"], None), (["--transport", "carrier-pigeon"], None)])
def test_bad_options_exit_2(args, field):
    result = invoke("topo", "import", str(SLURM), *args)
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    if field:
        assert field in result.stderr


def test_gpu_without_nvlink_on_an_nvlink_matrix_names_the_file():
    result = invoke("topo", "import", str(H100), "--gpu", "L40S")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {H100}: ") and "fabric" in result.stderr
