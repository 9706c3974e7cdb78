"""Mixed fabrics end to end (issue 20, scopes 1 and 4, and the transport rule).

* the cluster spec: NIC ``gid_index`` / ``ifname`` and node-group ``rdma_island``, with hostile
  device, interface and island names refused at the file boundary;
* the transport rule: a process group whose nodes are not on one RDMA network (different
  transport class or RDMA island, or TCP-only members) is costed on TCP sockets at the slowest
  member's socket share; inside one network it keeps its RDMA speed;
* the Plan's fabric section (present only when the spec names its fabric) and its validation;
* the NCCL settings of the torchrun, Slurm and Kubernetes outputs: every node's environment
  matches its NICs with exact-match (``=``) names, RoCE nodes get their GID index, TCP nodes
  disable IB, and the per-rank wrapper maps LOCAL_RANK to the rank's rail. The scripts are
  run for real with a fake ``torchrun``, ``hostname``, ``srun`` and Python on ``PATH``.
"""
from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from cost_models import communication as comm
from cost_models.groups import stage_views
from cost_models.parallel import Degrees
from cost_models.profile import Profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.step import estimate
from planner.emit import emit, emission
from planner.emit.kubeflow import k8s_unescape
from planner.errors import InvalidPlanError, SpecError
from planner.inputs.clusters import load_cluster
from planner.inputs.models import load_model
from planner.plan.document import Plan, cluster_to_plain, plan_from_json, plan_to_json
from planner.plan.fabric import rails_of_gpu
from planner.plan.file import load_plan
from planner.plan.validate import validate_plan
from planner.training.build import build_plan
from planner.training.estimation import load_profile
from topologies.cluster import SOCKET_LATENCY_S, group_view, worst_group_view
from topologies.presets import cluster_presets, load_cluster_preset
from topologies.spec import cluster_from_dict
from topologies.standard import homogeneous_cluster

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mixed-nic-fabric.yaml"
HOSTILE_NAMES = ("$(rm -rf /)", "a;b", "`id`", "mlx5_0\nmlx5_1", "q'uote", 'd"q', "a b",
                 "mlx5_0,mlx5_1", "=mlx5_0", "^mlx5_0", "", "-x", "a|b", "a&b", "$HOME")
UNIVERSE = [f"mlx5_{i}" for i in range(20)]  # RDMA devices a node might have


def example_spec() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def nccl_selects(value: str, devices: list[str]) -> list[str]:
    """The devices an ``NCCL_IB_HCA`` value selects (NCCL docs: a leading ``=`` makes the
    names exact; otherwise each name is a prefix)."""
    exact = value.startswith("=")
    names = value[1:].split(",") if exact else value.split(",")
    return [d for d in devices if any(d == n if exact else d.startswith(n) for n in names)]


# --- the cluster spec ---------------------------------------------------------------------


def _with(path: tuple, value) -> dict:
    data = example_spec()
    target = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_device_interface_and_island_names_are_refused_by_the_spec(name):
    cases = [(("node_groups", 3, "nics", 0, "devices"), ["eth0", name], "devices"),
             (("node_groups", 0, "nics", 1, "ifname"), name, "ifname"),
             (("node_groups", 0, "rdma_island"), name, "rdma_island")]
    for path, value, field in cases:
        with pytest.raises(ValidationError) as raised:
            cluster_from_dict(_with(path, value))
        assert raised.value.errors()[0]["loc"][-1] == field


def test_spec_errors_name_the_field(tmp_path):
    cases = [
        (("node_groups", 0, "nics", 0, "gid_index"), 3, "node_groups.0.nics.0",
         "gid_index only on roce"),
        (("node_groups", 2, "nics", 0, "gid_index"), -1, "node_groups.2.nics.0.gid_index",
         "greater than or equal to 0"),
        (("node_groups", 0, "nics", 1, "ifname"), "x" * 16, "node_groups.0.nics.1.ifname",
         "at most 15"),
        (("node_groups", 3, "rdma_island"), "pod-a", "node_groups.3",
         "rdma_island only on a group with ib or roce"),
        (("node_groups", 2, "nics", 0, "devices"), ["mlx5_1", "mlx5_1", "mlx5_2", "mlx5_3"],
         "node_groups.2.nics.0.devices", "distinct device names"),
        (("node_groups", 0, "nics"), [{"count": 8, "gbps": 400, "transport": "ib",
                                       "devices": [f"mlx5_{i}" for i in range(8)]},
                                      {"count": 1, "gbps": 400, "transport": "ib"}],
         "node_groups.0", "devices on every ib/roce nics entry"),
        (("node_groups", 2, "nics"), [
            {"count": 2, "gbps": 400, "transport": "roce", "gid_index": 3},
            {"count": 2, "gbps": 400, "transport": "roce", "gid_index": 5}],
         "node_groups.2", "one gid_index"),
    ]
    for path, value, field, fragment in cases:
        data = _with(path, value)
        with pytest.raises(ValidationError):
            cluster_from_dict(data)
        file = tmp_path / "bad.yaml"
        file.write_text(json.dumps(data, indent=2))
        with pytest.raises(SpecError) as raised:
            load_cluster(str(file))
        message = str(raised.value)
        assert field in message and fragment in message, message


def test_new_fields_round_trip_through_the_plan_inputs():
    cluster = cluster_from_dict(example_spec())
    plain = cluster_to_plain(cluster)
    again = cluster_from_dict(plain)
    assert [(g.rdma_island, [(n.devices, n.gid_index, n.ifname) for n in g.nics])
            for g in again.node_groups] == [
        (g.rdma_island, [(n.devices, n.gid_index, n.ifname) for n in g.nics])
        for g in cluster.node_groups]
    assert plain["node_groups"][0]["rdma_island"] == "pod-a"
    assert plain["node_groups"][2]["nics"][0]["gid_index"] == 3
    assert plain["node_groups"][2]["nics"][0]["ifname"] == "bond0"


@pytest.mark.parametrize("name", sorted(cluster_presets()))
def test_presets_write_no_new_keys(name):
    """Specs without the new fields give the same plan inputs as before (byte-identical)."""
    text = json.dumps(cluster_to_plain(load_cluster_preset(name)))
    for key in ("gid_index", "ifname", "rdma_island", "nccl_topo_file"):
        assert key not in text


# --- the transport rule -------------------------------------------------------------------


def _two_groups(a: dict, b: dict) -> object:
    def group(name, nics, **extra):
        return {"name": name, "count": 2, "gpu": "H100", "gpus_per_node": 8,
                "fabric": "nvswitch", "nics": nics, **extra}
    return cluster_from_dict({
        "name": "two", "node_groups": [group("a", **a), group("b", **b)],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 4}]}})


IB = [{"count": 8, "gbps": 400, "transport": "ib"}]
ROCE = [{"count": 8, "gbps": 400, "transport": "roce"}]
IB_AND_ETH = [*IB, {"count": 1, "gbps": 100, "transport": "tcp", "ifname": "eno1"}]
PROFILE = Profile()


@pytest.mark.parametrize("nics, socket_gbps", [
    ([{"count": 2, "gbps": 25, "transport": "tcp"}], 2 * 25),       # below the cap: line rate
    ([{"count": 8, "gbps": 100, "transport": "tcp"}], 8 * 100),
    (ROCE, 8 * 100),                                               # 400G ports: as 100G ones
    (IB_AND_ETH, 100),                                             # the Ethernet port only
])
def test_socket_bandwidth_is_each_socket_nics_line_rate_capped_at_100g(nics, socket_gbps):
    node = _two_groups({"nics": nics}, {"nics": nics}).node_groups[0]
    assert node.socket_bw_bytes_per_s == pytest.approx(socket_gbps * 1e9 / 8)


def test_dp_group_across_ib_and_roce_nodes_is_costed_on_tcp():
    mixed = _two_groups({"nics": IB}, {"nics": ROCE})
    same = _two_groups({"nics": IB}, {"nics": IB})
    across, inside = group_view(mixed, [0, 16]), group_view(same, [0, 16])
    assert across.inter.name == "tcp" and inside.inter.name == "ib"
    # the slowest member's socket share (RDMA ports carrying IP, each priced as at most a
    # 100 Gb/s port: SOCKET_NIC_GBPS_MAX), kernel-socket latency
    assert across.inter.bw_bytes_per_s == pytest.approx(8 * 100e9 / 8 / 8)
    assert across.inter.latency_s >= SOCKET_LATENCY_S
    size = 1e9
    tcp_s = comm.all_reduce_s(across, size, PROFILE)
    ib_s = comm.all_reduce_s(inside, size, PROFILE)
    assert tcp_s == pytest.approx(ib_s * PROFILE.link_eff("ib") / PROFILE.link_eff("tcp")
                                  * 400 / 100, rel=1e-3)
    # inside one class (both RoCE nodes of the mixed cluster) the group keeps RDMA
    roce = group_view(mixed, [16, 24])
    assert roce.inter.name == "roce"
    assert roce.inter.bw_bytes_per_s == pytest.approx(8 * 400e9 / 8 / 8)


def test_rdma_islands_without_a_path_fall_back_to_the_tcp_nics():
    split = _two_groups({"nics": IB_AND_ETH, "rdma_island": "x"},
                        {"nics": IB_AND_ETH, "rdma_island": "y"})
    joined = _two_groups({"nics": IB_AND_ETH, "rdma_island": "x"},
                         {"nics": IB_AND_ETH, "rdma_island": "x"})
    default = _two_groups({"nics": IB_AND_ETH}, {"nics": IB_AND_ETH})
    across = group_view(split, [0, 16]).inter
    assert across.name == "tcp" and across.bw_bytes_per_s == pytest.approx(100e9 / 8 / 8)
    for cluster in (joined, default):  # one island (the default island: one per transport)
        assert group_view(cluster, [0, 16]).inter.name == "ib"
    # within an island the split cluster keeps IB
    assert group_view(split, [0, 8]).inter.name == "ib"
    # a TCP-only member among RDMA nodes also forces sockets
    with_tcp = _two_groups({"nics": IB}, {"nics": [{"count": 2, "gbps": 100,
                                                     "transport": "tcp"}]})
    assert group_view(with_tcp, [0, 16]).inter.name == "tcp"
    assert group_view(with_tcp, [0, 16]).inter.bw_bytes_per_s == pytest.approx(
        2 * 100e9 / 8 / 8)


@pytest.mark.parametrize("seed", range(12))
def test_vectorised_worst_view_follows_the_transport_rule(seed):
    cluster = cluster_from_dict(example_spec())
    rng = np.random.default_rng(seed)
    size = int(rng.choice([2, 4, 8, 16]))
    ranks = rng.permutation(cluster.num_gpus)
    rows = ranks[: (len(ranks) // size) * size].reshape(-1, size)

    def key(view):
        b = view.bottleneck
        return (b.bw_bytes_per_s * (view.members_per_domain if b is view.inter else 1),
                -b.latency_s)
    fast = worst_group_view(cluster, rows)
    brute = min((group_view(cluster, r.tolist()) for r in rows), key=key)
    assert key(fast) == key(brute)
    assert fast.inter.name == brute.inter.name


def test_stage_views_cost_the_cross_island_dp_group_on_sockets():
    cluster = cluster_from_dict(example_spec())
    [views] = stage_views(cluster, Degrees(tp=8, dp=8))
    assert views.dp.inter.name.startswith("tcp")
    assert views.tp.inter is None  # TP inside one node


# --- the fabric section -------------------------------------------------------------------


def _plan(cluster, model="llama-3.1-8b", gb=64, **degrees) -> Plan:
    m = load_model(model)
    w = Workload(seq_len=4096, global_batch=gb)
    prof = load_profile(cluster.node_groups[0].gpu.name, None)
    est = estimate(m, cluster, w, TrainingConfig.from_dict(degrees), prof)
    return validate_plan(build_plan(m, cluster, est, prof, why="test"))


@lru_cache(maxsize=None)
def example_plan() -> Plan:
    return _plan(cluster_from_dict(example_spec()), tp=8, dp=8)


@lru_cache(maxsize=None)
def dgx_plan() -> Plan:
    return _plan(load_cluster_preset("dgx-h100"), tp=8, dp=8)


def _expected_nodes() -> list[dict]:
    """Per node rank, what the example's YAML says (read independently of the planner)."""
    out = []
    for g in example_spec()["node_groups"]:
        for host in g["hosts"]:
            nics = g["nics"]
            rdma = [n for n in nics if n["transport"] in ("ib", "roce")]
            tcp = [n for n in nics if n["transport"] == "tcp"]
            out.append({"host": host, "transport": (rdma or tcp)[0]["transport"],
                        "hcas": [d for n in rdma for d in n["devices"]],
                        "gid": next((n.get("gid_index", 3) for n in rdma
                                     if n["transport"] == "roce"), None),
                        "ifnames": ([n.get("ifname") or d for n in tcp
                                     for d in ([n["ifname"]] if n.get("ifname")
                                               else n["devices"])]
                                    or [n["ifname"] for n in nics if n.get("ifname")]),
                        "gpus": g["gpus_per_node"]})
    return out


def expected_env(node: dict) -> dict[str, str]:
    env = {}
    if node["transport"] in ("ib", "roce"):
        env["NCCL_NET"] = "IB"
        env["NCCL_IB_HCA"] = "=" + ",".join(node["hcas"])
        if node["gid"] is not None:
            env["NCCL_IB_GID_INDEX"] = str(node["gid"])
    else:
        env["NCCL_NET"] = "Socket"
        env["NCCL_IB_DISABLE"] = "1"
    env["NCCL_SOCKET_IFNAME"] = "=" + ",".join(node["ifnames"])
    return env


def expected_rail(node: dict, local_rank: int) -> str | None:
    hcas = node["hcas"]
    if len(hcas) < 2:
        return None
    return "=" + ",".join(hcas[p] for p in rails_of_gpu(local_rank, len(hcas), node["gpus"]))


def test_plans_of_clusters_without_fabric_fields_have_no_section():
    for cluster in (homogeneous_cluster("H100", 2), load_cluster(str(ROOT / "examples"
                                                                      / "mixed-fabric.yaml"))):
        p = _plan(cluster, tp=8, dp=cluster.num_nodes, gb=8 * cluster.num_nodes)
        assert p.fabric is None and "fabric" not in json.loads(plan_to_json(p))


def test_a_cluster_with_roce_or_tcp_nodes_gets_a_section_without_named_fabric():
    """The mixed-nic-h100 preset names no devices, interfaces or islands, but its RoCE nodes
    need their GID index and its TCP-only nodes NCCL's socket network: its plans carry the
    section, one entry per node with the transport its spec gives."""
    spec = load_cluster_preset("mixed-nic-h100")
    p = _plan(spec, tp=8, dp=spec.num_nodes, gb=8 * spec.num_nodes)
    assert p.fabric is not None
    by_group = {g.name: g.nics for g in spec.node_groups}
    for entry in p.fabric["nodes"]:
        nics = by_group[entry["node_group"]]
        fastest = max(nics, key=lambda n: n.gbps).transport
        assert entry["transport"] == fastest
        assert (entry["gid_index"] is not None) == (fastest == "roce")
    transports = {e["transport"] for e in p.fabric["nodes"]}
    assert transports == {"ib", "roce", "tcp"}


def test_fabric_section_lists_each_nodes_nics_in_rail_order():
    p = example_plan()
    entries = p.fabric["nodes"]
    for entry, want, node in zip(entries, _expected_nodes(), p.nodes):
        assert entry["host"] == want["host"] == node["host"]
        assert entry["transport"] == want["transport"]
        assert entry["hcas"] == (want["hcas"] if want["transport"] != "tcp" else [])
        assert entry["gid_index"] == want["gid"]
        assert entry["socket_ifnames"] == want["ifnames"]
        if entry["rank_hcas"] is not None:
            assert ["=" + ",".join(r) for r in entry["rank_hcas"]] == [
                expected_rail(want, lr) for lr in range(want["gpus"])]
    assert [e["rdma_island"] for e in entries[:4]] == ["pod-a"] * 2 + ["pod-b"] * 2
    # a DP group holds one rank of every node: it spans islands and classes
    assert p.fabric["socket_groups"]["dp"] == len(p.groups["dp"])
    assert "tp" not in p.fabric["socket_groups"]
    assert plan_to_json(plan_from_json(plan_to_json(p))) == plan_to_json(p)


def test_a_plan_file_with_a_fabric_section_loads(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(plan_to_json(example_plan()))
    assert plan_to_json(load_plan(path)) == plan_to_json(example_plan())


def _edited(p: Plan, edit) -> Plan:
    data = json.loads(plan_to_json(p))
    edit(data["fabric"])
    return plan_from_json(json.dumps(data))


EDITS = {
    "hostile hca": lambda f: f["nodes"][0]["hcas"].__setitem__(0, "$(rm -rf /)"),
    "hostile rail": lambda f: f["nodes"][0]["rank_hcas"].__setitem__(0, ["`id`"]),
    "hostile ifname": lambda f: f["nodes"][6]["socket_ifnames"].__setitem__(0, "eth0;id"),
    "comma": lambda f: f["nodes"][4]["hcas"].__setitem__(0, "mlx5_1,mlx5_2"),
    "prefix swap": lambda f: f["nodes"][4]["hcas"].__setitem__(0, "mlx5_10"),
    "empty name": lambda f: f["nodes"][0]["hcas"].__setitem__(0, ""),
    "gid on ib": lambda f: f["nodes"][0].__setitem__("gid_index", 3),
    "wrong gid": lambda f: f["nodes"][4].__setitem__("gid_index", 1),
    "extra key": lambda f: f["nodes"][0].__setitem__("env", {}),
    "missing nodes": lambda f: f["nodes"].pop(),
    "socket groups": lambda f: f.__setitem__("socket_groups", {}),
    "transport": lambda f: f["nodes"][6].__setitem__("transport", "ib"),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_hand_edited_fabric_sections_are_refused(name):
    p = _edited(example_plan(), EDITS[name])
    with pytest.raises(InvalidPlanError):
        validate_plan(p)
    for fmt in ("torchrun", "slurm", "kubeflow"):
        with pytest.raises(ValueError, match="fabric"):
            emit(fmt, p)


# --- emitted settings ---------------------------------------------------------------------


def _exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


RECORDER = (f"#!{sys.executable}\n"
            "import json, os, sys\n"
            "with open(os.environ['RECORD'], 'w') as fh:\n"
            "    json.dump({'argv': sys.argv[1:], 'env': {k: v for k, v in os.environ.items()\n"
            "               if k.startswith('NCCL_') or k.startswith('PLANNER_')}}, fh)\n")


@pytest.fixture
def sandbox(tmp_path: Path):
    """Fakes on PATH (torchrun and python record argv and NCCL env; hostname; srun);
    returns run(argv, **env) -> (process, record)."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    record = tmp_path / "record.json"
    _exe(fake / "torchrun", RECORDER)
    _exe(fake / "fakepython", RECORDER)
    _exe(fake / "hostname", '#!/usr/bin/env bash\nprintf "%s\\n" "$FAKE_HOST"\n')
    _exe(fake / "srun", "#!/usr/bin/env bash\n"
         'while [ "$#" -gt 0 ] && [[ "$1" == --* ]]; do shift; done\nexec "$@"\n')

    def run(argv: list[str], **env: str):
        record.unlink(missing_ok=True)
        base = {"PATH": f"{fake}:{os.environ['PATH']}", "HOME": str(work),
                "RECORD": str(record), "FAKE_HOST": "unknown-host",
                "PLANNER_PYTHON": str(fake / "fakepython")}
        proc = subprocess.run(argv, cwd=work, capture_output=True, text=True,
                              env={**base, **env}, timeout=30)
        return proc, (json.loads(record.read_text()) if record.exists() else None)

    run.work = work
    return run


def _nccl(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith("NCCL_")}


def _check_rank_wrapper(sandbox, argv: list[str], node_env: dict, want: dict, script_argv,
                        **extra) -> None:
    """Run each LOCAL_RANK through the wrapper in torchrun's argv: the process sees the
    node's settings with its own rail, and Python gets the script and its arguments."""
    at = argv.index("--no-python")
    assert argv[at + 1:at + 3] == ["bash", "-c"]
    wrapper, name, rest = argv[at + 3], argv[at + 4], argv[at + 5:]
    assert name == "planner-nccl-rank" and rest == script_argv
    for lr in range(want["gpus"]):
        proc, rec = sandbox(["bash", "-c", wrapper, name, *rest], LOCAL_RANK=str(lr),
                            **node_env, **extra)
        assert proc.returncode == 0, proc.stderr
        assert rec["argv"] == ["-u", *script_argv]
        rail = expected_rail(want, lr) if want["transport"] != "tcp" else None
        final = dict(expected_env(want), **({"NCCL_IB_HCA": rail} if rail else {}))
        assert _nccl(rec["env"]) == final
        if rail:
            assert nccl_selects(rail, UNIVERSE) == [rail[1:]]
    proc, _ = sandbox(["bash", "-c", wrapper, name, *rest], LOCAL_RANK="99", **node_env,
                      **extra)
    assert (proc.returncode != 0) == (want["transport"] != "tcp")  # no rail for rank 99


SCRIPT_ARGS = ("--lr", "3e-4", "$(touch CANARY)")


def test_torchrun_script_sets_every_nodes_nccl_settings(sandbox, tmp_path):
    from planner.emit import EmitOptions
    options = EmitOptions(script="pretrain.py", script_args=SCRIPT_ARGS)
    files = emit("torchrun", example_plan(), options)
    script = tmp_path / "launch_torchrun.sh"
    script.write_text(files["launch_torchrun.sh"])
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    script_argv = ["pretrain.py", *SCRIPT_ARGS]
    for node_rank, want in enumerate(_expected_nodes()):
        for args, env in (((), {"FAKE_HOST": want["host"]}), ((str(node_rank),), {})):
            proc, rec = sandbox(["bash", str(script), *args], **env)
            assert proc.returncode == 0, proc.stderr
            node_env = _nccl(rec["env"])
            assert node_env == expected_env(want)
            hca = node_env.get("NCCL_IB_HCA")
            if hca is not None:  # exact names: mlx5_1 never selects mlx5_10..mlx5_19
                assert nccl_selects(hca, UNIVERSE) == sorted(want["hcas"], key=UNIVERSE.index)
            _check_rank_wrapper(sandbox, rec["argv"], node_env, want, script_argv)
    assert not (sandbox.work / "CANARY").exists()
    # the one-line commands carry the same settings in front of the same torchrun argv
    blocks = files["torchrun_commands.txt"].split("# node_rank ")[1:]
    for block, want in zip(blocks, _expected_nodes()):
        words = shlex.split(block.split("\n", 1)[1])
        at = words.index("torchrun")
        env = dict(w.split("=", 1) for w in words[:at])
        assert _nccl(env) == expected_env(want)
        _check_rank_wrapper(sandbox, words[at + 1:], _nccl(env), want, script_argv)


def test_slurm_script_sets_every_nodes_nccl_settings(sandbox, tmp_path):
    text = emit("slurm", example_plan())["planner.sbatch"]
    script = tmp_path / "planner.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    for want in _expected_nodes():
        proc, rec = sandbox(["bash", str(script)], SLURMD_NODENAME=want["host"])
        assert proc.returncode == 0, proc.stderr
        assert _nccl(rec["env"]) == expected_env(want)
        _check_rank_wrapper(sandbox, rec["argv"], _nccl(rec["env"]), want, ["train.py"])


def _k8s(p: Plan, options=None) -> dict:
    from planner.emit import EmitOptions
    text = emit("kubeflow", p, options or EmitOptions())["pytorchjob.yaml"]
    doc = yaml.safe_load(text)
    assert yaml.safe_load(yaml.safe_dump(doc)) == doc
    return doc


def _container(doc: dict, role: str) -> dict:
    return doc["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]


def test_kubernetes_master_gets_its_settings_and_workers_look_up_their_host(sandbox):
    doc = _k8s(example_plan())
    nodes = _expected_nodes()
    master = _container(doc, "Master")
    env = {e["name"]: k8s_unescape(e["value"]) for e in master["env"] if "value" in e}
    assert _nccl(env) == expected_env(nodes[0])
    args = [k8s_unescape(a) for a in master["args"]]
    _check_rank_wrapper(sandbox, args, _nccl(env), nodes[0], ["train.py"])
    # workers run on hosts with different settings: the wrapper picks them by node name
    worker = _container(doc, "Worker")
    [lookup] = [e for e in worker["env"] if e["name"] == "PLANNER_K8S_NODE"]
    assert lookup["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert not any(e["name"].startswith("NCCL_") for e in worker["env"])
    args = [k8s_unescape(a) for a in worker["args"]]
    for want in nodes[1:]:
        _check_rank_wrapper(sandbox, args, {}, want, ["train.py"], PLANNER_K8S_NODE=want["host"])
    at = args.index("--no-python")
    proc, _ = sandbox(["bash", "-c", args[at + 3], "x", "train.py"], LOCAL_RANK="0",
                      PLANNER_K8S_NODE="elsewhere")
    assert proc.returncode == 1 and "not in the plan's host table" in proc.stderr


def test_kubernetes_uniform_nodes_get_static_env_and_one_rail_wrapper(sandbox):
    doc = _k8s(dgx_plan())
    devices = load_cluster_preset("dgx-h100").node_groups[0].nics[0].devices
    want = {"host": None, "transport": "ib", "hcas": list(devices), "gid": None,
            "ifnames": [], "gpus": 8}
    for role in ("Master", "Worker"):
        c = _container(doc, role)
        env = {e["name"]: e["value"] for e in c["env"]}
        assert _nccl(env) == {"NCCL_NET": "IB", "NCCL_IB_HCA": "=" + ",".join(devices)}
        args = [k8s_unescape(a) for a in c["args"]]
        at = args.index("--no-python")
        for lr in range(8):
            proc, rec = sandbox(["bash", "-c", args[at + 3], "x", "train.py"],
                                LOCAL_RANK=str(lr), **_nccl(env))
            assert proc.returncode == 0, proc.stderr
            assert rec["env"]["NCCL_IB_HCA"] == expected_rail(want, lr) == "=" + devices[lr]


def test_hostile_hosts_and_arguments_stay_literal_in_the_nccl_wrappers(sandbox, tmp_path):
    from planner.emit import EmitOptions
    spec = example_spec()
    hostile = ["ib-a-01", "$(touch CANARY)", "`touch CANARY`", "a;touch CANARY",
               "q'uote\"d", "nl\ntouch CANARY", "roce-02", "*"]
    for g, i in zip(spec["node_groups"], range(0, 8, 2)):
        g["hosts"] = hostile[i:i + 2]
    p = _plan(cluster_from_dict(spec), tp=8, dp=8)
    options = EmitOptions(script="$(touch CANARY).py", script_args=("`touch CANARY`", "a b"),
                          plan_path="x'y.json")
    nodes = _expected_nodes()
    for want, host in zip(nodes, hostile):
        want["host"] = host
    script_argv = [options.script, *options.script_args]
    files = emission("torchrun", p, options).as_dict()
    script = tmp_path / "launch.sh"
    script.write_text(files["launch_torchrun.sh"])
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    for node_rank, want in enumerate(nodes):
        proc, rec = sandbox(["bash", str(script), str(node_rank)])
        assert proc.returncode == 0, proc.stderr
        _check_rank_wrapper(sandbox, rec["argv"], _nccl(rec["env"]), want, script_argv)
    doc = _k8s(p, options)
    args = [k8s_unescape(a) for a in _container(doc, "Worker")["args"]]
    for want in nodes[1:]:
        _check_rank_wrapper(sandbox, args, {}, want, script_argv, PLANNER_K8S_NODE=want["host"])
    assert not (sandbox.work / "CANARY").exists()
    assert sorted(os.listdir(sandbox.work)) == []


def test_nccl_settings_are_deterministic_and_notes_name_the_socket_groups():
    p = example_plan()
    for fmt in ("torchrun", "slurm", "kubeflow"):
        first = emission(fmt, p)
        assert first == emission(fmt, plan_from_json(plan_to_json(p)))
        assert any("NVIDIA/nccl#878" in n for n in first.notes)
        assert any(n.startswith("  node_rank 4 (roce): ") and "NCCL_IB_GID_INDEX=3" in n
                   for n in first.notes)


# --- an NCCL topology XML on the nodes (NCCL_TOPO_FILE) --------------------------------------

TOPO_FILE = "/opt/microsoft/ndv5-topo.xml"


def topo_spec() -> dict:
    """The example with an NCCL topology XML on the RoCE nodes only (as VMs would have)."""
    spec = example_spec()
    spec["node_groups"][2]["nccl_topo_file"] = TOPO_FILE
    return spec


@lru_cache(maxsize=None)
def topo_plan() -> Plan:
    return _plan(cluster_from_dict(topo_spec()), tp=8, dp=8)


def _topo_env(want: dict) -> dict[str, str]:
    return dict(expected_env(want), **({"NCCL_TOPO_FILE": TOPO_FILE}
                                       if want["host"].startswith("roce") else {}))


@pytest.mark.parametrize("path", [*HOSTILE_NAMES, "relative/topo.xml", "/a b.xml", "/x;y",
                                  "/" + "a" * 255])
def test_hostile_nccl_topo_files_are_refused_by_the_spec(path):
    spec = topo_spec()
    spec["node_groups"][2]["nccl_topo_file"] = path
    with pytest.raises(ValidationError) as raised:
        cluster_from_dict(spec)
    assert raised.value.errors()[0]["loc"][-1] == "nccl_topo_file"


def test_nccl_topo_file_reaches_only_its_groups_nodes_in_every_launcher(sandbox, tmp_path):
    p = topo_plan()
    assert [e.get("topo_file") for e in p.fabric["nodes"]] == [None] * 4 + [TOPO_FILE] * 2 + [
        None] * 2
    assert cluster_to_plain(p.cluster())["node_groups"][2]["nccl_topo_file"] == TOPO_FILE
    # the rest of the section is the example's, key for key
    assert [{k: v for k, v in e.items() if k != "topo_file"} for e in p.fabric["nodes"]] == \
        example_plan().fabric["nodes"]
    nodes = _expected_nodes()
    files = emit("torchrun", p)
    script = tmp_path / "launch_torchrun.sh"
    script.write_text(files["launch_torchrun.sh"])
    for node_rank, want in enumerate(nodes):
        proc, rec = sandbox(["bash", str(script), str(node_rank)])
        assert proc.returncode == 0, proc.stderr
        assert _nccl(rec["env"]) == _topo_env(want)
    sbatch = tmp_path / "planner.sbatch"
    sbatch.write_text(emit("slurm", p)["planner.sbatch"])
    for want in nodes:
        proc, rec = sandbox(["bash", str(sbatch)], SLURMD_NODENAME=want["host"])
        assert proc.returncode == 0, proc.stderr
        assert _nccl(rec["env"]) == _topo_env(want)
    args = [k8s_unescape(a) for a in _container(_k8s(p), "Worker")["args"]]
    at = args.index("--no-python")
    for want in nodes[1:]:
        proc, rec = sandbox(["bash", "-c", args[at + 3], "x", "train.py"], LOCAL_RANK="0",
                            PLANNER_K8S_NODE=want["host"])
        assert proc.returncode == 0, proc.stderr
        assert rec["env"].get("NCCL_TOPO_FILE") == _topo_env(want).get("NCCL_TOPO_FILE")


@pytest.mark.parametrize("edit", [
    lambda f: f["nodes"][4].__setitem__("topo_file", "/opt/$(id).xml"),   # hostile
    lambda f: f["nodes"][4].__setitem__("topo_file", "/opt/other.xml"),   # not the spec's
    lambda f: f["nodes"][0].__setitem__("topo_file", TOPO_FILE),          # a node without one
    lambda f: f["nodes"][4].pop("topo_file")])                            # dropped
def test_hand_edited_topo_files_are_refused(edit):
    p = _edited(topo_plan(), edit)
    with pytest.raises(InvalidPlanError):
        validate_plan(p)
    with pytest.raises(ValueError, match="fabric"):
        emit("torchrun", p)


def test_a_topo_file_alone_gives_a_fabric_section():
    spec = {"name": "vm", "node_groups": [{
        "name": "nd", "count": 2, "gpu": "H100", "gpus_per_node": 8, "fabric": "nvswitch",
        "nccl_topo_file": TOPO_FILE, "nics": [{"count": 8, "gbps": 400, "transport": "ib"}]}],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 2}]}}
    p = _plan(cluster_from_dict(spec), tp=8, dp=2, gb=16)
    assert [nccl_env_of(e) for e in p.fabric["nodes"]] == [
        {"NCCL_NET": "IB", "NCCL_TOPO_FILE": TOPO_FILE}] * 2


def nccl_env_of(entry: dict) -> dict[str, str]:
    from planner.plan.fabric import nccl_env
    return dict(nccl_env(entry))
