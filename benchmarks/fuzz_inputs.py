"""Fuzz campaign over planner's file readers through the command line (issue 21).

    python benchmarks/fuzz_inputs.py                 # 5,000 inputs over all readers
    python benchmarks/fuzz_inputs.py --examples 20000 --jobs 4 --seed 7

Generates malformed and edge-case documents with the hypothesis strategies of
``tests/fuzz_cases.py`` (the ones ``tests/test_fuzz_inputs.py`` runs with a small CI budget):
cluster specs (``planner topo show``), model files (``planner estimate --model``), expert
loads (``planner experts plan`` / ``experts eval``), expert placements (``experts eval``) and
plans (``planner explain``, ``compare``, ``emit``). Every input runs in its own forked process
(the parent has imported planner once), under a wall-clock limit (``--time-limit``, 60 s) and
an address-space limit (``--memory-limit-gib``) so that nothing can eat the machine; the
parent reads each child's peak RSS from ``wait4``.

Counts per reader: exit codes, tracebacks, internal errors (exit 1), runs over the time limit,
processes killed by a signal, runs whose peak RSS passed 2 GiB, partial files (outputs left by
a failed command, staged temporary files left by any), and error outputs of more than one
line. A clean input exits 0, 2 (bad input) or 3 (infeasible) with at most one line of error.
Writes ``benchmarks/results/fuzz_inputs.json``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import fuzz_cases  # noqa: E402
from fuzz_cases import CASES, READERS, fresh_folder, generated_seeds, run_case  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "fuzz_inputs.json"
RSS_LIMIT_MIB = 2048  # acceptance of issue 21: no run over 2 GiB
KILL_GRACE_S = 30.0  # beyond the child's own alarm, the parent kills it


def generate(reader: str, count: int, rng_seed: int) -> list:
    """``count`` cases of ``reader`` from its hypothesis strategy (generation only)."""
    cases: list = []

    @seed(rng_seed)
    @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(CASES[reader]())
    def collect(case) -> None:
        cases.append(case)

    collect()
    return cases


def _child(case, write_fd: int, time_limit_s: float, memory_limit_gib: float) -> None:
    """Run one case in this forked process and send its outcome to the parent."""
    limit = int(memory_limit_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        with fresh_folder() as folder:
            outcome = run_case(case, Path(folder), time_limit_s)
            record = {"exit_code": outcome.exit_code, "traceback": outcome.traceback,
                      "partial": outcome.partial[:10], "seconds": outcome.seconds,
                      "clean": outcome.clean, "one_line": outcome.exit_code == 0 or
                      outcome.output.strip().count("\n") == 0,
                      "output": outcome.output[-600:].replace(folder, "{dir}")}
    except BaseException as err:  # noqa: BLE001  (the harness itself failed on this case)
        record = {"exit_code": None, "harness_error": f"{type(err).__name__}: {err}"[:300]}
    data = json.dumps(record).encode()
    with os.fdopen(write_fd, "wb") as pipe:
        pipe.write(data)
    os._exit(0)


def run_all(cases: list, jobs: int, time_limit_s: float, memory_limit_gib: float) -> list[dict]:
    """Every case in a forked child, ``jobs`` at a time; one record per case, in order."""
    records: list[dict | None] = [None] * len(cases)
    running: dict[int, tuple[int, int, float]] = {}  # pid -> (case index, read fd, start)
    buffers: dict[int, bytearray] = {}
    next_index = 0
    done = 0
    while done < len(cases):
        while next_index < len(cases) and len(running) < jobs:
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child never returns into this loop
                try:
                    os.close(read_fd)
                    _child(cases[next_index], write_fd, time_limit_s, memory_limit_gib)
                finally:
                    os._exit(70)
            os.close(write_fd)
            os.set_blocking(read_fd, False)
            running[pid] = (next_index, read_fd, time.monotonic())
            buffers[pid] = bytearray()
            next_index += 1
        for pid, (index, read_fd, start) in list(running.items()):
            try:
                while chunk := os.read(read_fd, 65536):
                    buffers[pid] += chunk
            except BlockingIOError:
                pass
            if time.monotonic() - start > time_limit_s + KILL_GRACE_S:
                os.kill(pid, signal.SIGKILL)
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            pid = 0
        if pid == 0:
            time.sleep(0.005)
            continue
        index, read_fd, start = running.pop(pid)
        try:
            while chunk := os.read(read_fd, 65536):
                buffers[pid] += chunk
        except BlockingIOError:
            pass
        os.close(read_fd)
        wall = time.monotonic() - start
        data = bytes(buffers.pop(pid))
        record = json.loads(data) if data else {"exit_code": None}
        record.update(wall_s=wall, peak_rss_mib=usage.ru_maxrss / 1024,
                      signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None)
        if record["signal"] is not None and record["signal"] != signal.SIGKILL:
            record["crash"] = True
        records[index] = record
        done += 1
        if done % 250 == 0:
            print(f"  {done}/{len(cases)} inputs", file=sys.stderr, flush=True)
    return records  # type: ignore[return-value]


def summarize(reader_cases: dict[str, list], records: dict[str, list[dict]]) -> dict:
    per_reader, failures = {}, []
    for reader, recs in records.items():
        exits = Counter("over time" if r.get("exit_code") is None and r.get("signal") is None
                        and "harness_error" not in r else
                        f"signal {r['signal']}" if r.get("signal") is not None else
                        str(r.get("exit_code")) for r in recs)
        per_reader[reader] = {
            "inputs": len(recs),
            "exit_codes": dict(sorted(exits.items())),
            "tracebacks": sum(bool(r.get("traceback")) for r in recs),
            "internal_errors_exit_1": sum(r.get("exit_code") == 1 for r in recs),
            "over_time_limit": sum(r.get("exit_code") is None and r.get("signal") is None
                                   and "harness_error" not in r for r in recs)
            + sum(r.get("signal") == signal.SIGKILL for r in recs),
            "crashed_by_signal": sum(bool(r.get("crash")) for r in recs),
            "over_2_gib_rss": sum(r["peak_rss_mib"] > RSS_LIMIT_MIB for r in recs),
            "partial_files": sum(bool(r.get("partial")) for r in recs),
            "multi_line_errors": sum(r.get("one_line") is False for r in recs),
            "harness_errors": sum("harness_error" in r for r in recs),
            "peak_rss_mib_max": round(max(r["peak_rss_mib"] for r in recs), 1),
            "wall_s_max": round(max(r["wall_s"] for r in recs), 3),
            "wall_s_mean": round(sum(r["wall_s"] for r in recs) / len(recs), 4),
        }
        for case, r in zip(reader_cases[reader], recs):
            if not r.get("clean") or r["peak_rss_mib"] > RSS_LIMIT_MIB:
                failures.append({"reader": reader, "case": case.describe()[:400],
                                 **{k: r.get(k) for k in ("exit_code", "signal", "traceback",
                                                          "partial", "wall_s", "peak_rss_mib",
                                                          "output", "harness_error")}})
    keys = ("inputs", "tracebacks", "internal_errors_exit_1", "over_time_limit",
            "crashed_by_signal", "over_2_gib_rss", "partial_files", "multi_line_errors",
            "harness_errors")
    total = {k: sum(v[k] for v in per_reader.values()) for k in keys}
    total["exit_codes"] = dict(sorted(sum((Counter(v["exit_codes"]) for v in per_reader.values()),
                                          Counter()).items()))
    total["peak_rss_mib_max"] = max(v["peak_rss_mib_max"] for v in per_reader.values())
    total["wall_s_max"] = max(v["wall_s_max"] for v in per_reader.values())
    return {"total": total, "readers": per_reader, "failures": failures[:50],
            "failures_total": len(failures)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000, help="inputs in all (split evenly "
                        "over the readers)")
    parser.add_argument("--readers", nargs="+", default=list(READERS), choices=READERS)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per input")
    parser.add_argument("--memory-limit-gib", type=float, default=4.0,
                        help="address-space limit of each input's process")
    parser.add_argument("--probe-limits", action="store_true", help="also large but "
                        "representable counts (a billion layers, 2**31 nodes): the input limits "
                        "of issue 21")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    fuzz_cases.PROBE_LIMITS = args.probe_limits

    start = time.perf_counter()
    generated_seeds()  # the seed plan and placement, made once before forking
    per_reader = -(-args.examples // len(args.readers))
    reader_cases = {}
    for i, reader in enumerate(args.readers):
        t0 = time.perf_counter()
        reader_cases[reader] = generate(reader, per_reader, args.seed + i)
        print(f"{reader}: {len(reader_cases[reader])} inputs generated in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    os.environ.setdefault("PLANNER_FUZZ_TMP", tempfile.gettempdir())
    records = {}
    for reader, cases in reader_cases.items():
        t0 = time.perf_counter()
        records[reader] = run_all(cases, args.jobs, args.time_limit, args.memory_limit_gib)
        print(f"{reader}: ran in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    summary = summarize(reader_cases, records)
    result = {
        "what": "malformed inputs through planner's readers (tests/fuzz_cases.py)",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": datetime.date.today().isoformat(),
        "seed": args.seed, "probe_limits": args.probe_limits, "jobs": args.jobs, "time_limit_s": args.time_limit,
        "memory_limit_gib": args.memory_limit_gib, "rss_limit_mib": RSS_LIMIT_MIB,
        "wall_s": round(time.perf_counter() - start, 1),
        **summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    total = summary["total"]
    print(f"{total['inputs']} inputs: exit codes {total['exit_codes']}; tracebacks "
          f"{total['tracebacks']}, internal errors {total['internal_errors_exit_1']}, over "
          f"{args.time_limit:g} s {total['over_time_limit']}, crashes {total['crashed_by_signal']}, "
          f"over 2 GiB {total['over_2_gib_rss']}, partial files {total['partial_files']}, "
          f"multi-line errors {total['multi_line_errors']}; peak RSS "
          f"{total['peak_rss_mib_max']:.0f} MiB; wrote {args.out}")


if __name__ == "__main__":
    main()
