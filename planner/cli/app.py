"""The ``planner`` command line: a thin Typer layer over the loaders, cost models and reports.

Commands: ``presets`` (models, clusters, GPUs), ``topo show|list|import`` (clusters), ``estimate``
(step time and memory of one parallel configuration), ``solve`` (search, place, slice: the best
plans), ``explain`` / ``compare`` (plan files), ``emit`` (launch configs of a plan), ``launch``
(run a plan here under torchrun: ``planner.run.launch``), ``calibrate`` / ``check-run``
(measure this machine, compare a run with its prediction: ``planner.cli.run``), ``experts``
(MoE expert placement: ``planner.cli.experts``). Errors are caught once, in the top-level
group (:class:`PlannerGroup`), so the console script and ``CliRunner`` behave the same: a
:class:`~planner.errors.PlannerError`, a usage error or a cost model's ``ValueError`` prints one
line ``error: ...`` on stderr and exits with its code (2 for bad input, 3 for infeasible).
Any other exception is a bug of planner's: one line ``error: internal error: <type>: <message>``
with a request to report it, exit code 1; ``planner --debug ...`` (or ``PLANNER_DEBUG=1``) lets
it through with its traceback instead.
"""
from __future__ import annotations

import json
import math
import re
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperGroup

from planner.cli.common import (ClusterOpt, GlobalBatchOpt, GpuOpt, GpusPerNodeOpt, OutputFormat,
                                SeqLenOpt, fail, help_markup_mode, nodes_option,
                                plain_help_width, print_report, progress_bar, set_debug,
                                refuse_unused, set_help_markup_mode, up_to, within)
from planner.errors import PlannerError, SpecError
from planner.training.estimate_json import estimate_to_dict
from planner.files import write_all_atomic, write_atomic
from planner.training.estimation import (AUTO, DEFAULT_GPU, ClusterChoice, ParallelChoice,
                                         auto_estimate, load_profile, parse_auto_int,
                                         make_workload, parse_names, resolve_cluster)
from planner.inputs.clusters import OPTIONS_SOURCE
from cost_models.training.config import RECOMPUTE_MODULES
from planner.inputs.limits import CLUSTER_NODES
from planner.inputs.models import load_model, model_presets
from planner.report.estimate import render_estimate
from planner.report.topo import render_presets, render_topology
from topologies.catalog import gpu_catalog
from topologies.presets import cluster_presets

USAGE_EXIT_CODE = 2
# click's UsageError (bad option value, unknown option, missing argument), found through the
# class typer re-exports: typer >= 0.2x vendors its own copy of click.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
INTERNAL_ERROR_EXIT_CODE = 1
DEBUG_ENV = "PLANNER_DEBUG"
MAX_INTERNAL_MESSAGE = 300  # characters of an internal error's message shown


class PlannerGroup(TyperGroup):
    """The top-level group: the one place where errors become a line on stderr and an exit code.

    Sub-commands' options are parsed inside ``invoke``, so bad option values land here too.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        set_help_markup_mode(self, help_markup_mode())  # rich help only in a wide terminal
        self.context_settings = {**(self.context_settings or {}), **plain_help_width()}
        return super().main(*args, **kwargs)

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
        except (ClickException, typer.Exit, typer.Abort, BrokenPipeError):
            raise  # click's own ways out (help, exit codes, Ctrl-C, a closed pipe)
        except Exception as err:  # a bug: one line, unless --debug asks for the traceback
            if ctx.params.get("debug"):
                raise
            fail(internal_error_message(err), INTERNAL_ERROR_EXIT_CODE)


def internal_error_message(err: BaseException) -> str:
    """The one line an unexpected exception becomes (type, message, where to go next)."""
    try:
        message = " ".join(str(err).split())
    except Exception:  # noqa: BLE001  (a message that cannot even be shown)
        message = ""
    if len(message) > MAX_INTERNAL_MESSAGE:
        message = message[:MAX_INTERNAL_MESSAGE - 3] + "..."
    return (f"internal error: {type(err).__name__}{': ' + message if message else ''} — "
            "please report it (rerun with --debug for the traceback)")


app = typer.Typer(cls=PlannerGroup, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_show_locals=False,
                  help="Plan the parallelism of LLM training on a GPU cluster.")


@app.callback()
def _global_options(debug: Annotated[bool, typer.Option(
        "--debug", envvar=DEBUG_ENV,
        help="Show the traceback of an internal error.")] = False) -> None:
    """Options of every command; ``--debug`` is read by :class:`PlannerGroup` and
    :func:`~planner.cli.common.using_document`."""
    set_debug(debug)


topo_app = typer.Typer(no_args_is_help=True, help="Cluster topologies: node groups and tiers.")
app.add_typer(topo_app, name="topo")

from planner.cli.experts import experts_app  # noqa: E402  (a sub-app of this group)

app.add_typer(experts_app, name="experts")

from planner.cli.run import calibrate_command, check_run_command  # noqa: E402
from planner.cli.serving import serve_app  # noqa: E402

app.add_typer(serve_app, name="serve")

app.command("calibrate")(calibrate_command)
app.command("check-run")(check_run_command)


class PresetKind(str, Enum):
    models = "models"
    clusters = "clusters"
    gpus = "gpus"


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    op = "op"
    full = "full"
    auto = "auto"


class Precision(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    nvfp4 = "nvfp4"
    fp32 = "fp32"


PRECISION_HELP = ("bf16/fp8: mixed precision; nvfp4: Blackwell's 4-bit GEMMs (TransformerEngine's "
                  "NVFP4 recipe); fp16: mixed precision with loss scaling (V100); fp32: plain "
                  "fp32 (CPU jobs).")


class Optimizer(str, Enum):
    adam = "adam"
    sgd = "sgd"


OptimizerOpt = Annotated[Optimizer, typer.Option(
    help="adam (two fp32 moments) or sgd (no state; e.g. the reference job).")]


NodesOpt = nodes_option("default 8")


@app.command()
def presets(kind: Annotated[Optional[PresetKind], typer.Argument(
        help="Which registry to list; all three when left out.")] = None) -> None:
    """List the model presets, cluster presets and GPU types planner knows."""
    from planner.report.presets import render_gpu_catalog, render_model_presets
    tables = {PresetKind.models: lambda: render_model_presets(model_presets()),
              PresetKind.clusters: lambda: render_presets(cluster_presets()),
              PresetKind.gpus: lambda: render_gpu_catalog(gpu_catalog())}
    for key in [kind] if kind else list(PresetKind):
        print_report(tables[key]())


@topo_app.command("show")
def topo_show(
    cluster: Annotated[Optional[str], typer.Argument(
        help="Cluster preset name or YAML/JSON file; or use --gpu and --nodes.")] = None,
    gpu: GpuOpt = None, nodes: NodesOpt = None, gpus_per_node: GpusPerNodeOpt = None,
) -> None:
    """Show a cluster: node groups, link tiers with per-GPU bandwidth, totals."""
    resolved = resolve_cluster(ClusterChoice(cluster, gpu, nodes, gpus_per_node))
    print_report(render_topology(resolved))


class ImportFormat(str, Enum):
    auto = "auto"
    nvidia_smi = "nvidia-smi"
    nccl_xml = "nccl-xml"
    slurm = "slurm"
    astra_sim = "astra-sim"


class Transport(str, Enum):
    ib = "ib"
    roce = "roce"
    tcp = "tcp"


@topo_app.command("import")
def topo_import(
    file: Annotated[Path, typer.Argument(help="nvidia-smi topo -m text, NCCL topology XML, "
                                         "Slurm topology.yaml or ASTRA-sim network YAML.")],
    input_format: Annotated[ImportFormat, typer.Option(
        "--format", help="The file's format (auto: from its content).")] = ImportFormat.auto,
    gpu: Annotated[Optional[str], typer.Option(
        help="GPU type of the nodes when the file does not say (default H100).")] = None,
    nodes: Annotated[Optional[int], typer.Option(
        min=1, callback=within(CLUSTER_NODES),
        help=up_to("Nodes like the one a one-node file describes (default 1).",
                   CLUSTER_NODES))] = None,
    nic_gbps: Annotated[Optional[float], typer.Option(
        help="Line rate of one NIC, Gbit/s, when the file does not say (default 400).")] = None,
    transport: Annotated[Optional[Transport], typer.Option(
        help="NIC transport when the file does not say (default ib).")] = None,
    nccl_topo_file: Annotated[Optional[str], typer.Option(
        help="Path of an NCCL topology XML on every node: launch files then set "
        "NCCL_TOPO_FILE to it (virtual machines).")] = None,
    out: Annotated[Optional[Path], typer.Option(
        help="Write the cluster YAML here (default: print it).")] = None,
) -> None:
    """Turn a topology file into a cluster YAML; what was assumed goes to stderr."""
    from planner.inputs.topo_import import ImportOptions, import_topology
    options = ImportOptions(gpu, nodes, nic_gbps, transport.value if transport else None,
                            nccl_topo_file=nccl_topo_file)
    imported = import_topology(file, input_format.value, options)
    for note in imported.notes:
        typer.echo(f"note: {note}", err=True)
    if out is None:
        typer.echo(imported.to_yaml(), nl=False)
        return
    write_atomic(out, imported.to_yaml())
    typer.echo(f"wrote {out} (check it with: planner topo show {out})", err=True)


@topo_app.command("list")
def topo_list() -> None:
    """List the cluster presets."""
    print_report(render_presets(cluster_presets()))


class MoeDispatcher(str, Enum):
    alltoall = "alltoall"
    flex = "flex"


class CudaGraphs(str, Enum):
    none = "none"
    moe_router = "moe_router"
    attn_moe_router = "attn+moe_router"
    full = "full"


CUDA_GRAPHS_HELP = ("What CUDA graphs capture, so the CPU does not launch it kernel by kernel "
                    "(a layer is launch bound when that takes longer than the GPU's work): none "
                    "(Megatron's default); moe_router, TransformerEngine graphs of the MoE "
                    "router and dispatcher preprocessing; attn+moe_router, also attention; "
                    "full, the whole iteration (--cuda-graph-impl full_iteration).")


class Attention(str, Enum):
    flash = "flash"
    flash2 = "flash2"
    unfused = "unfused"


ATTENTION_HELP = ("Attention kernels: flash, the GPU's native fused kernel (Megatron/Transformer "
                  "Engine: cuDNN on Hopper and later); flash2, FlashAttention-2 generation "
                  "(flash-attn 2, PyTorch SDPA's default backend: torchtitan, FSDP trainers), "
                  "about half as fast on Hopper and Blackwell; unfused softmax (2021 Megatron).")

MOE_DISPATCHER_HELP = ("MoE token dispatcher (Megatron --moe-token-dispatcher-type): alltoall "
                       "sends every (token, expert) pair; flex (DeepEP) sends a token once per "
                       "destination GPU and, across nodes, once per node.")


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
        min=1, help="Expert tensor-parallel degree (default: the divisor of --tp that is "
                    "fastest and fits, MoE models).")] = None,
    vpp: Annotated[int, typer.Option(
        min=1, help="Model chunks per pipeline stage (interleaved 1F1B when > 1).")] = 1,
    micro_batch: Annotated[str, typer.Option(
        help="Sequences per micro-batch, or auto: the fastest that fits.")] = "1",
    global_batch: GlobalBatchOpt = 1024, seq_len: SeqLenOpt = 4096,
    recompute: Annotated[Recompute, typer.Option(
        help="Activation recomputation; op: torchtitan's per-op selective checkpointing "
             "(dense models); auto: the fastest of none, selective, full that fits.")
    ] = Recompute.none,
    recompute_layers: Annotated[Optional[int], typer.Option(
        min=1, help="With --recompute full: layers per stage to recompute (default: all).")] = None,
    recompute_modules: Annotated[Optional[str], typer.Option(
        help="With --recompute selective (or auto): Megatron-Core's submodules to recompute, "
             "comma-separated, among " + ", ".join(RECOMPUTE_MODULES) + " (default: "
             "layernorm,moe_act; core_attn with --attention unfused).")] = None,
    sequence_parallel: Annotated[Optional[bool], typer.Option(
        "--sequence-parallel/--no-sequence-parallel",
        help="Megatron sequence parallelism (default: on when tp > 1).")] = None,
    zero: Annotated[int, typer.Option(
        min=0, max=3, help="0 plain DP, 1 distributed optimizer, 2 + gradients, 3 + weights.")] = 1,
    zero_bubble: Annotated[bool, typer.Option(
        "--zero-bubble/--no-zero-bubble", help="ZB-H1 pipeline schedule (needs --vpp 1).")] = False,
    seq_slices: Annotated[int, typer.Option(
        min=1, help="SlimPipe: sequence slices per micro-batch (1F1B, pp > 1).")] = 1,
    moe_dispatcher: Annotated[MoeDispatcher, typer.Option(
        help=MOE_DISPATCHER_HELP)] = MoeDispatcher.alltoall,
    cuda_graphs: Annotated[CudaGraphs, typer.Option(help=CUDA_GRAPHS_HELP)] = CudaGraphs.none,
    fp8_attention: Annotated[bool, typer.Option(
        "--fp8-attention/--no-fp8-attention",
        help="With --precision fp8: attention in fp8 too (TransformerEngine FP8 attention).")
    ] = False,
    fused_grouped_mlp: Annotated[bool, typer.Option(
        "--fused-grouped-mlp/--no-fused-grouped-mlp",
        help="MoE with --precision fp8 (MXFP8, Blackwell): TransformerEngine's fused grouped "
             "MLP, the experts' GEMMs in a few grouped kernels.")] = False,
    attention: Annotated[Attention, typer.Option(help=ATTENTION_HELP)] = Attention.flash,
    precision: Annotated[Precision, typer.Option(help=PRECISION_HELP)] = Precision.bf16,
    optimizer: OptimizerOpt = Optimizer.adam,
    calibration: Annotated[Optional[Path], typer.Option(
        help="JSON overriding calibration parameters (see docs/calibration.md).")] = None,
    output_format: Annotated[OutputFormat, typer.Option(
        "--format", help="table for people, json for tools.")] = OutputFormat.table,
) -> None:
    """Estimate step time, throughput and per-GPU memory of one parallel configuration.

    Without --cluster or --gpu the cluster is 8 nodes of H100. Settings left to auto
    (--recompute auto, --micro-batch auto, --etp unset) take the fastest value that fits;
    the output names them under "chosen".
    """
    spec = load_model(model)
    hardware = resolve_cluster(ClusterChoice(cluster, gpu, nodes, gpus_per_node), DEFAULT_GPU)
    workload = make_workload(seq_len, global_batch, precision.value, optimizer.value, hardware)
    choice = ParallelChoice(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=AUTO if etp is None else etp,
                            vpp=vpp, micro_batch=parse_auto_int(micro_batch, "--micro-batch"),
                            recompute=recompute.value, recompute_layers=recompute_layers,
                            recompute_modules=parse_names(recompute_modules),
                            sequence_parallel=sequence_parallel, zero=zero,
                            zero_bubble=zero_bubble, seq_slices=seq_slices,
                            moe_dispatcher=moe_dispatcher.value, attention=attention.value,
                            cuda_graphs=cuda_graphs.value, fp8_attention=fp8_attention,
                            fused_grouped_mlp=fused_grouped_mlp)
    profile = load_profile(hardware.slowest_gpu.name, calibration)
    result = auto_estimate(spec, hardware, workload, choice, profile)
    data = estimate_to_dict(result.estimate, result.chosen)
    if output_format is OutputFormat.json:
        typer.echo(json.dumps(data, sort_keys=True, indent=2))
    else:
        print_report(render_estimate(data, hardware, spec.num_layers))


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
    ctx: typer.Context,
    model: Annotated[str, typer.Option(
        help="Model preset (see 'planner presets models'), model YAML/JSON or HF config.json."
    )] = "llama-3.1-70b",
    cluster: ClusterOpt = None, gpu: GpuOpt = None, nodes: NodesOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    global_batch: GlobalBatchOpt = 1024, seq_len: SeqLenOpt = 4096,
    precision: Annotated[Precision, typer.Option(help=PRECISION_HELP)] = Precision.bf16,
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
    moe_dispatcher: Annotated[MoeDispatcher, typer.Option(
        help=MOE_DISPATCHER_HELP)] = MoeDispatcher.alltoall,
    cuda_graphs: Annotated[CudaGraphs, typer.Option(help=CUDA_GRAPHS_HELP)] = CudaGraphs.none,
    attention: Annotated[Attention, typer.Option(help=ATTENTION_HELP)] = Attention.flash,
    calibration: Annotated[Optional[Path], typer.Option(
        help="JSON overriding calibration parameters (see docs/calibration.md).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Write the best plan to this JSON file.")] = None,
    out_dir: Annotated[Optional[Path], typer.Option(
        help="Write every shown plan as plan-01.json, plan-02.json, ... in this folder "
             "(plan-NN.json files an earlier run left beyond them are removed).")] = None,
    output_format: Annotated[OutputFormat, typer.Option(
        "--format", help="table for people, json for tools (the plans).")] = OutputFormat.table,
    expert_loads: Annotated[Optional[Path], typer.Option(
        help="MoE models: per-layer expert loads (see 'planner experts plan'); adds an "
             "expert-placement section to every plan with expert parallelism.")] = None,
    redundant_experts_per_gpu: Annotated[int, typer.Option(
        min=0, help="With --expert-loads: redundant expert slots per GPU.")] = 1,
    allow_mixed_networks: Annotated[bool, typer.Option(
        "--allow-mixed-networks", help="Let TP/CP/DP/EP groups span RDMA networks (NIC "
        "classes, islands, TCP-only nodes) when predicted faster; by default they stay on one "
        "network whenever some plan allows it.")] = False,
) -> None:
    """Search parallel configurations, place them on the cluster, slice the pipeline, and
    print the best plans. Without options: Llama-3.1-70B on 8 nodes of H100 (64 GPUs)."""
    from planner.plan.document import plan_to_json
    from planner.training.search import SearchSpace
    from planner.training.solve import solve as run_solve
    from planner.report.solve import render_solve

    refuse_unused(ctx, {"redundant_experts_per_gpu": (expert_loads is not None,
                                                      "--expert-loads")})
    if objective.value == "min-gpus" and not (
            target_tokens_per_s is not None and math.isfinite(target_tokens_per_s)
            and target_tokens_per_s > 0):
        raise SpecError(OPTIONS_SOURCE, "--target-tokens-per-s", "a positive number with "
                        "--objective min-gpus", target_tokens_per_s)
    if objective.value != "min-gpus" and target_tokens_per_s is not None:
        raise SpecError(OPTIONS_SOURCE, "--target-tokens-per-s", "only with --objective "
                        "min-gpus (the other objectives rank plans, they take no target)",
                        target_tokens_per_s)
    spec = load_model(model)
    hardware = resolve_cluster(ClusterChoice(cluster, gpu, nodes, gpus_per_node), DEFAULT_GPU)
    workload = make_workload(seq_len, global_batch, precision.value, optimizer.value, hardware)
    profile = load_profile(hardware.slowest_gpu.name, calibration)
    space = SearchSpace(tp=tp, pp=pp, cp=cp, ep=ep, micro_batch=micro_batch,
                        schedules=tuple(s.value for s in schedule) if schedule else
                        SearchSpace().schedules, moe_dispatcher=moe_dispatcher.value,
                        attention=attention.value, cuda_graphs=cuda_graphs.value)
    loads = None
    if expert_loads is not None:
        from planner.inputs.expert_loads import load_expert_loads
        loads = load_expert_loads(expert_loads)
    with _PhaseBars(output_format is OutputFormat.table) as progress:
        result = run_solve(spec, hardware, workload, profile, space, top_k, objective.value,
                           target_tokens_per_s, progress, contain=not allow_mixed_networks)
        if loads is not None:
            result = _with_experts(result, loads, redundant_experts_per_gpu, progress)
        named = ([(out, result.plans[0])] if out is not None else []) + (
            [(out_dir / f"plan-{i + 1:02d}.json", plan) for i, plan in enumerate(result.plans)]
            if out_dir is not None else [])
        files = {}
        for i, (path, plan) in enumerate(named):
            progress("writing plans", i, len(named))
            files[path] = plan_to_json(plan)
    write_all_atomic(files)  # every file or none
    if out_dir is not None:
        _remove_stale_plans(out_dir, len(result.plans))
    if output_format is OutputFormat.json:
        typer.echo("[" + ",\n".join(plan_to_json(p).rstrip() for p in result.plans) + "]")
    else:
        print_report(render_solve(result.plans, result.stats))


_PLAN_FILE = re.compile(r"plan-(\d{2,})\.json")


def _remove_stale_plans(out_dir: Path, kept: int) -> list[Path]:
    """Remove the ``plan-NN.json`` files in ``out_dir`` numbered beyond ``kept`` (an earlier
    run's, which showed more plans), so the folder holds this run's plans only; other files
    are left alone. Returns the removed paths."""
    removed = []
    for path in sorted(out_dir.iterdir()):
        match = _PLAN_FILE.fullmatch(path.name)
        if match and int(match.group(1)) > kept and path.is_file():
            path.unlink()
            removed.append(path)
    return removed


class _PhaseBars:
    """``progress(phase, done, total)`` for ``planner solve``: one transient progress bar per
    phase (searching, placing, building plans, writing plans), each with its own label and
    clock; nothing when ``enabled`` is false or stderr is not a terminal (a finished rich bar
    leaves an empty line there)."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console

        self.enabled = enabled and Console(stderr=True).is_terminal
        self.phase: str | None = None
        self.bar: progress_bar | None = None
        self.update = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        if phase != self.phase:
            self.close()
            self.phase, self.bar = phase, progress_bar(phase, self.enabled, total)
            self.update = self.bar.__enter__()
        if self.update is not None:
            self.update(done, total)

    def close(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*(exc or (None, None, None)))
            self.bar = None

    def __enter__(self) -> "_PhaseBars":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close(*exc)


def _with_experts(result, loads, redundant: int, progress: _PhaseBars):
    """Plans with an expert-placement section, validated again (``planner.experts.plan``)."""
    from dataclasses import replace

    from planner.experts.plan import with_expert_placement
    from planner.plan.validate import validate_plan

    cache: dict = {}
    plans = []
    for i, p in enumerate(result.plans):
        progress("placing experts", i, len(result.plans))
        plans.append(validate_plan(with_expert_placement(p, loads, redundant, cache),
                                   f"plan {i + 1}"))
    return replace(result, plans=tuple(plans))


from planner.cli.plans import compare, emit, explain, launch  # noqa: E402

for command in (explain, compare, emit, launch):
    app.command()(command)


def main() -> None:
    """Console-script entry point (``planner``); errors are handled by :class:`PlannerGroup`."""
    app(prog_name="planner")


if __name__ == "__main__":
    main()
