"""``planner calibrate``: measure this machine and fit the cost models' profile to it.

1. torchrun starts one process per device (``--nproc``; on CPU each gets ``cores / nproc``
   threads) running :mod:`planner.run.calibrate_job`: GEMMs by size, causal attention forward +
   backward, a small transformer layer, memory bandwidth, a decode step's skinny GEMMs and
   decode attention, and every collective by message and group size. Its progress lines drive
   a progress bar; the whole process group is ended on any failure or Ctrl-C
   (:func:`planner.run.launch.end_job`).
2. The CLI (:func:`planner.cli.run.calibrate_command`) hands the raw timings to
   the cost models' fit (``fitting.fit_all``), which fits the profile (GEMM efficiency curve, attention
   efficiency, per-kernel overhead, bandwidth, and alpha-beta of the machine's link with a
   factor per collective) using the cost model's own formulas, and the serving fit
   (``cost_models.serving.calibration.fit_serving``: ``kv_read_efficiency``, and a check of the
   skinny-GEMM regime); this module fits nothing and imports no cost model.
3. :func:`calibration_document` and :func:`write_calibration`: one JSON file (``planner.calibration/v1``) holds the ``profile`` that ``--calibration``
   applies, the ``serving`` fields measured (what ``planner serve --calibration`` applies
   besides the profile), the machine as a ``cluster`` (an inline device with the measured peaks,
   one node, fabric ``host`` with the fitted bandwidth and latency), the residual of every case,
   and the raw timings. The cluster is also written as a YAML file for ``--cluster``.
"""
from __future__ import annotations

import json
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.errors import PlannerError
from planner.files import write_atomic

__all__ = ["SCHEMA", "BenchmarkError", "CalibrateOptions", "available_cores",
           "calibration_document", "calibration_warnings", "drifted", "fit_quality",
           "oversubscribed", "default_nproc", "element_bytes", "link_tier", "machine_cluster",
           "measure", "pass_spread", "probe_times", "rank_speed_spread", "residual_summary",
           "run_benchmarks", "speed_drift", "threads_per_process", "write_calibration"]

SCHEMA = "planner.calibration/v1"


class BenchmarkError(PlannerError):
    """The benchmark processes failed (not bad input)."""

    exit_code = 1


@dataclass(frozen=True)
class CalibrateOptions:
    backend: str = "gloo"
    nproc: int = 2
    quick: bool = False
    master_port: int | None = None


def default_nproc(backend: str) -> int:
    """One process per GPU with NCCL; with gloo one per core, at least 2 (collectives)."""
    if backend == "nccl":
        try:
            import torch
            return max(1, torch.cuda.device_count())
        except ImportError:
            return 1
    return max(2, available_cores())


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity: taskset, cgroup cpusets), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_per_process(opts: CalibrateOptions) -> int:
    """Torch threads of each benchmark process: the cores shared out (gloo), 1 with NCCL."""
    return max(1, available_cores() // opts.nproc) if opts.backend == "gloo" else 1


def run_benchmarks(opts: CalibrateOptions, raw_path: Path, progress=None) -> None:
    """Run :mod:`planner.run.calibrate_job` under torchrun; ``progress(done, total, label)``."""
    from planner.run.launch import Stop, end_job, start_job, stop_on_signals

    threads = threads_per_process(opts)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={opts.nproc}"]
    if opts.master_port is not None:
        cmd.append(f"--master-port={opts.master_port}")
    cmd += ["-m", "planner.run.calibrate_job", "--out", str(raw_path), "--backend", opts.backend]
    if opts.quick:
        cmd.append("--quick")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    log: list[str] = []
    with stop_on_signals():
        proc, before = start_job(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, env=env)
        try:
            for line in proc.stdout:
                if line.startswith("@@progress "):
                    _, done, total, label = line.rstrip("\n").split(" ", 3)
                    if progress is not None:
                        progress(int(done), int(total), label)
                else:
                    log.append(line)
            code = proc.wait()
        except Stop as stop:
            err = BenchmarkError(f"stopped by {signal.Signals(stop.signum).name}: every "
                                 "benchmark process was ended")
            err.exit_code = 128 + stop.signum
            raise err from None
        finally:
            end_job(proc, before)
    if code != 0 or not raw_path.is_file():
        tail = "".join(log[-15:]).strip()
        raise BenchmarkError(f"the calibration benchmarks failed (torchrun exit {code}); last "
                             f"output: {tail or '(none)'}")


def _cpu_busy_s() -> float | None:
    """Seconds all cores have been busy since boot (``/proc/stat``: user + nice + system + irq
    + softirq + steal), None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class OtherLoad:
    """Cores' worth of CPU work that processes other than ours did during a measurement: all
    cores' busy time (``/proc/stat``) minus what our children (the benchmark processes, reaped)
    used, over the wall time. A number, not the laggy 1-minute load average."""

    def __init__(self) -> None:
        self.busy0, self.ours0, self.t0 = _cpu_busy_s(), _children_cpu_s(), time.monotonic()

    def cores(self) -> float | None:
        busy = _cpu_busy_s()
        if busy is None or self.busy0 is None:
            return None
        wall = max(time.monotonic() - self.t0, 1e-9)
        ours = _children_cpu_s() - self.ours0
        return round(max(0.0, (busy - self.busy0 - ours) / wall), 3)


def link_tier(backend: str) -> str:
    """The link tier the collectives of ``backend`` are fitted to: ``host`` (gloo) or
    ``nvswitch``."""
    return "host" if backend == "gloo" else "nvswitch"


def element_bytes(backend: str) -> int:
    """Bytes per element the benchmarks of ``backend`` use: fp32 on CPU (gloo), else bf16."""
    return 4 if backend == "gloo" else 2


def measure(opts: CalibrateOptions, progress=None) -> dict:
    """Run the benchmarks (:func:`run_benchmarks`) and return their raw timings."""
    with tempfile.TemporaryDirectory(prefix="planner-calibrate-") as tmp:
        raw_path = Path(tmp) / "raw.json"
        other = OtherLoad()
        run_benchmarks(opts, raw_path, progress)
        raw = json.loads(raw_path.read_text())
        raw.setdefault("conditions", {})["other_load_cores"] = other.cores()
        return raw


def machine_cluster(fit: Any, raw: dict, nproc: int, name: str = "local") -> dict:
    """This machine as a cluster file: one node of ``nproc`` measured devices. ``fit``: the
    fitted figures (the cost models' ``CalibrationFit``: ``peak_flops``,
    ``memory_bw_bytes_per_s``, ``link.bw_bytes_per_s``, ``link.latency_s``)."""
    precision = "fp32" if raw["backend"] == "gloo" else "bf16"
    per_process = f" ({raw['threads']} thread{'s' * (raw['threads'] > 1)})" if raw[
        "backend"] == "gloo" else ""
    device = {"name": f"{raw['device']}{per_process}", "arch": "cpu" if raw["backend"] == "gloo"
              else "measured",
              "memory_gb": round(raw["memory_bytes"] / 2**30, 3),
              "memory_bw_GBps": round(fit.memory_bw_bytes_per_s / 1e9, 3),
              "peak_tflops": {precision: round(fit.peak_flops / 1e12, 6)},
              "source": f"planner calibrate ({raw['backend']}, torch {raw['torch']})"}
    group = {"name": name, "count": 1, "gpu": device, "gpus_per_node": nproc,
             "fabric": link_tier(raw["backend"])}
    if math.isfinite(fit.link.bw_bytes_per_s):
        group["intra_bw_GBps"] = round(fit.link.bw_bytes_per_s / 1e9, 6)
        group["intra_latency_us"] = round(max(fit.link.latency_s * 1e6, 0.01), 3)
    else:  # one process: no collective was measured, and none crosses a link on one device
        group["intra_bw_GBps"] = 1.0
    return {"name": name, "description": f"this machine, measured by planner calibrate "
                                         f"({nproc} x {device['name']})",
            "node_groups": [group]}


def _residuals(residuals) -> list[dict]:
    return [{**asdict(r), "error": r.error} for r in residuals]


def calibration_document(fit: Any, profile: dict, raw: dict, nproc: int,
                         serving: Any = None) -> dict:
    """The ``planner.calibration/v1`` object (see module docstring). ``fit``: the
    cost models' ``CalibrationFit``; ``profile``: its profile as plain data; ``serving``: the
    serving fit (``cost_models.serving.calibration.ServingFit``: ``profile_fields()``, the
    read rates and efficiencies, ``residuals``), None when the benchmarks had no decode cases.
    Its ``serving`` object holds only the measured fields, as ``serving_overrides`` reads it."""
    tier = link_tier(raw["backend"])
    profile = dict(profile)
    profile["link_efficiency"] = {tier: 1.0}
    profile["reserved_bytes"] = 0.0 if raw["backend"] == "gloo" else profile["reserved_bytes"]
    doc: dict = {
        "schema": SCHEMA,
        "machine": {k: raw[k] for k in ("device", "backend", "threads", "torch", "world_size",
                                        "quick")},
        "conditions": dict(raw.get("conditions", {})),
        "profile": profile,
    }
    if serving is not None:
        doc["serving"] = dict(serving.profile_fields())
    doc["cluster"] = machine_cluster(fit, raw, nproc)
    doc["fit"] = {"peak_flops": fit.peak_flops,
                  "memory_bw_bytes_per_s": fit.memory_bw_bytes_per_s,
                  "link": asdict(fit.link), "attention_call_s": fit.attention_call_s,
                  "residuals": _residuals(fit.residuals)}
    if serving is not None:
        doc["fit"]["serving"] = {
            "kv_read_bytes_per_s": serving.kv_read_bytes_per_s,
            "kv_read_efficiency": serving.kv_read_efficiency,
            "weight_read_bytes_per_s": serving.weight_read_bytes_per_s,
            "weight_read_efficiency": serving.weight_read_efficiency,
            "residuals": _residuals(serving.residuals)}
    doc["raw"] = raw
    doc["quality"] = fit_quality(doc)
    return doc


def write_calibration(doc: dict, out: Path, cluster_out: Path) -> None:
    """Write the calibration document to ``out`` and its cluster as YAML to ``cluster_out``
    (each atomically)."""
    write_atomic(cluster_out, "# Written by planner calibrate: this machine as a cluster file.\n"
                 + yaml.safe_dump(doc["cluster"], sort_keys=False))
    write_atomic(out, json.dumps(doc, indent=1) + "\n")


COMPUTE_KINDS = ("gemm", "attention", "layer")  # the benchmarks the compute parameters are fitted on
COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
RESIDUAL_WARN = 0.25  # a fitted benchmark whose median |residual| is above this is a poor fit
LOAD_WARN = 0.25  # share of the cores other processes may keep busy while measuring
# slowest over fastest rank's time on the same kernel case, median over the compute cases,
# above which the ranks did not run alike (on the lent 16-vCPU Xeon, 2026-11-28: 1.03 on one
# pair of cores and 1.5-1.8 on two others, at the same moment; this 2-vCPU box about 1.1)
RANK_SPREAD_WARN = 1.25
# a rank's speed probe (planner.run.speed_probe) at calibrate's end over its start, either way,
# above which the machine changed while it was measured (2026-11-28 18:06-18:23 UTC, three
# calibrations of the 2-vCPU box in a quiet hour: 1.00-1.05 in two, 1.13 and 1.30 in the one
# whose predictions were all but one too slow, +0.1% to +11.4%, against -9.4% to +7.8%)
SPEED_DRIFT_WARN = 1.15


def drifted(quality: dict) -> bool:
    """Whether a calibration's ``quality`` (:func:`fit_quality`) says the machine's compute or
    link speed moved while it measured (either probe above :data:`SPEED_DRIFT_WARN`)."""
    return any((quality.get(k) or 0.0) > SPEED_DRIFT_WARN for k in ("speed_drift", "link_drift"))


def fit_quality(doc: dict) -> dict:
    """The fit's quality in one number and per benchmark: ``median_abs_residual`` over the
    compute cases (:data:`COMPUTE_KINDS`: what ``gemm_efficiency``, ``gemm_half_dim``,
    ``attention_efficiency``, ``hbm_efficiency`` and ``kernel_overhead_s`` are fitted on),
    ``collectives_median_abs_residual`` over the collectives (the link's alpha-beta), and
    ``by_kind``: kind -> (cases, median, worst). Cache-resident copies and the serving checks
    are not fits and do not count."""
    residuals = doc["fit"]["residuals"]
    compute = sorted(abs(r["error"]) for r in residuals if r["kind"] in COMPUTE_KINDS)
    comm = sorted(abs(r["error"]) for r in residuals if r["kind"] in COLLECTIVE_KINDS)
    spread = rank_speed_spread(doc.get("raw", {}))
    passes = pass_spread(doc.get("raw", {}))
    drift = speed_drift(doc.get("conditions", {}))
    link = speed_drift(doc.get("conditions", {}), "link_probe_s")
    return {"median_abs_residual": compute[len(compute) // 2] if compute else None,
            "compute_cases": len(compute),
            "rank_speed_spread": spread,
            "pass_spread": passes,
            "speed_drift": drift[0] if drift else None,
            "link_drift": link[0] if link else None,
            "collectives_median_abs_residual": comm[len(comm) // 2] if comm else None,
            "collective_cases": len(comm),
            "by_kind": {k: {"cases": n, "median": med, "worst": worst}
                        for k, n, med, worst in residual_summary(doc)}}


def rank_speed_spread(raw: dict) -> float | None:
    """How unalike the ranks ran: per compute case (:data:`COMPUTE_KINDS`), the slowest
    rank's time over the fastest's, all ranks having run it at the same time; the median over
    the cases. None with one rank. The fit takes each case's median over the ranks, but a
    synchronous job waits for its slowest rank at every collective, so where this is well
    above 1 (a VM whose vCPUs share physical cores with other guests, cores at different
    clocks) a job runs slower than the fit says, by up to the spread, and by how much depends
    on which cores its ranks get and when."""
    per_rank = raw.get("compute") or []
    if len(per_rank) < 2:
        return None
    ratios = []
    for kind in COMPUTE_KINDS:
        for cases in zip(*(r.get(kind, []) for r in per_rank)):
            times = [c["time_s"] for c in cases]
            if min(times) > 0:
                ratios.append(max(times) / min(times))
    return statistics.median(ratios) if ratios else None


def pass_spread(raw: dict) -> float | None:
    """How much the machine's speed moved between the passes over the compute cases
    (``calibrate_job.merge_passes``): per compute case (:data:`COMPUTE_KINDS`) and rank, its
    slowest pass over its fastest; the median over them. The fit keeps each case's median
    pass, so this is the spread it was spared, not an error it carries. None without passes
    (one pass, or a file written before them)."""
    ratios = []
    for per_rank in raw.get("compute") or []:
        for kind in COMPUTE_KINDS:
            for case in per_rank.get(kind, []):
                times = case.get("pass_times_s") or []
                if len(times) > 1 and min(times) > 0:
                    ratios.append(max(times) / min(times))
    return statistics.median(ratios) if ratios else None


def probe_times(conditions: dict, key: str = "speed_probe_s"
                ) -> tuple[list[float], list[float]] | None:
    """Each rank's probe seconds before and after (``key`` of a calibration's ``conditions``
    or a run record's ``environment``: ``speed_probe_s``, the compute probe, or
    ``link_probe_s``, the link probe; :mod:`planner.run.speed_probe`), or None where there are
    none (files written before the probe)."""
    probe = conditions.get(key)
    if not isinstance(probe, dict):
        return None
    before, after = ([float(v) for v in probe.get(when) or [] if isinstance(v, (int, float))]
                     for when in ("before", "after"))
    return (before, after) if before or after else None


def speed_drift(conditions: dict, key: str = "speed_probe_s"
                ) -> tuple[float, int, float, float] | None:
    """How far the machine's speed moved while calibrate measured: per rank, its probe
    (``key``: the compute probe, or ``link_probe_s``) at the end over the one at the start
    (:func:`probe_times`), either way up (a ratio of at least 1); the rank that moved most as
    (ratio, rank, start s, end s). None without the probe."""
    times = probe_times(conditions, key)
    if times is None:
        return None
    pairs = [(rank, a, b) for rank, (a, b) in enumerate(zip(*times)) if a > 0 and b > 0]
    if not pairs:
        return None
    rank, a, b = max(pairs, key=lambda p: max(p[1] / p[2], p[2] / p[1]))
    return max(a / b, b / a), rank, a, b


def oversubscribed(backend: str, nproc: int, threads: int, cores: int) -> str | None:
    """Why ``nproc`` processes of ``threads`` threads would not measure this machine, or None:
    on CPU (gloo) more threads than cores time-share them, so every benchmark measures the
    contention (a GEMM fit's median residual went from 6% to 139% with 4 processes on 2
    cores)."""
    if backend == "gloo" and nproc * threads > cores:
        return (f"{nproc} processes x {threads} thread(s) on {cores} core(s): they time-share "
                "the cores, so the timings measure contention, not the machine (use --nproc "
                f"{max(1, cores // max(threads, 1))} or fewer)")
    return None


def calibration_warnings(doc: dict) -> list[str]:
    """What makes this calibration untrustworthy: more processes than cores, a busy machine
    (other processes kept more than :data:`LOAD_WARN` of the cores busy while measuring:
    :class:`OtherLoad`), fits whose median residual is above :data:`RESIDUAL_WARN`, ranks
    unalike (:func:`rank_speed_spread`) and a machine whose compute or link speed moved between
    the start and the end (:func:`speed_drift` of either probe above
    :data:`SPEED_DRIFT_WARN`)."""
    cond = doc.get("conditions", {})
    out = []
    why = oversubscribed(cond.get("backend", "gloo"), cond.get("processes", 1),
                         cond.get("threads", 1), cond.get("cores", 1))
    if why:
        out.append(why)
    other, cores = cond.get("other_load_cores"), cond.get("cores")
    if other is not None and cores and other > LOAD_WARN * cores:
        out.append(f"other processes kept {other:.2f} of {cores} cores busy while measuring: "
                   "they shared the cores, and the timings with them")
    quality = fit_quality(doc)
    for kind, q in quality["by_kind"].items():
        if kind in COMPUTE_KINDS and q["median"] > RESIDUAL_WARN:
            out.append(f"{kind}: median residual {q['median']:.0%} (worst {q['worst']:.0%}) over "
                       f"{q['cases']} cases, above {RESIDUAL_WARN:.0%}: the cost model's "
                       f"{kind} formula does not describe these timings")
    spread = quality["rank_speed_spread"]
    if spread is not None and spread > RANK_SPREAD_WARN:
        out.append(f"the ranks ran the same kernels at different speeds: the slowest took "
                   f"{spread:.2f}x the fastest's time (median over the compute cases). The fit "
                   "takes their median, but a synchronous job waits for its slowest rank, so "
                   "jobs can run up to that much slower than predicted, depending on the "
                   "cores they get")
    drift = speed_drift(cond)
    if drift is not None and drift[0] > SPEED_DRIFT_WARN:
        ratio, rank, start, end = drift
        out.append(f"the machine's speed moved while measuring: rank {rank} ran the speed "
                   f"probe (planner.run.speed_probe) in {1e3 * start:.2f} ms at the start and "
                   f"{1e3 * end:.2f} ms at the end ({ratio:.2f}x apart), so the timings in "
                   "between describe a machine that changed; calibrate again when it is steadier")
    link = speed_drift(cond, "link_probe_s")
    if link is not None and link[0] > SPEED_DRIFT_WARN:
        ratio, rank, start, end = link
        out.append(f"the machine's collectives changed speed while measuring: rank {rank} ran "
                   "the link probe (one all-reduce over every rank, planner.run.speed_probe) in "
                   f"{1e3 * start:.2f} ms at the start and "
                   f"{1e3 * end:.2f} ms at the end ({ratio:.2f}x apart), so the collective "
                   "tables describe a link that changed; calibrate again when it is steadier")
    comm = quality["collectives_median_abs_residual"]
    if comm is not None and comm > RESIDUAL_WARN:
        out.append(f"collectives: median residual {comm:.0%} over "
                   f"{quality['collective_cases']} cases, above {RESIDUAL_WARN:.0%}")
    return out


def residual_summary(doc: dict) -> list[tuple[str, int, float, float]]:
    """Per benchmark kind, the training fit's then the serving fit's: (kind, cases, median
    |error|, worst |error|)."""
    by_kind: dict[str, list[float]] = {}
    for r in doc["fit"]["residuals"] + doc["fit"].get("serving", {}).get("residuals", []):
        by_kind.setdefault(r["kind"], []).append(abs(r["error"]))
    out = []
    for kind, errs in by_kind.items():
        errs = sorted(errs)
        out.append((kind, len(errs), errs[len(errs) // 2], errs[-1]))
    return out
