"""Time ``planner estimate`` for Llama-3.1-405B on 16,384 H100 (target: under 1 s).

    python benchmarks/estimate_speed.py

Measures the cost-model call in process (median of 5) and the whole command as a user runs
it (``planner estimate ... --format json`` in a fresh process, median of 3, interpreter start
and imports included). Writes ``benchmarks/results/estimate_speed.json`` and refreshes the
table in ``docs/benchmarks.md``.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from doc_tables import update_section  # noqa: E402
from cost_models.parallel import Degrees  # noqa: E402
from cost_models.training.config import TrainingConfig, Workload  # noqa: E402
from cost_models.profile import default_profile  # noqa: E402
from cost_models.training.step import estimate  # noqa: E402
from planner.inputs.models import load_model  # noqa: E402
from topologies.standard import homogeneous_cluster  # noqa: E402

ARGS = ["--model", "llama-3.1-405b", "--gpu", "H100", "--nodes", "2048", "--tp", "8",
        "--pp", "16", "--seq-len", "8192", "--global-batch", "2048", "--format", "json"]
RESULT = ROOT / "benchmarks" / "results" / "estimate_speed.json"


def time_library(runs: int = 5) -> float:
    model = load_model("llama-3.1-405b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 2048)
    cfg = TrainingConfig(degrees=Degrees(tp=8, pp=16, dp=128), sequence_parallel=True)
    work, prof = Workload(8192, 2048), default_profile("H100-SXM5-80GB")
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        estimate(model, cluster, work, cfg, prof)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_cli(runs: int = 3) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "planner.cli.app", "estimate", *ARGS]
    times, out = [], {}
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        times.append(time.perf_counter() - t0)
        out = json.loads(proc.stdout)
    return statistics.median(times), out


def main() -> None:
    lib_s = time_library()
    cli_s, out = time_cli()
    result = {"case": "llama-3.1-405b on 16384 H100-SXM5-80GB, tp8 pp16 dp128, seq 8192, "
                      "global batch 2048", "library_estimate_s": lib_s, "cli_wall_s": cli_s,
              "target_s": 1.0, "step_time_s": out["step_time_s"], "mfu": out["mfu"],
              "machine": f"{platform.processor() or platform.machine()}, "
                         f"{os.cpu_count()} cores, Python {platform.python_version()}",
              "date": time.strftime("%Y-%m-%d")}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    update_section("estimate_speed", [
        "## `planner estimate` speed (`benchmarks/estimate_speed.py`)", "",
        "| case | cost model in process (s) | whole command (s) | target (s) |",
        "|---|---:|---:|---:|",
        f"| {result['case']} | {lib_s:.3f} | {cli_s:.2f} | 1.0 |", "",
        f"Measured {result['date']} on {result['machine']}. The whole command includes the "
        "interpreter start and imports."])
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
