"""NCCL settings in the launch files, read from the plan's ``fabric`` section.

Per node, the environment of :func:`planner.plan.fabric.nccl_env` (``NCCL_NET``,
``NCCL_IB_HCA`` with exact ``=`` names, ``NCCL_IB_GID_INDEX``, ``NCCL_SOCKET_IFNAME``,
``NCCL_IB_DISABLE``). NCCL reads ``NCCL_IB_HCA`` once per process, so where a node's ranks use
different rails each process is started through a *rank wrapper*: a one-line ``bash -c``
program that sets ``NCCL_IB_HCA`` from torchrun's ``LOCAL_RANK`` in a ``case`` statement and
then ``exec``\\ s the training script with Python (``$PLANNER_PYTHON``, default ``python3``).
torchrun runs it with ``--no-python`` (``torch/distributed/run.py``: the training script is
executed directly, its arguments follow it), so the argv becomes
``torchrun ... --no-python bash -c <wrapper> planner-nccl-rank <script> <args>``.

Every value is passed through ``shlex.quote`` in the wrapper and in the launch scripts (the
names are also restricted by the cluster spec and the plan validator); the Kubernetes emitter
escapes the wrapper for ``$(VAR)`` expansion and writes it with ``yaml.safe_dump``.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.plan.fabric import (fabric_problems, nccl_env, rank_env, serving_fabric_problems,
                                 socket_group_note)

if TYPE_CHECKING:
    from planner.plan.document import Plan

Env = tuple[tuple[str, str], ...]
RANK_WRAPPER_NAME = "planner-nccl-rank"  # $0 of the wrapper (shows in ps and error messages)


@dataclass(frozen=True)
class FabricNode:
    """One node's NCCL settings: its node rank and host, the node-wide environment, and per
    LOCAL_RANK the variables its rank wrapper sets (None: the node needs no wrapper)."""

    rank: int
    host: str
    transport: str
    env: Env
    rank_env: tuple[Env, ...] | None


def fabric_of(plan: Plan) -> tuple[FabricNode, ...] | None:
    """The validated NCCL settings of every node of ``plan`` (None without a fabric section);
    ValueError names the first problem of a section that does not match the plan's cluster."""
    section = plan.fabric
    if section is None:
        return None
    if plan.kind != "training":
        raise ValueError(f"plan: a fabric section on a {plan.kind} plan")
    try:
        cluster, pool = plan.cluster(), plan.pool()
    except (TypeError, ValueError, KeyError) as err:
        raise ValueError(f"plan: the fabric section needs readable inputs ({err})") from None
    problems = fabric_problems(section, cluster, pool)
    if problems:
        raise ValueError(f"plan: {problems[0]}")
    out = []
    for entry, node in zip(section["nodes"], pool.nodes):
        rails = None
        if entry["rank_hcas"] is not None:
            rails = tuple(tuple(rank_env(entry, lr)) for lr in range(node["gpus"]))
        out.append(FabricNode(entry["node_rank"], entry["host"], entry["transport"],
                              tuple(nccl_env(entry)), rails))
    return tuple(out)


def serving_fabric_env(plan: Plan) -> tuple[dict[str, Env], tuple[str, ...]]:
    """Per host of a serving plan the node-wide NCCL environment of its fabric section, and
    notes ({} and () without a section); ValueError names the first problem of a section
    that does not match the plan. The engines start their own GPU workers, so per-GPU rails
    cannot be set: ``NCCL_IB_HCA`` lists every RDMA device of the node."""
    section = plan.fabric
    if section is None:
        return {}, ()
    try:
        cluster = plan.cluster()
    except (TypeError, ValueError, KeyError) as err:
        raise ValueError(f"plan: the fabric section needs readable inputs ({err})") from None
    instances = (plan.serving or {}).get("instances", [])
    problems = serving_fabric_problems(section, cluster, plan.pools, instances)
    if problems:
        raise ValueError(f"plan: {problems[0]}")
    env = {e["host"]: tuple(nccl_env(e)) for pool in section["pools"] for e in pool["nodes"]}
    notes = ["NCCL settings per host (plan fabric section; NCCL_IB_HCA names match exactly): "
             + "; ".join(f"{h}: {' '.join(f'{k}={v}' for k, v in e) or '(none)'}"
                         for h, e in env.items())]
    spanning = {p["role"]: p["socket_instances"] for p in section["pools"] if p["socket_instances"]}
    if spanning:
        notes.append("Engine instances spanning RDMA networks run their collectives on TCP "
                     "sockets (" + ", ".join(f"{n} {r}" for r, n in spanning.items())
                     + "): start them with NCCL_NET=Socket, or give the pool nodes of one "
                     "network.")
    if any(e["rank_hcas"] is not None for pool in section["pools"] for e in pool["nodes"]):
        notes.append("Per-GPU rails are not set: the engine starts its own GPU workers, so each "
                     "node's NCCL_IB_HCA lists all of its RDMA devices.")
    return env, tuple(notes)


def needs_wrapper(fabric: tuple[FabricNode, ...] | None) -> bool:
    """Whether any node's ranks use different rails (then every node runs the wrapper, so all
    nodes start the same way)."""
    return bool(fabric) and any(n.rank_env is not None for n in fabric)


def env_words(env: Env) -> list[str]:
    """``NAME=value`` shell words, each value quoted."""
    return [f"{name}={shlex.quote(value)}" for name, value in env]


def export_lines(env: Env) -> list[str]:
    return [f"export {word}" for word in env_words(env)]


def _exec_python() -> str:
    return 'exec "${PLANNER_PYTHON:-python3}" -u "$@"'


def _rank_case(rank_env: tuple[Env, ...] | None) -> str:
    """``case`` on LOCAL_RANK exporting each rank's rail ('' when the node has no rails)."""
    if rank_env is None:
        return ""
    arms = [f"{lr}) {'; '.join(export_lines(env))} ;;" for lr, env in enumerate(rank_env)]
    bad = ('*) echo "planner: LOCAL_RANK \'${LOCAL_RANK:-}\' has no rail on this node" >&2; '
           "exit 1 ;;")
    return 'case "${LOCAL_RANK:-}" in ' + " ".join([*arms, bad]) + " esac; "


def rank_wrapper(node: FabricNode) -> str:
    """The one-line ``bash -c`` program a process of ``node`` starts through."""
    return _rank_case(node.rank_env) + _exec_python()


def host_wrapper(nodes: tuple[FabricNode, ...], variable: str) -> str:
    """A one-line wrapper for processes whose host is only known at run time (``$variable``):
    it exports the host's node-wide settings and its rank's rail, then execs Python."""
    arms = []
    for n in nodes:
        body = "; ".join(export_lines(n.env)) + ("; " if n.env else "")
        arms.append(f"{shlex.quote(n.host)}) {body}{_rank_case(n.rank_env)}: ;;")
    bad = (f'*) echo "planner: node \'${{{variable}:-}}\' is not in the plan\'s host table" '
           ">&2; exit 1 ;;")
    return f'case "${{{variable}:-}}" in ' + " ".join([*arms, bad]) + " esac; " + _exec_python()


def wrapper_argv(wrapper: str) -> list[str]:
    """The torchrun arguments that put the wrapper between torchrun and the script."""
    return ["--no-python", "bash", "-c", wrapper, RANK_WRAPPER_NAME]


def fabric_notes(fabric: tuple[FabricNode, ...] | None, section: dict | None) -> list[str]:
    """Notes on the NCCL settings: one line per node, the socket groups, the wrapper."""
    if not fabric:
        return []
    notes = ["NCCL settings per node (plan fabric section; NCCL_IB_HCA names match exactly):"]
    for n in fabric:
        words = " ".join(f"{k}={v}" for k, v in n.env) or "(none)"
        rails = ""
        if n.rank_env is not None:
            rails = "; per LOCAL_RANK NCCL_IB_HCA " + " ".join(
                f"{lr}:{env[0][1]}" for lr, env in enumerate(n.rank_env))
        notes.append(f"  node_rank {n.rank} ({n.transport}): {words}{rails}")
    if needs_wrapper(fabric):
        notes.append("Ranks of a node use different rails: each process starts through a "
                     "bash wrapper (torchrun --no-python) that sets NCCL_IB_HCA from "
                     "LOCAL_RANK, then runs the script with $PLANNER_PYTHON (default python3).")
    note = socket_group_note(section or {})
    if note:
        notes.append(note)
    return notes
