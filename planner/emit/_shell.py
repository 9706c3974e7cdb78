"""Shell text shared by the torchrun and Slurm emitters.

Every value that came from a user file is passed through :func:`shlex.quote` before it enters
shell text, including the host names used as ``case`` patterns (a quoted pattern matches
literally). Lines are built as *logical* lines: a quoted value may contain newlines, so
indentation is only ever added in front of a logical line, never inside one.

torchrun flags (``torch/distributed/run.py``, ``torchrun --help``): ``--nnodes``,
``--nproc-per-node``, ``--node-rank``, ``--rdzv-backend`` (default ``static``),
``--master-addr``, ``--master-port``. With the static backend the node's rendezvous rank is
``--node-rank`` (``rdzv_configs["rank"] = args.node_rank``) and the endpoint is
``master_addr:master_port``, so node rank ``r`` always gets the global ranks after those of
nodes ``0..r-1``: the ranks the plan's rank table assumes.

A plan with a fabric section also sets each node's NCCL environment (exported in a ``case`` on
the node rank) and, where a node's ranks use different rails, starts every process through the
rank wrapper of :mod:`planner.emit._nccl` (``--no-python bash -c <wrapper>``).
"""
from __future__ import annotations

import re
import shlex

from planner.emit._facts import Facts, Node
from planner.emit._nccl import (RANK_WRAPPER_NAME, env_words, export_lines, needs_wrapper,
                                rank_wrapper, wrapper_argv)
from planner.emit._options import EmitOptions

# torchrun reads PET_<OPTION> environment variables as option defaults; these four could turn
# the static rendezvous into another one, so the scripts unset them (the others are overridden
# by the explicit flags).
PET_OVERRIDES = ("PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND", "PET_RDZV_CONF", "PET_STANDALONE")
_IPV4 = re.compile(r"[0-9.]+")


def q(value: str) -> str:
    """``value`` quoted as one shell word."""
    return shlex.quote(value)


def comment(lines: tuple[str, ...] | list[str]) -> list[str]:
    """``# `` in front of each line (the lines hold no newline)."""
    return [f"# {line}".rstrip() for line in lines]


def indent(lines: list[str], prefix: str = "  ") -> list[str]:
    """``prefix`` in front of each logical line (not after newlines inside quoted words)."""
    return [prefix + line if line else line for line in lines]


def torchrun_argv(f: Facts, o: EmitOptions, node: Node) -> tuple[str, ...]:
    """The argv of the torchrun command that node ``node`` runs (static rendezvous)."""
    wrapper = (wrapper_argv(rank_wrapper(f.fabric[node.rank])) if needs_wrapper(f.fabric)
               else [])
    return ("torchrun", f"--nnodes={len(f.nodes)}", f"--nproc-per-node={node.gpus}",
            f"--node-rank={node.rank}", "--rdzv-backend=static",
            f"--master-addr={f.master.host}", f"--master-port={o.master_port}",
            *wrapper, o.script, *o.script_args)


def command_line(f: Facts, o: EmitOptions, node: Node) -> str:
    """Node ``node``'s full command as one shell line (``[NCCL_...=...] PLANNER_PLAN=...
    torchrun ...``)."""
    nccl = env_words(f.fabric[node.rank].env) if f.fabric else []
    words = [*nccl, f"PLANNER_PLAN={q(o.plan_path)}"] + [q(w) for w in torchrun_argv(f, o, node)]
    return " ".join(words)


def nccl_lines(f: Facts) -> list[str]:
    """With ``PLANNER_NODE_RANK`` set: export the node's NCCL settings and, when ranks use
    different rails, pick its rank wrapper (``PLANNER_NCCL_RANK_WRAPPER``). [] without a
    fabric section."""
    if not f.fabric:
        return []
    wrap = needs_wrapper(f.fabric)
    lines = ["# NCCL settings of this node (plan fabric section)",
             'case "$PLANNER_NODE_RANK" in']
    for n in f.fabric:
        body = export_lines(n.env)
        if wrap:
            body.append(f"PLANNER_NCCL_RANK_WRAPPER={q(rank_wrapper(n))}")
        lines += [f"  {n.rank})", *indent(body, "    "), "    ;;"]
    return [*lines, "esac"]


def host_patterns(nodes: tuple[Node, ...]) -> tuple[tuple[str, int], ...]:
    """(host name, node rank) pairs to match ``hostname`` output against: every plan host, and
    the short name (before the first dot) of a fully qualified one when that short name is
    unique in the plan and is not itself a plan host. IP addresses get no short alias."""
    pairs = [(n.host, n.rank) for n in nodes]
    hosts = {n.host for n in nodes}
    shorts: dict[str, list[int]] = {}
    for n in nodes:
        short = n.host.split(".", 1)[0]
        if short and short != n.host and not _IPV4.fullmatch(n.host) and ":" not in n.host:
            shorts.setdefault(short, []).append(n.rank)
    for short, ranks in sorted(shorts.items(), key=lambda kv: kv[1][0]):
        if len(ranks) == 1 and short not in hosts:
            pairs.append((short, ranks[0]))
    return tuple(pairs)


def rank_lookup_lines(f: Facts) -> list[str]:
    """Set ``PLANNER_NODE_RANK`` from this machine's names (Slurm's node name, ``hostname``,
    its short and fully qualified forms) looked up in the plan's host table; exit 1 if absent."""
    names = ('"${SLURMD_NODENAME:-}" "$(hostname 2>/dev/null || true)" '
             '"$(hostname -s 2>/dev/null || true)" "$(hostname -f 2>/dev/null || true)"')
    cases = [f"    {q(host)}) PLANNER_NODE_RANK={rank} ;;" for host, rank in host_patterns(f.nodes)]
    return ["PLANNER_NODE_RANK=''",
            f"for planner_name in {names}; do",
            '  case "$planner_name" in', *cases, "  esac",
            '  if [ -n "$PLANNER_NODE_RANK" ]; then break; fi',
            "done",
            'if [ -z "$PLANNER_NODE_RANK" ]; then',
            '  echo "planner: host \'$(hostname 2>/dev/null || true)\' is not in the plan\'s host '
            'table; pass its node rank (0..' + str(len(f.nodes) - 1) + ') explicitly" >&2',
            "  exit 1",
            "fi"]


def launch_lines(f: Facts, o: EmitOptions) -> list[str]:
    """With ``PLANNER_NODE_RANK`` set: pick the node's GPU count, export ``PLANNER_PLAN`` and
    ``exec`` torchrun with the static rendezvous on the plan's node-rank-0 host."""
    if f.uniform_gpus is not None:
        nproc = [f"PLANNER_NPROC={f.uniform_gpus}"]
    else:
        nproc = ['case "$PLANNER_NODE_RANK" in',
                 *[f"  {n.rank}) PLANNER_NPROC={n.gpus} ;;" for n in f.nodes], "esac"]
    wrapper = (["--no-python", "bash", "-c", '"$PLANNER_NCCL_RANK_WRAPPER"',
                RANK_WRAPPER_NAME] if needs_wrapper(f.fabric) else [])
    words = ["torchrun", f"--nnodes={len(f.nodes)}", '--nproc-per-node="$PLANNER_NPROC"',
             '--node-rank="$PLANNER_NODE_RANK"', "--rdzv-backend=static",
             f"--master-addr={q(f.master.host)}", f"--master-port={o.master_port}",
             *wrapper, q(o.script), *[q(a) for a in o.script_args]]
    command = ["exec " + words[0] + " \\"] + [f"  {w} \\" for w in words[1:-1]] + [f"  {words[-1]}"]
    return [*nproc, *nccl_lines(f),
            f"export PLANNER_PLAN={q(o.plan_path)}",
            "export PLANNER_NODE_RANK",
            f"unset {' '.join(PET_OVERRIDES)}",
            f'echo "planner: node rank $PLANNER_NODE_RANK of {len(f.nodes)}, $PLANNER_NPROC '
            f'processes, master {comment_free(f.master.host)}:{o.master_port}" >&2',
            *command]


def comment_free(host: str) -> str:
    """A host name for a double-quoted ``echo`` message: shell-active characters and
    anything outside printable ASCII replaced by ``?`` (the real value is never evaluated)."""
    return re.sub(r"[^A-Za-z0-9._:\[\]-]", "?", host)
