"""vLLM and SGLang launch files of a serving plan: one ``launch_<host>.sh`` per host and
``serving_commands.txt`` listing every command.

Every flag is one the engine documents (the sources are listed per flag in
``tests/test_emit_serving.py``, ``FLAG_SOURCES``):

* SGLang (``python -m sglang.launch_server``, docs "Server Arguments", source
  ``python/sglang/srt/server_args.py``): ``--tp-size`` is every GPU of a pipeline stage, so an
  instance with attention data parallelism runs ``--tp-size tp*dp --dp-size dp
  --enable-dp-attention`` (attention TP is ``tp``, the MoE layers split ``tp*dp`` GPUs into
  ``--ep-size ep`` x ``etp``); ``--max-running-requests`` counts the whole instance
  (``batch*dp``; SGLang divides it by the attention DP size). Multi-node instances add
  ``--nnodes --node-rank --dist-init-addr``; PD disaggregation adds ``--disaggregation-mode``,
  ``--disaggregation-transfer-backend mooncake`` and, on prefill,
  ``--disaggregation-bootstrap-port`` (docs "PD Disaggregation"). The router (``python -m
  sglang_router.launch_router``, the sgl-model-gateway README) takes ``--worker-urls`` or
  ``--pd-disaggregation --prefill URL BOOTSTRAP_PORT ... --decode URL ...``.
* vLLM (``vllm serve``, docs "Engine Arguments", "Data Parallel Deployment", "Parallelism and
  Scaling", "NixlConnector Usage Guide"): ``--tensor-parallel-size tp
  --pipeline-parallel-size pp --data-parallel-size dp``; ``--max-num-seqs`` is per DP rank
  (``batch``); expert parallelism is ``--enable-expert-parallel`` (EP over all ``tp*dp`` GPUs, no
  expert TP). A multi-node instance whose DP ranks fit on a node runs one ``vllm serve`` per node
  (``--data-parallel-size-local``, ``--data-parallel-address``, ``--data-parallel-rpc-port``, and
  ``--headless --data-parallel-start-rank`` off the head); one whose single DP rank spans nodes
  uses ``--nnodes --node-rank --master-addr --master-port`` (``--headless`` off the head). PD
  disaggregation: ``--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'``
  with ``VLLM_NIXL_SIDE_CHANNEL_HOST/PORT``; vLLM has no router flag, the notes name the proxy.

Engine rules that refuse a plan (ValueError ``<format>: ...``): the plan made for the other
engine; vLLM with prefill and decode of different TP (a conservative rule: NixlConnector's
compatibility matrix now lists heterogeneous TP for dense, MoE and MLA models, and requires
equal TP only for hybrid Mamba models); SGLang with different prefill/decode attention TP on a
model without MLA (conservative too: SGLang's common KV transfer only warns "Performance is NOT
guaranteed" there, fails for hybrid SWA/Mamba models, and crashed under load in
sgl-project/sglang#15674); vLLM expert parallelism other than over all ``tp*dp`` GPUs;
vLLM DP ranks that do not fit whole on the nodes; an SGLang multi-node instance with unequal
GPUs per node; a disaggregated SGLang plan without a router.
"""
from __future__ import annotations

import json
from dataclasses import replace

from planner.emit._facts import comment_safe
from planner.emit._nccl import serving_fabric_env
from planner.emit._options import EmitOptions
from planner.emit._serving import (BOOTSTRAP_PORT_OFFSET, COORD_PORT_OFFSET,
                                   NIXL_SIDE_CHANNEL_BASE, Command, Instance, PoolSpec,
                                   ServingFacts, check_ports, host_port, render_files,
                                   serving_facts, side_port, url)
from planner.emit.types import Emission, UnsupportedByFormat
from planner.plan.document import Plan

NIXL_KV_TRANSFER = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                              separators=(",", ":"))


def _facts(fmt: str, plan: Plan) -> ServingFacts:
    if isinstance(plan, Plan) and plan.kind != "serving":
        raise UnsupportedByFormat(
            f"{fmt}: a {plan.kind} plan cannot be served; the vllm and sglang "
            "formats launch serving plans (planner serve)")
    f = serving_facts(plan)
    if f.engine != fmt:
        raise UnsupportedByFormat(
            f"{fmt}: the plan was made for engine {f.engine!r}; plan again for "
            f"{fmt} (its sizes and batch limits are engine-specific)")
    return f


def with_fabric(plan: Plan, commands: tuple[Command, ...], notes: tuple[str, ...]
                ) -> tuple[tuple[Command, ...], tuple[str, ...]]:
    """The commands with their host's NCCL settings (the plan's fabric section) added to the
    environment, and the notes on them."""
    env, more = serving_fabric_env(plan)
    if not env:
        return commands, notes
    out = tuple(replace(c, env=(*c.env, *env.get(c.host, ())))
                if any(k == "CUDA_VISIBLE_DEVICES" for k, _ in c.env) else c  # GPU processes
                for c in commands)
    return out, (*notes, *more)


def _gpu_env(node) -> tuple[str, str]:
    return ("CUDA_VISIBLE_DEVICES", ",".join(str(g) for g in node.gpus))


def _where(inst: Instance, rank: int) -> str:
    node = inst.nodes[rank]
    return (f"{inst.name}, node rank {rank} of {len(inst.nodes)}, GPUs "
            f"{','.join(map(str, node.gpus))}, port {inst.port}")


def _precision_notes(f: ServingFacts, kv_flag: str) -> list[str]:
    notes = []
    if f.precision == "fp8":
        notes.append("--quantization fp8 quantizes a bf16/fp16 checkpoint online; an FP8 "
                     "checkpoint also loads with it (or drop the flag: the engine reads the "
                     "checkpoint's quantization config).")
    elif f.precision in ("fp4", "int4"):
        notes.append(f"weights {f.precision}: no flag is emitted; model_path must name a "
                     "checkpoint already quantized to it (the engine reads its config).")
    if f.kv_dtype == "fp8":
        notes.append(f"KV cache fp8 ({kv_flag}): without KV scales in the checkpoint the scales "
                     "default to 1.0; check accuracy.")
    return notes


# --- SGLang ------------------------------------------------------------------------------------


def _sglang_rules(f: ServingFacts) -> None:
    if f.mode == "disagg":
        p, d = f.pools["prefill"], f.pools["decode"]
        if p.tp != d.tp and not f.mla:
            raise UnsupportedByFormat(
                f"sglang: prefill attention tp={p.tp} and decode tp={d.tp} differ "
                "on a model without MLA; SGLang's KV transfer between different "
                "TP sizes is only reliable for MLA models (sgl-project/sglang"
                "#15674): use the same tp")
        if f.router is None:
            raise UnsupportedByFormat(
                "sglang: a disaggregated plan needs a router (the PD router "
                "sends each request to a prefill and a decode instance)")
    for inst in f.instances:
        counts = {len(n.gpus) for n in inst.nodes}
        if len(counts) > 1:
            raise UnsupportedByFormat(
                f"sglang: {inst.name} has {sorted(counts)} GPUs on its nodes; a "
                "multi-node SGLang instance needs the same count on every node")


def _sglang_server(f: ServingFacts, inst: Instance, pool: PoolSpec, rank: int,
                   bootstrap: int | None) -> tuple[str, ...]:
    argv = ["python", "-m", "sglang.launch_server", "--model-path", f.model_path,
            "--tp-size", str(pool.tp * pool.dp)]
    if pool.dp > 1:
        argv += ["--dp-size", str(pool.dp), "--enable-dp-attention"]
    if pool.ep > 1:
        argv += ["--ep-size", str(pool.ep)]
    if pool.pp > 1:
        argv += ["--pp-size", str(pool.pp)]
    argv += ["--max-running-requests", str(pool.batch * pool.dp)]
    if f.max_model_len is not None:
        argv += ["--context-length", str(f.max_model_len)]
    if f.kv_dtype == "fp8":
        argv += ["--kv-cache-dtype", "fp8_e4m3"]
    if f.precision == "fp8":
        argv += ["--quantization", "fp8"]
    if f.mode == "disagg":
        argv += ["--disaggregation-mode", inst.role,
                 "--disaggregation-transfer-backend", "mooncake"]
        if bootstrap is not None:
            argv += ["--disaggregation-bootstrap-port", str(bootstrap)]
    if len(inst.nodes) > 1:
        argv += ["--nnodes", str(len(inst.nodes)), "--node-rank", str(rank),
                 "--dist-init-addr", host_port(inst.head, side_port(inst, COORD_PORT_OFFSET))]
    return (*argv, "--host", "0.0.0.0", "--port", str(inst.port))


def _sglang_router(f: ServingFacts, bootstrap: dict[int, int]) -> Command | None:
    if f.router is None:
        return None
    host, port = f.router
    argv = ["python", "-m", "sglang_router.launch_router"]
    if f.mode == "disagg":
        argv.append("--pd-disaggregation")
        for inst in f.of_role("prefill"):
            argv += ["--prefill", url(inst.head, inst.port), str(bootstrap[inst.index])]
        for inst in f.of_role("decode"):
            argv += ["--decode", url(inst.head, inst.port)]
    else:
        argv += ["--worker-urls", *(url(i.head, i.port) for i in f.instances)]
    argv += ["--host", "0.0.0.0", "--port", str(port)]
    return Command(host, f"router on port {port}", (), tuple(argv))


def sglang_commands(f: ServingFacts) -> tuple[tuple[Command, ...], tuple[str, ...]]:
    """Every SGLang process of the plan (servers in plan order, then the router) and the notes."""
    _sglang_rules(f)
    ports: list[tuple[str, int, str]] = []
    bootstrap = {}
    for inst in f.of_role("prefill"):
        bootstrap[inst.index] = side_port(inst, BOOTSTRAP_PORT_OFFSET)
        ports.append((inst.head, bootstrap[inst.index], f"{inst.name} (PD bootstrap)"))
    commands = []
    for inst in f.instances:
        ports.append((inst.head, inst.port, inst.name))
        if len(inst.nodes) > 1:
            ports.append((inst.head, side_port(inst, COORD_PORT_OFFSET),
                          f"{inst.name} (--dist-init-addr)"))
        for rank, node in enumerate(inst.nodes):
            boot = bootstrap[inst.index] if inst.role == "prefill" else None
            argv = _sglang_server(f, inst, f.pools[inst.role], rank, boot)
            commands.append(Command(node.host, _where(inst, rank), (_gpu_env(node),), argv))
    router = _sglang_router(f, bootstrap)
    if router is not None:
        ports.append((router.host, f.router[1], "the router"))
        commands.append(router)
    check_ports(ports)
    return tuple(commands), tuple(_sglang_notes(f))


def _sglang_notes(f: ServingFacts) -> list[str]:
    notes = _precision_notes(f, "--kv-cache-dtype fp8_e4m3")
    if any(p.dp > 1 for p in f.pools.values()):
        notes.append("--tp-size counts every GPU of a pipeline stage (tp*dp); attention runs "
                     "dp data-parallel groups of tp GPUs (--dp-size N --enable-dp-attention; "
                     "newer SGLang also spells it --attn-dp-size N).")
    if any(len(i.nodes) > 1 for i in f.instances):
        notes.append(f"Multi-node instances rendezvous at their head host, port = instance "
                     f"port + {COORD_PORT_OFFSET} (--dist-init-addr; SGLang also uses the few "
                     "ports after it).")
    if f.mode == "disagg":
        notes.append(f"KV transfer backend mooncake (SGLang's default; nixl is the other "
                     f"choice); prefill bootstrap port = instance port + "
                     f"{BOOTSTRAP_PORT_OFFSET}. Set --disaggregation-ib-device if the RDMA "
                     "devices are not found by themselves.")
    if f.router is None and len(f.instances) > 1:
        notes.append("The plan has no router: spread requests over the instances yourself.")
    return notes


def render_sglang(plan: Plan, options: EmitOptions = EmitOptions()) -> Emission:
    """``launch_<host>.sh`` per host and ``serving_commands.txt`` for SGLang (``options`` are
    the training launchers'; nothing here uses them)."""
    f = _facts("sglang", plan)
    commands, notes = with_fabric(plan, *sglang_commands(f))
    return render_files("sglang", f, commands, notes)


# --- vLLM --------------------------------------------------------------------------------------


def _vllm_rules(f: ServingFacts) -> None:
    if f.mode == "disagg":
        p, d = f.pools["prefill"], f.pools["decode"]
        if p.tp != d.tp:
            raise UnsupportedByFormat(
                f"vllm: prefill tp={p.tp} and decode tp={d.tp} differ; use the "
                "same tensor-parallel size on both")
    for pool in f.pools.values():
        if pool.ep > 1 and pool.ep != pool.tp * pool.dp:
            raise UnsupportedByFormat(
                f"vllm: the {pool.role} pool has ep={pool.ep} over tp*dp = "
                f"{pool.tp * pool.dp} GPUs; --enable-expert-parallel spreads the "
                "experts over all of them (ep = tp*dp, no expert TP)")


def _vllm_layout(inst: Instance, pool: PoolSpec) -> list[tuple[str, ...]]:
    """Per node rank: the launch flags that place it (multi-node DP, or one rank over nodes)."""
    if len(inst.nodes) == 1:
        return [("--port", str(inst.port))]
    rank_gpus = pool.tp * pool.pp
    if all(len(n.gpus) % rank_gpus == 0 for n in inst.nodes):
        shared = ("--data-parallel-address", inst.head, "--data-parallel-rpc-port",
                  str(side_port(inst, COORD_PORT_OFFSET)))
        out, start = [], 0
        for rank, node in enumerate(inst.nodes):
            local = len(node.gpus) // rank_gpus
            own = ("--data-parallel-size-local", str(local), *shared)
            out.append((*own, "--port", str(inst.port)) if rank == 0 else
                       ("--headless", *own, "--data-parallel-start-rank", str(start)))
            start += local
        return out
    counts = {len(n.gpus) for n in inst.nodes}
    if pool.dp == 1 and len(counts) == 1:
        master = ("--nnodes", str(len(inst.nodes)), "--master-addr", inst.head,
                  "--master-port", str(side_port(inst, COORD_PORT_OFFSET)))
        return [(*master, "--node-rank", str(r),
                 *(("--port", str(inst.port)) if r == 0 else ("--headless",)))
                for r in range(len(inst.nodes))]
    raise UnsupportedByFormat(
        f"vllm: {inst.name} spreads {pool.dp} DP rank(s) of tp*pp = {rank_gpus} "
        f"GPUs over nodes with {[len(n.gpus) for n in inst.nodes]} GPUs; vLLM "
        "launches whole DP ranks per node, or one DP rank over nodes with the "
        "same GPU count each")


def _vllm_engine_args(f: ServingFacts, pool: PoolSpec) -> list[str]:
    argv = ["vllm", "serve", f.model_path, "--tensor-parallel-size", str(pool.tp)]
    if pool.pp > 1:
        argv += ["--pipeline-parallel-size", str(pool.pp)]
    if pool.dp > 1:
        argv += ["--data-parallel-size", str(pool.dp)]
    if pool.ep > 1:
        argv.append("--enable-expert-parallel")
    argv += ["--max-num-seqs", str(pool.batch)]
    if f.max_model_len is not None:
        argv += ["--max-model-len", str(f.max_model_len)]
    if f.kv_dtype == "fp8":
        argv += ["--kv-cache-dtype", "fp8"]
    if f.precision == "fp8":
        argv += ["--quantization", "fp8"]
    if f.mode == "disagg":
        argv += ["--kv-transfer-config", NIXL_KV_TRANSFER]
    return argv


def vllm_commands(f: ServingFacts) -> tuple[tuple[Command, ...], tuple[str, ...]]:
    """Every ``vllm serve`` process of the plan, in plan order, and the notes."""
    _vllm_rules(f)
    commands, ports, nixl_base = [], [], NIXL_SIDE_CHANNEL_BASE
    for inst in f.instances:
        pool = f.pools[inst.role]
        layout = _vllm_layout(inst, pool)
        ports.append((inst.head, inst.port, inst.name))
        if len(inst.nodes) > 1:
            ports.append((inst.head, side_port(inst, COORD_PORT_OFFSET),
                          f"{inst.name} (DP RPC / master port)"))
        for rank, node in enumerate(inst.nodes):
            env = [_gpu_env(node)]
            if f.mode == "disagg":
                env += [("VLLM_NIXL_SIDE_CHANNEL_HOST", node.host),
                        ("VLLM_NIXL_SIDE_CHANNEL_PORT", str(nixl_base))]
                ports += [(node.host, nixl_base + k, f"{inst.name} (NIXL side channel)")
                          for k in range(pool.dp)]
            argv = (*_vllm_engine_args(f, pool), *layout[rank])
            commands.append(Command(node.host, _where(inst, rank), tuple(env), argv))
        if f.mode == "disagg":
            nixl_base += pool.dp
    if f.router is not None:
        ports.append((f.router[0], f.router[1], "the router"))
    check_ports(ports)
    return tuple(commands), tuple(_vllm_notes(f))


def _vllm_notes(f: ServingFacts) -> list[str]:
    notes = _precision_notes(f, "--kv-cache-dtype fp8")
    if any(len(i.nodes) > 1 for i in f.instances):
        notes.append(f"Multi-node instances meet at their head host, port = instance port + "
                     f"{COORD_PORT_OFFSET} (--data-parallel-rpc-port, or --master-port when "
                     "one DP rank spans nodes); only the head serves HTTP.")
    if f.mode == "disagg":
        endpoint = (f"at the plan's router {comment_safe(f.router[0])}:{f.router[1]}"
                    if f.router else "(the plan names no router host)")
        prefill = ", ".join(f"{comment_safe(i.head)}:{i.port}" for i in f.of_role("prefill"))
        decode = ", ".join(f"{comment_safe(i.head)}:{i.port}" for i in f.of_role("decode"))
        notes += ["vLLM has no built-in PD router: run a proxy " + endpoint + " that sends each "
                  "request to a prefill and then a decode instance (vLLM ships a toy one, "
                  "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py, see its "
                  "NixlConnector guide).",
                  f"prefill instances: {prefill}; decode instances: {decode}.",
                  f"NIXL side-channel ports: {NIXL_SIDE_CHANNEL_BASE} (vLLM's default) plus the "
                  "DP ranks of the instances before each one; each adds its DP rank."]
    elif len(f.instances) > 1:
        where = (f"at the plan's router {comment_safe(f.router[0])}:{f.router[1]}"
                 if f.router else "")
        notes.append(f"vLLM has no router: put a load balancer {where} in front of the "
                     f"{len(f.instances)} instances.".replace("  ", " "))
    return notes


def render_vllm(plan: Plan, options: EmitOptions = EmitOptions()) -> Emission:
    """``launch_<host>.sh`` per host and ``serving_commands.txt`` for vLLM (``options`` are the
    training launchers'; nothing here uses them)."""
    f = _facts("vllm", plan)
    commands, notes = with_fabric(plan, *vllm_commands(f))
    return render_files("vllm", f, commands, notes)
