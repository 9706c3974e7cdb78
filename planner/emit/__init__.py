"""Launch configs of a plan: torchrun, Slurm, Kubeflow, Megatron-LM, DeepSpeed, torchtitan
for training plans; vLLM and SGLang for serving plans.

``emit(fmt, plan, options)`` returns ``{file name: text}``; the same inputs give the same
bytes. ``emission(...)`` also returns the notes (limitations and approximations of the
format), which the files carry as comments where the format has comments.

Every value that came from a user file (host names, script path and arguments, job name,
image, plan path, model name) is quoted for the syntax it lands in: ``shlex.quote`` in shell
text (``case`` patterns included), ``yaml.safe_dump`` for YAML, escaping serializers for
TOML and JSON, and a one-line escaped form inside comments. A plan or option that a format
cannot express raises ValueError with the reason.

Formats and files:

* ``torchrun``: ``launch_torchrun.sh``, ``torchrun_commands.txt``
* ``slurm``: ``planner.sbatch``
* ``kubeflow``: ``pytorchjob.yaml``
* ``megatron``: ``megatron_args.sh``, ``megatron_args.json``
* ``deepspeed``: ``ds_config.json``, ``deepspeed_notes.txt``
* ``torchtitan``: ``torchtitan.toml``
* ``vllm``, ``sglang`` (serving plans, ``SERVING_FORMATS``): ``launch_<host>.sh`` per host,
  ``serving_commands.txt``
"""
from __future__ import annotations

from planner.emit._facts import Facts, facts_of
from planner.emit._options import EmitOptions, check_options
from planner.emit.deepspeed import render_deepspeed
from planner.emit.kubeflow import render_kubeflow
from planner.emit.launch import render_slurm, render_torchrun
from planner.emit.megatron import render_megatron
from planner.emit.afd_vllm import render_vllm_afd
from planner.emit.serving_engines import render_sglang, render_vllm
from planner.emit.torchtitan import render_torchtitan
from planner.emit.types import Emission, UnsupportedByFormat
from planner.plan.document import Plan

FORMATS = ("torchrun", "slurm", "kubeflow", "megatron", "deepspeed", "torchtitan")
SERVING_FORMATS = ("vllm", "sglang")  # formats of serving plans

__all__ = ["FORMATS", "SERVING_FORMATS", "EmitOptions", "Emission", "emit", "emission"]


def _render(fmt: str, f: Facts, o: EmitOptions) -> Emission:
    if fmt == "torchrun":
        return render_torchrun(f, o)
    if fmt == "slurm":
        return render_slurm(f, o)
    if fmt == "kubeflow":
        return render_kubeflow(f, o)
    if fmt == "megatron":
        return render_megatron(f)
    if fmt == "deepspeed":
        return render_deepspeed(f)
    return render_torchtitan(f, o)


def emission(fmt: str, plan: Plan, options: EmitOptions = EmitOptions()) -> Emission:
    """The files and notes of ``fmt`` for ``plan``; ValueError for an unknown format, a plan
    or option that fails validation, or a plan the format cannot express."""
    if fmt not in FORMATS + SERVING_FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected one of "
                         f"{', '.join(FORMATS + SERVING_FORMATS)}")
    options = check_options(options)
    if fmt in SERVING_FORMATS:
        if isinstance(plan, Plan) and (plan.serving or {}).get("mode") == "afd":
            if fmt == "sglang":
                raise UnsupportedByFormat(
                    "sglang: an afd (attention/FFN disaggregated) plan: SGLang's "
                    "AFD runs on Ascend NPUs only (sgl-project/sglang#36258); "
                    "use 'planner emit vllm' for the afd-plugin settings")
            return render_vllm_afd(plan)
        return (render_vllm if fmt == "vllm" else render_sglang)(plan, options)
    if isinstance(plan, Plan) and plan.kind == "serving":
        raise UnsupportedByFormat(
            f"{fmt}: a serving plan is launched with the "
            f"{' or '.join(SERVING_FORMATS)} format, not {fmt}")
    return _render(fmt, facts_of(plan), options)


def emit(fmt: str, plan: Plan, options: EmitOptions = EmitOptions()) -> dict[str, str]:
    """``{file name: text}`` of ``fmt`` for ``plan`` (see :func:`emission`)."""
    return emission(fmt, plan, options).as_dict()
