"""The facts of a serving plan that the vLLM and SGLang emitters use, checked once, and the
shell text they share.

A serving plan's ``serving`` section (``docs/serving.md``) is user input like any plan file:
every field the emitters write is checked here for type and consistency (pools of the plan's
mode, instances that match their pool, no GPU or port used twice on a host). Host names and the
model path are free text: they are only refused when they hold NUL or a lone surrogate, or start
with ``-`` (the engines' argument parsers would read them as options); everything else is
quoted with :func:`shlex.quote` where it enters shell text and written JSON-escaped into
comments.

Only ``plan.serving`` and ``plan.inputs["model"]`` are read; the training facts
(:func:`planner.emit._facts.facts_of`) do not apply to serving plans.

Ports the plan does not name are derived from the instance's HTTP port ``P`` (see
:func:`side_port`): the multi-node coordination port (SGLang ``--dist-init-addr``, vLLM
``--data-parallel-rpc-port`` / ``--master-port``) is ``P + 1000`` and the SGLang PD bootstrap
port is ``P + 2000``; vLLM's NIXL side channel takes ``5600`` (its default) plus the data
parallel ranks of the instances before it. :func:`check_ports` refuses a plan where two of
them meet on one host.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from planner.emit._facts import check_text, comment_safe
from planner.emit.types import Emission
from planner.plan.document import Plan

MODES = {"colocated": ("colocated",), "disagg": ("prefill", "decode")}
PRECISIONS = ("bf16", "fp16", "fp8", "fp4", "int4")
KV_DTYPES = ("bf16", "fp16", "fp8")
COORD_PORT_OFFSET = 1000  # multi-node coordination port = instance port + 1000
BOOTSTRAP_PORT_OFFSET = 2000  # SGLang PD bootstrap port = instance port + 2000
NIXL_SIDE_CHANNEL_BASE = 5600  # vLLM's VLLM_NIXL_SIDE_CHANNEL_PORT default
_HEX64 = re.compile(r"[0-9a-f]{64}")
_FILE_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class PoolSpec:
    """One role's engine layout: attention ``tp`` x ``dp`` ranks per pipeline stage, ``pp``
    stages, MoE layers over ``etp`` x ``ep``; ``batch`` running requests per attention rank."""

    role: str
    tp: int
    pp: int
    dp: int
    ep: int
    etp: int
    batch: int
    workers: int

    @property
    def gpus_per_instance(self) -> int:
        return self.tp * self.pp * self.dp

    def summary(self) -> str:
        return (f"{self.role}: tp={self.tp} pp={self.pp} dp={self.dp} ep={self.ep} "
                f"etp={self.etp} batch={self.batch} x {self.workers} instance(s)")


@dataclass(frozen=True)
class InstanceNode:
    """The part of an instance on one host: its local GPU indices."""

    host: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Instance:
    """One engine instance; ``nodes[r]`` runs its node rank ``r`` (``nodes[0]`` is the head)."""

    role: str
    index: int
    port: int
    nodes: tuple[InstanceNode, ...]

    @property
    def head(self) -> str:
        return self.nodes[0].host

    @property
    def name(self) -> str:
        return f"{self.role} instance {self.index}"


@dataclass(frozen=True)
class ServingFacts:
    """What the serving emitters read from a plan, validated."""

    mode: str
    engine: str
    model_path: str
    model_name: str
    mla: bool
    moe: bool
    precision: str
    kv_dtype: str
    max_model_len: int | None
    pools: dict[str, PoolSpec]
    instances: tuple[Instance, ...]
    router: tuple[str, int] | None
    inputs_hash: str

    def of_role(self, role: str) -> tuple[Instance, ...]:
        return tuple(i for i in self.instances if i.role == role)


@dataclass(frozen=True)
class Command:
    """One process to start on ``host``: environment assignments and argv (all literal)."""

    host: str
    what: str  # a comment line (generated text and comment_safe values only)
    env: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]

    def shell_line(self) -> str:
        """The command as one shell line, every value quoted as one word."""
        words = [f"{name}={shlex.quote(value)}" for name, value in self.env]
        return " ".join(words + [shlex.quote(a) for a in self.argv])


# --- checks ------------------------------------------------------------------------------------


def _int(what: str, value, low: int = 1, high: int | None = None) -> int:
    if type(value) is not int or value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"plan: {what} must be an integer {bound}, got {value!r}")
    return value


def _word(what: str, value) -> str:
    """A non-empty string an argument parser reads as a value (not starting with '-')."""
    text = check_text(f"plan: {what}", value)
    if not text or text.startswith("-"):
        raise ValueError(f"plan: {what} must be a non-empty string that does not start with "
                         f"'-' (the engine would read it as an option), got {value!r}")
    return text


def _obj(what: str, value) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"plan: {what} must be an object")
    return value


def _pool(i: int, raw, roles: tuple[str, ...]) -> PoolSpec:
    raw = _obj(f"serving.pools[{i}]", raw)
    role = raw.get("role")
    if role not in roles:
        raise ValueError(f"plan: serving.pools[{i}].role must be one of {', '.join(roles)}, "
                         f"got {role!r}")
    ints = {k: _int(f"serving.pools[{i}].{k}", raw.get(k))
            for k in ("tp", "pp", "dp", "ep", "batch", "workers")}
    etp = raw.get("etp")
    etp = (ints["tp"] * ints["dp"]) // ints["ep"] if etp is None else \
        _int(f"serving.pools[{i}].etp", etp)
    if etp * ints["ep"] != ints["tp"] * ints["dp"]:
        raise ValueError(f"plan: serving.pools[{i}]: etp*ep = {etp}*{ints['ep']} must equal "
                         f"tp*dp = {ints['tp']}*{ints['dp']}")
    return PoolSpec(role=role, etp=etp, **ints)


def _instance(i: int, raw, pools: dict[str, PoolSpec]) -> Instance:
    raw = _obj(f"serving.instances[{i}]", raw)
    role = raw.get("role")
    if role not in pools:
        raise ValueError(f"plan: serving.instances[{i}].role must be one of the pools' roles "
                         f"({', '.join(pools)}), got {role!r}")
    index = _int(f"serving.instances[{i}].index", raw.get("index"), 0)
    port = _int(f"serving.instances[{i}].port", raw.get("port"), 1, 65535)
    rows = raw.get("nodes")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"plan: serving.instances[{i}].nodes must be a non-empty list")
    nodes = []
    for r, row in enumerate(rows):
        where = f"serving.instances[{i}].nodes[{r}]"
        row = _obj(where, row)
        host = _word(f"{where}.host", row.get("host"))
        gpus = row.get("gpus")
        if not isinstance(gpus, list) or not gpus:
            raise ValueError(f"plan: {where}.gpus must be a non-empty list of GPU indices")
        gpus = tuple(_int(f"{where}.gpus[{g}]", x, 0) for g, x in enumerate(gpus))
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"plan: {where}.gpus lists a GPU twice: {list(gpus)}")
        nodes.append(InstanceNode(host, gpus))
    hosts = [n.host for n in nodes]
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"plan: serving.instances[{i}] lists a host twice: {hosts}")
    total, want = sum(len(n.gpus) for n in nodes), pools[role].gpus_per_instance
    if total != want:
        raise ValueError(f"plan: serving.instances[{i}] has {total} GPUs, its {role} pool needs "
                         f"tp*pp*dp = {want}")
    return Instance(role, index, port, tuple(nodes))


def _check_placement(instances: tuple[Instance, ...], pools: dict[str, PoolSpec]) -> None:
    for role, pool in pools.items():
        indices = sorted(inst.index for inst in instances if inst.role == role)
        if indices != list(range(pool.workers)):
            raise ValueError(f"plan: the {role} pool has workers={pool.workers} but its "
                             f"instances have indices {indices}")
    owner: dict[tuple[str, int], str] = {}
    for inst in instances:
        for node in inst.nodes:
            for gpu in node.gpus:
                other = owner.setdefault((node.host, gpu), inst.name)
                if other != inst.name:
                    raise ValueError(f"plan: GPU {gpu} of host {comment_safe(node.host)} is "
                                     f"given to both {other} and {inst.name}")
    for inst in instances:
        if len(inst.nodes) == 1:
            continue
        for other in instances:
            shared = {n.host for n in inst.nodes} & {n.host for n in other.nodes}
            if other is not inst and shared:
                raise ValueError(f"plan: {inst.name} spans several nodes, so it must have its "
                                 f"hosts to itself, but {other.name} also runs on "
                                 f"{comment_safe(sorted(shared)[0])}")


def serving_facts(plan: Plan) -> ServingFacts:
    """The validated :class:`ServingFacts` of ``plan``; ValueError names the first bad field."""
    if not isinstance(plan, Plan):
        raise ValueError(f"expected a Plan, got {type(plan).__name__}")
    s = _obj("serving", plan.serving)
    mode = s.get("mode")
    if mode not in MODES:
        raise ValueError(f"plan: serving.mode must be one of {', '.join(MODES)}, got {mode!r}")
    model = _obj("inputs.model", plan.inputs.get("model") if isinstance(plan.inputs, dict)
                 else None)
    precision, kv_dtype = s.get("precision"), s.get("kv_dtype")
    if precision not in PRECISIONS:
        raise ValueError(f"plan: serving.precision must be one of {', '.join(PRECISIONS)}, "
                         f"got {precision!r}")
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"plan: serving.kv_dtype must be one of {', '.join(KV_DTYPES)}, "
                         f"got {kv_dtype!r}")
    max_len = s.get("max_model_len")
    max_len = None if max_len is None else _int("serving.max_model_len", max_len)
    raw_pools = s.get("pools")
    if not isinstance(raw_pools, list):
        raise ValueError("plan: serving.pools must be a list")
    pools = {}
    for i, raw in enumerate(raw_pools):
        pool = _pool(i, raw, MODES[mode])
        if pool.role in pools:
            raise ValueError(f"plan: serving.pools has two {pool.role} pools")
        pools[pool.role] = pool
    if tuple(sorted(pools)) != tuple(sorted(MODES[mode])):
        raise ValueError(f"plan: a {mode} plan needs pools {', '.join(MODES[mode])}, got "
                         f"{', '.join(pools) or 'none'}")
    raw_instances = s.get("instances")
    if not isinstance(raw_instances, list):
        raise ValueError("plan: serving.instances must be a list")
    instances = tuple(_instance(i, raw, pools) for i, raw in enumerate(raw_instances))
    _check_placement(instances, pools)
    router = s.get("router")
    if router is not None:
        router = _obj("serving.router", router)
        router = (_word("serving.router.host", router.get("host")),
                  _int("serving.router.port", router.get("port"), 1, 65535))
    digest = plan.inputs_hash
    if not isinstance(digest, str):
        raise ValueError(f"plan: inputs_hash must be a string, got {digest!r}")
    return ServingFacts(
        mode=mode, engine=check_text("plan: serving.engine", s.get("engine")),
        model_path=_word("serving.model_path", s.get("model_path")),
        model_name=check_text("plan: inputs.model.name", model.get("name")),
        mla=model.get("mla") is not None, moe=model.get("moe") is not None,
        precision=precision, kv_dtype=kv_dtype, max_model_len=max_len, pools=pools,
        instances=instances, router=router, inputs_hash=digest)


# --- ports -------------------------------------------------------------------------------------


def side_port(inst: Instance, offset: int) -> int:
    """A port the plan does not name, derived from the instance's HTTP port (module docstring);
    ValueError when it falls outside 1..65535."""
    port = inst.port + offset
    if not 1 <= port <= 65535:
        raise ValueError(f"plan: {inst.name}'s port {inst.port} + {offset} (a derived port) is "
                         "outside 1..65535; give it a lower port")
    return port


def check_ports(uses: list[tuple[str, int, str]]) -> None:
    """``uses`` are (host, port, what) triples; ValueError when a port is taken twice on a host."""
    taken: dict[tuple[str, int], str] = {}
    for host, port, what in uses:
        other = taken.setdefault((host, port), what)
        if other != what:
            raise ValueError(f"plan: port {port} on host {comment_safe(host)} is used by both "
                             f"{other} and {what}")


def url(host: str, port: int) -> str:
    """``http://host:port`` (an IPv6 literal in brackets)."""
    return f"http://{host_port(host, port)}"


def host_port(host: str, port: int) -> str:
    bare = ":" in host and not host.startswith("[")
    return f"[{host}]:{port}" if bare else f"{host}:{port}"


# --- files -------------------------------------------------------------------------------------


def header_lines(f: ServingFacts, fmt: str) -> list[str]:
    """The header every emitted file starts with (without comment markers)."""
    from planner import __version__
    digest = f.inputs_hash if _HEX64.fullmatch(f.inputs_hash) else comment_safe(f.inputs_hash)
    return [f"Generated by planner {__version__} (planner emit {fmt}). Do not edit by hand: "
            "change the plan and re-run planner emit.",
            f"plan inputs_hash: {digest}",
            f"model: {comment_safe(f.model_name)}, loaded from {comment_safe(f.model_path)}",
            f"serving mode {f.mode}, weights {f.precision}, KV cache {f.kv_dtype}, "
            f"max_model_len {f.max_model_len}",
            *(f"pool {p.summary()}" for p in f.pools.values())]


def _comment(lines) -> list[str]:
    return [f"# {line}".rstrip() for line in lines]


def script_names(hosts: tuple[str, ...]) -> dict[str, str]:
    """``launch_<host>.sh`` per host, the host reduced to ``[A-Za-z0-9._-]``; a name that two
    hosts would share gets the host's position in the plan appended."""
    base = {h: _FILE_SAFE.sub("_", h).strip("._") or "host" for h in hosts}
    counts: dict[str, int] = {}
    for b in base.values():
        counts[b] = counts.get(b, 0) + 1
    return {h: f"launch_{b}.sh" if counts[b] == 1 else f"launch_{b}-{i}.sh"
            for i, (h, b) in enumerate(base.items())}


def render_files(fmt: str, f: ServingFacts, commands: tuple[Command, ...],
                 notes: tuple[str, ...]) -> Emission:
    """One ``launch_<host>.sh`` per host that runs a command (it starts that host's processes in
    the background and waits for whichever ends first, ``wait -n``: when one fails, or the
    script is interrupted, it stops the others) and ``serving_commands.txt``."""
    header = _comment(header_lines(f, fmt))
    hosts = tuple(dict.fromkeys(c.host for c in commands))  # plan order
    names = script_names(hosts)
    files = []
    for host in hosts:
        mine = [c for c in commands if c.host == host]
        body = ["planner_pids=()"]
        for c in mine:
            body += [f"# {c.what}", c.shell_line() + " &", 'planner_pids+=("$!")']
        text = ["#!/usr/bin/env bash", *header, f"# host: {comment_safe(host)}", "#",
                *_comment(notes), "#",
                f"# Run on that host: starts its {len(mine)} process(es) in the background and "
                "waits; when any one exits with an error (bash 4.3 or later: wait -n; older "
                "bash notices it only once the ones started before it end), or this script "
                "gets Ctrl-C or SIGTERM, the others are stopped.",
                "set -euo pipefail", "", *body, "",
                "trap 'kill \"${planner_pids[@]}\" 2>/dev/null || true' EXIT",
                "trap 'exit 130' INT",
                "trap 'exit 143' TERM",
                "# wait -n returns as soon as any process ends, with its status: an error ends "
                "the script (set -e), and the EXIT trap stops the rest",
                "if (( BASH_VERSINFO[0] > 4 || (BASH_VERSINFO[0] == 4 && "
                "BASH_VERSINFO[1] >= 3) )); then",
                '  for _ in "${planner_pids[@]}"; do',
                "    wait -n",
                "  done",
                "else  # bash before 4.3 has no wait -n: each process in turn",
                '  for planner_pid in "${planner_pids[@]}"; do',
                '    wait "$planner_pid"',
                "  done",
                "fi"]
        files.append((names[host], "\n".join(text) + "\n"))
    listing = [*header, "#", *_comment(notes), "#",
               "# Every command of the plan, each under a comment naming its host; the "
               "launch_<host>.sh scripts run them.", ""]
    for c in commands:
        listing += [f"# host {comment_safe(c.host)}: {c.what}", c.shell_line(), ""]
    files.append(("serving_commands.txt", "\n".join(listing)))
    return Emission(tuple(files), notes)
