"""``planner experts``: plan expert replication and placement, evaluate it, make test loads."""
from __future__ import annotations

import json
import shlex
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer
from rich.console import Console

from planner.cli.common import (OutputFormat, progress_bar, refuse_unused, up_to, using_document,
                               within)
from planner.errors import SpecError
from planner.inputs.limits import (EP_GPUS, EXPERT_SLOTS, EXPERTS, GPUS_PER_NODE,
                                   INPUT_FILE_BYTES, LOAD_VALUES, LOCALITY_SLACK, MODEL_LAYERS,
                                   ROBUST_SCENARIOS, SLOTS_PER_GPU, TOKENS_PER_STEP, TRACE_STEPS,
                                   check, check_file_size)
from planner.files import write_all_atomic, write_atomic, write_atomic_bytes

experts_app = typer.Typer(no_args_is_help=True, help="MoE expert replication, placement and quotas.")

LoadsArg = Annotated[Optional[Path], typer.Argument(
    help="Expert loads: SGLang JSON {\"logical_count\": [layers][experts]}, CSV or NPY "
         "[layers x experts] or [steps x layers x experts]. Omitted: a synthetic demo.")]


class Quotas(str, Enum):
    realtime = "realtime"
    static = "static"


class Dispatch(str, Enum):
    auto = "auto"
    even = "even"
    sglang = "sglang"
    static = "static"
    realtime = "realtime"


# Dispatch rules each engine export can run under (solvers.experts.dispatch): SGLang's static
# per-rank dispatch or its 'dynamic' one (even); vLLM spreads tokens evenly.
_ENGINE_RULES = {"--sglang": ("sglang", "even"), "--vllm": ("even",)}


def resolve_dispatch(dispatch: Dispatch, sglang: bool, vllm: bool) -> str:
    """The dispatch rule to plan for. ``auto``: the first rule every requested export can run
    (SGLang alone: its static dispatch; vLLM, or both: the even split), else the even split.
    An explicit rule an export cannot run is an error."""
    engines = [flag for flag, given in (("--sglang", sglang), ("--vllm", vllm)) if given]
    if dispatch is Dispatch.auto:
        if not engines:
            return "even"
        common = [r for r in _ENGINE_RULES["--sglang"] if all(r in _ENGINE_RULES[f] for f in engines)]
        return common[0]
    for flag in engines:
        if dispatch.value not in _ENGINE_RULES[flag]:
            raise SpecError("--dispatch", "", f"a rule {flag[2:]} applies with {flag} "
                            f"({' or '.join(_ENGINE_RULES[flag])})", dispatch.value)
    return dispatch.value


def _loads(path: Optional[Path]):
    from planner.inputs.expert_loads import ExpertLoads, load_expert_loads, synthetic_loads

    if path is None:
        return ExpertLoads(synthetic_loads(layers=8, experts=64, steps=16), "synthetic (zipf 1.0, 64 experts)")
    return load_expert_loads(path)


def _slots(num_experts: int, gpus: int, slots_per_gpu: Optional[int], redundant_per_gpu: int) -> int:
    """Slots per GPU, within :data:`EXPERT_SLOTS` for the whole group."""
    if slots_per_gpu is None:
        if num_experts % gpus:
            raise SpecError("--gpus", "", f"a divisor of the {num_experts} experts, or give "
                            "--slots-per-gpu", gpus)
        slots_per_gpu = num_experts // gpus + redundant_per_gpu
    check(gpus * slots_per_gpu, EXPERT_SLOTS, "command line", "--gpus x --slots-per-gpu")
    return slots_per_gpu


# Image formats the heatmap is written in, by the --heatmap file's suffix.
HEATMAP_SUFFIXES = (".png",)


def _check_heatmap(path: Optional[Path]) -> None:
    """Refuse a --heatmap file whose suffix names a format it is not written in (before any
    output is written)."""
    if path is not None and path.suffix.lower() not in HEATMAP_SUFFIXES:
        raise SpecError("--heatmap", "", f"a file ending in {' or '.join(HEATMAP_SUFFIXES)} "
                        "(the heatmap is written as PNG)", str(path))


PLACEMENT_EXPECTED = "a placement file written by 'planner experts plan --out'"


def _read_placement_json(path: Path):
    """A placement file's JSON (our document or SGLang's map); SpecError if unreadable."""
    from planner.inputs.documents import parse_json

    check_file_size(path)
    try:
        return parse_json(Path(path).read_text(encoding="utf-8"), str(path))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SpecError(str(path), "", f"a readable JSON placement file ({err})") from None


def _read_current(path: Path):
    from planner.experts.plan import current_from_document

    with using_document(str(path), "a placement from 'planner experts plan --out' or "
                                   "SGLang's physical_to_logical_map"):
        return current_from_document(_read_placement_json(path), str(path))


@experts_app.command("plan")
def plan(
    ctx: typer.Context,
    loads: LoadsArg = None,
    gpus: Annotated[int, typer.Option(
        min=1, callback=within(EP_GPUS),
        help=up_to("GPUs in the expert-parallel group.", EP_GPUS))] = 64,
    gpus_per_node: Annotated[int, typer.Option(
        min=1, callback=within(GPUS_PER_NODE), help=up_to("GPUs per node.", GPUS_PER_NODE))] = 8,
    slots_per_gpu: Annotated[Optional[int], typer.Option(
        min=1, callback=within(SLOTS_PER_GPU), help="Expert slots per GPU (default "
        f"experts/gpus + --redundant-per-gpu). At most {SLOTS_PER_GPU.maximum:,}, and GPUs x "
        f"slots at most {EXPERT_SLOTS.maximum:,}.")] = None,
    redundant_per_gpu: Annotated[int, typer.Option(
        min=0, callback=within(SLOTS_PER_GPU),
        help=up_to("Redundant slots per GPU.", SLOTS_PER_GPU))] = 1,
    dispatch: Annotated[Dispatch, typer.Option(
        help="How the runtime splits an expert's tokens over its replicas: 'even' (vLLM, SGLang "
             "--ep-dispatch-algorithm dynamic), 'sglang' (SGLang's static per-rank dispatch), "
             "'static' (this plan's split ratios; planner's runtime), 'realtime' (quotas "
             "re-planned every step). 'auto': the --sglang/--vllm engine's rule, else even.")] = Dispatch.auto,
    robust: Annotated[bool, typer.Option(help="Static/realtime rules: minimise the worst case "
                                              "over workloads (the file's steps, or drifted copies "
                                              "of its loads). Even/SGLang rules: keep the nominal "
                                              "placement and report its worst scenario.")] = False,
    drift: Annotated[float, typer.Option(min=0, help="Robust mode, one-step file: log-normal "
                                                     "sigma of per-expert drift.")] = 0.15,
    scenarios: Annotated[int, typer.Option(
        min=2, callback=within(ROBUST_SCENARIOS),
        help=up_to("Robust mode: drifted scenarios.", ROBUST_SCENARIOS))] = 16,
    quotas: Annotated[Quotas, typer.Option(
        help="Robust mode with --dispatch static/realtime: 'realtime' scores per-scenario quotas, "
             "'static' the plan's split ratios.")] = Quotas.realtime,
    locality_slack: Annotated[Optional[float], typer.Option(
        min=0, callback=within(LOCALITY_SLACK), help="Trade balance for locality: accept "
        "busiest/mean up to (1+slack) x the best to cut cross-node dispatch (at most 100: "
        "beyond, balance no longer counts).")] = None,
    current: Annotated[Optional[Path], typer.Option(
        help="Current placement (this command's --out file or SGLang's physical_to_logical_map)"
             " to migrate from.")] = None,
    migration_weight: Annotated[float, typer.Option(
        min=0, help="Keep a layer's current placement unless planning gains more than this x "
                    "the fraction of slots it moves.")] = 0.0,
    expert_mb: Annotated[float, typer.Option(min=0, help="Weights of one expert (MB), for "
                                                         "migration bytes.")] = 0.0,
    expert_groups: Annotated[int, typer.Option(
        min=1, callback=within(EXPERTS), help="Expert groups for the EPLB-style baseline's "
        "hierarchical mode (DeepSeek-V3: 8); 1 compares with EPLB's global policy.")] = 1,
    out: Annotated[Optional[Path], typer.Option(help="Write the placement JSON here.")] = None,
    sglang: Annotated[Optional[Path], typer.Option(
        help="Write SGLang's --init-expert-location file here.")] = None,
    vllm: Annotated[Optional[Path], typer.Option(help="Write vLLM's --eplb-config JSON here.")] = None,
    heatmap: Annotated[Optional[Path], typer.Option(
        help="Write a before/after GPU-load heatmap to this .png file.")] = None,
    output_format: Annotated[OutputFormat, typer.Option(
        "--format", help="table or json.")] = OutputFormat.table,
) -> None:
    """Plan replica counts, placement and token split for every MoE layer, under the dispatch
    rule the runtime applies.

    Prints busiest/mean GPU load before, for an EPLB-style baseline and after (all under that
    rule), the worst layers and a GPU-load heatmap. Without LOADS: a synthetic 64-expert demo."""
    from planner.experts.plan import (ExpertOptions, placement_document, plan_experts,
                                 sglang_location, vllm_eplb_config)
    from planner.report.experts import heatmap_png, render_experts
    from planner.plan.validate import validate_expert_placement

    _check_heatmap(heatmap)
    rule = resolve_dispatch(dispatch, sglang is not None, vllm is not None)
    refuse_unused(ctx, {
        "drift": (robust, "--robust"), "scenarios": (robust, "--robust"),
        "quotas": (robust and rule in ("static", "realtime"),
                   "--robust and --dispatch static or realtime"),
        "migration_weight": (current is not None, "--current"),
        "expert_mb": (current is not None, "--current")})
    if gpus > gpus_per_node and gpus % gpus_per_node:
        raise SpecError("--gpus", "", f"at most --gpus-per-node ({gpus_per_node}) or a multiple "
                        f"of it: {gpus} GPUs leave a node with {gpus % gpus_per_node} of its "
                        f"{gpus_per_node}", gpus)
    if locality_slack is not None and rule in ("even", "sglang"):
        raise SpecError("--locality-slack", "", "--dispatch static or realtime (the even and "
                        "SGLang rules fix the split, so there is no balance to trade)", rule)
    data = _loads(loads)
    if robust:  # every step of a trace is a scenario
        check(data.series.shape[0], ROBUST_SCENARIOS, data.source, "steps (with --robust)")
    options = ExpertOptions(gpus, gpus_per_node,
                            _slots(data.num_experts, gpus, slots_per_gpu, redundant_per_gpu),
                            robust, rule, drift, scenarios, quotas.value, locality_slack,
                            migration_weight, expert_mb * 1e6, groups=expert_groups)
    cur = _read_current(current) if current is not None else None
    with progress_bar("planning layers", output_format is OutputFormat.table,
                      len(data.moe_layers)) as tick:
        result = plan_experts(data, options, cur, tick, str(current))
    doc = validate_expert_placement(placement_document(result), "expert placement")
    text = json.dumps(doc, sort_keys=True) + "\n"
    files = {path: render() for path, render in (
        (out, lambda: text), (sglang, lambda: json.dumps(sglang_location(doc)) + "\n"),
        (vllm, lambda: json.dumps(vllm_eplb_config(doc)) + "\n"),
        (heatmap, lambda: heatmap_png(result))) if path is not None}
    write_all_atomic(files)  # every file or none
    if output_format is OutputFormat.json:
        typer.echo(text, nl=False)
    else:
        Console().print(render_experts(result))
        if sglang is not None:  # the flags that make SGLang apply what was planned
            algorithm = "static" if rule == "sglang" else "dynamic"
            redundant = result.layout.num_slots - result.layout.num_experts
            Console().print(f"SGLang flags: --init-expert-location {shlex.quote(str(sglang))} "
                            f"--ep-num-redundant-experts {redundant} --ep-dispatch-algorithm {algorithm}",
                            soft_wrap=True, markup=False, highlight=False)


@experts_app.command("eval")
def evaluate(
    placement: Annotated[Path, typer.Argument(help="A placement file from 'planner experts plan --out'.")],
    loads: Annotated[Path, typer.Argument(help="Loads to evaluate it on (same formats as plan).")],
    output_format: Annotated[OutputFormat, typer.Option(
        "--format", help="table or json.")] = OutputFormat.table,
) -> None:
    """Evaluate a placement on other loads: static split ratios, even split, and real-time
    quotas re-planned for the exact loads of every step."""
    from planner.experts.eval import evaluate_document, render_evaluation
    from planner.plan.validate import validate_expert_placement

    doc = _read_placement_json(placement)
    if not isinstance(doc, dict):
        raise SpecError(str(placement), "", PLACEMENT_EXPECTED, type(doc).__name__)
    data = _loads(loads)
    with using_document(str(placement), PLACEMENT_EXPECTED):
        validate_expert_placement(doc, str(placement))
        result = evaluate_document(doc, data, str(placement))
    if output_format is OutputFormat.json:
        typer.echo(json.dumps(result, sort_keys=True))
    else:
        Console().print(render_evaluation(result))


@experts_app.command("synth")
def synth(
    out: Annotated[Path, typer.Argument(help="Output file (.npy, or .json in SGLang's format).")],
    layers: Annotated[int, typer.Option(
        min=1, callback=within(MODEL_LAYERS), help=up_to("MoE layers.", MODEL_LAYERS))] = 4,
    experts: Annotated[int, typer.Option(
        min=2, callback=within(EXPERTS), help=up_to("Experts per layer.", EXPERTS))] = 64,
    steps: Annotated[int, typer.Option(
        min=1, callback=within(TRACE_STEPS), help=f"Steps of the trace. At most "
        f"{TRACE_STEPS.maximum:,}, and steps x layers x experts at most "
        f"{LOAD_VALUES.maximum:,}.")] = 32,
    tokens_per_step: Annotated[int, typer.Option(
        min=1, callback=within(TOKENS_PER_STEP),
        help=up_to("Tokens routed per step.", TOKENS_PER_STEP))] = 16384,
    top_k: Annotated[int, typer.Option(
        min=1, callback=within(EXPERTS), help=up_to("Experts each token visits.", EXPERTS))] = 8,
    zipf: Annotated[float, typer.Option(min=0, help="Zipf exponent of expert popularity.")] = 1.0,
    drift_every: Annotated[int, typer.Option(
        min=1, callback=within(TRACE_STEPS),
        help=up_to("Steps between hot-set drifts.", TRACE_STEPS))] = 8,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Write synthetic routing counts (Zipf popularity, drifting hot set) for tests and demos."""
    import io

    from planner.inputs.expert_loads import synthetic_loads

    check(steps * layers * experts, LOAD_VALUES, "command line", "--steps x --layers x --experts")
    if out.suffix.lower() not in (".npy", ".json"):
        raise SpecError(str(out), "", "a file ending in .npy or .json", out.suffix or out.name)
    series = synthetic_loads(layers, experts, steps, tokens_per_step, top_k, zipf, drift_every,
                             seed=seed)
    if out.suffix.lower() == ".json":
        text = json.dumps({"logical_count": series.astype(int).tolist()}) + "\n"
        if len(text) > INPUT_FILE_BYTES.maximum:  # planner could not read it back
            raise SpecError(str(out), "", f"{INPUT_FILE_BYTES.expected()}: this trace takes "
                            f"{len(text) / 2**20:,.0f} MiB as JSON; write it as .npy")
        write_atomic(out, text)
    else:
        buffer = io.BytesIO()
        np.save(buffer, series)
        write_atomic_bytes(out, buffer.getvalue())
    typer.echo(f"wrote {out} ({steps} steps x {layers} layers x {experts} experts)")
