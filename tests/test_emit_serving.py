"""Serving launch files (``planner emit vllm|sglang``): every flag is one the engine documents,
the scripts parse and, run with fake ``python``/``vllm`` on ``PATH``, start exactly the listed
commands; multi-node instances get their node ranks, GPU slices are disjoint and cover the
node, hostile host names and model paths reach the engines literally, engine rules refuse what
the engines refuse, and the output is deterministic.

Plans are built here from a ``serving`` section (``docs/serving.md``) with a small placement
helper: an instance larger than a node takes whole nodes, otherwise a contiguous block of one
node's GPUs; ports count up from 30000 per instance on a host.
"""
from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from planner.emit import FORMATS, SERVING_FORMATS, emission, emit
from planner.emit._serving import serving_facts
from planner.emit.serving_engines import sglang_commands, vllm_commands
from planner.plan.document import Plan, plan_from_json, plan_to_json

# Every flag the emitters may write, per program, with where the engine documents it.
VLLM_ARGS = "vllm-project/vllm vllm/engine/arg_utils.py (EngineArgs.add_cli_args)"
VLLM_DP = "https://docs.vllm.ai/en/latest/serving/data_parallel_deployment.html"
VLLM_MP = ("https://docs.vllm.ai/en/latest/serving/parallelism_scaling.html "
           "(Running vLLM with MultiProcessing)")
SGL_ARGS = ("https://docs.sglang.io/advanced_features/server_arguments.html; "
            "sgl-project/sglang python/sglang/srt/server_args.py")
SGL_PD = "https://docs.sglang.io/advanced_features/pd_disaggregation.html"
ROUTER = ("sgl-project/sglang sgl-model-gateway README (python3 -m sglang_router.launch_router); "
          "sglang_router/router_args.py")
FLAG_SOURCES = {
    "vllm": {
        "--tensor-parallel-size": f"{VLLM_MP}; {VLLM_ARGS}",
        "--pipeline-parallel-size": f"{VLLM_MP}; {VLLM_ARGS}",
        "--data-parallel-size": VLLM_DP,
        "--data-parallel-size-local": VLLM_DP,
        "--data-parallel-address": VLLM_DP,
        "--data-parallel-rpc-port": VLLM_DP,
        "--data-parallel-start-rank": VLLM_DP,
        "--headless": f"{VLLM_DP}; {VLLM_MP}",
        "--enable-expert-parallel": VLLM_DP,
        "--max-num-seqs": f"{VLLM_DP} (per DP rank); {VLLM_ARGS}",
        "--max-model-len": VLLM_ARGS,
        "--kv-cache-dtype": (f"{VLLM_ARGS} (CacheDType: fp8); "
                             "https://docs.vllm.ai/en/latest/features/quantization/"
                             "quantized_kvcache.html"),
        "--quantization": VLLM_ARGS,
        "--kv-transfer-config": "https://docs.vllm.ai/en/latest/features/nixl_connector_usage.html",
        "--port": "vllm-project/vllm vllm/entrypoints/common/cli_args.py (FrontendArgs.port)",
        "--nnodes": VLLM_MP,
        "--node-rank": VLLM_MP,
        "--master-addr": VLLM_MP,
        "--master-port": f"{VLLM_ARGS} (ParallelConfig.master_port)",
    },
    "sglang": {
        "--model-path": SGL_ARGS,
        "--tp-size": SGL_ARGS,
        "--dp-size": SGL_ARGS,
        "--enable-dp-attention": (f"{SGL_ARGS}; https://docs.sglang.io/advanced_features/"
                                  "dp_dpa_smg_guide.html"),
        "--ep-size": SGL_ARGS,
        "--pp-size": SGL_ARGS,
        "--max-running-requests": SGL_ARGS,
        "--context-length": SGL_ARGS,
        "--kv-cache-dtype": SGL_ARGS,
        "--quantization": SGL_ARGS,
        "--host": SGL_ARGS,
        "--port": SGL_ARGS,
        "--nnodes": SGL_ARGS,
        "--node-rank": SGL_ARGS,
        "--dist-init-addr": SGL_ARGS,
        "--disaggregation-mode": SGL_PD,
        "--disaggregation-transfer-backend": SGL_PD,
        "--disaggregation-bootstrap-port": f"{SGL_PD}; {SGL_ARGS}",
    },
    "sglang_router": {
        "--worker-urls": ROUTER,
        "--pd-disaggregation": f"{ROUTER}; {SGL_PD}",
        "--prefill": f"{ROUTER}; {SGL_PD}",
        "--decode": f"{ROUTER}; {SGL_PD}",
        "--host": ROUTER,
        "--port": ROUTER,
    },
}
PROGRAMS = {("vllm", "serve"): "vllm", ("python", "-m", "sglang.launch_server"): "sglang",
            ("python", "-m", "sglang_router.launch_router"): "sglang_router"}
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_NIXL_SIDE_CHANNEL_PORT")
# The first is the brief's example with ~ for / (HOME is the test's work folder): these run.
HOSTILE = ("x; rm -rf ~ $(touch pwned)", "$(touch CANARY)", "`touch CANARY`",
           "nl\ntouch CANARY", "q'uote\"d", "*")


# --- plans --------------------------------------------------------------------------------------

DENSE = {"name": "llama-3.1-70b", "mla": None, "moe": None}
MLA_MOE = {"name": "deepseek-v3", "mla": {"kv_lora_rank": 512, "q_lora_rank": 1536,
                                          "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                                          "v_head_dim": 128},
           "moe": {"num_experts": 256, "top_k": 8}}


def pool(role, tp=1, pp=1, dp=1, ep=1, etp=None, batch=16, workers=1):
    return {"role": role, "tp": tp, "pp": pp, "dp": dp, "ep": ep,
            "etp": etp if etp is not None else tp * dp // ep, "batch": batch,
            "workers": workers, "gpus_per_instance": tp * pp * dp}


def place(pools, hosts, gpus_per_node=8):
    """Instances of every pool in order: whole nodes when larger than a node, else contiguous
    blocks; ports from 30000 per instance on a host."""
    instances, free, next_port = [], [(h, 0) for h in hosts], {h: 30000 for h in hosts}
    for p in pools:
        size = p["gpus_per_instance"]
        for index in range(p["workers"]):
            if size >= gpus_per_node:
                take = [e for e in free if e[1] == 0][:size // gpus_per_node]
                free = [e for e in free if e not in take]
                nodes = [{"host": h, "cluster_node": hosts.index(h),
                          "gpus": list(range(gpus_per_node))} for h, _ in take]
            else:
                host, used = free[0]
                nodes = [{"host": host, "cluster_node": hosts.index(host),
                          "gpus": list(range(used, used + size))}]
                free[0] = (host, used + size)
                if used + size == gpus_per_node:
                    free.pop(0)
            head = nodes[0]["host"]
            instances.append({"role": p["role"], "index": index, "port": next_port[head],
                              "nodes": nodes})
            next_port[head] += 1
    return instances


def serving_plan(engine, pools, hosts, model=DENSE, mode=None, router=True, model_path=None,
                 precision="bf16", kv_dtype="bf16", max_model_len=8192, gpus_per_node=8,
                 instances=None):
    mode = mode or ("colocated" if pools[0]["role"] == "colocated" else "disagg")
    serving = {
        "mode": mode, "engine": engine, "model_path": model_path or f"org/{model['name']}",
        "precision": precision, "kv_dtype": kv_dtype, "max_model_len": max_model_len,
        "workload": {"isl": 4096, "osl": 1024, "rate_per_s": None, "concurrency": 256,
                     "ttft_ms": 2000, "tpot_ms": 50, "prefix_hit": 0.0},
        "pools": pools,
        "instances": instances if instances is not None else place(pools, hosts,
                                                                   gpus_per_node),
        "router": {"host": hosts[0], "port": 8000} if router else None}
    return Plan(schema_version=2, kind="serving", planner_version="test", inputs_hash="",
                inputs={"model": model}, pools=[], prediction={}, serving=serving)


def hostile_plan(engine):
    """Disaggregated, multi-node decode; every host and the model path hostile."""
    hosts = list(HOSTILE[:3])
    pools = [pool("prefill", tp=4, workers=2), pool("decode", tp=4, dp=4, ep=16, batch=32)]
    return serving_plan(engine, pools, hosts, model=MLA_MOE, model_path=HOSTILE[0] + "\n" +
                        HOSTILE[4])


def colocated_hostile_plan(engine):
    hosts = list(HOSTILE[3:])
    return serving_plan(engine, [pool("colocated", tp=4, workers=4)], hosts,
                        model_path=HOSTILE[1])


# name -> (builder of a plan for an engine, engines that can launch it)
SPECS = {
    "one_per_gpu": (lambda e: serving_plan(e, [pool("colocated", batch=64, workers=8)],
                                           ["node-0"]), SERVING_FORMATS),
    "tp4_pp2": (lambda e: serving_plan(e, [pool("colocated", tp=4, pp=2, workers=2)],
                                       ["node-0", "node-1"], max_model_len=None), SERVING_FORMATS),
    "dp_attention_2_nodes": (lambda e: serving_plan(
        e, [pool("colocated", tp=4, dp=4, ep=16, batch=32, workers=2)],
        ["n0", "n1", "n2", "n3"], model=MLA_MOE, precision="fp8", kv_dtype="fp8"),
        SERVING_FORMATS),
    "tp16_2_nodes": (lambda e: serving_plan(e, [pool("colocated", tp=16)], ["a0", "a1"],
                                            router=False), SERVING_FORMATS),
    "disagg": (lambda e: serving_plan(
        e, [pool("prefill", tp=4, workers=2), pool("decode", tp=4, dp=4, ep=16, batch=32)],
        ["p0", "d0", "d1"], model=MLA_MOE, kv_dtype="fp8"), SERVING_FORMATS),
    "disagg_dense": (lambda e: serving_plan(
        e, [pool("prefill", tp=2, workers=2), pool("decode", tp=2, batch=64, workers=2)],
        ["node-0"]), SERVING_FORMATS),
    "hostile": (hostile_plan, SERVING_FORMATS),
    "colocated_hostile": (colocated_hostile_plan, SERVING_FORMATS),
}
CASES = [(engine, name) for name, (_, engines) in SPECS.items() for engine in engines]


def plan(engine, name):
    return SPECS[name][0](engine)


def commands_of(engine, p):
    f = serving_facts(p)
    return (vllm_commands if engine == "vllm" else sglang_commands)(f)[0]


def program(argv):
    for prefix, name in PROGRAMS.items():
        if tuple(argv[:len(prefix)]) == prefix:
            return name, list(argv[len(prefix):])
    raise AssertionError(f"unknown program in {argv[:3]}")


def split_env(words):
    env = {}
    while words and "=" in words[0] and words[0].split("=", 1)[0] in ENV_NAMES:
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    return env, words


def flag(argv, name, default=None):
    values = [argv[i + 1] for i, a in enumerate(argv) if a == name]
    assert len(values) <= 1, (name, argv)
    return values[0] if values else default


# --- flags ----------------------------------------------------------------------------------------


def test_every_emitted_flag_is_documented_and_every_documented_flag_is_used():
    seen = {prog: set() for prog in FLAG_SOURCES}
    for engine, name in CASES:
        if name.endswith("hostile"):
            continue  # lines of hostile plans hold quoted newlines; parsed below instead
        text = emit(engine, plan(engine, name))["serving_commands.txt"]
        lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
        assert lines
        for line in lines:
            env, words = split_env(shlex.split(line))
            prog, args = program(words)
            assert prog == "sglang_router" or prog == engine
            flags = {a for a in args if a.startswith("-")}
            undocumented = flags - set(FLAG_SOURCES[prog])
            assert not undocumented, f"{engine}/{name}: {prog} flags with no source: {undocumented}"
            seen[prog] |= flags
    for prog, table in FLAG_SOURCES.items():
        assert seen[prog] == set(table), f"{prog}: never emitted: {set(table) - seen[prog]}"
        assert all(source.strip() for source in table.values())


# --- files parse and run --------------------------------------------------------------------------


def _exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def run_script(tmp_path):
    """Run a launch script with fake ``python`` and ``vllm`` that record argv and environment;
    returns (process, records sorted by argv)."""
    fake, records, work = tmp_path / "fakebin", tmp_path / "records", tmp_path / "work"
    for d in (fake, records, work):
        d.mkdir()
    recorder = (f"#!{sys.executable}\n"
                "import json, os, sys, uuid\n"
                f"keep = {ENV_NAMES!r}\n"
                "path = os.path.join(os.environ['SERVE_RECORDS'], uuid.uuid4().hex + '.json')\n"
                "with open(path, 'w') as fh:\n"
                "    json.dump({'argv': [os.path.basename(sys.argv[0])] + sys.argv[1:],\n"
                "               'env': {k: os.environ[k] for k in keep if k in os.environ}}, fh)\n")
    _exe(fake / "python", recorder)
    _exe(fake / "vllm", recorder)

    def run(script: Path):
        for old in records.iterdir():
            old.unlink()
        env = {"PATH": f"{fake}:{os.environ['PATH']}", "HOME": str(work),
               "SERVE_RECORDS": str(records)}
        proc = subprocess.run(["bash", str(script)], cwd=work, capture_output=True, text=True,
                              env=env, timeout=60)
        recs = [json.loads(p.read_text()) for p in records.iterdir()]
        return proc, sorted(recs, key=lambda r: json.dumps(r))

    run.work = work
    return run


def write_files(files, where: Path):
    out = {}
    for name, text in files.items():
        assert "/" not in name and name not in (".", "..")
        (where / name).write_text(text)
        out[name] = where / name
    return out


@pytest.mark.parametrize("engine,name", CASES)
def test_scripts_parse_and_start_exactly_their_hosts_commands(engine, name, tmp_path,
                                                              run_script):
    p = plan(engine, name)
    files = emit(engine, p)
    commands = commands_of(engine, p)
    scripts = {n: t for n, t in files.items() if n.endswith(".sh")}
    assert list(files)[-1] == "serving_commands.txt" and len(files) == len(scripts) + 1
    by_host = {}
    for c in commands:
        by_host.setdefault(c.host, []).append(c)
    assert len(scripts) == len(by_host)
    paths = write_files(files, tmp_path)
    ran = []
    for fname in scripts:
        text = files[fname]
        assert text.startswith("#!/usr/bin/env bash\n")
        head = text[:text.index("\nset -euo pipefail\n")].splitlines()
        assert all(line.startswith("#") for line in head), fname  # user text stays in comments
        check = subprocess.run(["bash", "-n", str(paths[fname])], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        proc, recs = run_script(paths[fname])
        assert proc.returncode == 0, proc.stderr
        [host] = [h for h, cs in by_host.items()
                  if f"# host: {json.dumps(h)}\n" in text]
        expected = sorted(({"argv": list(c.argv), "env": dict(c.env)} for c in by_host[host]),
                          key=lambda r: json.dumps(r))
        assert recs == expected
        ran.append(host)
    assert sorted(ran) == sorted(by_host)
    assert os.listdir(run_script.work) == []  # nothing created by a quoted value


@pytest.mark.parametrize("engine,name", CASES)
def test_command_list_tokenizes_to_exactly_the_commands(engine, name):
    p = plan(engine, name)
    text = emit(engine, p)["serving_commands.txt"]
    commands = commands_of(engine, p)
    words = []
    for c in commands:
        line = c.shell_line()
        assert f"\n{line}\n" in text
        assert shlex.split(line) == [f"{k}={v}" for k, v in c.env] + list(c.argv)
        words += shlex.split(line)
    # outside quotes there is nothing but comments and these words
    assert shlex.split(text, comments=True) == words


@pytest.mark.parametrize("engine", SERVING_FORMATS)
def test_hostile_hosts_and_model_path_stay_one_word(engine):
    p = hostile_plan(engine)
    model_path = p.serving["model_path"]
    prefill = [i for i in p.serving["instances"] if i["role"] == "prefill"]
    [decode] = [i for i in p.serving["instances"] if i["role"] == "decode"]
    head = decode["nodes"][0]["host"]
    assert head == HOSTILE[1] and prefill[0]["nodes"][0]["host"] == HOSTILE[0]
    for c in commands_of(engine, p):
        env, words = split_env(shlex.split(c.shell_line()))
        prog, args = program(words)
        if prog == "vllm":
            assert args[0] == model_path
            assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == c.host
            if c.host != prefill[0]["nodes"][0]["host"]:
                assert flag(args, "--data-parallel-address") == head
        elif prog == "sglang":
            assert flag(args, "--model-path") == model_path
            if flag(args, "--disaggregation-mode") == "decode":
                assert flag(args, "--dist-init-addr") == f"{head}:{decode['port'] + 1000}"
        else:
            pre = [args[i + 1] for i, a in enumerate(args) if a == "--prefill"]
            assert pre == [f"http://{HOSTILE[0]}:{i['port']}" for i in prefill]
            assert flag(args, "--decode") == f"http://{head}:30000"


# --- placement ------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", SERVING_FORMATS)
def test_multi_node_instances_get_their_node_ranks(engine):
    p = plan(engine, "dp_attention_2_nodes")
    commands = commands_of(engine, p)
    for inst in p.serving["instances"]:
        nodes = inst["nodes"]
        head = nodes[0]["host"]
        mine = [c for c in commands if c.host in {n["host"] for n in nodes}
                and "sglang_router.launch_router" not in c.argv]
        assert [c.host for c in mine] == [n["host"] for n in nodes]  # node-rank order
        argvs = [list(c.argv) for c in mine]
        if engine == "sglang":
            for rank, argv in enumerate(argvs):
                assert flag(argv, "--nnodes") == str(len(nodes))
                assert flag(argv, "--node-rank") == str(rank)
                assert flag(argv, "--dist-init-addr") == f"{head}:{inst['port'] + 1000}"
                assert flag(argv, "--tp-size") == "16" and flag(argv, "--dp-size") == "4"
                assert flag(argv, "--max-running-requests") == str(32 * 4)
        else:
            starts, locals_ = [], []
            for rank, argv in enumerate(argvs):
                assert ("--headless" in argv) == (rank > 0)
                assert (flag(argv, "--port") is not None) == (rank == 0)
                assert flag(argv, "--data-parallel-address") == head
                assert flag(argv, "--data-parallel-size") == "4"
                starts.append(int(flag(argv, "--data-parallel-start-rank", 0)))
                locals_.append(int(flag(argv, "--data-parallel-size-local")))
            assert locals_ == [2, 2] and starts == [0, 2]
            assert flag(argvs[0], "--data-parallel-start-rank") is None  # head: internal LB


def test_vllm_rank_over_nodes_uses_node_ranks_and_headless():
    p = plan("vllm", "tp16_2_nodes")
    argvs = [list(c.argv) for c in commands_of("vllm", p)]
    assert [flag(a, "--node-rank") for a in argvs] == ["0", "1"]
    assert all(flag(a, "--nnodes") == "2" and flag(a, "--master-addr") == "a0" for a in argvs)
    assert ["--headless" in a for a in argvs] == [False, True]
    assert flag(argvs[0], "--tensor-parallel-size") == "16"


@pytest.mark.parametrize("engine", SERVING_FORMATS)
@pytest.mark.parametrize("name,host", [("one_per_gpu", "node-0"), ("disagg_dense", "node-0"),
                                       ("tp4_pp2", "node-0"), ("disagg", "p0")])
def test_gpu_slices_are_disjoint_and_cover_the_node(engine, name, host):
    p = plan(engine, name)
    slices = [dict(c.env)["CUDA_VISIBLE_DEVICES"] for c in commands_of(engine, p)
              if c.host == host and dict(c.env)]
    gpus = [int(g) for s in slices for g in s.split(",")]
    assert len(gpus) == len(set(gpus)) and sorted(gpus) == list(range(8)), slices


def test_one_gpu_instances_and_router_on_one_node():
    p = plan("sglang", "one_per_gpu")
    commands = commands_of("sglang", p)
    servers = [c for c in commands if "sglang.launch_server" in c.argv]
    assert [dict(c.env)["CUDA_VISIBLE_DEVICES"] for c in servers] == [str(i) for i in range(8)]
    assert [flag(list(c.argv), "--port") for c in servers] == [str(30000 + i) for i in range(8)]
    [router] = [c for c in commands if "sglang_router.launch_router" in c.argv]
    urls = list(router.argv[router.argv.index("--worker-urls") + 1:router.argv.index("--host")])
    assert urls == [f"http://node-0:{30000 + i}" for i in range(8)]
    notes = emission("vllm", plan("vllm", "one_per_gpu")).notes
    assert any("vLLM has no router" in n for n in notes)


def test_disaggregated_sglang_router_pairs_prefill_bootstrap_ports():
    p = plan("sglang", "disagg")
    commands = commands_of("sglang", p)
    [router] = [c for c in commands if "sglang_router.launch_router" in c.argv]
    argv = list(router.argv)
    assert "--pd-disaggregation" in argv
    prefills = [argv[i + 1:i + 3] for i, a in enumerate(argv) if a == "--prefill"]
    boots = {c.host + ":" + flag(list(c.argv), "--port"):
             flag(list(c.argv), "--disaggregation-bootstrap-port")
             for c in commands if flag(list(c.argv), "--disaggregation-mode") == "prefill"}
    assert [[u, b] for u, b in prefills] == [[f"http://{k}", v] for k, v in boots.items()]
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--decode"] == ["http://d0:30000"]


def test_vllm_disagg_uses_nixl_with_distinct_side_channel_ports():
    p = plan("vllm", "disagg_dense")
    commands = commands_of("vllm", p)
    ports = []
    for c in commands:
        cfg = json.loads(flag(list(c.argv), "--kv-transfer-config"))
        assert cfg == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        env = dict(c.env)
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == c.host
        ports.append(int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"]))
    assert len(set(ports)) == len(ports) == 4
    assert any("proxy" in n for n in emission("vllm", p).notes)


# --- refusals -------------------------------------------------------------------------------------


def _mismatch(engine, model):
    return serving_plan(engine, [pool("prefill", tp=4), pool("decode", tp=8)], ["n0", "n1"],
                        model=model)


def test_prefill_decode_tp_mismatch_raises_where_the_engine_needs_equal_tp():
    with pytest.raises(ValueError, match="^vllm: prefill tp=4 and decode tp=8 differ"):
        emit("vllm", _mismatch("vllm", MLA_MOE))
    with pytest.raises(ValueError, match="^sglang: prefill attention tp=4 and decode tp=8"):
        emit("sglang", _mismatch("sglang", DENSE))
    files = emit("sglang", _mismatch("sglang", MLA_MOE))  # MLA: SGLang maps the ranks
    assert "serving_commands.txt" in files


def test_plans_of_the_wrong_kind_or_engine_raise():
    serving = plan("sglang", "disagg")
    for fmt in FORMATS:
        with pytest.raises(ValueError, match=f"^{fmt}: a serving plan"):
            emit(fmt, serving)
    training = Plan(schema_version=2, kind="training", planner_version="test", inputs_hash="",
                    inputs={}, pools=[], prediction={}, training={})
    for fmt in SERVING_FORMATS:
        with pytest.raises(ValueError, match=f"^{fmt}: a training plan cannot be served"):
            emit(fmt, training)
    with pytest.raises(ValueError, match="^vllm: the plan was made for engine 'sglang'"):
        emit("vllm", serving)


def test_engine_limits_raise():
    ep_partial = serving_plan("vllm", [pool("colocated", tp=8, ep=4, etp=2)], ["n0"],
                              model=MLA_MOE)
    with pytest.raises(ValueError, match="^vllm: .*--enable-expert-parallel"):
        emit("vllm", ep_partial)
    assert emit("sglang", edit(ep_partial, lambda s: s.__setitem__("engine", "sglang")))
    odd = serving_plan("vllm", [pool("colocated", tp=6, dp=2)], ["n0", "n1"], instances=[
        {"role": "colocated", "index": 0, "port": 30000,
         "nodes": [{"host": "n0", "gpus": list(range(8))}, {"host": "n1", "gpus": [0, 1, 2, 3]}]}])
    with pytest.raises(ValueError, match="^vllm: .*whole DP ranks"):
        emit("vllm", odd)
    uneven = edit(odd, lambda s: s.update(engine="sglang"))
    with pytest.raises(ValueError, match="^sglang: .*same count on every node"):
        emit("sglang", uneven)
    no_router = serving_plan("sglang", [pool("prefill", tp=4), pool("decode", tp=4)], ["n0"],
                             router=False)
    with pytest.raises(ValueError, match="^sglang: a disaggregated plan needs a router"):
        emit("sglang", no_router)


def edit(p: Plan, change) -> Plan:
    """A deep copy of ``p`` whose serving section ``change(serving)`` edited."""
    data = json.loads(plan_to_json(p))
    change(data["serving"])
    return plan_from_json(json.dumps(data))


BAD_EDITS = {
    "tp not an int": lambda s: s["pools"][0].__setitem__("tp", "4; rm -rf ~"),
    "mode": lambda s: s.__setitem__("mode", "mixed"),
    "kv dtype": lambda s: s.__setitem__("kv_dtype", "int2"),
    "model path option": lambda s: s.__setitem__("model_path", "--trust-remote-code"),
    "empty model path": lambda s: s.__setitem__("model_path", ""),
    "NUL host": lambda s: s["instances"][0]["nodes"][0].__setitem__("host", "a\x00b"),
    "host option": lambda s: s["instances"][0]["nodes"][0].__setitem__("host", "-x"),
    "port range": lambda s: s["instances"][0].__setitem__("port", 70000),
    "derived port range": lambda s: s["instances"][2].__setitem__("port", 65000),
    "gpu count": lambda s: s["instances"][0]["nodes"][0]["gpus"].pop(),
    "gpu twice": lambda s: s["instances"][1]["nodes"][0].__setitem__(
        "gpus", s["instances"][0]["nodes"][0]["gpus"]),
    "port twice": lambda s: s["instances"][1].__setitem__("port", 30000),
    "router port": lambda s: s["router"].__setitem__("port", 30001),
    "workers": lambda s: s["pools"][0].__setitem__("workers", 3),
    "etp*ep": lambda s: s["pools"][1].__setitem__("etp", 2),
    "shared host": lambda s: s["instances"][0]["nodes"].__setitem__(0, {
        "host": "d0", "gpus": [0, 1, 2, 3]}),
}


@pytest.mark.parametrize("engine", SERVING_FORMATS)
@pytest.mark.parametrize("what", BAD_EDITS)
def test_malformed_serving_sections_raise(engine, what):
    bad = edit(plan(engine, "disagg"), BAD_EDITS[what])
    with pytest.raises(ValueError, match="^plan: "):
        emit(engine, bad)


# --- determinism ----------------------------------------------------------------------------------


@pytest.mark.parametrize("engine,name", CASES)
def test_emit_is_deterministic(engine, name):
    p = plan(engine, name)
    first = emit(engine, p)
    assert emit(engine, p) == first
    assert emit(engine, plan(engine, name)) == first
    assert emit(engine, plan_from_json(plan_to_json(p))) == first
    assert list(first) == list(emission(engine, p).as_dict())


@pytest.mark.parametrize("engine", SERVING_FORMATS)
def test_a_failing_process_stops_the_others_at_once(engine, tmp_path):
    """A host's script waits for whichever process ends first (``wait -n``): when one exits
    with an error the script exits with its status and stops the rest, though those never end
    by themselves (servers); it does not wait on them in turn."""
    files = emit(engine, plan(engine, "one_per_gpu"))  # 8 processes on one host
    name, text = max(((n, t) for n, t in files.items() if n.endswith(".sh")),
                     key=lambda item: item[1].count('planner_pids+=("$!")'))
    assert text.count('planner_pids+=("$!")') >= 2, name
    fake, pids = tmp_path / "fakebin", tmp_path / "pids"
    fake.mkdir()
    pids.mkdir()
    # the last process started fails after 0.5 s; the others run until killed
    last = [ln for ln in text.splitlines() if ln.endswith(" &")][-1]
    token = shlex.split(last.removesuffix(" &"))[-1]
    _exe(fake / "python", f"#!{sys.executable}\n"
         "import os, sys, time\n"
         f"if sys.argv[-1] == {token!r}:\n"
         "    time.sleep(0.5); sys.exit(3)\n"
         f"open(os.path.join({str(pids)!r}, str(os.getpid())), 'w').close()\n"
         "time.sleep(60)\n")
    (fake / "vllm").symlink_to(fake / "python")
    script = tmp_path / name
    script.write_text(text)
    import time
    started = time.monotonic()
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=50,
                          env={"PATH": f"{fake}:{os.environ['PATH']}", "HOME": str(tmp_path)})
    assert proc.returncode == 3, proc.stderr
    assert time.monotonic() - started < 20
    alive = [int(p.name) for p in pids.iterdir()]
    assert alive  # some processes were still running when the last one failed
    time.sleep(0.2)
    for pid in alive:  # gone, or a zombie not yet reaped by whoever adopted it
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue
        assert state == "Z", (pid, state)
