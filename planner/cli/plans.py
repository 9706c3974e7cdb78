"""Commands that read plan files: ``explain``, ``compare``, ``emit`` and ``launch``.

Each loads and validates the plan (:func:`planner.plan.file.load_plan`), then hands it to a
report, an emitter or the launcher; registered on the app by :mod:`planner.cli.app`.
``explain`` and ``compare`` dispatch on the plan's kind (training or serving); for serving
plans the few figures the reports need that a plan does not hold (targets met, the ranking)
are worked out here.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Optional

import typer
from rich.console import Console, RenderableType

from planner.cli.common import fail, print_report, using_document
from planner.errors import SpecError
from planner.files import write_all_atomic

if TYPE_CHECKING:  # annotations only: plans are loaded lazily inside the commands
    from planner.plan.document import Plan

PLAN_EXPECTED = "a plan written by 'planner solve' or 'planner serve'"

PlanArg = Annotated[Path, typer.Argument(help="A plan file written by 'planner solve --out' "
                                              "(or 'planner serve --out').")]


def explain(
    plan: PlanArg,
    timeline: Annotated[Optional[Path], typer.Option(
        help="Also draw the pipeline timeline to this .png or .svg file.")] = None,
    max_microbatches: Annotated[int, typer.Option(
        min=1, help="Micro-batches to simulate for the timeline (warm-up and cool-down are "
                    "the same for any count).")] = 16,
) -> None:
    """Show everything a plan decided and predicted, and its pipeline timeline; for a serving
    plan, its pools, step time by part, TTFT, TPOT and throughput against the targets, and its
    engine instances."""
    from planner.plan.file import load_plan
    from planner.report.explain import render_explain
    from planner.report.timeline import save_timeline
    from planner.training.timeline import plan_timeline

    loaded = load_plan(plan)
    if loaded.kind == "serving":
        from planner.report.serving_explain import render_serving_explain
        if timeline is not None:
            raise SpecError("--timeline", "", "a training plan (a serving plan has no "
                                              "pipeline timeline)", loaded.kind)
        _print_plan_report(lambda: render_serving_explain(loaded, serving_targets_met(loaded)),
                           str(plan))
        return
    with using_document(str(plan), PLAN_EXPECTED):
        simulated = plan_timeline(loaded, max_microbatches)
        title = (f"{loaded.inputs['model']['name']}: {loaded.schedule}, "
                 f"{simulated.num_stages} stages, {simulated.simulated_units} micro-batches")
    report = _rendered(lambda: render_explain(loaded, simulated), str(plan))
    if timeline is not None:
        save_timeline(simulated, timeline, title)
    sys.stdout.write(report)
    if timeline is not None:
        typer.echo(f"wrote {timeline}")


def compare(plans: Annotated[list[Path], typer.Argument(help="Two or more plan files.")]) -> None:
    """Show plans side by side with their differences highlighted; serving plans one row
    each, ranked by output tokens/s per GPU, the best marked."""
    from planner.report.compare import render_compare
    from planner.plan.file import load_plan

    if len(plans) < 2:
        raise SpecError("PLANS", "", "two or more plan files to compare ('planner explain "
                        "PLAN' shows one)", [str(p) for p in plans])
    seen: dict[Path, Path] = {}
    for p in plans:
        key = p.resolve()
        if key in seen:
            raise SpecError("PLANS", "", "distinct plan files", f"{seen[key]} and {p} are the "
                            "same file")
        seen[key] = p
    loaded = [load_plan(p) for p in plans]
    names = [p.stem for p in plans]
    if len(set(names)) < len(names):
        names = [str(p) for p in plans]
    kinds = sorted({p.kind for p in loaded})
    if len(kinds) > 1:
        got = ", ".join(f"{name}: {p.kind}" for name, p in zip(names, loaded))
        raise SpecError("PLANS", "kind", "plans of one kind (training or serving)", got)
    for path, p in zip(plans, loaded):  # a plan malformed beyond its validator: name it alone
        _rendered(_one_plan_report(p), str(path))
    sources = ", ".join(str(p) for p in plans)
    if kinds == ["serving"]:
        from planner.report.serving_explain import render_serving_compare

        def serving_report():
            order = serving_rank(loaded)
            best = 0 if loaded[order[0]].prediction["meets_slo"] else None
            return render_serving_compare([loaded[i] for i in order], [names[i] for i in order],
                                          best, serving_inputs_differ(loaded))
        _print_plan_report(serving_report, sources)
        return
    _print_plan_report(lambda: render_compare(loaded, names), sources)


def _one_plan_report(plan: Plan) -> Callable[[], RenderableType]:
    """What ``explain`` shows of ``plan`` (without the timeline), to render."""
    if plan.kind == "serving":
        from planner.report.serving_explain import render_serving_explain
        return lambda: render_serving_explain(plan, serving_targets_met(plan))
    from planner.report.explain import render_explain
    return lambda: render_explain(plan)


def _rendered(render: Callable[[], RenderableType], source: str) -> str:
    """The text :func:`print_report` prints for ``render()``, made in full before anything is
    printed: a plan malformed beyond what its validator checks fails with one line naming
    ``source`` (:func:`using_document`) instead of half a report and a traceback."""
    console = Console()
    with using_document(source, PLAN_EXPECTED), console.capture() as captured:
        print_report(render(), console)
    return captured.get()


def _print_plan_report(render: Callable[[], RenderableType], source: str) -> None:
    sys.stdout.write(_rendered(render, source))


def serving_targets_met(plan: Plan) -> dict[str, bool | None]:
    """Per target (``ttft``, ``tpot``) whether the prediction meets it (``None``: no target);
    the same test as the estimate's ``meets_slo`` (``planner/serving/estimate.py``)."""
    workload, prediction = plan.serving["workload"], plan.prediction
    got = {"ttft": prediction.get("ttft_at_quantile_s", prediction["ttft_s"]),
           "tpot": prediction.get("tpot_full_s", prediction["tpot_s"])}
    return {name: None if workload.get(f"{name}_ms") is None
            else got[name] is not None and got[name] * 1e3 <= workload[f"{name}_ms"] + 1e-9
            for name in ("ttft", "tpot")}


def serving_rank(plans: list[Plan]) -> list[int]:
    """Indices of ``plans``, best first: plans meeting their targets before those that miss,
    then by output tokens/s per GPU, highest first (ties keep the command-line order)."""
    return sorted(range(len(plans)), key=lambda i: (not plans[i].prediction["meets_slo"],
                                                    -plans[i].prediction[
                                                        "output_tokens_per_s_per_gpu"]))


def serving_inputs_differ(plans: list[Plan]) -> bool:
    """Whether the plans are for different models or workloads (ISL, OSL, load, targets)."""
    return len({(p.inputs["model"]["name"],
                 tuple(sorted(p.serving["workload"].items()))) for p in plans}) > 1


def emit(
    fmt: Annotated[str, typer.Argument(
        metavar="FORMAT", help="torchrun, slurm, kubeflow, megatron, deepspeed or torchtitan; "
                               "vllm or sglang for serving plans.")],
    plan: PlanArg,
    out_dir: Annotated[Path, typer.Option(help="Folder to write the files to.")] = Path("launch"),
    script: Annotated[str, typer.Option(help="Training script each rank runs.")] = "train.py",
    script_arg: Annotated[Optional[list[str]], typer.Option(
        help="An argument for the script (repeat the option).")] = None,
    master_port: Annotated[int, typer.Option(min=1, max=65535)] = 29500,
    job_name: Annotated[str, typer.Option(help="Job name (Slurm, Kubernetes).")] = "planner-job",
    image: Annotated[str, typer.Option(help="Container image (Kubeflow).")] = (
        "nvcr.io/nvidia/pytorch:24.12-py3"),
) -> None:
    """Write launch configs for a plan: per-node torchrun commands, a Slurm script, a Kubeflow
    PyTorchJob, Megatron-LM arguments, a DeepSpeed config or a torchtitan TOML; for a serving
    plan, per-host vLLM or SGLang launch scripts (and the SGLang router)."""
    from planner.emit import FORMATS, SERVING_FORMATS, EmitOptions
    from planner.emit import emit as run_emit
    from planner.plan.file import load_plan

    if fmt not in FORMATS + SERVING_FORMATS:
        raise SpecError("FORMAT", "", f"one of {', '.join(FORMATS + SERVING_FORMATS)}", fmt)
    loaded = load_plan(plan)
    options = EmitOptions(script=script, script_args=tuple(script_arg or ()),
                          master_port=master_port, job_name=job_name, image=image,
                          # scripts may start from any folder (Slurm: the submit folder), so
                          # they name the plan by its absolute path; a container's is the
                          # image's business, left as given
                          plan_path=str(plan if fmt == "kubeflow" else plan.resolve()))
    with using_document(str(plan), PLAN_EXPECTED):
        files = run_emit(fmt, loaded, options)  # everything is rendered before anything is written
    targets = {out_dir / name: text for name, text in sorted(files.items())}
    write_all_atomic(targets, executable={p for p in targets if p.name.endswith((".sh", ".sbatch"))})
    for path in targets:
        typer.echo(f"wrote {path}")
    for note in loaded.notes if loaded.kind == "serving" else ():
        if note.startswith("model_path:"):  # the engines would load a bare model name
            typer.echo(f"warning: {note}", err=True)
    placeholders = default_host_names(loaded)
    if placeholders and fmt not in ("megatron", "deepspeed", "torchtitan"):
        typer.echo(f"warning: the plan's host names ({placeholders[0]} .. {placeholders[-1]}) "
                   "are the defaults of a cluster without hosts; the launch files find each "
                   "node's rank by its host name, so list the real names in the cluster file "
                   f"(node_groups[].hosts) and {'serve' if loaded.kind == 'serving' else 'solve'}"
                   " again" + (
                       ", or start each node with its rank (launch_torchrun.sh NODE_RANK)"
                       if fmt == "torchrun" else ""), err=True)


def default_host_names(plan) -> list[str]:
    """The plan's host names when every one is its node group's default ``<group>-<index>``
    (the cluster file listed no hosts), in node order; [] otherwise."""
    import re
    nodes = [n for pool in plan.pools for n in pool.nodes]
    hosts = [n.get("host", "") for n in nodes]
    if nodes and all(re.fullmatch(re.escape(str(n.get("node_group", ""))) + r"-\d+",
                                  str(n.get("host", ""))) for n in nodes):
        return list(dict.fromkeys(hosts))
    return []


def launch(
    plan: PlanArg,
    script: Annotated[Optional[str], typer.Option(
        help="Training script every rank runs (default: planner's reference job).")] = None,
    script_arg: Annotated[Optional[list[str]], typer.Option(
        help="An argument for the script (repeat the option).")] = None,
    record: Annotated[Optional[Path], typer.Option(
        help="Write the run record (JSON) here.")] = None,
    master_port: Annotated[Optional[int], typer.Option(min=1, max=65535)] = None,
    dry_run: Annotated[bool, typer.Option(help="Print the command(s), run nothing.")] = False,
) -> None:
    """Run a plan on this machine under torchrun (one node), streaming the logs; on a worker
    failure, Ctrl-C, SIGTERM or SIGHUP every process of the job is ended (SIGTERM, then
    SIGKILL after 5 s) and the message says which. For a plan of several nodes, print
    the per-node torchrun commands to run on each host. For an AFD serving plan, run its
    attention and FFN GPUs here as one world (the AFD decode job by default; the prefill
    pool is not run)."""
    import os
    import shlex

    from planner.emit import EmitOptions
    from planner.emit import emit as run_emit
    from planner.run.calibrate import OtherLoad
    from planner.run.launch import (MAX_LOCAL_PROCESSES, TORCH_MISSING, add_run_conditions,
                                    afd_local, local_command, run_local, torch_installed,
                                    write_launch_record)
    from planner.plan.file import load_plan

    loaded = load_plan(plan)
    afd = afd_local(loaded)
    if loaded.kind == "serving" and afd is None:
        fail(f"planner launch runs training plans and AFD serving plans; this is a "
             f"{loaded.serving['mode']} serving plan (use 'planner emit sglang' or "
             "'planner emit vllm')", 2)
    if afd is not None:
        prefill = sum(p.num_gpus for p in loaded.pools if p.role == "prefill")
        if sum(afd) > MAX_LOCAL_PROCESSES:
            fail(f"the plan's AFD decode pools need {afd[0]} attention + {afd[1]} FFN = "
                 f"{sum(afd)} processes on this machine, more than {MAX_LOCAL_PROCESSES}", 2)
        typer.echo(f"planner launch: AFD plan: running its decode pools here ({afd[0]} "
                   f"attention + {afd[1]} FFN processes); the prefill pool ({prefill} "
                   f"GPU{'' if prefill == 1 else 's'}) is not run", err=True)
    elif len(loaded.nodes) > 1:
        options = EmitOptions(script=script or "train.py", script_args=tuple(script_arg or ()),
                              plan_path=str(plan))
        typer.echo(run_emit("torchrun", loaded, options)["torchrun_commands.txt"], nl=False)
        return
    if not dry_run and not torch_installed():
        fail(TORCH_MISSING, 2)
    _check_launch_paths(script, record)
    cmd = local_command(loaded, plan, script, list(script_arg or []), record, master_port)
    typer.echo(f"planner launch: {shlex.join(cmd)}", err=True)
    if dry_run:
        return
    other = OtherLoad()
    result = run_local(cmd, {**os.environ, "PLANNER_PLAN": str(plan)})
    if script is not None and record is not None:
        write_launch_record(record, loaded, cmd, result)
    elif record is not None and record.is_file() and not result.interrupted:
        add_run_conditions(record, {"other_load_cores": other.cores()})
    if result.interrupted:
        import signal as _signal
        name = _signal.Signals(result.signal).name
        fail(f"interrupted by {name}: {result.ended_text()}", result.exit_code)
    if result.exit_code != 0:
        fail(f"the job failed (torchrun exit code {result.exit_code}; the worker's error is in "
             f"the log above); {result.ended_text()}", result.exit_code)


def _check_launch_paths(script: str | None, record: Path | None) -> None:
    """What the job needs from the command line, checked before any process starts: the
    script exists, and the record's folder exists and is writable."""
    import os
    if script is not None and not Path(script).is_file():
        fail(f"--script: expected a script file, got {script!r}: no such file", 2)
    if record is not None:
        folder = record.parent  # Path('run.json').parent is Path('.')
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            fail(f"--record: expected a path in a writable folder, got {str(record)!r}: "
                 f"{str(folder)!r} is not a writable folder", 2)
