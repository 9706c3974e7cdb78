"""torchrun and Slurm launch scripts.

``launch_torchrun.sh`` runs on every node: its node rank comes from its first argument, or
from this machine's host name looked up in the plan's host table; it then ``exec``\\ s
``torchrun`` with the static rendezvous (see :mod:`planner.emit._shell`).
``torchrun_commands.txt`` lists the same command for each node.

``planner.sbatch`` (Slurm, https://slurm.schedmd.com/sbatch.html): ``#SBATCH --job-name``,
``--nodes``, ``--ntasks-per-node=1``, ``--gpus-per-node``, ``--nodelist`` (the plan's hosts)
and ``--exclusive``; then one ``srun`` task per node (https://slurm.schedmd.com/srun.html:
``--ntasks-per-node``, ``--kill-on-bad-exit``, ``--export=ALL``) runs a shell function that
maps ``$SLURMD_NODENAME`` / ``hostname`` to the plan's node rank through a ``case`` table.
``SLURM_NODEID`` is not used: it numbers the nodes in Slurm's sorted node-list order, which
need not be the plan's node-rank order (the plan may have reordered nodes for locality).

Plans with a fabric section get each node's NCCL settings (``NCCL_NET``, ``NCCL_IB_HCA`` with
exact ``=`` names, ``NCCL_IB_GID_INDEX``, ``NCCL_SOCKET_IFNAME``, ``NCCL_IB_DISABLE``) exported
before torchrun starts, and the LOCAL_RANK rail wrapper where a node's ranks use different
rails (:mod:`planner.emit._nccl`).
"""
from __future__ import annotations

import re

from planner.emit._facts import Facts, comment_safe, header_lines
from planner.emit._options import EmitOptions, slurm_job_name
from planner.emit._shell import (comment, command_line, indent, launch_lines,
                                 rank_lookup_lines)
from planner.emit.types import Emission

_SLURM_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _rank_notes(f: Facts) -> list[str]:
    notes = ["Node ranks are fixed by the plan (static rendezvous: torchrun gives node rank r "
             "the global ranks after those of nodes 0..r-1):"]
    for n in f.nodes:
        notes.append(f"  node_rank {n.rank}: host {comment_safe(n.host)}, {n.gpus} GPUs, "
                     f"global ranks {n.first_rank}-{n.first_rank + n.gpus - 1}")
    return notes + list(f.fabric_notes)


def render_torchrun(f: Facts, o: EmitOptions) -> Emission:
    """``launch_torchrun.sh`` and ``torchrun_commands.txt``."""
    n = len(f.nodes)
    notes = tuple(_rank_notes(f))
    script = ["#!/usr/bin/env bash", *comment(header_lines(f, "torchrun")), "#",
              *comment(notes), "#",
              f"# Usage: launch_torchrun.sh [NODE_RANK]   (0..{n - 1}; default: looked up from "
              "this host's name)",
              "set -euo pipefail", "",
              'if [ "$#" -gt 1 ]; then',
              f'  echo "usage: $0 [NODE_RANK]  (0..{n - 1})" >&2',
              "  exit 2",
              "fi",
              'if [ "$#" -eq 1 ]; then',
              f'  if [[ "$1" =~ ^[0-9]{{1,9}}$ ]] && (( 10#$1 < {n} )); then',
              "    PLANNER_NODE_RANK=$((10#$1))",
              "  else",
              f'    echo "planner: the node rank must be an integer 0..{n - 1}" >&2',
              "    exit 2",
              "  fi",
              "else",
              *indent(rank_lookup_lines(f)),
              "fi",
              *launch_lines(f, o)]
    commands = [*comment(header_lines(f, "torchrun")), "#",
                "# One command per node; run each on its host (any order). Node ranks are fixed "
                "by the plan.", ""]
    for node in f.nodes:
        commands += [f"# node_rank {node.rank}: host {comment_safe(node.host)}, {node.gpus} "
                     f"GPUs, global ranks {node.first_rank}-{node.first_rank + node.gpus - 1}",
                     command_line(f, o, node), ""]
    return Emission((("launch_torchrun.sh", "\n".join(script) + "\n"),
                     ("torchrun_commands.txt", "\n".join(commands))), notes)


def slurm_nodelist(f: Facts) -> str | None:
    """The ``--nodelist`` value (plan order), or None when a host is not a plain Slurm node
    name (then the directive is left out rather than written with characters sbatch would
    parse)."""
    if all(_SLURM_HOST.fullmatch(n.host) for n in f.nodes):
        return ",".join(n.host for n in f.nodes)
    return None


def render_slurm(f: Facts, o: EmitOptions) -> Emission:
    """``planner.sbatch``."""
    n = len(f.nodes)
    gpus = max(node.gpus for node in f.nodes)
    notes = _rank_notes(f)
    notes.append("The node rank is looked up from $SLURMD_NODENAME / hostname, not "
                 "SLURM_NODEID (Slurm numbers nodes in its sorted node-list order).")
    nodelist = slurm_nodelist(f)
    if nodelist is None:
        notes.append("--nodelist left out: some plan host names are not plain Slurm node "
                     "names; request the plan's hosts yourself (the case table below still "
                     "matches them exactly).")
    if f.uniform_gpus is None:
        notes.append(f"The nodes differ in GPU count; --gpus-per-node asks for the largest "
                     f"({gpus}) on every node. Use a heterogeneous job (#SBATCH hetjob) if "
                     "your nodes cannot all provide it.")
    if slurm_job_name(o.job_name) != o.job_name:
        notes.append(f"job name {comment_safe(o.job_name)} reduced to "
                     f"{slurm_job_name(o.job_name)} for #SBATCH.")
    directives = [f"#SBATCH --job-name={slurm_job_name(o.job_name)}", f"#SBATCH --nodes={n}",
                  "#SBATCH --ntasks-per-node=1", f"#SBATCH --gpus-per-node={gpus}"]
    if nodelist is not None:
        directives.append(f"#SBATCH --nodelist={nodelist}")
    directives.append("#SBATCH --exclusive")
    step = ["set -euo pipefail", *rank_lookup_lines(f), *launch_lines(f, o)]
    text = ["#!/usr/bin/env bash", *directives, *comment(header_lines(f, "slurm")), "#",
            *comment(notes), "set -euo pipefail", "",
            "# Runs once per node (one srun task per node): find this node's rank in the plan's",
            "# host table, then start torchrun on it.",
            "planner_node_step() {", *indent(step), "}",
            "export -f planner_node_step", "",
            f"srun --nodes={n} --ntasks={n} --ntasks-per-node=1 --kill-on-bad-exit=1 "
            "--export=ALL bash -c planner_node_step"]
    return Emission((("planner.sbatch", "\n".join(text) + "\n"),), tuple(notes))
