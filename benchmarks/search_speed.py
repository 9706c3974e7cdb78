"""Full-search speed: Llama-3.1-405B on 16,384 H100 and DeepSeek-V3 on 2,048 H800 (target
<= 10 s each on 2 cores).

    python benchmarks/search_speed.py

Times ``planner.training.solve.solve`` in process: the search over every consistent degree tuple and
its options, then placement and the pipeline-partition DP of the top 10, plan building and
validation (median of 3 runs), and records what the search did: degree tuples seen, tuples
pruned by the memory lower bound, options estimated, options pruned by memory. Also times the
whole ``planner solve`` command once in a fresh process (imports included). Writes
``benchmarks/results/search_speed.json`` and a table in ``docs/benchmarks.md``.

Workloads are the published ones: Llama 3 405B trained with 16M-token batches of 8,192-token
sequences (Llama 3 paper, table 4); DeepSeek-V3 with 15,360 sequences of 4,096 tokens
(DeepSeek-V3 technical report, sec. 4.2).
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
from cost_models.training.config import Workload  # noqa: E402
from cost_models.profile import default_profile  # noqa: E402
from planner.inputs.models import load_model  # noqa: E402
from planner.training.solve import solve  # noqa: E402
from planner.training.why import degrees_text  # noqa: E402
from topologies.standard import homogeneous_cluster  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "search_speed.json"
CASES = (
    ("llama-3.1-405b", "H100-SXM5-80GB", 2048, Workload(8192, 2048)),
    ("deepseek-v3", "H800-SXM5-80GB", 256, Workload(4096, 15360)),
    # long context (no target): SlimPipe slicing multiplies the options of pipelined tuples
    ("qwen3-235b-a22b", "H100-SXM5-80GB", 32, Workload(32768, 256)),
)


def run_case(model_name: str, gpu: str, nodes: int, workload: Workload, runs: int = 3) -> dict:
    model, cluster = load_model(model_name), homogeneous_cluster(gpu, nodes)
    prof = default_profile(gpu)
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = solve(model, cluster, workload, prof, top_k=10)
        times.append(time.perf_counter() - t0)
    cli = [sys.executable, "-m", "planner.cli.app", "solve", "--model", model_name, "--gpu", gpu,
           "--nodes", str(nodes), "--seq-len", str(workload.seq_len), "--global-batch",
           str(workload.global_batch), "--format", "json"]
    t0 = time.perf_counter()
    subprocess.run(cli, capture_output=True, check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    cli_s = time.perf_counter() - t0
    s, best = result.stats, result.estimates[0]
    return {"model": model_name, "gpus": cluster.num_gpus, "gpu": gpu,
            "seq_len": workload.seq_len, "global_batch": workload.global_batch,
            "solve_s_median": statistics.median(times), "solve_s_runs": times,
            "search_s": s.seconds, "cli_wall_s": cli_s, "degree_tuples": s.degree_tuples,
            "tuples_pruned_memory": s.tuples_pruned_memory,
            "tuples_pruned_bound": s.tuples_pruned_bound,
            "options_estimated": s.options_estimated,
            "options_pruned_memory": s.options_pruned_memory,
            "best": degrees_text(best), "best_schedule": best.config.schedule,
            "best_mfu": best.mfu, "best_step_s": best.step_time_s}


def main() -> None:
    rows = [run_case(*case) for case in CASES]
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
               f"{platform.python_version()}")
    out = {"target_s": 10.0, "machine": machine, "date": time.strftime("%Y-%m-%d"), "cases": rows}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(out, indent=1) + "\n")
    update_section("search_speed", [
        "## `planner solve` search speed (`benchmarks/search_speed.py`)", "",
        "| case | solve, median of 3 (s) | whole command (s) | degree tuples | pruned by memory "
        "bound | pruned by step-time bound | options estimated | options pruned by memory | "
        "best plan |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *[f"| {r['model']} on {r['gpus']:,} {r['gpu']}, {r['global_batch']} x {r['seq_len']} | "
          f"{r['solve_s_median']:.1f} | {r['cli_wall_s']:.1f} | {r['degree_tuples']} | "
          f"{r['tuples_pruned_memory']} | {r['tuples_pruned_bound']} | "
          f"{r['options_estimated']:,} | "
          f"{r['options_pruned_memory']:,} | {r['best']} {r['best_schedule']}, "
          f"{r['best_mfu']:.0%} MFU |" for r in rows], "",
        "A tuple is pruned by the step-time bound when even its compute alone (no "
        "communication, recompute or bubble; best micro-batch and layer split) is slower than "
        "the 10th best plan found so far; tuples are visited in order of that bound. "
        f"Target: 10 s each for the first two. Measured {out['date']} on {machine}. 'solve' is the search, "
        "placement and pipeline-partition DP of the top 10, plan building and validation; the "
        "whole command adds interpreter start, imports and JSON output."])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
