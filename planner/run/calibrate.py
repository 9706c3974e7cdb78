"""``planner calibrate``: measure this machine and fit the cost models' profile to it.

1. torchrun starts one process per device (``--nproc``; on CPU each gets ``cores / nproc``
   threads) running :mod:`planner.run.calibrate_job`: GEMMs by size, causal attention forward +
   backward, a small transformer layer, memory bandwidth, a decode step's skinny GEMMs and
   decode attention, and every collective by message and group size. Its progress lines drive
   a progress bar; the whole process group is ended on any failure or Ctrl-C
   (:func:`planner.run.launch.kill_group`).
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
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.errors import PlannerError
from planner.files import write_atomic

__all__ = ["SCHEMA", "BenchmarkError", "CalibrateOptions", "calibration_document",
           "default_nproc", "element_bytes", "link_tier", "machine_cluster", "measure",
           "residual_summary", "run_benchmarks", "write_calibration"]

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
    return max(2, os.cpu_count() or 2)


def run_benchmarks(opts: CalibrateOptions, raw_path: Path, progress=None) -> None:
    """Run :mod:`planner.run.calibrate_job` under torchrun; ``progress(done, total, label)``."""
    from planner.run.launch import kill_group

    threads = max(1, (os.cpu_count() or 1) // opts.nproc) if opts.backend == "gloo" else 1
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={opts.nproc}"]
    if opts.master_port is not None:
        cmd.append(f"--master-port={opts.master_port}")
    cmd += ["-m", "planner.run.calibrate_job", "--out", str(raw_path), "--backend", opts.backend]
    if opts.quick:
        cmd.append("--quick")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env)
    log: list[str] = []
    try:
        for line in proc.stdout:
            if line.startswith("@@progress "):
                _, done, total, label = line.rstrip("\n").split(" ", 3)
                if progress is not None:
                    progress(int(done), int(total), label)
            else:
                log.append(line)
        code = proc.wait()
    finally:
        kill_group(proc.pid)
        if proc.poll() is None:
            proc.wait()
    if code != 0 or not raw_path.is_file():
        tail = "".join(log[-15:]).strip()
        raise BenchmarkError(f"the calibration benchmarks failed (torchrun exit {code}); last "
                             f"output: {tail or '(none)'}")


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
        run_benchmarks(opts, raw_path, progress)
        return json.loads(raw_path.read_text())


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
    elif raw["backend"] == "gloo":
        group["intra_bw_GBps"] = 1.0  # one process: no collective was measured
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
        "profile": profile,
    }
    if serving is not None:
        doc["serving"] = dict(serving.profile_fields())
    doc["cluster"] = machine_cluster(fit, raw, nproc)
    doc["fit"] = {"peak_flops": fit.peak_flops,
                  "memory_bw_bytes_per_s": fit.memory_bw_bytes_per_s,
                  "link": asdict(fit.link), "residuals": _residuals(fit.residuals)}
    if serving is not None:
        doc["fit"]["serving"] = {
            "kv_read_bytes_per_s": serving.kv_read_bytes_per_s,
            "kv_read_efficiency": serving.kv_read_efficiency,
            "weight_read_bytes_per_s": serving.weight_read_bytes_per_s,
            "weight_read_efficiency": serving.weight_read_efficiency,
            "residuals": _residuals(serving.residuals)}
    doc["raw"] = raw
    return doc


def write_calibration(doc: dict, out: Path, cluster_out: Path) -> None:
    """Write the calibration document to ``out`` and its cluster as YAML to ``cluster_out``
    (each atomically)."""
    write_atomic(cluster_out, "# Written by planner calibrate: this machine as a cluster file.\n"
                 + yaml.safe_dump(doc["cluster"], sort_keys=False))
    write_atomic(out, json.dumps(doc, indent=1) + "\n")


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
