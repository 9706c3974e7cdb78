"""`planner solve` at 100K GPUs: wall time, peak memory and plan file size of the whole command
(issue 21: <= 10 s wall, <= 1 GiB RSS on 2 cores, plan files <= 5 MB).

    python benchmarks/scale_solve.py [--cases llama-405b deepseek-v3] [--repeat 1] [--write-doc]

Each case runs ``planner solve ... --out <tmp>/plan.json`` as a fresh process under
``/usr/bin/time -f "%e %M"`` (elapsed seconds, peak resident set in KiB; without
``/usr/bin/time``, a wrapper process reads ``resource.getrusage(RUSAGE_CHILDREN)``), so the
numbers include the interpreter start, imports, the search, plan building, validation and
writing the file. Cases:

* Llama-3.1-405B on 16,384 nodes of 8 H100 (131,072 GPUs), default workload;
* DeepSeek-V3 on 12,500 nodes of 8 H800 (100,000 GPUs), global batch 16,000 (the default
  batch of 1,024 sequences has no consistent configuration on 100,000 GPUs).

Writes ``benchmarks/results/scale_solve.json``; ``--write-doc`` also rewrites its section of
``docs/benchmarks.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from doc_tables import update_section  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "scale_solve.json"
TARGETS = {"wall_s": 10.0, "max_rss_mib": 1024.0, "plan_mb": 5.0}  # issue 21
CASES = {
    "llama-405b": ("llama-3.1-405b", "H100", 16384, []),
    "deepseek-v3": ("deepseek-v3", "H800", 12500, ["--global-batch", "16000"]),
}
# Before plan schema 3 (commit 172c6a3: explicit per-rank table and group lists), measured
# with the same command on the same 2-core machine: Llama-3.1-405B on 131,072 H100, two runs.
BEFORE = {"commit": "172c6a3", "case": "llama-405b", "wall_s": [18.86, 20.29],
          "max_rss_mib": 1031.7, "plan_mb": 34.20,
          "note": "two runs in the session of the numbers above"}


def solve_command(model: str, gpu: str, nodes: int, extra: list[str], out: Path) -> list[str]:
    """``planner solve`` of one case, run from this checkout."""
    return [sys.executable, "-m", "planner.cli.app", "solve", "--model", model, "--gpu", gpu,
            "--nodes", str(nodes), *extra, "--out", str(out)]


def measured(command: list[str], timeout_s: float) -> dict:
    """Exit code, wall seconds and peak RSS (MiB) of ``command`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as stats:
        if Path("/usr/bin/time").exists():
            wrapped = ["/usr/bin/time", "-o", stats.name, "-f", "%e %M", *command]
        else:  # the children's peak RSS, read by a wrapper that runs only this command
            wrapped = [sys.executable, "-c",
                       "import resource, subprocess, sys, time; t = time.perf_counter(); "
                       "rc = subprocess.run(sys.argv[2:]).returncode; "
                       "open(sys.argv[1], 'w').write(f'{time.perf_counter() - t} '"
                       "f'{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}'); "
                       "sys.exit(rc)", stats.name, *command]
        try:
            run = subprocess.run(wrapped, capture_output=True, text=True, cwd=ROOT, env=env,
                                 timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"exit_code": None, "wall_s": timeout_s, "max_rss_mib": None,
                    "error": f"timed out after {timeout_s:.0f} s"}
        wall_s, rss_kib = stats.read().split()[-2:]
    out = {"exit_code": run.returncode, "wall_s": float(wall_s),
           "max_rss_mib": int(rss_kib) / 1024}
    if run.returncode:
        out["error"] = (run.stderr.strip().splitlines() or [""])[-1]
    return out


def run_case(name: str, repeat: int, timeout_s: float) -> dict:
    model, gpu, nodes, extra = CASES[name]
    runs, best = [], None
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "plan.json"
        for _ in range(repeat):
            plan.unlink(missing_ok=True)
            runs.append(measured(solve_command(model, gpu, nodes, extra, plan), timeout_s))
            print(f"{name}: {runs[-1]}", file=sys.stderr)
        size = plan.stat().st_size if plan.exists() else None
        if plan.exists():
            data = json.loads(plan.read_text())
            pool = data["pools"][0]
            best = {"degrees": pool["degrees"], "gpus": sum(n["gpus"] for n in pool["nodes"]),
                    "schedule": data["training"]["schedule"],
                    "exceptions": len(pool["ranks"]["exceptions"])}
    ok = [r for r in runs if r["exit_code"] == 0]
    row = {"case": name, "model": model, "gpu": gpu, "nodes": nodes, "extra_args": extra,
           "command": "planner " + " ".join(solve_command(model, gpu, nodes, extra,
                                                          Path("<tmp>"))[3:]),
           "runs": runs, "plan_mb": None if size is None else size / 1e6, "best": best}
    if ok:
        row["wall_s"] = statistics.median(r["wall_s"] for r in ok)
        row["max_rss_mib"] = max(r["max_rss_mib"] for r in ok)
        row["meets"] = {k: row[k] is not None and row[k] <= v for k, v in TARGETS.items()}
    return row


def _cell(row: dict, key: str, fmt: str) -> str:
    value = row.get(key)
    if value is None:
        return "-"
    mark = "" if row.get("meets", {}).get(key) else " (over)"
    return f"{value:{fmt}}{mark}"


def doc_lines(out: dict) -> list[str]:
    rows = out["cases"]
    lines = ["## `planner solve` at 100K GPUs (`benchmarks/scale_solve.py`)", "",
             "| case | GPUs | wall (s) | max RSS (MiB) | plan file (MB) | best plan |",
             "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        best = r["best"]
        what = ("-" if best is None else
                " ".join(f"{k}={best['degrees'][k]}" for k in ("tp", "cp", "pp", "dp", "ep", "etp")
                         if best["degrees"].get(k) not in (None, 1))
                + f" {best['schedule']}")
        if r["runs"] and r["runs"][-1].get("error"):
            what = f"failed: {r['runs'][-1]['error']}"
        gpus = "-" if best is None else f"{best['gpus']:,}"
        lines.append(f"| {r['command']} | {gpus} | {_cell(r, 'wall_s', '.1f')} | "
                     f"{_cell(r, 'max_rss_mib', ',.0f')} | {_cell(r, 'plan_mb', '.2f')} | "
                     f"{what} |")
    b = out["before"]
    lines += ["", f"Targets (issue 21): wall <= {TARGETS['wall_s']:.0f} s, max RSS <= 1 GiB "
              f"({TARGETS['max_rss_mib']:.0f} MiB), plan file <= {TARGETS['plan_mb']:.0f} MB; "
              "(over) marks a miss. Each number is the whole command in a fresh process "
              "(`/usr/bin/time -f \"%e %M\"`: interpreter start, imports, search, plan building, "
              "validation, writing the file); wall is the median of the runs. Plan files store "
              "each pool's rank table as the rank-order rule plus exceptions (schema 3) and no "
              "process groups. Before (commit "
              f"`{b['commit']}`, explicit per-rank table and groups), the Llama case took "
              f"{b['wall_s'][0]}-{b['wall_s'][1]} s, {b['max_rss_mib']:,.0f} MiB and wrote "
              f"{b['plan_mb']} MB ({b['note']}). Measured {out['date']} on {out['machine']}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--repeat", type=int, default=1, help="runs per case (wall: the median)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    ap.add_argument("--out", type=Path, default=RESULT)
    ap.add_argument("--write-doc", action="store_true",
                    help="rewrite this benchmark's section of docs/benchmarks.md")
    args = ap.parse_args(argv)
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
               f"{platform.python_version()}")
    rows = [run_case(name, args.repeat, args.timeout) for name in args.cases]
    out = {"targets": TARGETS, "machine": machine, "date": time.strftime("%Y-%m-%d"),
           "before": BEFORE, "cases": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    if args.write_doc:
        update_section("scale_solve", doc_lines(out))
    print("\n".join(doc_lines(out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
