"""``planner serve``: search serving deployments; ``serve estimate``: one deployment;
``serve simulate``: a serving plan through the request-level simulator."""
from __future__ import annotations

import json
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from cost_models.parallel import ConfigError
from planner.cli.common import (ClusterOpt, GpuOpt, GpusPerNodeOpt, OutputFormat, nodes_option,
                                 print_report, up_to, within)
from planner.errors import InfeasibleError, SpecError
from planner.files import write_atomic
from planner.inputs.clusters import OPTIONS_SOURCE
from planner.inputs.limits import SEQUENCE_TOKENS
from planner.inputs.models import load_model
from planner.training.estimation import ClusterChoice, load_profile, resolve_cluster

if TYPE_CHECKING:  # the serving modules load when a serve command runs, not at start-up
    from cost_models.serving.config import ServingWorkload
    from planner.serving.estimate import Calibration

DEFAULT_SERVE_GPU = "H100-SXM5-80GB"


class Engine(str, Enum):
    sglang = "sglang"
    vllm = "vllm"
    trtllm = "trtllm"


class WeightPrecision(str, Enum):
    bf16 = "bf16"
    fp8 = "fp8"
    fp4 = "fp4"
    int4 = "int4"


class Objective(str, Enum):
    goodput = "goodput"
    min_gpus = "min-gpus"
    per_dollar = "per-dollar"


class KvDtype(str, Enum):
    bf16 = "bf16"
    fp8 = "fp8"


ModelOpt = Annotated[str, typer.Option(
    help="Model preset (see 'planner presets models'), model YAML/JSON or HF config.json.")]
NodesOpt = nodes_option("default: the fewest whose memory holds the weights twice over")
EstimateNodesOpt = nodes_option("default 1")
IslOpt = Annotated[int, typer.Option(min=1, callback=within(SEQUENCE_TOKENS), help=up_to(
    "Input tokens per request.", SEQUENCE_TOKENS))]
OslOpt = Annotated[int, typer.Option(min=1, callback=within(SEQUENCE_TOKENS), help=up_to(
    "Output tokens per request.", SEQUENCE_TOKENS))]
TtftOpt = Annotated[Optional[float], typer.Option(help=(
    "Target time to first token, ms, for the share of requests --ttft-percentile sets."))]
TpotOpt = Annotated[Optional[float], typer.Option(help="Target time per output token, ms.")]
PctOpt = Annotated[float, typer.Option(min=1.0, max=99.9, help=(
    "Share of requests (percent) that must meet the TTFT target; TPOT is a per-request mean "
    "over its tokens and is held to the target on average."))]
RateOpt = Annotated[Optional[float], typer.Option(help="Request arrival rate, requests/s.")]
ConcOpt = Annotated[Optional[int], typer.Option(min=1, help="Requests in flight (closed loop).")]
PrecOpt = Annotated[WeightPrecision, typer.Option(help="Weight precision.")]
KvOpt = Annotated[KvDtype, typer.Option(help="KV cache precision.")]
EngineOpt = Annotated[Engine, typer.Option(help="Serving engine the plan is for.")]
PrefixOpt = Annotated[float, typer.Option(min=0.0, max=0.99, help="Prefix-cache hit rate.")]
MtpOpt = Annotated[int, typer.Option(min=0, help="MTP / speculative draft depth.")]
AccOpt = Annotated[float, typer.Option(min=0.0, max=1.0, help="Draft acceptance rate.")]
ImbalanceOpt = Annotated[float, typer.Option(min=1.0, max=64.0, help=(
    "MoE: the busiest expert GPU's routed tokens over the mean (1: balanced, as EPLB-style "
    "redundant experts keep it; 'planner experts eval' measures it on a trace)."))]
CalOpt = Annotated[Optional[Path], typer.Option(help="Calibration JSON (see docs/serving.md).")]
LengthsOpt = Annotated[Optional[Path], typer.Option(help=(
    "CSV or JSON of per-request input_tokens and output_tokens: their means replace --isl and "
    "--osl, their spread sets the queueing variance, and the simulator replays them."))]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="table or json.")]

serve_app = typer.Typer(help="Plan LLM serving deployments: colocated or prefill/decode "
                             "disaggregated, for SGLang and vLLM.")


def _workload(isl, osl, rate, concurrency, ttft_ms, tpot_ms, precision, kv_dtype, prefix_hit,
              mtp, acceptance, ttft_percentile: float = 90.0, lengths=None,
              moe_imbalance: float = 1.0) -> ServingWorkload:
    from cost_models.serving.config import ServingWorkload
    scv = {}
    if lengths is not None:
        (isl_mean, isl_scv), (osl_mean, osl_scv) = lengths.input_mean_scv, lengths.output_mean_scv
        isl, osl = max(1, round(isl_mean)), max(1, round(osl_mean))
        scv = {"isl_scv": isl_scv, "osl_scv": osl_scv}
    if rate is not None and concurrency is not None:
        raise SpecError(OPTIONS_SOURCE, "--rate", "either --rate or --concurrency, not both",
                        rate)
    try:
        return ServingWorkload(isl=isl, osl=osl, rate_per_s=rate, concurrency=concurrency,
                               ttft_ms=ttft_ms, tpot_ms=tpot_ms, prefix_hit=prefix_hit,
                               mtp_depth=mtp, mtp_acceptance=acceptance,
                               precision=precision.value, kv_dtype=kv_dtype.value,
                               ttft_quantile=ttft_percentile / 100.0,
                               moe_imbalance=moe_imbalance, **scv)
    except ConfigError as err:
        flag = WORKLOAD_FLAGS.get(err.quantity, f"--{err.quantity.replace('_', '-')}")
        raise SpecError(OPTIONS_SOURCE, flag, err.expected, err.got) from None


# the option behind each quantity ServingWorkload checks, where the names differ
WORKLOAD_FLAGS = {"rate_per_s": "--rate", "ttft_quantile": "--ttft-percentile",
                  "mtp": "--mtp/--mtp-acceptance", "isl/osl": "--isl/--osl",
                  "isl_scv/osl_scv": "--lengths"}


def _calibration(gpu_names: tuple[str, ...], path: Path | None) -> Calibration:
    """Default profiles of every GPU type, with the ``--calibration`` file applied to each."""
    from cost_models.serving.profile import serving_overrides
    from planner.serving.estimate import Calibration
    cal = Calibration.defaults(gpu_names)
    if path is None:
        return cal
    profiles, serving = {}, {}
    for name in gpu_names:
        profiles[name] = load_profile(name, path)
        try:
            serving[name] = serving_overrides(cal.serving[name], path)
        except (ValueError, TypeError) as err:
            raise SpecError(str(path), "serving", f"serving profile fields ({err})") from None
    return Calibration(profiles, serving)


def _weights_bytes(spec, precision: str) -> float:
    from cost_models.serving.config import PoolLayout
    from cost_models.serving.memory import weight_bytes_per_gpu
    return weight_bytes_per_gpu(spec, PoolLayout(), precision)


def _default_nodes(spec, gpu: str | None, gpus_per_node, precision: str) -> int:
    """Fewest nodes (1, 2, 4, ...) whose HBM holds the weights with half of it left for KV."""
    probe = resolve_cluster(ClusterChoice(None, gpu, 1, gpus_per_node), DEFAULT_SERVE_GPU)
    per_node = probe.num_gpus * probe.slowest_gpu.hbm_bytes
    nodes = 1
    while nodes < 64 and _weights_bytes(spec, precision) > 0.5 * nodes * per_node:
        nodes *= 2
    return nodes


def _hardware(cluster, gpu, nodes, gpus_per_node, spec=None, precision: str = "bf16",
              one_type: bool = False):
    """The cluster and its GPU types (first-listed first); ``one_type`` refuses several."""
    if nodes is None and cluster is None:
        nodes = _default_nodes(spec, gpu, gpus_per_node, precision) if spec else 1
    hw = resolve_cluster(ClusterChoice(cluster, gpu, nodes, gpus_per_node), DEFAULT_SERVE_GPU)
    types = tuple(dict.fromkeys(g.gpu.name for g in hw.node_groups))
    if one_type and len(types) > 1:
        raise SpecError(cluster or OPTIONS_SOURCE, "node_groups", "one GPU type for 'serve "
                        "estimate' (POOL strings name no GPU; 'planner serve' plans pools on "
                        "several types)", ", ".join(types))
    return hw, types


def _plan_summary(c, wl: ServingWorkload, cluster) -> dict:
    from planner.serving.search import cost_per_hour
    d = c.estimate.as_dict(wl)
    d["pools"] = [{**p.as_dict(), "gpu": p.gpu} for p in c.estimate.pools]
    cost = cost_per_hour(c.deployment, cluster)
    if cost is not None:  # the cluster file prices its GPUs
        d["cost_per_hour"] = cost
        d["output_tokens_per_dollar"] = c.estimate.output_tokens_per_s * 3600.0 / cost
    d["engine"] = c.deployment.engine
    if c.deployment.mode == "afd":
        d["micro_batches"] = c.deployment.micro_batches
    return d


@serve_app.callback(invoke_without_command=True)
def serve(
    ctx: typer.Context,
    model: ModelOpt = "llama-3.1-70b",
    cluster: ClusterOpt = None, gpu: GpuOpt = None, nodes: NodesOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    isl: IslOpt = 4096, osl: OslOpt = 512,
    ttft_ms: TtftOpt = 2000.0, tpot_ms: TpotOpt = 50.0, ttft_percentile: PctOpt = 90.0,
    rate: RateOpt = None, concurrency: ConcOpt = None,
    precision: PrecOpt = WeightPrecision.bf16, kv_dtype: KvOpt = KvDtype.bf16,
    engine: EngineOpt = Engine.sglang, prefix_hit: PrefixOpt = 0.0,
    mtp: MtpOpt = 0, mtp_acceptance: AccOpt = 0.0, moe_imbalance: ImbalanceOpt = 1.0,
    mode: Annotated[Optional[str], typer.Option(
        help="colocated, disagg or afd (attention/FFN disaggregated decode; MoE models). "
             "Default: all that apply, side by side.")] = None,
    top_k: Annotated[int, typer.Option(min=1, help="Plans shown per mode.")] = 3,
    objective: Annotated[Objective, typer.Option(help=(
        "goodput: most output tokens/s per GPU within the targets; min-gpus: fewest GPUs that "
        "serve --rate within the targets; per-dollar: most tokens per unit of GPU cost "
        "(price_per_gpu_hour on every node group of the cluster file)."))] = Objective.goodput,
    calibration: CalOpt = None, lengths: LengthsOpt = None,
    model_path: Annotated[Optional[str], typer.Option(
        help="What the engines load (HF id or checkpoint folder; default: a preset's HF id, "
             "an HF config.json's folder, else the model's name).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Write the best plan here.")] = None,
    output_format: FormatOpt = OutputFormat.table,
) -> None:
    """Search colocated and disaggregated deployments for the highest output tokens/s per GPU
    that meets the TTFT and TPOT targets. Without --cluster or --nodes: the fewest nodes of
    --gpu (default H100) whose memory holds the weights twice over."""
    if ctx.invoked_subcommand is not None:
        return
    from planner.inputs.request_lengths import load_request_lengths
    from planner.report.serving import render_serve
    from planner.serving.afd import sensitivity
    from planner.serving.build import build_serving_plan
    from planner.serving.search import search
    from planner.serving.why import afd_verdict, why
    spec = load_model(model)
    hw, types = _hardware(cluster, gpu, nodes, gpus_per_node, spec, precision.value)
    sample = load_request_lengths(lengths) if lengths is not None else None
    wl = _workload(isl, osl, rate, concurrency, ttft_ms, tpot_ms, precision, kv_dtype,
                   prefix_hit, mtp, mtp_acceptance, ttft_percentile, sample, moe_imbalance)
    if mode not in (None, "colocated", "disagg", "afd"):
        raise SpecError(OPTIONS_SOURCE, "--mode", "colocated, disagg or afd", mode)
    if mode == "afd" and not spec.is_moe:
        raise SpecError(OPTIONS_SOURCE, "--mode", "colocated or disagg for a dense model "
                        "(attention/FFN disaggregation splits off the MoE experts)", mode)
    if mode == "afd" and objective is Objective.min_gpus:
        raise SpecError(OPTIONS_SOURCE, "--objective", "goodput or per-dollar with --mode afd",
                        objective.value)
    _check_objective(objective, rate, types, hw, cluster)
    cal = _calibration(types, calibration)
    modes = (mode,) if mode else ("colocated", "disagg") + (
        ("afd",) if spec.is_moe and objective is not Objective.min_gpus else ())
    start = time.perf_counter()
    result = search(spec, wl, hw, cal, engine.value, top_k, modes, objective.value)
    elapsed = time.perf_counter() - start
    best_co = result.colocated[0] if result.colocated else None
    best_dis = result.disagg[0] if result.disagg else None
    best_afd = result.afd[0] if result.afd else None
    fewest = objective is Objective.min_gpus
    ranked = _ranked(result, objective, hw)
    if not ranked:
        _no_plan(fewest, rate, hw, spec, model, precision.value, types, mode)
    best = ranked[0]
    if not best.meets_slo:
        _unmet_targets(best, wl, result.pareto, ttft_percentile, ttft_ms, tpot_ms)
    co_summary = _plan_summary(best_co, wl, hw) if best_co else None
    dis_summary = _plan_summary(best_dis, wl, hw) if best_dis else None
    dollars = None
    if objective is Objective.per_dollar and co_summary and dis_summary:
        dollars = (co_summary["output_tokens_per_dollar"],
                   dis_summary["output_tokens_per_dollar"])
    reason = why(best_co, best_dis, wl, fewest_gpus=fewest, mode=mode, per_dollar=dollars)
    data = {"model": spec.name, "gpu": " + ".join(types), "gpus": hw.num_gpus, "isl": wl.isl,
            "osl": wl.osl,
            "ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "search_s": elapsed,
            "layouts": result.layouts_evaluated, "why": reason,
            "plans": [_plan_summary(c, wl, hw) for c in ranked[:top_k]],
            "best_colocated": co_summary, "best_disagg": dis_summary,
            "pareto": list(result.pareto)}
    if "afd" in modes:
        data["best_afd"] = _plan_summary(best_afd, wl, hw) if best_afd else None
        data["afd_verdict"] = afd_verdict(best_afd, best_co, best_dis, result.afd_units, wl)
        data["afd_sensitivity"] = sensitivity(spec, wl, hw, cal, result.afd_units[0]) if (
            result.afd_units) else None
        data["afd_search"] = list(result.afd_searches)
    if out is not None:
        from planner.plan.document import plan_to_json
        from planner.plan.validate import validate_plan
        from planner.inputs.models import engine_model_path
        notes = []
        if model_path is None:
            model_path, known = engine_model_path(model, spec)
            if not known:
                notes.append(f"model_path: the engines load {model_path!r}, the model's name; "
                             "give serve --model-path (an HF id or a checkpoint folder)")
        plan = build_serving_plan(spec, hw, best.deployment, wl, best.estimate, cal,
                                  why=reason, model_path=model_path, lengths=sample,
                                  notes=notes)
        write_atomic(out, plan_to_json(validate_plan(plan, str(out))))
    if output_format is OutputFormat.json:
        data.pop("search_s")  # same inputs, same bytes
        typer.echo(json.dumps(data, sort_keys=True, indent=1))
    else:
        print_report(render_serve(data))
        if out is not None:
            typer.echo(f"wrote {out}")


def _check_objective(objective: Objective, rate, types: tuple[str, ...], hw, cluster) -> None:
    """What each objective needs: a target rate and one GPU type (min-gpus), prices
    (per-dollar)."""
    if objective is Objective.min_gpus and rate is None:
        raise SpecError(OPTIONS_SOURCE, "--rate", "a target request rate with --objective "
                        "min-gpus")
    if objective is Objective.min_gpus and len(types) > 1:
        raise SpecError(OPTIONS_SOURCE, "--objective", "goodput on a cluster of several GPU "
                        "types (min-gpus plans one type)", ", ".join(types))
    if objective is Objective.per_dollar and any(
            g.price_per_gpu_hour is None for g in hw.node_groups):
        raise SpecError(cluster or OPTIONS_SOURCE, "node_groups.price_per_gpu_hour",
                        "a price on every node group with --objective per-dollar")


def _ranked(result, objective: Objective, hw) -> list:
    """Every candidate of both modes, those meeting the targets first, best objective first."""
    from planner.serving.search import cost_per_hour
    def value(c) -> float:
        if objective is Objective.per_dollar:
            return c.estimate.output_tokens_per_s / cost_per_hour(c.deployment, hw)
        if objective is Objective.min_gpus:
            return -c.estimate.gpus
        return c.estimate.output_tokens_per_s_per_gpu
    return sorted(result.colocated + result.disagg + result.afd,
                  key=lambda c: (c.meets_slo, value(c)), reverse=True)


def _no_plan(fewest: bool, rate, hw, spec, model: str, precision: str, types,
             mode: str | None = None) -> None:
    """No layout at all: the target rate is out of reach, the mode needs more nodes than the
    cluster has, or nothing fits in memory."""
    nodes = sum(g.count for g in hw.node_groups)
    if mode in ("disagg", "afd") and nodes < 2:
        pools = ("a prefill and a decode pool" if mode == "disagg" else
                 "a prefill pool and the attention and FFN pools")
        raise SpecError(OPTIONS_SOURCE, "--mode", f"colocated on a cluster of one node "
                        f"(--mode {mode} puts {pools} on separate whole nodes; the cluster "
                        f"has {nodes})", mode)
    if fewest:
        raise InfeasibleError(f"no layout on the cluster's {hw.num_gpus} GPUs serves --rate "
                              f"{rate:g} requests/s within the targets (--objective goodput "
                              "shows the most it serves)")
    need = _weights_bytes(spec, precision) / 1e9
    have = sum(g.num_gpus * g.gpu.hbm_bytes for g in hw.node_groups) / 1e9
    raise InfeasibleError(f"{model} does not fit on {hw.num_gpus} x {' + '.join(types)}: it "
                          f"needs {need:.0f} GB of {precision} weights plus KV, the cluster "
                          f"has {have:.0f} GB, and no layout fits")


def _unmet_targets(best, wl: ServingWorkload, pareto, ttft_percentile: float, ttft_ms,
                   tpot_ms) -> None:
    """The best plan misses a target: say its TTFT/TPOT and which target binds."""
    e = best.estimate
    ttft = e.ttft.quantile_s(wl.ttft_quantile)
    missed = [name for name, got, target in (("TTFT", ttft, wl.ttft_ms),
                                             ("TPOT", e.tpot_target_s, wl.tpot_ms))
              if target is not None and got * 1e3 > target]
    binding = " and ".join(missed) or "memory"
    fastest = max((p["tokens_per_s_per_user"] for p in pareto), default=0.0)
    floor = (f"; no layout decodes faster than {1e3 / fastest:.1f} ms per token"
             if "TPOT" in missed and fastest > 0 else "")
    raise InfeasibleError(f"no plan meets --ttft-ms {_ms(ttft_ms)} / --tpot-ms {_ms(tpot_ms)}: "
                          f"the best plan ({best.deployment.mode}) reaches p{ttft_percentile:g} "
                          f"TTFT {ttft * 1e3:.0f} ms and TPOT {e.tpot_target_s * 1e3:.1f} ms "
                          f"({binding} "
                          f"{'bind' if len(missed) > 1 else 'binds'}){floor}")


def _ms(value) -> str:
    """A target as the user gave it (``none`` when not set)."""
    return "none" if value is None else f"{value:g}"


def _pool(text: str | None, option: str, role: str, gpu: str):
    from cost_models.serving.config import parse_pool
    from planner.serving.estimate import PoolSpec
    if text is None:
        return None
    try:
        return PoolSpec(role, gpu, parse_pool(text))
    except (ValueError, ConfigError) as err:
        raise SpecError(OPTIONS_SOURCE, option, f"POOL as tp=..,pp=..,dp=..,ep=..,etp=..,"
                        f"batch=..,workers=.. ({err})", text) from None


@serve_app.command("estimate")
def serve_estimate(
    model: ModelOpt = "llama-3.1-70b",
    cluster: ClusterOpt = None, gpu: GpuOpt = None, nodes: EstimateNodesOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    isl: IslOpt = 4096, osl: OslOpt = 512,
    rate: RateOpt = None, concurrency: ConcOpt = None,
    ttft_ms: TtftOpt = None, tpot_ms: TpotOpt = None, ttft_percentile: PctOpt = 90.0,
    precision: PrecOpt = WeightPrecision.bf16, kv_dtype: KvOpt = KvDtype.bf16,
    engine: EngineOpt = Engine.sglang, prefix_hit: PrefixOpt = 0.0,
    mtp: MtpOpt = 0, mtp_acceptance: AccOpt = 0.0, moe_imbalance: ImbalanceOpt = 1.0,
    colocated: Annotated[Optional[str], typer.Option(help="POOL of a colocated deployment.")]
    = None,
    prefill: Annotated[Optional[str], typer.Option(help="POOL of the prefill instances.")] = None,
    decode: Annotated[Optional[str], typer.Option(help="POOL of the decode instances.")] = None,
    two_batch_overlap: Annotated[bool, typer.Option(
        help="Hide EP all-to-all behind compute (SGLang --enable-two-batch-overlap).")] = False,
    calibration: CalOpt = None, lengths: LengthsOpt = None,
    output_format: FormatOpt = OutputFormat.table,
) -> None:
    """Predict TTFT, TPOT, throughput and memory of one deployment. POOL is
    tp=..,pp=..,dp=..,ep=..,etp=..,batch=..,workers=.. (dp: attention-DP ranks per instance,
    batch: requests per attention rank)."""
    from planner.inputs.request_lengths import load_request_lengths
    from planner.report.serving import render_serve_estimate
    from planner.serving.estimate import Deployment, estimate
    spec = load_model(model)
    hw, types = _hardware(cluster, gpu, nodes, gpus_per_node, one_type=True)
    g = hw.node_groups[0].gpu
    sample = load_request_lengths(lengths) if lengths is not None else None
    wl = _workload(isl, osl, rate, concurrency, ttft_ms, tpot_ms, precision, kv_dtype,
                   prefix_hit, mtp, mtp_acceptance, ttft_percentile, sample, moe_imbalance)
    co = _pool(colocated, "--colocated", "colocated", g.name)
    pre, dec = _pool(prefill, "--prefill", "prefill", g.name), _pool(decode, "--decode",
                                                                     "decode", g.name)
    if (co is None) == (pre is None and dec is None) or (co is None and (pre is None
                                                                         or dec is None)):
        raise SpecError(OPTIONS_SOURCE, "--colocated", "either --colocated POOL or both "
                        "--prefill POOL and --decode POOL")
    dep = Deployment("colocated", (co,), engine.value) if co else Deployment(
        "disagg", (pre, dec), engine.value)
    if dep.gpus > hw.num_gpus:
        raise SpecError(OPTIONS_SOURCE, "--colocated/--prefill/--decode",
                        f"pools within the cluster's {hw.num_gpus} GPUs",
                        f"{dep.gpus} GPUs (tp*pp*dp*workers summed over pools)")
    cal = _calibration(types, calibration)
    try:
        est = estimate(spec, dep, wl, hw, {g.name: g}, cal, overlap_comm=two_batch_overlap)
    except ConfigError as err:
        raise SpecError(OPTIONS_SOURCE, f"POOL {err.quantity}", err.expected, err.got) from None
    data = est.as_dict(wl)
    if output_format is OutputFormat.json:
        typer.echo(json.dumps(data, sort_keys=True, indent=1))
    else:
        print_report(render_serve_estimate(data))


@serve_app.command("simulate")
def serve_simulate(
    plan: Annotated[Path, typer.Argument(help="Serving plan JSON written by 'planner serve "
                                              "--out'.")],
    requests: Annotated[int, typer.Option(min=1, help="Requests to simulate (at least 5 "
                                          "times the deployment's in-flight room).")] = 4000,
    seed: Annotated[int, typer.Option(help="Seed of the Poisson arrivals.")] = 0,
    output_format: FormatOpt = OutputFormat.table,
) -> None:
    """Run a serving plan through the request-level simulator (step times from the same cost
    model) and compare TTFT, TPOT and throughput with the plan's closed-form prediction."""
    from planner.plan.file import load_plan
    from planner.serving.simulate import simulate_plan
    doc = load_plan(plan)
    if doc.kind != "serving" or doc.serving is None:
        raise SpecError(str(plan), "kind", "a serving plan", doc.kind)
    try:
        data = simulate_plan(doc, requests=requests, seed=seed)
    except (ValueError, ConfigError) as err:
        raise SpecError(str(plan), "serving", f"a plan the simulator can run ({err})") from None
    if output_format is OutputFormat.json:
        typer.echo(json.dumps(data, sort_keys=True, indent=1))
        return
    from rich.table import Table
    sim, pred, rel = data["simulated"], data["predicted"], data["relative_difference"]
    load = data["load"]
    title = (f"{data['mode']} on {data['gpus']} GPUs, {data['requests']} requests, "
             + (f"Poisson {load['rate_per_s']:.2f} req/s" if load["kind"] == "rate"
                else f"closed loop of {load['concurrency']}"))
    table = Table(title=title)
    for col in ("metric", "simulated", "closed form", "difference"):
        table.add_column(col, justify="left" if col == "metric" else "right")

    def pct(x):
        return "-" if x is None else f"{x * 100:+.1f}%"

    def ms(x):
        return "-" if x is None else f"{x * 1e3:.1f}"
    table.add_row("TTFT mean, ms", ms(sim["ttft_s"]["mean"]), ms(pred["ttft_s"]),
                  pct(rel["ttft_s"]))
    for q in ("p90", "p99"):
        table.add_row(f"TTFT {q}, ms", ms(sim["ttft_s"][q]), ms(pred.get(f"ttft_{q}_s")),
                      pct(rel.get(f"ttft_{q}_s")))
    table.add_row("TPOT mean, ms", ms(sim["tpot_s"]["mean"]), ms(pred["tpot_s"]),
                  pct(rel["tpot_s"]))
    table.add_row("TPOT p99, ms", ms(sim["tpot_s"]["p99"]), "", "")
    table.add_row("output tok/s/GPU", f"{sim['output_tokens_per_s_per_gpu']:.0f}",
                  "-" if pred["output_tokens_per_s_per_gpu"] is None
                  else f"{pred['output_tokens_per_s_per_gpu']:.0f}",
                  pct(rel["output_tokens_per_s_per_gpu"]))
    table.add_row("SLO attainment", f"{sim['slo_attainment'] * 100:.1f}%", "", "")
    table.add_row("preemptions", str(sim["preemptions"]), "", "")
    print_report(table)
