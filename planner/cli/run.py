"""``planner calibrate`` and ``planner check-run``: the measurement side of the CLI (registered
on the top-level app by :mod:`planner.cli.app`).

These commands wire the rooms together, since :mod:`planner.run` imports no cost model:

* calibrate: :mod:`planner.run.calibrate` measures, ``cost_models.fitting.fit_all`` fits,
  :mod:`planner.run.calibrate` writes;
* check-run: :mod:`planner.run.check_run` reads the record,
  :mod:`planner.training.run_prediction` predicts it, :mod:`planner.run.check_run` compares.
"""
from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from planner.cli.common import OutputFormat, fail, progress_bar


class Backend(str, Enum):
    gloo = "gloo"
    nccl = "nccl"


def calibrate_command(
    out: Annotated[Path, typer.Option(help="Calibration JSON to write (for --calibration).")] = Path(
        "calibration.json"),
    backend: Annotated[Backend, typer.Option(
        help="gloo: CPU processes; nccl: one process per GPU.")] = Backend.gloo,
    nproc: Annotated[Optional[int], typer.Option(
        min=1, help="Processes (devices); default: GPUs with nccl, CPU cores (>= 2) with gloo.")
    ] = None,
    cluster_out: Annotated[Optional[Path], typer.Option(
        help="Cluster YAML of this machine to write (default: OUT with .cluster.yaml).")] = None,
    quick: Annotated[bool, typer.Option(help="Few sizes, short repeats (seconds; for tests).")
                     ] = False,
    master_port: Annotated[Optional[int], typer.Option(min=1, max=65535)] = None,
    strict: Annotated[bool, typer.Option(
        help="Exit 3 and write nothing when a warning holds (more processes than cores, a "
             "busy machine, a fit whose median residual is above 25%).")] = False,
    refit: Annotated[Optional[Path], typer.Option(
        help="Measure nothing: fit the raw timings of this earlier calibration JSON again "
             "(with this version's cost models).")] = None,
) -> None:
    """Measure this machine (GEMM, attention, memory bandwidth, decode kernels, every
    collective by message and group size), fit the cost models' profile and the serving
    model's KV read efficiency to it, and write them and this machine as a cluster file. Use
    both with 'planner solve/estimate --cluster FILE --calibration OUT' ('planner serve
    --calibration OUT' applies the serving fields too)."""
    from cost_models.fitting import fit_all
    from cost_models.profile import profile_to_dict
    from cost_models.serving.calibration import fit_serving
    from planner.run.calibrate import (CalibrateOptions, available_cores, calibration_document,
                                       calibration_warnings, default_nproc, element_bytes,
                                       link_tier, measure, oversubscribed,
                                       threads_per_process, write_calibration)

    cluster_path = cluster_out or out.with_name(out.stem + ".cluster.yaml")
    crowded = None
    if refit is not None:
        raw = _raw_of(refit)
        opts = CalibrateOptions(raw["backend"], raw["world_size"], raw.get("quick", False))
    else:
        opts = CalibrateOptions(backend.value, nproc or default_nproc(backend.value), quick,
                                master_port)
        _check_backend(opts)
        crowded = oversubscribed(opts.backend, opts.nproc, threads_per_process(opts),
                                 available_cores())
        if crowded:
            if strict:
                fail(f"--strict: {crowded}; nothing measured", 3)
            typer.echo(f"warning: {crowded}", err=True)
        with progress_bar(f"calibrating ({opts.nproc} x {backend.value})", True) as update:
            raw = measure(opts, (lambda d, t, _label: update(d, t)) if update else None)
    fit = fit_all(raw, tier=link_tier(opts.backend), elem_bytes=element_bytes(opts.backend))
    doc = calibration_document(fit, profile_to_dict(fit.profile), raw, opts.nproc,
                               fit_serving(raw, fit))
    warnings = calibration_warnings(doc)
    if strict and warnings:
        fail("--strict: " + "; ".join(warnings) + f"; {out} not written", 3)
    write_calibration(doc, out, cluster_path)
    console = Console()
    for part in _calibration_tables(doc, opts.nproc, opts.backend):
        console.print(part)
    console.print(_quality_line(doc))
    for warning in warnings:
        if warning != crowded:  # said before measuring
            typer.echo(f"warning: {warning}", err=True)
    console.print(f"wrote {out} and {cluster_path}")


def _calibration_tables(doc: dict, nproc: int, backend: str) -> tuple[Table, Table]:
    """The calibrate report's two tables: the fitted parameters, then the residuals per
    benchmark."""
    from planner.run.calibrate import residual_summary

    prof, dev = doc["profile"], doc["cluster"]["node_groups"][0]
    table = Table(title=f"Calibration of {doc['machine']['device']} "
                        f"({nproc} x {backend}, {doc['machine']['threads']} thread(s) each)")
    table.add_column("parameter")
    table.add_column("value", justify="right")
    peak = next(iter(dev["gpu"]["peak_tflops"].items()))
    for name, value in (
            (f"peak GEMM ({peak[0]})", f"{peak[1] * 1e3:,.1f} GFLOP/s"),
            ("gemm_efficiency", f"{prof['gemm_efficiency']:.3f}"),
            ("gemm_half_dim", f"{prof['gemm_half_dim']:.1f}"),
            ("attention_efficiency", f"{prof['attention_efficiency']:.3f}"),
            ("attention_half_keys", f"{prof.get('attention_half_keys', 0.0):,.1f}"),
            ("attention per call (launches)",
             f"{doc['fit'].get('attention_call_s', 0.0) * 1e6:,.1f} us"),
            ("memory bandwidth", f"{dev['gpu']['memory_bw_GBps']:,.1f} GB/s"),
            ("kernel_overhead_s", f"{prof['kernel_overhead_s'] * 1e6:.1f} us"),
            *([("host_launch_s (CPU, overlaps GPU)",
                f"{prof['host_launch_s'] * 1e6:.1f} us")] if prof.get("host_launch_s") else []),
            *_link_rows(doc, prof, dev),
            *_serving_rows(doc)):
        table.add_row(name, value)
    fits = Table(title="Fit residuals (predicted / measured - 1)")
    for col in ("benchmark", "cases", "median |error|", "worst |error|"):
        fits.add_column(col, justify="left" if col == "benchmark" else "right")
    for kind, n, med, worst in residual_summary(doc):
        fits.add_row(kind, str(n), f"{med:.1%}", f"{worst:.1%}")
    return table, fits


def _quality_line(doc: dict) -> str:
    """'fit quality: median |residual| 5.0% over 27 compute cases, ...; measured with ...'."""
    quality, cond = doc["quality"], doc["conditions"]
    comm = quality["collectives_median_abs_residual"]
    text = (f"fit quality: median |residual| {quality['median_abs_residual']:.1%} over "
            f"{quality['compute_cases']} compute cases")
    if comm is not None:
        text += f", {comm:.1%} over {quality['collective_cases']} collective cases"
    if quality.get("rank_speed_spread") is not None:
        text += (f"; slowest rank {quality['rank_speed_spread']:.2f}x the fastest on the same "
                 "kernels")
    if quality.get("pass_spread") is not None:
        text += f"; a case's passes {quality['pass_spread']:.2f}x apart (median)"
    if quality.get("speed_drift") is not None:
        text += f"; speed probe {quality['speed_drift']:.2f}x apart at start and end"
    if quality.get("link_drift") is not None:
        text += f", link probe {quality['link_drift']:.2f}x"
    text += f"; measured with {cond.get('processes')} process(es) on {cond.get('cores')} core(s)"
    if cond.get("pinned") is not None:
        text += ", each on cores of its own" if cond["pinned"] else ", not pinned to cores"
    if cond.get("other_load_cores") is not None:
        text += f", other processes busy on {cond['other_load_cores']:.2f} cores"
    return text


def _raw_of(path: Path) -> dict:
    """The raw timings of a calibration JSON (``planner calibrate --out``), for --refit."""
    from planner.errors import SpecError

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise SpecError(str(path), "", f"a calibration JSON written by planner calibrate "
                        f"({err.__class__.__name__})") from None
    raw = doc.get("raw") if isinstance(doc, dict) else None
    if not isinstance(raw, dict) or doc.get("schema") != "planner.calibration/v1" or \
            "compute" not in raw:
        raise SpecError(str(path), "raw", "the raw timings of a 'planner.calibration/v1' "
                        "document (planner calibrate --out)")
    return raw


def _check_backend(opts) -> None:
    """NCCL needs torch with CUDA and a GPU per process: say so before starting anything."""
    if opts.backend != "nccl":
        return
    try:
        import torch
    except ImportError:
        return  # measure() reports the missing torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        fail("command line: --backend nccl: expected a machine with CUDA GPUs, this one has "
             "none (use --backend gloo)", 2)
    if opts.nproc > gpus:
        fail(f"command line: --nproc: expected at most {gpus} with --backend nccl (one process "
             f"per GPU: NCCL refuses two ranks on one GPU), got {opts.nproc}", 2)


def _link_rows(doc: dict, prof: dict, dev: dict) -> list[tuple[str, str]]:
    """The rows of what the collectives and the ping-pong pairs fitted; one row saying so when
    one process measured none (its cluster file's link is a placeholder)."""
    if not doc["quality"].get("collective_cases"):
        return [("links, collectives, waits", "not measured (one process)")]
    return [("link bandwidth (all-reduce)", f"{dev.get('intra_bw_GBps', 0):,.3f} GB/s"),
            ("link latency (all-reduce)", f"{dev.get('intra_latency_us', 0):,.1f} us"),
            ("collective_switch_s", f"{prof.get('collective_switch_s', 0.0) * 1e6:,.1f} us"),
            ("collective_skew_sqrt_s (arrival skew)",
             f"{prof.get('collective_skew_sqrt_s', 0.0) * 1e3:,.2f} ms/sqrt(s)"),
            ("resume_s (compute after a wait)", f"{prof.get('resume_s', 0.0) * 1e6:,.1f} us"),
            ("p2p_latency_s (receiver waits)",
             f"{prof.get('p2p_latency_s', 0.0) * 1e6:,.1f} us"),
            ("late_read_s (came while busy)", f"{prof.get('late_read_s', 0.0) * 1e6:,.1f} us"),
            ("p2p_post_s (isend / irecv call)",
             f"{prof.get('p2p_post_s', 0.0) * 1e6:,.1f} us")]


def _serving_rows(doc: dict) -> list[tuple[str, str]]:
    """The serving fit's rows of the calibrate table: the two fields it sets (KV reads, and
    the weights' reads of an M = 1 GEMM, beside the layers' ``hbm_efficiency``)."""
    fit = doc["fit"].get("serving")
    if fit is None:
        return []
    return [("serving kv_read_efficiency",
             f"{fit['kv_read_efficiency']:.3f} ({fit['kv_read_bytes_per_s'] / 1e9:,.1f} GB/s)"),
            ("serving weight_read_efficiency",
             f"{fit['weight_read_efficiency']:.3f} (layers' hbm_efficiency "
             f"{doc['profile']['hbm_efficiency']:.3f})")]


def check_run_command(
    record: Annotated[Path, typer.Argument(help="Run record JSON (planner launch --record).")],
    calibration: Annotated[Optional[Path], typer.Option(
        help="Calibration JSON (planner calibrate); default: the plan's own profile.")] = None,
    output_format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.table,
) -> None:
    """Predicted against measured for a reference-job run: the step, each stage's compute and
    collectives, the pipeline wait, the DP all-reduce and the optimizer. For an AFD decode job
    record (planner launch AFD_PLAN --record), needs --calibration: the step, each side's busy
    time and waits."""
    from cost_models.profile import Profile
    from planner.plan.document import plan_from_dict
    from planner.run.afd_check_run import AFD_RECORD_SCHEMA, schema_of
    from planner.run.check_run import compare, load_record
    from planner.training.estimation import load_profile
    from planner.training.run_prediction import predict_run

    if schema_of(record) == AFD_RECORD_SCHEMA:
        _check_afd_run(record, calibration, output_format)
        return
    data = load_record(record)
    _warn_conditions(data, calibration)
    plan = plan_from_dict(data["plan"])
    profile: Profile | None = None
    if calibration is not None:
        profile = load_profile(plan.cluster().slowest_gpu.name, calibration)
    rows = compare(data, predict_run(data, profile))
    if output_format is OutputFormat.json:
        typer.echo(json.dumps([{"what": r.what, "predicted_s": r.predicted_s,
                                "measured_s": r.measured_s, "error": r.error} for r in rows],
                              indent=1))
        return
    cfg = data["config"]
    table = Table(title=f"{record.name}: predicted vs measured, seconds per step "
                        f"(tp {cfg['tp']} pp {cfg['pp']} dp {cfg['dp']} ep {cfg['ep']}; "
                        f"median of steps 2..{len(data['step_times_max_s'])})")
    Console().print(_comparison(table, rows, 4))


def _warn_conditions(data: dict, calibration: Optional[Path]) -> None:
    """Warn (stderr) where the run's conditions differ from the calibration's (a file written
    by planner calibrate; a plain profile file has none)."""
    from planner.run.check_run import condition_warnings, run_warnings

    calibrated: dict = {}
    if calibration is not None:
        try:
            doc = json.loads(calibration.read_text())
            calibrated = doc.get("conditions", {}) if isinstance(doc, dict) else {}
        except (OSError, ValueError):
            calibrated = {}  # the profile loader reports a bad file
    for warning in (condition_warnings(calibrated, data.get("environment", {}))
                    + run_warnings(data)):
        typer.echo(f"warning: {warning}", err=True)


def _check_afd_run(record: Path, calibration: Optional[Path],
                   output_format: OutputFormat) -> None:
    """check-run of an AFD decode job record: :mod:`planner.run.afd_check_run` reads and
    compares, :mod:`planner.serving.afd_run_prediction` predicts on the calibrated machine."""
    from planner.errors import SpecError
    from planner.run.afd_check_run import compare_afd, load_afd_record, read_record
    from planner.run.check_run import condition_warnings
    from planner.serving.afd_run_prediction import predict_afd_run

    data = load_afd_record(record)
    if calibration is None:
        raise SpecError("command line", "--calibration", "a calibration JSON of the machine the "
                        "AFD job ran on (planner calibrate): the plan's GPUs are not the CPUs "
                        "or GPUs the job ran on")
    cal = read_record(calibration)
    if cal.get("schema") != "planner.calibration/v1":
        raise SpecError(str(calibration), "schema", "a 'planner.calibration/v1' document "
                        "(planner calibrate --out)", cal.get("schema"))
    pred = predict_afd_run(data, cal)
    modelled = ("pinned one core each, a core running its ranks in turn "
                "(solvers.serving.pinned_cores)" if pred.sharing == "pinned" else None)
    for warning in condition_warnings(cal.get("conditions", {}), data.get("environment", {}),
                                      modelled):
        typer.echo(f"warning: {warning}", err=True)
    rows = compare_afd(data, pred)
    if output_format is OutputFormat.json:
        typer.echo(json.dumps({"rows": [{"what": r.what, "predicted_s": r.predicted_s,
                                         "measured_s": r.measured_s, "error": r.error}
                                        for r in rows],
                               "prediction": pred.as_dict()}, indent=1))
        return
    cfg, shape = data["config"], data["shape"]
    steps = len(data["step_times_max_s"])
    table = Table(title=f"{record.name}: predicted vs measured, seconds per step "
                        f"({cfg['attention_gpus']} attention + {cfg['ffn_gpus']} FFN ranks, "
                        f"m {shape['micro_batches']}, batch {shape['batch']} per attention "
                        f"rank; median of steps 2..{steps})")
    console = Console()
    console.print(_comparison(table, rows, 5))
    att, disp, exp, comb = pred.stages
    how = {"pinned": ", each pinned to one, a core running its ranks in turn",
           "processor sharing": ", not pinned (shared evenly)"}.get(pred.sharing, "")
    sharing = (f"{pred.processes} processes time-share {pred.cores:g} cores{how}"
               if pred.shared_cores else f"{pred.processes} processes on {pred.cores:g} cores")
    console.print(f"predicted stages per micro-batch of a MoE layer: attention {att * 1e3:.3f} "
                  f"ms, dispatch {disp * 1e3:.3f} ms, experts {exp * 1e3:.3f} ms, combine "
                  f"{comb * 1e3:.3f} ms (bound: {pred.bound}); {pred.ops_attention:.0f} / "
                  f"{pred.ops_ffn:.0f} torch calls per step (attention / FFN rank) at "
                  f"{pred.kernel_overhead_s * 1e6:.1f} us, isend / irecv at "
                  f"{pred.post_s * 1e6:.1f} us; message latency "
                  f"{pred.message_latency_s * 1e6:.0f} us, resume after a wait "
                  f"{pred.resume_s * 1e6:.0f} us, late read {pred.late_read_s * 1e6:.0f} us; "
                  f"{sharing}")


def _comparison(table: Table, rows, digits: int) -> Table:
    """check-run's predicted/measured/error columns, the step row in bold."""
    for col in ("", "predicted", "measured", "error"):
        table.add_column(col, justify="left" if not col else "right")
    for r in rows:
        err = "" if r.error is None else f"{r.error:+.1%}"
        style = "bold" if r.what == "step" else None
        table.add_row(r.what, "-" if r.predicted_s is None else f"{r.predicted_s:.{digits}f}",
                      f"{r.measured_s:.{digits}f}", err, style=style)
    return table
