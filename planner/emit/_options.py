"""Emitter options (the user's script, port, job name, image, plan path) and their checks."""
from __future__ import annotations

import re
from dataclasses import dataclass

from planner.emit._facts import check_text


@dataclass(frozen=True)
class EmitOptions:
    """What the plan does not say: how the user's training program is started.

    ``script`` and ``script_args`` are passed to torchrun verbatim (quoted for the shell;
    anything is allowed but NUL). ``plan_path`` is exported as ``PLANNER_PLAN`` so that
    ``planner.run.runtime`` in the training processes can find the plan.
    """

    script: str = "train.py"
    script_args: tuple[str, ...] = ()
    master_port: int = 29500
    job_name: str = "planner-job"
    image: str = "nvcr.io/nvidia/pytorch:24.12-py3"
    plan_path: str = "plan.json"


def check_options(o: EmitOptions) -> EmitOptions:
    """``o`` if its values can be emitted, else ValueError naming the option."""
    if not isinstance(o, EmitOptions):
        raise ValueError(f"expected EmitOptions, got {type(o).__name__}")
    check_text("option script", o.script)
    if not o.script or o.script.startswith("-"):
        raise ValueError(f"option script: a path that does not start with '-' (torchrun would "
                         f"read it as an option), got {o.script!r}")
    if not isinstance(o.script_args, tuple):
        raise ValueError("option script_args: expected a tuple of strings")
    for i, arg in enumerate(o.script_args):
        check_text(f"option script_args[{i}]", arg)
    if type(o.master_port) is not int or not 1 <= o.master_port <= 65535:
        raise ValueError(f"option master_port: an integer 1..65535, got {o.master_port!r}")
    for name in ("job_name", "image", "plan_path"):
        value = check_text(f"option {name}", getattr(o, name))
        if not value:
            raise ValueError(f"option {name}: must not be empty")
    return o


def slurm_job_name(name: str) -> str:
    """``name`` reduced to characters that are safe in an ``#SBATCH`` line (letters, digits,
    ``.``, ``_``, ``-``), at most 64 of them; ``planner-job`` if nothing is left."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:64]
    return safe or "planner-job"


def dns1123_name(name: str, limit: int = 40) -> str:
    """``name`` as a Kubernetes DNS-1123 label: lowercase ``[a-z0-9-]``, starting and ending
    with an alphanumeric, at most ``limit`` characters (the operator appends
    ``-worker-<index>`` for pod and service names, which must stay within 63)."""
    safe = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:limit].strip("-")
    return safe or "planner-job"
