"""The ``planner`` command line: a thin Typer layer over the loaders, cost models and reports.

Commands: ``presets`` (models, clusters, GPUs), ``topo show|list`` (clusters), ``estimate``
(step time and memory of one parallel configuration), ``solve`` (search, place, slice: the best
plans), ``explain`` / ``compare`` (plan files), ``emit`` (launch configs of a plan), ``launch``
(run a plan here under torchrun: ``planner.run.launch``), ``calibrate`` / ``check-run``
(measure this machine, compare a run with its prediction: ``planner.cli.run``), ``experts``
(MoE expert placement: ``planner.cli.experts``). Errors are caught once, in the top-level
group (:class:`PlannerGroup`), so the console script and ``CliRunner`` behave the same: a
:class:`~planner.errors.PlannerError`, a usage error or a cost model's ``ValueError`` prints one
line ``error: ...`` on stderr and exits with its code (2 for bad input, 3 for infeasible).
"""
from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional

import typer
from rich.console import Console
from typer.core import TyperGroup

from planner.cli.common import OutputFormat, progress_bar
from planner.errors import PlannerError, SpecError
from planner.training.estimate_json import estimate_to_dict
from planner.files import write_atomic
from planner.training.estimation import (DEFAULT_GPU, ClusterChoice, ParallelChoice, checked_estimate,
                                load_profile, make_config, make_workload, resolve_cluster)
from planner.inputs.clusters import OPTIONS_SOURCE
from planner.inputs.models import load_model, model_presets
from planner.report.presets import render_gpu_catalog, render_model_presets
from planner.report.estimate import render_estimate
from planner.report.topo import render_presets, render_topology
from topologies.catalog import gpu_catalog
from topologies.presets import cluster_presets

USAGE_EXIT_CODE = 2
# click's UsageError (bad option value, unknown option, missing argument), found through the
# class typer re-exports: typer >= 0.2x vendors its own copy of click.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def fail(message: str, exit_code: int) -> NoReturn:
    """Print ``error: message`` as one line on stderr and exit with ``exit_code``."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    raise typer.Exit(exit_code)


class PlannerGroup(TyperGroup):
    """The top-level group: the one place where errors become a line on stderr and an exit code.

    Sub-commands' options are parsed inside ``invoke``, so bad option values land here too.
    """

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as err:
            if type(err).__name__ == "NoArgsIsHelpError":  # ``planner topo``: show the help
                raise
            where = err.ctx.command_path if err.ctx else "planner"
            fail(f"{err.format_message()} (see '{where} --help')", err.exit_code)
        except PlannerError as err:
            fail(str(err), err.exit_code)
        except ValueError as err:  # backstop: a cost-model constructor rejecting user input
            fail(str(err), USAGE_EXIT_CODE)


app = typer.Typer(cls=PlannerGroup, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_show_locals=False,
                  help="Plan the parallelism of LLM training on a GPU cluster.")
topo_app = typer.Typer(no_args_is_help=True, help="Cluster topologies: node groups and tiers.")
app.add_typer(topo_app, name="topo")

from planner.cli.experts import experts_app  # noqa: E402  (a sub-app of this group)

app.add_typer(experts_app, name="experts")

from planner.cli.run import calibrate_command, check_run_command  # noqa: E402

app.command("calibrate")(calibrate_command)
app.command("check-run")(check_run_command)


class PresetKind(str, Enum):
    models = "models"
    clusters = "clusters"
    gpus = "gpus"


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


class Precision(str, Enum):
    bf16 = "bf16"
    fp8 = "fp8"
    fp32 = "fp32"


class Optimizer(str, Enum):
    adam = "adam"
    sgd = "sgd"


OptimizerOpt = Annotated[Optimizer, typer.Option(
    help="adam (two fp32 moments) or sgd (no state; e.g. the reference job).")]


ClusterOpt = Annotated[Optional[str], typer.Option(
    "--cluster", help="Cluster preset name (see 'planner presets clusters') or YAML/JSON file.")]
GpuOpt = Annotated[Optional[str], typer.Option(
    help="GPU type for a standard cluster (see 'planner presets gpus').")]
NodesOpt = Annotated[Optional[int], typer.Option(min=1, help="Nodes of --gpu (default 8).")]
GpusPerNodeOpt = Annotated[Optional[int], typer.Option(
    min=1, help="GPUs per node (default: the GPU's usual node).")]


def _console() -> Console:
    return Console()


@app.command()
def presets(kind: Annotated[Optional[PresetKind], typer.Argument(
        help="Which registry to list; all three when left out.")] = None) -> None:
    """List the model presets, cluster presets and GPU types planner knows."""
    tables = {PresetKind.models: lambda: render_model_presets(model_presets()),
              PresetKind.clusters: lambda: render_presets(cluster_presets()),
              PresetKind.gpus: lambda: render_gpu_catalog(gpu_catalog())}
    console = _console()
    for key in [kind] if kind else list(PresetKind):
        console.print(tables[key]())


@topo_app.command("show")
def topo_show(
    cluster: Annotated[Optional[str], typer.Argument(
        help="Cluster preset name or YAML/JSON file; or use --gpu and --nodes.")] = None,
    gpu: GpuOpt = None, nodes: NodesOpt = None, gpus_per_node: GpusPerNodeOpt = None,
) -> None:
    """Show a cluster: node groups, link tiers with per-GPU bandwidth, totals."""
    resolved = resolve_cluster(ClusterChoice(cluster, gpu, nodes, gpus_per_node))
    _console().print(render_topology(resolved))


@topo_app.command("list")
def topo_list() -> None:
    """List the cluster presets."""
    _console().print(render_presets(cluster_presets()))


@app.command()
def estimate(
    model: Annotated[str, typer.Option(
        help="Model preset (see 'planner presets models'), model YAML/JSON or HF config.json."
    )] = "llama-3.1-70b",
    cluster: ClusterOpt = None, gpu: GpuOpt = None, nodes: NodesOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    tp: Annotated[int, typer.Option(min=1, help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option(min=1, help="Pipeline-parallel degree.")] = 1,
    dp: Annotated[Optional[int], typer.Option(
        min=1, help="Data-parallel degree (default: GPUs / (tp*pp*cp)).")] = None,
    cp: Annotated[int, typer.Option(min=1, help="Context-parallel degree.")] = 1,
    ep: Annotated[int, typer.Option(min=1, help="Expert-parallel degree (MoE).")] = 1,
    etp: Annotated[Optional[int], typer.Option(
        min=1, help="Expert tensor-parallel degree (default: --tp).")] = None,
    vpp: Annotated[int, typer.Option(
        min=1, help="Model chunks per pipeline stage (interleaved 1F1B when > 1).")] = 1,
    micro_batch: Annotated[int, typer.Option(min=1, help="Sequences per micro-batch.")] = 1,
    global_batch: Annotated[int, typer.Option(min=1, help="Sequences per step.")] = 1024,
    seq_len: Annotated[int, typer.Option(min=1, help="Tokens per sequence.")] = 4096,
    recompute: Annotated[Recompute, typer.Option(help="Activation recomputation.")] = Recompute.none,
    recompute_layers: Annotated[Optional[int], typer.Option(
        min=1, help="With --recompute full: layers per stage to recompute (default: all).")] = None,
    sequence_parallel: Annotated[Optional[bool], typer.Option(
        "--sequence-parallel/--no-sequence-parallel",
        help="Megatron sequence parallelism (default: on when tp > 1).")] = None,
    zero: Annotated[int, typer.Option(
        min=0, max=3, help="0 plain DP, 1 distributed optimizer, 2 + gradients, 3 + weights.")] = 1,
    zero_bubble: Annotated[bool, typer.Option(
        "--zero-bubble/--no-zero-bubble", help="ZB-H1 pipeline schedule (needs --vpp 1).")] = False,
    seq_slices: Annotated[int, typer.Option(
        min=1, help="SlimPipe: sequence slices per micro-batch (1F1B, pp > 1).")] = 1,
    precision: Annotated[Precision, typer.Option(
        help="bf16/fp8: mixed precision; fp32: plain fp32 (CPU jobs).")] = Precision.bf16,
    optimizer: OptimizerOpt = Optimizer.adam,
    calibration: Annotated[Optional[Path], typer.Option(
        help="JSON overriding calibration parameters (see docs/calibration.md).")] = None,
    output_format: Annotated[OutputFormat, typer.Option(
        "--format", help="table for people, json for tools.")] = OutputFormat.table,
) -> None:
    """Estimate step time, throughput and per-GPU memory of one parallel configuration.

    Without --cluster or --gpu the cluster is 8 nodes of H100.
    """
    spec = load_model(model)
    hardware = resolve_cluster(ClusterChoice(cluster, gpu, nodes, gpus_per_node), DEFAULT_GPU)
    workload = make_workload(seq_len, global_batch, precision.value, optimizer.value)
    choice = ParallelChoice(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, vpp=vpp,
                            micro_batch=micro_batch, recompute=recompute.value,
                            recompute_layers=recompute_layers,
                            sequence_parallel=sequence_parallel, zero=zero,
                            zero_bubble=zero_bubble, seq_slices=seq_slices)
    cfg = make_config(choice, hardware.num_gpus)
    profile = load_profile(hardware.slowest_gpu.name, calibration)
    est = checked_estimate(spec, hardware, workload, cfg, profile)
    if output_format is OutputFormat.json:
        typer.echo(json.dumps(estimate_to_dict(est), sort_keys=True, indent=2))
    else:
        _console().print(render_estimate(est, spec, hardware))


class Objective(str, Enum):
    throughput = "throughput"
    min_gpus = "min-gpus"


class Schedule(str, Enum):
    one_f_one_b = "1f1b"
    interleaved = "interleaved-1f1b"
    zb_h1 = "zb-h1"
    slimpipe = "slimpipe"


@app.command()
def solve(
    model: Annotated[str, typer.Option(
        help="Model preset (see 'planner presets models'), model YAML/JSON or HF config.json."
    )] = "llama-3.1-70b",
    cluster: ClusterOpt = None, gpu: GpuOpt = None, nodes: NodesOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    global_batch: Annotated[int, typer.Option(min=1, help="Sequences per step.")] = 1024,
    seq_len: Annotated[int, typer.Option(min=1, help="Tokens per sequence.")] = 4096,
    precision: Annotated[Precision, typer.Option(
        help="bf16/fp8: mixed precision; fp32: plain fp32 (CPU jobs).")] = Precision.bf16,
    optimizer: OptimizerOpt = Optimizer.adam,
    top_k: Annotated[int, typer.Option(min=1, max=100, help="Plans to show.")] = 10,
    objective: Annotated[Objective, typer.Option(
        help="throughput: fastest plan on all GPUs; min-gpus: fewest GPUs reaching "
             "--target-tokens-per-s.")] = Objective.throughput,
    target_tokens_per_s: Annotated[Optional[float], typer.Option(
        min=0, help="With --objective min-gpus: tokens/s the whole job must reach.")] = None,
    tp: Annotated[Optional[int], typer.Option(min=1, help="Fix the TP degree.")] = None,
    pp: Annotated[Optional[int], typer.Option(min=1, help="Fix the PP degree.")] = None,
    cp: Annotated[Optional[int], typer.Option(min=1, help="Fix the CP degree.")] = None,
    ep: Annotated[Optional[int], typer.Option(min=1, help="Fix the EP degree.")] = None,
    micro_batch: Annotated[Optional[int], typer.Option(min=1, help="Fix the micro-batch.")] = None,
    schedule: Annotated[Optional[list[Schedule]], typer.Option(
        help="Allowed pipeline schedules (repeat the option); default all.")] = None,
    calibration: Annotated[Optional[Path], typer.Option(
        help="JSON overriding calibration parameters (see docs/calibration.md).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Write the best plan to this JSON file.")] = None,
    out_dir: Annotated[Optional[Path], typer.Option(
        help="Write every shown plan as plan-01.json, plan-02.json, ... in this folder.")] = None,
    output_format: Annotated[OutputFormat, typer.Option(
        "--format", help="table for people, json for tools (the plans).")] = OutputFormat.table,
    expert_loads: Annotated[Optional[Path], typer.Option(
        help="MoE models: per-layer expert loads (see 'planner experts plan'); adds an "
             "expert-placement section to every plan with expert parallelism.")] = None,
    redundant_experts_per_gpu: Annotated[int, typer.Option(
        min=0, help="With --expert-loads: redundant expert slots per GPU.")] = 1,
) -> None:
    """Search parallel configurations, place them on the cluster, slice the pipeline, and
    print the best plans. Without options: Llama-3.1-70B on 8 nodes of H100 (64 GPUs)."""
    from planner.plan.document import plan_to_json
    from planner.training.search import SearchSpace
    from planner.training.solve import solve as run_solve
    from planner.report.solve import render_solve

    if objective.value == "min-gpus" and not target_tokens_per_s:
        raise SpecError(OPTIONS_SOURCE, "--target-tokens-per-s", "a positive number with "
                        "--objective min-gpus", target_tokens_per_s)
    spec = load_model(model)
    hardware = resolve_cluster(ClusterChoice(cluster, gpu, nodes, gpus_per_node), DEFAULT_GPU)
    workload = make_workload(seq_len, global_batch, precision.value, optimizer.value)
    profile = load_profile(hardware.slowest_gpu.name, calibration)
    space = SearchSpace(tp=tp, pp=pp, cp=cp, ep=ep, micro_batch=micro_batch,
                        schedules=tuple(s.value for s in schedule) if schedule else
                        SearchSpace().schedules)
    loads = None
    if expert_loads is not None:
        from planner.inputs.expert_loads import load_expert_loads
        loads = load_expert_loads(expert_loads)
    with progress_bar("searching", output_format is OutputFormat.table) as progress:
        result = run_solve(spec, hardware, workload, profile, space, top_k, objective.value,
                           target_tokens_per_s, progress)
    if loads is not None:
        result = _with_experts(result, loads, redundant_experts_per_gpu)
    if out is not None:
        write_atomic(out, plan_to_json(result.plans[0]))
    if out_dir is not None:
        for i, plan in enumerate(result.plans):
            write_atomic(out_dir / f"plan-{i + 1:02d}.json", plan_to_json(plan))
    if output_format is OutputFormat.json:
        typer.echo("[" + ",\n".join(plan_to_json(p).rstrip() for p in result.plans) + "]")
    else:
        _console().print(render_solve(result.plans, result.stats))


def _with_experts(result, loads, redundant: int):
    """Plans with an expert-placement section, validated again (``planner.experts.plan``)."""
    from dataclasses import replace

    from planner.experts.plan import with_expert_placement
    from planner.plan.validate import validate_plan

    cache: dict = {}
    plans = tuple(validate_plan(with_expert_placement(p, loads, redundant, cache), f"plan {i + 1}")
                  for i, p in enumerate(result.plans))
    return replace(result, plans=plans)


PlanArg = Annotated[Path, typer.Argument(help="A plan file written by 'planner solve --out'.")]


@app.command()
def explain(
    plan: PlanArg,
    timeline: Annotated[Optional[Path], typer.Option(
        help="Also draw the pipeline timeline to this .png or .svg file.")] = None,
    max_microbatches: Annotated[int, typer.Option(
        min=1, help="Micro-batches to simulate for the timeline (warm-up and cool-down are "
                    "the same for any count).")] = 16,
) -> None:
    """Show everything a plan decided and predicted, and its pipeline timeline."""
    from planner.report.explain import render_explain
    from planner.plan.file import load_plan
    from planner.training.timeline import save_timeline, simulate_plan

    loaded = load_plan(plan)
    problem, result = simulate_plan(loaded, max_microbatches)
    if timeline is not None:
        save_timeline(result, problem.num_stages, timeline,
                      f"{loaded.inputs['model']['name']}: {loaded.schedule}, "
                      f"{problem.num_stages} stages, {problem.num_microbatches} micro-batches")
    _console().print(render_explain(loaded, problem, result))
    if timeline is not None:
        typer.echo(f"wrote {timeline}")


@app.command()
def compare(plans: Annotated[list[Path], typer.Argument(help="Two or more plan files.")]) -> None:
    """Show plans side by side with their differences highlighted."""
    from planner.report.compare import render_compare
    from planner.plan.file import load_plan

    loaded = [load_plan(p) for p in plans]
    names = [p.stem for p in plans]
    if len(set(names)) < len(names):
        names = [str(p) for p in plans]
    _console().print(render_compare(loaded, names))


@app.command()
def emit(
    fmt: Annotated[str, typer.Argument(
        metavar="FORMAT", help="torchrun, slurm, kubeflow, megatron, deepspeed or torchtitan.")],
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
    PyTorchJob, Megatron-LM arguments, a DeepSpeed config or a torchtitan TOML."""
    from planner.emit import FORMATS, EmitOptions
    from planner.emit import emit as run_emit
    from planner.plan.file import load_plan

    if fmt not in FORMATS:
        raise SpecError("FORMAT", "", f"one of {', '.join(FORMATS)}", fmt)
    loaded = load_plan(plan)
    options = EmitOptions(script=script, script_args=tuple(script_arg or ()),
                          master_port=master_port, job_name=job_name, image=image,
                          plan_path=str(plan))
    files = run_emit(fmt, loaded, options)  # everything is rendered before anything is written
    for name, text in sorted(files.items()):
        executable = name.endswith((".sh", ".sbatch"))
        write_atomic(out_dir / name, text, 0o755 if executable else None)
        typer.echo(f"wrote {out_dir / name}")


@app.command()
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
    failure or Ctrl-C every process of the job is ended. For a plan of several nodes, print
    the per-node torchrun commands to run on each host."""
    import os
    import shlex

    from planner.emit import EmitOptions
    from planner.emit import emit as run_emit
    from planner.run.launch import local_command, run_local, write_launch_record
    from planner.plan.file import load_plan

    loaded = load_plan(plan)
    if len(loaded.nodes) > 1:
        options = EmitOptions(script=script or "train.py", script_args=tuple(script_arg or ()),
                              plan_path=str(plan))
        typer.echo(run_emit("torchrun", loaded, options)["torchrun_commands.txt"], nl=False)
        return
    cmd = local_command(loaded, plan, script, list(script_arg or []), record, master_port)
    typer.echo(f"planner launch: {shlex.join(cmd)}", err=True)
    if dry_run:
        return
    result = run_local(cmd, {**os.environ, "PLANNER_PLAN": str(plan)})
    if script is not None and record is not None:
        write_launch_record(record, loaded, cmd, result)
    if result.interrupted:
        fail("interrupted: every process of the job was ended", 130)
    if result.exit_code != 0:
        fail(f"the job failed (torchrun exit code {result.exit_code}; the worker's error is in "
             "the log above); every process of the job was ended", result.exit_code)


def main() -> None:
    """Console-script entry point (``planner``); errors are handled by :class:`PlannerGroup`."""
    app(prog_name="planner")


if __name__ == "__main__":
    main()
