"""Launch-config emitters (``planner.emit``): every format parses, puts every node at the
plan's node rank, reproduces the plan's degrees and layer split, refuses what it cannot
express, is deterministic, and passes hostile strings from user files through literally.

The torchrun and Slurm scripts are executed for real with a fake ``torchrun`` (records its
argv and environment as JSON), a fake ``hostname`` and a fake ``srun`` on ``PATH``.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.step import estimate
from planner.emit import FORMATS, EmitOptions, emission, emit
from planner.emit.kubeflow import k8s_unescape
from planner.emit.megatron import pipeline_layout
from planner.training.estimation import load_profile
from planner.inputs.models import load_model
from planner.plan.document import Plan, plan_from_json, plan_to_json
from planner.training.build import build_plan
from topologies.spec import cluster_from_dict
from topologies.standard import homogeneous_cluster

HOSTILE_HOSTS = ("a;rm -rf ~", "$(id)", "`id`", "$(touch CANARY)", "b;touch CANARY",
                 "q'uote\"d", "nl\ntouch CANARY", "*")
HOSTILE_ARGS = ("it's", 'say "hi"', "two\nlines", "$(touch CANARY)", "`touch CANARY`",
                "--flag=$HOME", "; touch CANARY #", "")
HOSTILE_JOB = 'x"; rm -rf / #'


# --- plans --------------------------------------------------------------------------------


def _build(model: str = "llama-3.1-8b", nodes: int = 2, cluster=None, seq: int = 4096,
           gb: int = 64, precision: str = "bf16", **cfg) -> Plan:
    m = load_model(model)
    c = cluster if cluster is not None else homogeneous_cluster("H100", nodes)
    w = Workload(seq_len=seq, global_batch=gb, precision=precision)
    prof = load_profile(c.node_groups[0].gpu.name, None)
    return build_plan(m, c, estimate(m, c, w, TrainingConfig.from_dict(cfg), prof), prof, why="test")


def _hetero_cluster():
    nic = [{"count": 8, "gbps": 400, "transport": "ib"}]
    group = {"gpu": "H100", "fabric": "nvswitch", "nics": nic}
    return cluster_from_dict({
        "name": "het", "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 32}]},
        "node_groups": [{**group, "name": "big", "count": 1, "gpus_per_node": 8,
                         "hosts": ["big0.example.com"]},
                        {**group, "name": "small", "count": 1, "gpus_per_node": 4,
                         "hosts": ["small0"]}]})


SPECS = {
    "mixtral": dict(model="mixtral-8x7b", nodes=4, tp=2, pp=2, dp=8, ep=4,
                    sequence_parallel=True),
    "vpp": dict(tp=2, pp=2, dp=4, vpp=2),
    "first": dict(tp=2, pp=2, dp=4, stage_layer_counts=(15, 17)),
    "firstlast": dict(tp=1, pp=4, dp=4, stage_layer_counts=(7, 9, 9, 7)),
    "layout": dict(tp=1, pp=4, dp=4, stage_layer_counts=(6, 9, 8, 9)),
    "vpp_uneven": dict(tp=2, pp=2, dp=4, vpp=3),
    "zb": dict(tp=2, pp=2, dp=4, zero_bubble=True, recompute="full", recompute_layers=2),
    "zero3": dict(nodes=1, tp=2, dp=4, zero=3, recompute="selective"),
    "op": dict(nodes=1, tp=2, dp=4, recompute="op", sequence_parallel=True),
    "cp": dict(tp=2, dp=4, cp=2, sequence_parallel=True),
    "moe_zero3": dict(model="mixtral-8x7b", nodes=4, tp=2, pp=2, dp=8, ep=4, zero=3),
    "fp8": dict(nodes=1, tp=8, dp=1, precision="fp8", sequence_parallel=True,
                tp_comm_overlap=True),
    "fp16": dict(nodes=1, tp=1, dp=8, zero=2, precision="fp16"),
    "hetero": dict(cluster="hetero", tp=2, dp=6, gb=60),
    "nvfp4": dict(cluster="gb300", tp=2, dp=4, precision="nvfp4"),
}

# format -> plans it cannot express (everything else must emit)
REFUSED = {
    "deepspeed": {"vpp", "vpp_uneven", "zero3", "cp", "moe_zero3"},
    "torchtitan": {"mixtral", "fp16", "nvfp4"},
    "kubeflow": {"hetero"},
}


@lru_cache(maxsize=None)
def plan(name: str) -> Plan:
    spec = dict(SPECS[name])
    if spec.get("cluster") == "hetero":
        spec["cluster"] = _hetero_cluster()
    if spec.get("cluster") == "gb300":
        spec["cluster"] = homogeneous_cluster("GB300", 2, 4)
    return _build(**spec)


def edited(p: Plan, edit) -> Plan:
    """A deep copy of ``p`` (through its JSON) changed by ``edit(dict)``."""
    data = json.loads(plan_to_json(p))
    edit(data)
    return plan_from_json(json.dumps(data))


def with_hosts(p: Plan, hosts) -> Plan:
    def edit(data):
        for node, host in zip(data["pools"][0]["nodes"], hosts):
            node["host"] = host
        data["inputs"]["cluster"]["node_groups"][0]["hosts"] = list(hosts)
    return edited(p, edit)


def hostile_plan() -> Plan:
    """Mixtral on 8 nodes whose host names are all hostile."""
    return with_hosts(_build(model="mixtral-8x7b", nodes=8, tp=2, pp=2, dp=16, ep=4,
                             sequence_parallel=True), HOSTILE_HOSTS)


CASES = [(fmt, name) for fmt in FORMATS for name in SPECS if name not in REFUSED.get(fmt, ())]


# --- helpers --------------------------------------------------------------------------------


def _exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def sandbox(tmp_path: Path):
    """A work dir with fakes on PATH; returns run(script_path, *args, **env) -> (rc, record)."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    record = tmp_path / "torchrun.json"
    _exe(fake / "torchrun", f"#!{sys.executable}\n"
         "import json, os, sys\n"
         "keep = ('PLANNER_PLAN', 'PLANNER_NODE_RANK', 'PET_RDZV_ENDPOINT', 'PET_STANDALONE')\n"
         "with open(os.environ['TORCHRUN_RECORD'], 'w') as fh:\n"
         "    json.dump({'argv': sys.argv[1:],\n"
         "               'env': {k: os.environ.get(k) for k in keep}}, fh)\n")
    _exe(fake / "hostname", "#!/usr/bin/env bash\n"
         'case "${1:-}" in\n'
         '  -s) printf "%s\\n" "${FAKE_HOST%%.*}" ;;\n'
         '  -f) printf "%s\\n" "${FAKE_FQDN:-$FAKE_HOST}" ;;\n'
         '  *) printf "%s\\n" "$FAKE_HOST" ;;\n'
         "esac\n")
    _exe(fake / "srun", "#!/usr/bin/env bash\n"
         'while [ "$#" -gt 0 ] && [[ "$1" == --* ]]; do shift; done\n'
         'exec "$@"\n')

    def run(script: Path, *args: str, **env: str):
        record.unlink(missing_ok=True)
        base = {"PATH": f"{fake}:{os.environ['PATH']}", "HOME": str(work),
                "TORCHRUN_RECORD": str(record), "FAKE_HOST": "unknown-host",
                "PET_RDZV_ENDPOINT": "evil:1", "PET_STANDALONE": "1"}
        proc = subprocess.run(["bash", str(script), *args], cwd=work, capture_output=True,
                              text=True, env={**base, **env}, timeout=30)
        data = json.loads(record.read_text()) if record.exists() else None
        return proc, data

    run.work = work
    return run


def write_files(files: dict[str, str], where: Path) -> dict[str, Path]:
    paths = {}
    for name, text in files.items():
        path = where / name
        path.write_text(text)
        paths[name] = path
    return paths


def option_value(argv: list[str], flag: str) -> str:
    [value] = [a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")]
    return value


def parse_commands(text: str) -> list[list[str]]:
    """The per-node commands of torchrun_commands.txt (each after its '# node_rank' line)."""
    blocks = re.split(r"^# node_rank \d+: .*$", text, flags=re.M)[1:]
    return [shlex.split(block) for block in blocks]


def megatron_dict(args: list[str]) -> dict[str, list[str]]:
    """Flag -> the values after it (empty list for a switch)."""
    out: dict[str, list[str]] = {}
    flag = None
    for a in args:
        if a.startswith("--"):
            flag = a
            out[flag] = []
        else:
            out[flag].append(a)
    return out


def parse_layout(layout: str) -> list[str]:
    """Megatron's layout grammar (checked independently): ``(...)*n`` and ``x*n`` unrolled,
    commas ignored, stages split on ``|``."""
    s = layout.replace(",", "")
    while (m := re.search(r"\(([^()]*)\)\*(\d+)", s)):
        s = s[:m.start()] + m.group(1) * int(m.group(2)) + s[m.end():]
    s = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    return s.split("|")


# --- every format parses ------------------------------------------------------------------


@pytest.mark.parametrize("fmt,name", CASES)
def test_each_format_emits_files_that_parse(fmt, name, tmp_path):
    files = emit(fmt, plan(name))
    assert files
    for fname, path in write_files(files, tmp_path).items():
        text = files[fname]
        if fname.endswith((".sh", ".sbatch")):
            proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
            assert text.startswith("#!/usr/bin/env bash\n")
        elif fname.endswith(".yaml"):
            assert yaml.safe_load(text)["kind"] == "PyTorchJob"
        elif fname.endswith(".json"):
            json.loads(text)
        elif fname.endswith(".toml"):
            tomllib.loads(text)
        if not fname.endswith(".json"):  # JSON has no comments
            assert "Generated by planner" in text and "Do not edit by hand" in text
            assert f"inputs_hash: {plan(name).inputs_hash}" in text


@pytest.mark.parametrize("fmt,name", [(f, n) for f, ns in REFUSED.items() for n in ns])
def test_formats_refuse_plans_they_cannot_express(fmt, name):
    with pytest.raises(ValueError, match=f"^{fmt}: "):
        emit(fmt, plan(name))


def test_unknown_format_and_bad_options_raise():
    p = plan("mixtral")
    with pytest.raises(ValueError, match="unknown format 'bash'"):
        emit("bash", p)
    for bad in (EmitOptions(script="-m evil"), EmitOptions(script=""),
                EmitOptions(script="a\x00b"), EmitOptions(script_args=["a"]),
                EmitOptions(master_port=0), EmitOptions(master_port=True),
                EmitOptions(job_name=""), EmitOptions(plan_path="\ud800")):
        with pytest.raises(ValueError, match="^option "):
            emit("torchrun", p, bad)


def test_malformed_plans_raise_value_error():
    p = plan("mixtral")
    edits = {
        "degrees.tp": lambda d: d["pools"][0]["degrees"].__setitem__("tp", "2; rm -rf ~"),
        "inputs_hash": lambda d: d.__setitem__("inputs_hash", "x\nrm -rf ~"),
        "node_rank": lambda d: d["pools"][0]["nodes"].reverse(),
        "gpus": lambda d: d["pools"][0]["nodes"][0].__setitem__("gpus", "8"),
        "duplicate": lambda d: d["pools"][0]["nodes"][1].__setitem__("host", d["pools"][0]["nodes"][0]["host"]),
        "empty host": lambda d: d["pools"][0]["nodes"][1].__setitem__("host", ""),
        "NUL host": lambda d: d["pools"][0]["nodes"][1].__setitem__("host", "a\x00b"),
        "chunks": lambda d: d["training"]["stages"][1]["chunks"][0].__setitem__(0, 3),
        "micro_batches": lambda d: d["training"].__setitem__("micro_batches", 3),
        "schedule": lambda d: d["training"].__setitem__("schedule", "zb-h1"),
    }
    for what, edit in edits.items():
        bad = edited(p, edit)
        for fmt in ("torchrun", "megatron"):
            with pytest.raises(ValueError, match="plan"):
                emit(fmt, bad)


# --- node ranks ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mixtral", "hetero"])
def test_torchrun_commands_put_each_host_at_its_plan_node_rank(name):
    p = plan(name)
    commands = parse_commands(emit("torchrun", p)["torchrun_commands.txt"])
    assert len(commands) == len(p.nodes)
    for node, argv in zip(p.nodes, commands):
        assert argv[0] == "PLANNER_PLAN=plan.json" and argv[1] == "torchrun"
        assert option_value(argv, "--nnodes") == str(len(p.nodes))
        assert option_value(argv, "--nproc-per-node") == str(node["gpus"])
        assert option_value(argv, "--node-rank") == str(node["node_rank"])
        assert option_value(argv, "--master-addr") == p.nodes[0]["host"]
        assert option_value(argv, "--rdzv-backend") == "static"
        assert argv[-1] == "train.py"


def _expected_argv(p: Plan, node: dict, options: EmitOptions) -> list[str]:
    return [f"--nnodes={len(p.nodes)}", f"--nproc-per-node={node['gpus']}",
            f"--node-rank={node['node_rank']}", "--rdzv-backend=static",
            f"--master-addr={p.nodes[0]['host']}", f"--master-port={options.master_port}",
            options.script, *options.script_args]


@pytest.mark.parametrize("name", ["mixtral", "hetero"])
def test_torchrun_script_runs_each_node_at_its_rank(name, sandbox, tmp_path):
    p = plan(name)
    options = EmitOptions(script="pretrain.py", script_args=("--lr", "3e-4"), master_port=1234,
                          plan_path="/plans/p.json")
    script = write_files(emit("torchrun", p, options), tmp_path)["launch_torchrun.sh"]
    for node in p.nodes:
        expected = _expected_argv(p, node, options)
        for how in ("hostname", "argument"):
            if how == "hostname":
                proc, rec = sandbox(script, FAKE_HOST=node["host"])
            else:
                proc, rec = sandbox(script, str(node["node_rank"]))
            assert proc.returncode == 0, proc.stderr
            assert rec["argv"] == expected
            assert rec["env"] == {"PLANNER_PLAN": "/plans/p.json",
                                  "PLANNER_NODE_RANK": str(node["node_rank"]),
                                  "PET_RDZV_ENDPOINT": None, "PET_STANDALONE": None}


def test_torchrun_script_matches_short_and_fully_qualified_names(sandbox, tmp_path):
    p = with_hosts(plan("vpp"), ["gpu1.cluster.local", "gpu2"])
    script = write_files(emit("torchrun", p), tmp_path)["launch_torchrun.sh"]
    # FQDN in the plan, machine says only its short name
    proc, rec = sandbox(script, FAKE_HOST="gpu1", FAKE_FQDN="gpu1")
    assert proc.returncode == 0 and option_value(rec["argv"], "--node-rank") == "0"
    # short name in the plan, machine's hostname is fully qualified
    proc, rec = sandbox(script, FAKE_HOST="gpu2.cluster.local")
    assert proc.returncode == 0 and option_value(rec["argv"], "--node-rank") == "1"


def test_torchrun_script_refuses_unknown_hosts_and_bad_ranks(sandbox, tmp_path):
    script = write_files(emit("torchrun", plan("mixtral")), tmp_path)["launch_torchrun.sh"]
    proc, rec = sandbox(script, FAKE_HOST="stranger")
    assert proc.returncode == 1 and rec is None and "not in the plan's host table" in proc.stderr
    for bad in ("4", "-1", "1;touch CANARY", "99999999999999999999", "0x1", "1 2", ""):
        proc, rec = sandbox(script, bad)
        assert proc.returncode == 2 and rec is None, bad
    proc, rec = sandbox(script, "1", "2")
    assert proc.returncode == 2 and rec is None
    assert not (sandbox.work / "CANARY").exists()


def test_slurm_sbatch_directives_and_rank_table(sandbox, tmp_path):
    # plan order deliberately differs from sorted order: Slurm's SLURM_NODEID would be wrong
    hosts = ["zeta", "alpha", "mu", "beta"]
    p = with_hosts(plan("mixtral"), hosts)
    text = emit("slurm", p, EmitOptions(job_name="my job"))["planner.sbatch"]
    directives = dict(line[len("#SBATCH "):].split("=", 1) for line in text.splitlines()
                      if line.startswith("#SBATCH --") and "=" in line)
    assert directives == {"--job-name": "my-job", "--nodes": "4", "--ntasks-per-node": "1",
                          "--gpus-per-node": "8", "--nodelist": "zeta,alpha,mu,beta"}
    assert "#SBATCH --exclusive" in text.splitlines()
    assert "SLURM_NODEID" not in text.replace("not SLURM_NODEID", "")
    script = write_files({"planner.sbatch": text}, tmp_path)["planner.sbatch"]
    for rank, host in enumerate(hosts):
        for env in ({"SLURMD_NODENAME": host}, {"FAKE_HOST": host}):
            proc, rec = sandbox(script, **env)
            assert proc.returncode == 0, proc.stderr
            assert rec["argv"] == _expected_argv(p, p.nodes[rank], EmitOptions())
            assert rec["env"]["PLANNER_PLAN"] == "plan.json"


def test_slurm_heterogeneous_nodes_use_the_largest_gpu_count_with_a_note():
    text = emit("slurm", plan("hetero"))["planner.sbatch"]
    assert "#SBATCH --gpus-per-node=8" in text
    assert "differ in GPU count" in text


def test_kubeflow_pins_master_and_confines_workers():
    p = plan("mixtral")
    doc = yaml.safe_load(emit("kubeflow", p, EmitOptions(job_name=HOSTILE_JOB))["pytorchjob.yaml"])
    assert doc["apiVersion"] == "kubeflow.org/v1" and doc["kind"] == "PyTorchJob"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
    assert doc["metadata"]["annotations"]["planner/job-name"] == HOSTILE_JOB
    assert doc["spec"]["nprocPerNode"] == "8"
    master, worker = (doc["spec"]["pytorchReplicaSpecs"][k] for k in ("Master", "Worker"))
    assert master["replicas"] == 1 and worker["replicas"] == len(p.nodes) - 1
    mspec, wspec = master["template"]["spec"], worker["template"]["spec"]
    assert mspec["nodeSelector"] == {"kubernetes.io/hostname": p.nodes[0]["host"]}
    [term] = wspec["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "kubernetes.io/hostname", "operator": "In",
                                         "values": [n["host"] for n in p.nodes[1:]]}]
    for spec in (mspec, wspec):
        [c] = spec["containers"]
        assert c["name"] == "pytorch" and c["command"] == ["torchrun"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert "--node-rank=$(PET_NODE_RANK)" in c["args"]
        assert "--master-addr=$(PET_MASTER_ADDR)" in c["args"]
        assert c["env"] == [{"name": "PLANNER_PLAN", "value": "plan.json"}]
    assert "pod index" in doc["metadata"]["annotations"]["planner/notes"]


# --- Megatron -------------------------------------------------------------------------------


def _megatron(name: str) -> tuple[dict[str, list[str]], str]:
    files = emit("megatron", plan(name))
    return megatron_dict(json.loads(files["megatron_args.json"])), files["megatron_args.sh"]


def _stage_layers_from_args(args: dict[str, list[str]], p: Plan) -> list[list[int]]:
    """Per model chunk (virtual-stage order) decoder-layer counts as Megatron would build."""
    cfg, layers = p.config, p.inputs["model"]["num_layers"]
    pp, vpp = cfg["pp"], cfg["vpp"]
    if "--pipeline-model-parallel-layout" in args:
        stages = parse_layout(args["--pipeline-model-parallel-layout"][0])
        assert stages[0].startswith("E") and stages[-1].endswith("L")
        return [s.count("t") for s in stages]
    if "--num-layers-per-virtual-pipeline-stage" in args:
        per = int(args["--num-layers-per-virtual-pipeline-stage"][0])
        return [per] * (layers // per)
    first = args.get("--decoder-first-pipeline-num-layers")
    last = args.get("--decoder-last-pipeline-num-layers")
    counts = [None] * pp
    if first:
        counts[0] = int(first[0])
    if last:
        counts[-1] = int(last[0])
    rest = [i for i, c in enumerate(counts) if c is None]
    left = layers - sum(c for c in counts if c is not None)
    for i in rest:
        counts[i] = left // len(rest)
    assert vpp == 1
    return counts


@pytest.mark.parametrize("name", [n for n in SPECS if n != "fp16"] + ["fp16"])
def test_megatron_degrees_batch_and_layers_reproduce_the_plan(name):
    p = plan(name)
    args, _ = _megatron(name)
    cfg, model = p.config, p.inputs["model"]
    one = {k: v[0] for k, v in args.items() if v}
    assert one["--tensor-model-parallel-size"] == str(cfg["tp"])
    assert one["--pipeline-model-parallel-size"] == str(cfg["pp"])
    assert one["--context-parallel-size"] == str(cfg["cp"])
    assert one["--num-layers"] == str(model["num_layers"])
    assert one["--hidden-size"] == str(model["hidden_size"])
    assert one["--num-attention-heads"] == str(model["num_heads"])
    assert one["--micro-batch-size"] == str(cfg["micro_batch"])
    assert one["--global-batch-size"] == str(p.inputs["workload"]["global_batch"])
    assert one["--seq-length"] == str(p.inputs["workload"]["seq_len"])
    if model["moe"]:
        assert one["--expert-model-parallel-size"] == str(cfg["ep"])
        assert one["--expert-tensor-parallel-size"] == str(cfg["etp"] or cfg["tp"])
        assert one["--num-experts"] == str(model["moe"]["num_experts"])
    if model["num_kv_heads"] != model["num_heads"]:
        assert one["--num-query-groups"] == str(model["num_kv_heads"])
    assert ("--sequence-parallel" in args) == (cfg["sequence_parallel"] and cfg["tp"] > 1)
    assert ("--use-distributed-optimizer" in args) == (cfg["zero"] >= 1)
    chunks = _stage_layers_from_args(args, p)
    expected = [p.stages[j % cfg["pp"]]["chunks"][j // cfg["pp"]][1]
                for j in range(cfg["pp"] * cfg["vpp"])]
    assert chunks == expected and sum(chunks) == model["num_layers"]


def test_megatron_pipeline_flags_pick_the_simplest_form():
    assert "--decoder-last-pipeline-num-layers" not in _megatron("first")[0]
    assert _megatron("first")[0]["--decoder-first-pipeline-num-layers"] == ["15"]
    flags = _megatron("firstlast")[0]
    assert flags["--decoder-first-pipeline-num-layers"] == ["7"]
    assert flags["--decoder-last-pipeline-num-layers"] == ["7"]
    assert _megatron("vpp")[0]["--num-layers-per-virtual-pipeline-stage"] == ["8"]
    assert _megatron("layout")[0]["--pipeline-model-parallel-layout"] == ["Et*6|t*9|t*8|t*9L"]
    assert parse_layout(pipeline_layout((0, 3, 1), mtp_layers=2)) == ["E", "ttt", "tmmL"]
    for name in ("mixtral", "zero3", "cp"):
        args = _megatron(name)[0]
        assert not any("pipeline-num-layers" in a or "layout" in a or "virtual" in a
                       for a in args)


def test_megatron_writes_the_plans_recompute_modules(tmp_path):
    """Named submodules go to --recompute-modules as the plan names them, and survive the
    plan file; the default set for a dense model is the norms (Megatron refuses moe_act
    without MoE layers)."""
    named = _build(nodes=1, dp=8, recompute="selective", recompute_modules=["mlp", "layernorm"])
    path = tmp_path / "plan.json"
    path.write_text(plan_to_json(named))
    args = megatron_dict(json.loads(emit("megatron", plan_from_json(path.read_text()))[
        "megatron_args.json"]))
    assert args["--recompute-modules"] == ["mlp", "layernorm"]
    default = _build(nodes=1, dp=8, recompute="selective")
    args = megatron_dict(json.loads(emit("megatron", default)["megatron_args.json"]))
    assert args["--recompute-modules"] == ["layernorm"]


def test_megatron_memory_precision_and_schedule_flags():
    args, text = _megatron("zb")
    assert args["--recompute-granularity"] == ["full"]
    assert args["--recompute-method"] == ["block"] and args["--recompute-num-layers"] == ["2"]
    assert "# NOTE: Schedule ZB-H1 (zero bubble) is not in mainline Megatron-LM" in text
    args, text = _megatron("zero3")
    for flag in ("--use-megatron-fsdp", "--no-gradient-accumulation-fusion",
                 "--use-distributed-optimizer"):
        assert flag in args
    assert args["--data-parallel-sharding-strategy"] == ["optim_grads_params"]
    assert args["--ckpt-format"] == ["fsdp_dtensor"]
    assert args["--recompute-granularity"] == ["selective"]
    assert args["--recompute-modules"] == ["layernorm"]
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in text
    args, text = _megatron("fp8")
    assert args["--fp8-format"] == ["hybrid"] and "--bf16" in args
    assert "--tp-comm-overlap" in args and "--sequence-parallel" in args
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text
    args, _ = _megatron("nvfp4")  # 4-bit GEMMs and weights, as the estimate priced them
    assert args["--fp4-format"] == ["e2m1"] and args["--fp4-recipe"] == ["nvfp4"]
    assert "--fp4-param-gather" in args and "--bf16" in args and "--fp8-format" not in args
    args, _ = _megatron("fp16")
    assert "--fp16" in args and "--bf16" not in args
    assert args["--data-parallel-sharding-strategy"] == ["optim_grads"]
    args, _ = _megatron("mixtral")
    assert args["--moe-token-dispatcher-type"] == ["alltoall"] and "--moe-grouped-gemm" in args
    assert "--overlap-grad-reduce" in args and "--overlap-param-gather" in args


def test_megatron_bash_array_equals_the_json_list(tmp_path):
    for name in ("mixtral", "layout", "zero3"):
        files = write_files(emit("megatron", plan(name)), tmp_path)
        proc = subprocess.run(
            ["bash", "-c", 'set -eu; source "$1"; printf "%s\\0" "${MEGATRON_ARGS[@]}"', "x",
             str(files["megatron_args.sh"])], capture_output=True, text=True, check=True)
        assert proc.stdout.split("\0")[:-1] == json.loads(files["megatron_args.json"].read_text())


# --- DeepSpeed and torchtitan ------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in SPECS if n not in REFUSED["deepspeed"]])
def test_deepspeed_batch_arithmetic(name):
    p = plan(name)
    cfg = p.config
    ds = json.loads(emit("deepspeed", p)["ds_config.json"])
    dp_world = p.num_gpus // (cfg["tp"] * cfg["pp"])
    assert dp_world == cfg["dp"] * cfg["cp"]
    assert ds["train_batch_size"] == p.inputs["workload"]["global_batch"]
    assert ds["train_batch_size"] == (ds["train_micro_batch_size_per_gpu"]
                                      * ds["gradient_accumulation_steps"] * dp_world)
    assert ds["train_micro_batch_size_per_gpu"] == cfg["micro_batch"]
    assert ds["zero_optimization"]["stage"] == cfg["zero"]
    assert ds["gradient_clipping"] == 1.0
    precision = p.inputs["workload"]["precision"]
    assert ds["bf16"]["enabled"] == (precision != "fp16")
    assert ds["fp16"]["enabled"] == (precision == "fp16")
    assert ds.get("tensor_parallel", {}).get("autotp_size", 1) == cfg["tp"]


@pytest.mark.parametrize("name", [n for n in SPECS if n not in REFUSED["torchtitan"]])
def test_torchtitan_degrees_batches_and_stages(name):
    p = plan(name)
    cfg = p.config
    doc = tomllib.loads(emit("torchtitan", p, EmitOptions(job_name=HOSTILE_JOB))[
        "torchtitan.toml"])
    par, train = doc["parallelism"], doc["training"]
    assert doc["job"]["description"] == HOSTILE_JOB
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == cfg["dp"]
    assert par["data_parallel_shard_degree"] == (cfg["dp"] if cfg["zero"] == 3 else 1)
    assert par["tensor_parallel_degree"] == cfg["tp"]
    assert par["pipeline_parallel_degree"] == cfg["pp"]
    assert par["context_parallel_degree"] == cfg["cp"]
    assert train["global_batch_size"] == p.inputs["workload"]["global_batch"]
    assert train["seq_len"] == p.inputs["workload"]["seq_len"]
    ac = doc["activation_checkpoint"]
    # torchtitan's per-op policy is its selective mode with the "op" option
    assert ac["mode"] == ("selective" if cfg["recompute"] == "op" else cfg["recompute"])
    if cfg["recompute"] in ("op", "selective"):
        assert ac["selective_ac_option"] == "op"
    if cfg["pp"] > 1:
        assert par["pipeline_parallel_schedule"] == {
            "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B",
            "zb-h1": "InterleavedZeroBubble"}[p.schedule]
        mb = par["pipeline_parallel_microbatch_size"]
        assert mb == cfg["micro_batch"] and train["local_batch_size"] // mb == p.micro_batches
        parts = par["module_fqns_per_model_part"]
        assert len(parts) == cfg["pp"] * cfg["vpp"]
        layers = [m for part in parts for m in part if m.startswith("layers.")]
        assert layers == [f"layers.{i}" for i in range(p.inputs["model"]["num_layers"])]
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
        for j, part in enumerate(parts):
            chunk = p.stages[j % cfg["pp"]]["chunks"][j // cfg["pp"]]
            assert [m for m in part if m.startswith("layers.")] == [
                f"layers.{i}" for i in range(chunk[0], chunk[0] + chunk[1])]
    else:  # gradient accumulation: global / (local x dp)
        assert train["global_batch_size"] // (train["local_batch_size"] * cfg["dp"]) == \
            p.micro_batches
    if p.inputs["model"]["moe"]:
        assert par["expert_parallel_degree"] == cfg["ep"]
        assert par["expert_tensor_parallel_degree"] == (cfg["etp"] or cfg["tp"])


# --- hostile strings ---------------------------------------------------------------------------


HOSTILE_OPTIONS = EmitOptions(script="$(touch CANARY)/train.py", script_args=HOSTILE_ARGS,
                              job_name=HOSTILE_JOB, plan_path="`touch CANARY`.json",
                              image="img:latest\n# evil: yes")


def test_hostile_hosts_and_arguments_reach_torchrun_literally(sandbox, tmp_path):
    p = hostile_plan()
    files = write_files(emit("torchrun", p, HOSTILE_OPTIONS), tmp_path)
    script = files["launch_torchrun.sh"]
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    for node in p.nodes:
        expected = _expected_argv(p, node, HOSTILE_OPTIONS)
        for env, args in (({"FAKE_HOST": node["host"]}, ()), ({}, (str(node["node_rank"]),))):
            proc, rec = sandbox(script, *args, **env)
            assert proc.returncode == 0, (node["host"], proc.stderr)
            assert rec["argv"] == expected
            assert rec["env"]["PLANNER_PLAN"] == HOSTILE_OPTIONS.plan_path
    assert not (sandbox.work / "CANARY").exists()
    assert sorted(os.listdir(sandbox.work)) == []
    # the plain-text commands split back into the same literal argv
    commands = parse_commands(files["torchrun_commands.txt"].read_text())
    for node, argv in zip(p.nodes, commands):
        assert argv[2:] == _expected_argv(p, node, HOSTILE_OPTIONS)
        assert argv[0] == "PLANNER_PLAN=" + HOSTILE_OPTIONS.plan_path


def test_hostile_hosts_in_slurm_are_matched_literally(sandbox, tmp_path):
    p = hostile_plan()
    text = emit("slurm", p, HOSTILE_OPTIONS)["planner.sbatch"]
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert not any(line.startswith("#SBATCH --nodelist") for line in directives)
    [job] = [line for line in directives if line.startswith("#SBATCH --job-name=")]
    assert re.fullmatch(r"#SBATCH --job-name=[A-Za-z0-9._-]+", job)
    # no user text escapes a comment: every line is a directive, a comment or generated code
    script = write_files({"planner.sbatch": text}, tmp_path)["planner.sbatch"]
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    for node in p.nodes:
        proc, rec = sandbox(script, SLURMD_NODENAME=node["host"])
        assert proc.returncode == 0, (node["host"], proc.stderr)
        assert rec["argv"] == _expected_argv(p, node, HOSTILE_OPTIONS)
    assert not (sandbox.work / "CANARY").exists()


def test_hostile_strings_round_trip_through_yaml_toml_and_json():
    p = edited(hostile_plan(), lambda d: d["inputs"]["model"].__setitem__(
        "name", 'mixtral"\n[evil]\nx = 1 # \x7f'))
    doc = yaml.safe_load(emit("kubeflow", p, HOSTILE_OPTIONS)["pytorchjob.yaml"])
    specs = doc["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] == \
        HOSTILE_HOSTS[0]
    for spec in specs.values():
        [c] = spec["template"]["spec"]["containers"]
        assert c["image"] == HOSTILE_OPTIONS.image
        tail = [k8s_unescape(a) for a in c["args"][-len(HOSTILE_ARGS) - 1:]]
        assert tail == [HOSTILE_OPTIONS.script, *HOSTILE_ARGS]
        assert "$(" not in "".join(c["args"]).replace("$$(", "").replace(
            "$(PET_NODE_RANK)", "").replace("$(PET_MASTER_ADDR)", "").replace(
            "$(PET_MASTER_PORT)", "")
        assert k8s_unescape(c["env"][0]["value"]) == HOSTILE_OPTIONS.plan_path
    assert doc["metadata"]["annotations"]["planner/job-name"] == HOSTILE_JOB
    worker = specs["Worker"]["template"]["spec"]["affinity"]["nodeAffinity"]
    values = worker["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"][0]["values"]
    assert values == list(HOSTILE_HOSTS[1:])
    assert "Not valid Kubernetes label values" in doc["metadata"]["annotations"]["planner/notes"]
    # TOML: model and job names (torchtitan needs ZeRO-3 with expert parallelism)
    p3 = edited(p, lambda d: d["training"]["options"].__setitem__("zero", 3))
    doc = tomllib.loads(emit("torchtitan", p3, HOSTILE_OPTIONS)["torchtitan.toml"])
    assert doc["job"]["description"] == HOSTILE_JOB
    assert doc["model"]["name"] == p.inputs["model"]["name"]
    assert set(doc) == {"job", "model", "training", "parallelism", "activation_checkpoint"}
    # the comment blocks never carry a raw newline from user text: every line up to the
    # first line of code is a comment (shell, YAML, TOML alike)
    first_code = {".sh": "set -euo pipefail", ".sbatch": "set -euo pipefail",
                  ".yaml": "apiVersion:", ".toml": "[job]", ".txt": "PLANNER_PLAN="}
    for fmt in ("torchrun", "slurm", "kubeflow", "megatron", "torchtitan"):
        q = p3 if fmt == "torchtitan" else p
        for name, text in emit(fmt, q, HOSTILE_OPTIONS).items():
            if name.endswith(".json"):
                continue
            markers = [first_code[Path(name).suffix]]
            if name == "megatron_args.sh":
                markers = ["\nexport ", "\nunset ", "\nMEGATRON_ARGS=("]
            head = text[:min(text.index(m) for m in markers if m in text)].splitlines()
            assert head and all(line.startswith("#") or not line for line in head), name


def test_megatron_and_deepspeed_carry_no_user_strings():
    p = edited(hostile_plan(), lambda d: d["inputs"]["model"].__setitem__("name", "$(id)\nx"))
    for fmt in ("megatron", "deepspeed"):
        for name, text in emit(fmt, p, HOSTILE_OPTIONS).items():
            assert "$(id)\n" not in text and "touch CANARY" not in text


# --- determinism -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt,name", [c for c in CASES if c[1] in ("mixtral", "layout", "hetero")])
def test_emit_is_deterministic(fmt, name):
    p = plan(name)
    first = emit(fmt, p, HOSTILE_OPTIONS)
    assert emit(fmt, p, HOSTILE_OPTIONS) == first
    assert emit(fmt, plan_from_json(plan_to_json(p)), HOSTILE_OPTIONS) == first
    assert list(first) == list(emission(fmt, p, HOSTILE_OPTIONS).as_dict())


def test_megatron_flex_dispatcher_flags_follow_the_plan():
    """A plan priced with the flex (DeepEP) dispatcher launches with it; the default plan
    keeps the all-to-all dispatcher (both estimates differ, so the flag must match)."""
    flex = _build(model="mixtral-8x7b", nodes=4, tp=2, pp=2, dp=8, ep=4,
                  sequence_parallel=True, moe_dispatcher="flex")
    assert flex.config["moe_dispatcher"] == "flex"
    args = megatron_dict(json.loads(emit("megatron", flex)["megatron_args.json"]))
    assert args["--moe-token-dispatcher-type"] == ["flex"]
    assert args["--moe-flex-dispatcher-backend"] == ["deepep"]
    plain, _ = _megatron("mixtral")
    assert "--moe-flex-dispatcher-backend" not in plain
    assert "moe_dispatcher" not in plan("mixtral").config  # default left out of the plan


def test_megatron_gradient_and_moment_widths_follow_the_plan():
    narrow = _build(tp=2, pp=2, dp=4, grad_reduce_in_fp32=False, optimizer_moment_bytes=2)
    args = megatron_dict(json.loads(emit("megatron", narrow)["megatron_args.json"]))
    assert "--grad-reduce-in-bf16" in args and "--use-precision-aware-optimizer" in args
    assert args["--exp-avg-dtype"] == ["bf16"] and args["--exp-avg-sq-dtype"] == ["bf16"]
    plain, _ = _megatron("vpp")
    assert "--grad-reduce-in-bf16" not in plain and "--use-precision-aware-optimizer" not in plain


@pytest.mark.parametrize("graphs,impl,scope", [
    ("moe_router", "transformer_engine", ["moe_router", "moe_preprocess"]),
    ("attn+moe_router", "transformer_engine", ["attn", "moe_router", "moe_preprocess"]),
    ("full", "full_iteration", None)])
def test_megatron_cuda_graph_flags_follow_the_plan(graphs, impl, scope):
    """A plan priced with CUDA graphs (fewer launches on the CPU) launches with them."""
    graphed = _build(model="mixtral-8x7b", nodes=4, tp=2, pp=2, dp=8, ep=4,
                     sequence_parallel=True, cuda_graphs=graphs)
    assert graphed.config["cuda_graphs"] == graphs
    args = megatron_dict(json.loads(emit("megatron", graphed)["megatron_args.json"]))
    assert args["--cuda-graph-impl"] == [impl]
    assert args.get("--cuda-graph-scope") == scope
    assert ("--no-check-for-nan-in-loss-and-grad" in args) == (graphs == "full")
    plain, _ = _megatron("mixtral")
    assert "--cuda-graph-impl" not in plain
    assert "cuda_graphs" not in plan("mixtral").config


def test_megatron_activation_offloading_follows_the_plan():
    offloaded = _build(model="mixtral-8x7b", nodes=4, tp=2, pp=2, dp=8, ep=4,
                       sequence_parallel=True, offload_modules=("expert_fc1", "moe_act"))
    args = megatron_dict(json.loads(emit("megatron", offloaded)["megatron_args.json"]))
    assert args["--offload-modules"] == ["expert_fc1", "moe_act"]
    assert "--fine-grained-activation-offloading" in args
    plain, _ = _megatron("mixtral")
    assert "--offload-modules" not in plain


def test_megatron_squared_relu_flag():
    """A squared-ReLU MLP (Nemotron) launches with Megatron's --squared-relu, not a note."""
    from cost_models.model_spec import ModelSpec
    m = ModelSpec("nemotron", 4, 1024, 8, 8, 128, 4096, 256000, glu=False, activation="relu2",
                  norm="layernorm", tied_embeddings=False)
    c = homogeneous_cluster("H100", 1)
    w = Workload(seq_len=4096, global_batch=16)
    cfg = TrainingConfig.from_dict({"degrees": {"tp": 2, "dp": 4}, "sequence_parallel": True})
    prof = load_profile(c.node_groups[0].gpu.name, None)
    p = build_plan(m, c, estimate(m, c, w, cfg, prof), prof, why="test")
    sh = emit("megatron", p)["megatron_args.sh"]
    assert "--squared-relu" in sh and "add the matching" not in sh


def test_torchtitan_fp8_says_torchao_saves_bf16_inputs():
    """A plan whose memory counts TransformerEngine's fp8-saved Linear inputs warns that
    torchao's float8 keeps them in bf16; a plan made with bf16-saved inputs does not."""
    def notes(**cfg) -> str:
        doc = emit("torchtitan", _build(precision="fp8", tp=2, dp=8, sequence_parallel=True,
                                        **cfg))["torchtitan.toml"]
        return doc
    assert "torchao's float8 saves it in bf16" in notes()
    assert "saves it in bf16" not in notes(quantized_saved_inputs=False)


def test_megatron_names_layer_offloading_it_has_no_flag_for():
    """A plan priced with activations of whole layers on the host says how to set it (a
    TransformerConfig field pretrain_gpt.py has no flag for); plans without it keep no key."""
    offloaded = _build(tp=2, pp=2, dp=4, sequence_parallel=True, offload_layers=3)
    assert offloaded.config["offload_layers"] == 3
    sh = emit("megatron", offloaded)["megatron_args.sh"]
    assert "cpu_offloading_num_layers = 3" in sh
    assert "offload_layers" not in plan("mixtral").config


def test_megatron_fp8_attention_and_fused_grouped_mlp_follow_the_plan():
    """A plan priced with TransformerEngine's fused grouped MLP exports its switch before
    TransformerEngine loads; fp8 attention, which pretrain_gpt.py has no flag for, is named."""
    fused = _build(model="mixtral-8x7b", nodes=4, precision="fp8", tp=2, pp=2, dp=8, ep=4,
                   sequence_parallel=True, fp8_attention=True, fused_grouped_mlp=True)
    assert fused.config["fp8_attention"] and fused.config["fused_grouped_mlp"]
    sh = emit("megatron", fused)["megatron_args.sh"]
    assert "export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1" in sh
    assert "fp8_dot_product_attention" in sh
    plain, plain_sh = _megatron("mixtral")
    assert "NVTE_CUTEDSL_FUSED_GROUPED_MLP" not in plain_sh
    assert "fp8_attention" not in plan("mixtral").config


def test_fp8_attention_and_fused_grouped_mlp_need_fp8_moe():
    from cost_models.parallel import ConfigError
    from cost_models.training.config import check_config
    from cost_models.parallel import Degrees
    dense, moe = load_model("llama-3.1-8b"), load_model("mixtral-8x7b")
    cfg = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8), fp8_attention=True)
    with pytest.raises(ConfigError, match="fp8_attention"):
        check_config(dense, Workload(4096, 64, "bf16"), cfg, 8)
    check_config(dense, Workload(4096, 64, "fp8"), cfg, 8)
    fused = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8, ep=8), fused_grouped_mlp=True)
    with pytest.raises(ConfigError, match="fused_grouped_mlp"):
        check_config(moe, Workload(4096, 64, "bf16"), fused, 8)
    with pytest.raises(ConfigError, match="fused_grouped_mlp"):
        check_config(dense, Workload(4096, 64, "fp8"), replace(fused, degrees=Degrees(dp=8)), 8)
    check_config(moe, Workload(4096, 64, "fp8"), fused, 8)


def test_per_op_recompute_is_torchtitans_and_megatron_says_it_has_no_flag():
    """``recompute op`` (torchtitan's per-op checkpointing) emits exactly that policy for
    torchtitan and no recompute flag for Megatron, with a note saying so."""
    p = plan("op")
    doc = tomllib.loads(emit("torchtitan", p, EmitOptions())["torchtitan.toml"])
    assert doc["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    assert not any("closest policy" in n for n in emission("torchtitan", p).notes)
    mega = emission("megatron", p)
    lines = [ln for _, content in mega.files for ln in content.splitlines()
             if not ln.lstrip().startswith("#")]
    assert not any("--recompute-granularity" in ln for ln in lines)
    assert any("per-op selective checkpointing" in n for n in mega.notes)


def test_emit_warns_when_the_hosts_are_the_default_names(tmp_path):
    """A cluster without hosts gives its nodes the names <group>-<index>; launch files that
    find a node's rank by its host name would not find a real machine there, so emit says so
    (and says nothing when the cluster file lists the hosts)."""
    from typer.testing import CliRunner

    from planner.cli.app import app
    runner = CliRunner()
    spec = {"name": "two", "node_groups": [{
        "name": "gpu", "count": 2, "gpu": "H100", "gpus_per_node": 8, "fabric": "nvswitch",
        "nics": [{"count": 8, "gbps": 400, "transport": "ib"}]}],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 2}]}}
    for hosts, warned in ((None, True), (["alpha", "beta"], False)):
        if hosts:
            spec["node_groups"][0]["hosts"] = hosts
        cluster = tmp_path / f"c{warned}.yaml"
        cluster.write_text(yaml.safe_dump(spec))
        plan = tmp_path / f"p{warned}.json"
        solved = runner.invoke(app, ["solve", "--cluster", str(cluster), "--model",
                                     "llama-3.1-8b", "--global-batch", "32", "--out", str(plan)])
        assert solved.exit_code == 0, solved.output
        out = runner.invoke(app, ["emit", "slurm", str(plan), "--out-dir", str(tmp_path / "l")])
        assert out.exit_code == 0, out.output
        assert ("warning: the plan's host names (gpu-0 .. gpu-1)" in out.output) == warned


@pytest.mark.parametrize("model, base, scaling", [("llama-3.1-8b", "500000", "8"),
                                                  ("qwen3-30b-a3b", "1000000", None),
                                                  ("gpt3-175b", None, None)])
def test_megatron_passes_the_models_rope_base_and_llama3_scaling(model, base, scaling, tmp_path):
    """Megatron's RoPE base defaults to 10,000 and Llama 3.1 needs 500,000 and its frequency
    scaling (HF rope_theta and rope_scaling; megatron/training/arguments.py); learned
    positions (GPT-3) take neither."""
    from typer.testing import CliRunner

    from planner.cli.app import app
    out = tmp_path / "p.json"
    solved = CliRunner().invoke(app, ["solve", "--model", model, "--gpu", "H100", "--nodes",
                                      "8" if model == "gpt3-175b" else "1", "--top-k", "1",
                                      "--global-batch", "64", "--out", str(out)])
    assert solved.exit_code == 0, solved.output
    args = megatron_dict(json.loads(emit("megatron", plan_from_json(out.read_text()))[
        "megatron_args.json"]))
    assert args.get("--rotary-base") == ([base] if base else None)
    assert ("--use-rope-scaling" in args) is (scaling is not None)
    assert args.get("--rope-scaling-factor") == ([scaling] if scaling else None)
