"""Predicted against measured decode step time of the AFD reference job on this machine
(issue 19: "after `planner calibrate`, predicted step time within 15% of measured for at least
three plans with different m and ratios, with the same ranking").

Commands it runs, in order (all through the ``planner`` CLI, as a user would):

1. ``planner calibrate --out benchmarks/results/afd-calibration-local.json`` (one gloo process
   per core), unless ``--calibration FILE`` names one;
2. for each plan below, once: ``planner serve --mode afd --model M --cluster C --isl 512
   --osl 64 --tpot-ms 200 --out PLAN`` (the model and cluster pick the attention:FFN ratio;
   the script checks the plan has the ratio it is meant to have);
3. ``--repeats`` rounds (default 3), each running every plan once, in the same order:
   ``planner launch PLAN --record RUN --script-arg=--steps --script-arg=20
   --script-arg=--backend --script-arg=gloo [--script-arg=--micro-batches --script-arg=M]``, then ``planner check-run RUN
   --calibration CAL --format json``.

The plans are fixed here, before any measurement. Every run decodes the job's tiny model
(hidden 64, layers dense/MoE/MoE, 8 experts top-2, one shared expert, 8 sequences per
attention rank, 16-token prompts) for 20 steps; a run's step time is the median of steps
2..20 of the slowest rank (check-run's "step" row), a plan's measured step the median of its
runs, its spread (max - min) / median over its runs. The prediction uses the calibration only
(``planner.serving.afd_run_prediction``); it is the same for every run of a plan.

This machine is shared: before each run the script waits (up to ``--quiet-wait`` s) until the
CPUs are idle, and records the CPU time other processes took during the run
(``external_cpu_s``: the machine's busy time less this run's processes', from ``/proc/stat``
and ``getrusage``); a run during which they took more than ``--max-external-cpu`` CPU
seconds is run again, and so is the calibration when they took more than that per 5 s of it
or when calibrate warns that the machine's compute or link speed moved while it measured
(a rank's speed or link probe more than 1.15x apart at its start and end; ``--attempts`` at
most; every attempt is kept in the JSON, and a run that never got a quiet
machine is counted as disturbed). Plans with more processes than cores share them, each
pinned to one core round-robin (``planner.run.affinity``; the predictor runs a core's ranks
in turn: ``solvers.serving.pinned_cores``). Writes
``benchmarks/results/afd_executor_prediction.json`` and prints a markdown table, then a second
one: the same prediction without the terms of calibrate's ping-pong benchmark
(``Profile.p2p_latency_s``, ``Profile.resume_s``, ``Profile.late_read_s``; messages at
``send_recv``'s latency, no resume after a wait, no late read), which is what check-run
predicted before they were measured, and a third: the time-shared plans predicted as if their
ranks shared the cores evenly (processor sharing, before the job pinned them). Last, each run
of the plans with a core per process beside the machine's speed at that run (its speed probe
over the calibration's, ``planner.run.check_run.speed_ratio``). Usage:
``python benchmarks/afd_executor_prediction.py [--repeats N] [--calibration FILE] [--steps N]``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from planner.serving.afd_run_prediction import predict_afd_run  # noqa: E402
from planner.run.calibrate import drifted  # noqa: E402
from planner.run.check_run import link_ratio, speed_ratio  # noqa: E402
from doc_tables import update_section  # noqa: E402
from executor_prediction import Steadiest, discordant  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
WORK = RESULTS / "afd_executor_prediction_runs"
CAL = RESULTS / "afd-calibration-local.json"
OUT = RESULTS / "afd_executor_prediction.json"
HISTORY = RESULTS / "afd_executor_prediction_history.json"  # every run's summary, appended

# The job's model follows the plan's layer pattern, experts (capped 8), top-k (capped 2) and
# shared experts (capped 1); both models give the same job model. The big one's experts need
# two 80 GB GPUs, so its plan has two FFN GPUs.
MODELS = {
    "tiny-shared-moe": {
        "name": "tiny-shared-moe", "num_layers": 3, "hidden_size": 256, "num_heads": 4,
        "num_kv_heads": 4, "head_dim": 64, "ffn_hidden_size": 1024, "vocab_size": 1024,
        "moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden": 512,
                "num_shared_experts": 1, "shared_ffn_hidden": 512},
        "moe_layers": [False, True, True]},
    "big-expert-moe": {
        "name": "big-expert-moe", "num_layers": 3, "hidden_size": 8192, "num_heads": 64,
        "num_kv_heads": 8, "head_dim": 128, "ffn_hidden_size": 28672, "vocab_size": 32000,
        "moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden": 98304,
                "num_shared_experts": 1, "shared_ffn_hidden": 4096},
        "moe_layers": [False, True, True]},
}
CLUSTER = """name: {name}
node_groups:
  - {{name: n, count: {nodes}, gpu: H100, gpus_per_node: 1, fabric: nvswitch, nics: [{{count: 2, gbps: 400, transport: ib}}]}}
network:
  tiers: [{{name: leaf, nodes_per_switch: 8}}]
"""
# name -> (model, nodes of 1 H100, expected (attention, FFN) GPUs, --micro-batches or None)
PLANS = {
    "1A+1F, m1": ("tiny-shared-moe", 3, (1, 1), 1),
    "1A+1F, m2": ("tiny-shared-moe", 3, (1, 1), 2),
    "1A+1F, m4": ("tiny-shared-moe", 3, (1, 1), 4),
    "2A+1F, m2": ("tiny-shared-moe", 4, (2, 1), 2),
    "1A+2F, m2": ("big-expert-moe", 5, (1, 2), 2),
}


def planner(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "planner", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
    return proc


def _cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / tick, sum(fields) / tick


def wait_quiet(limit_s: float, threshold: float = 0.05) -> tuple[float, float]:
    """Wait until the machine's CPUs are busy less than ``threshold`` of a 2 s window (at most
    ``limit_s``); (the last window's busy fraction, seconds waited)."""
    start = time.monotonic()
    while True:
        b0, t0 = _cpu()
        time.sleep(2.0)
        b1, t1 = _cpu()
        busy = (b1 - b0) / max(t1 - t0, 1e-9)
        if busy < threshold or time.monotonic() - start > limit_s:
            return busy, time.monotonic() - start


def make_plan(name: str, model: str, nodes: int, want: tuple[int, int]) -> Path:
    slug = name.split(",")[0].replace("+", "")
    model_path = WORK / f"{model}.yaml"
    model_path.write_text(json.dumps(MODELS[model]))  # JSON is YAML
    cluster = WORK / f"cluster-{nodes}x1.yaml"
    cluster.write_text(CLUSTER.format(name=f"bench-{nodes}x1", nodes=nodes))
    plan = WORK / f"plan-{slug}.json"
    planner("serve", "--model", str(model_path), "--cluster", str(cluster), "--mode", "afd",
            "--isl", "512", "--osl", "64", "--tpot-ms", "200", "--out", str(plan))
    pools = {p["role"]: p for p in json.loads(plan.read_text())["serving"]["pools"]}
    got = tuple(pools[r]["workers"] * pools[r]["gpus_per_instance"] for r in ("attention", "ffn"))
    if got != want:
        raise SystemExit(f"{name}: planner serve made {got[0]} attention + {got[1]} FFN GPUs, "
                         f"not {want}: the plans are meant to be fixed")
    return plan


def run_once(name: str, plan: Path, m: int | None, steps: int, cal: Path, rep: int,
             quiet_wait: float) -> dict:
    slug = name.lower().replace(", ", "-").replace("+", "")
    record = WORK / f"{slug}-run{rep}.json"
    busy_before, waited = wait_quiet(quiet_wait)
    # gloo on the CPU, what the CPU calibration measured (the job picks NCCL where every process
    # has a GPU of its own)
    extra = ["--script-arg=--steps", f"--script-arg={steps}", "--script-arg=--backend",
             "--script-arg=gloo"]
    if m is not None:
        extra += ["--script-arg=--micro-batches", f"--script-arg={m}"]
    b0, _ = _cpu()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    planner("launch", str(plan), "--record", str(record), *extra)
    wall = time.monotonic() - start
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b1, _ = _cpu()
    ours = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    doc = json.loads(planner("check-run", str(record), "--calibration", str(cal),
                             "--format", "json").stdout)
    rows = {r["what"]: r for r in doc["rows"]}
    speed, link = probe_ratios(cal, record)
    return {"run": rep, "record": str(record.relative_to(ROOT)),
            "speed_ratio": speed, "link_ratio": link,
            "measured_step_s": rows["step"]["measured_s"],
            "predicted_step_s": rows["step"]["predicted_s"], "rows": doc["rows"],
            "prediction": doc["prediction"], "launch_wall_s": wall,
            "busy_before": busy_before, "waited_s": waited,
            "external_cpu_s": max(0.0, (b1 - b0) - ours), "own_cpu_s": ours}


def probe_ratios(cal: Path, record: Path) -> tuple[float | None, float | None]:
    """The run's speed probe and link probe over the calibration's
    (:func:`planner.run.check_run.speed_ratio`, :func:`~planner.run.check_run.link_ratio`):
    above 1 the machine computed (moved bytes) slower during the run than when it was
    calibrated. None where either file lacks the probe."""
    conditions = json.loads(cal.read_text()).get("conditions") or {}
    env = json.loads(record.read_text()).get("environment") or {}
    return speed_ratio(conditions, env), link_ratio(conditions, env)


def run_clean(name: str, plan: Path, m: int | None, steps: int, cal: Path, rep: int,
              quiet_wait: float, max_external: float, attempts: int) -> dict:
    """:func:`run_once` until other processes took at most ``max_external`` CPU seconds
    during the run (``attempts`` at most; the last attempt is kept whatever it met, marked
    ``disturbed``). Every attempt's figures are kept under ``attempts``."""
    tries = []
    for _ in range(attempts):
        res = run_once(name, plan, m, steps, cal, rep, quiet_wait)
        tries.append({k: res[k] for k in ("measured_step_s", "external_cpu_s", "waited_s")})
        if res["external_cpu_s"] <= max_external:
            break
    res["disturbed"] = res["external_cpu_s"] > max_external
    res["attempts"] = tries
    return res


def _ranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0] * len(values)
    for r, i in enumerate(order):
        out[i] = r + 1
    return out


# The ablation: the prediction without the ping-pong benchmark's two terms.
def without_pingpong(caldoc: dict) -> dict:
    """``caldoc`` with ``p2p_latency_s``, ``resume_s`` and ``late_read_s`` unset (0: not
    measured)."""
    return {**caldoc, "profile": {**caldoc["profile"], "p2p_latency_s": 0.0, "resume_s": 0.0,
                                  "late_read_s": 0.0}}


def posts_as_calls(caldoc: dict) -> dict:
    """``caldoc`` without ``p2p_post_s``: each ``isend`` / ``irecv`` priced as a torch call,
    as before calibrate timed them (2026-11-29)."""
    return {**caldoc, "profile": {**caldoc["profile"], "p2p_post_s": 0.0}}


def unchanged(doc: dict) -> dict:
    return doc


def unpinned(record: dict) -> dict:
    """``record`` without its ranks' cores: the prediction shares all the cores evenly among
    the processes that compute (``solvers.serving.shared_cores``, processor sharing), as it
    did before the job pinned ranks that outnumber the cores."""
    return {**record, "rank_timings": [{k: v for k, v in t.items() if k != "pinned_cores"}
                                       for t in record["rank_timings"]]}


# key -> (calibration change, record change): the default model without the ping-pong terms,
# and the time-shared plans predicted as if their ranks shared the cores evenly
VARIANTS = {"without_pingpong_terms": (without_pingpong, unchanged),
            "processor_sharing": (unchanged, unpinned),
            "posts_as_calls": (posts_as_calls, unchanged)}
VARIANT_NAMES = {"processor_sharing": "cores shared evenly (processor sharing)",
                 "posts_as_calls": "isend / irecv priced as a torch call"}


def summarise(name: str, runs: list[dict], caldoc: dict) -> dict:
    measured = [r["measured_step_s"] for r in runs]
    med = statistics.median(measured)
    pred = runs[0]["prediction"]
    record = json.loads((ROOT / runs[0]["record"]).read_text())
    variants = {}
    for key, (change, record_change) in VARIANTS.items():
        step = predict_afd_run(record_change(record), change(caldoc)).step_s
        variants[key] = {"predicted_step_s": step, "error": step / med - 1.0}
    rows = {}
    for what in [r["what"] for r in runs[0]["rows"]]:
        vals = [next(x for x in r["rows"] if x["what"] == what)["measured_s"] for r in runs]
        rows[what] = {"predicted_s": next(x for x in runs[0]["rows"]
                                          if x["what"] == what)["predicted_s"],
                      "measured_s": statistics.median(vals)}
    return {"plan": name, "runs": len(runs), "measured_step_s": med,
            "measured_min_s": min(measured), "measured_max_s": max(measured),
            "spread": (max(measured) - min(measured)) / med,
            "predicted_step_s": pred["step_s"], "error": pred["step_s"] / med - 1.0,
            "variants": variants,
            "bound": pred["bound"], "stages_s": pred["stages"],
            "shared_cores": pred["shared_cores"], "processes": pred["processes"],
            "sharing": pred.get("sharing", "none"),
            "rows": rows, "external_cpu_s": [r["external_cpu_s"] for r in runs],
            "disturbed_runs": sum(r["disturbed"] for r in runs),
            "per_run_step_s": measured,
            "runs_speed_ratio": [r.get("speed_ratio") for r in runs],
            "runs_error": [pred["step_s"] / x - 1.0 for x in measured]}


def _call_us(prof: dict) -> float:
    """Microseconds the prediction charges per torch call: calibrate's no-grad
    ``eager_call_s`` where measured (runs from 2026-11-27 22:15 UTC), else
    ``kernel_overhead_s``."""
    return (prof.get("eager_call_s") or prof["kernel_overhead_s"]) * 1e6


def _shared(r: dict) -> str:
    """How a plan's processes share the cores, for the table."""
    if not r["shared_cores"]:
        return ""
    return " (pinned, shared)" if r.get("sharing") == "pinned" else " (time-shared)"


def render(out: dict) -> list[str]:
    machine, results, summary = out["machine"], out["results"], out["summary"]
    lines = [
        "## AFD reference job: predicted vs measured decode step "
        "(`benchmarks/afd_executor_prediction.py`)",
        "",
        f"Machine: {machine['device']}, {out['cpu_count']} cores; calibrated by `planner "
        f"calibrate` ({machine['world_size']} gloo processes of {machine['threads']} "
        f"thread(s); a torch call {_call_us(out['profile']):.1f} us, "
        f"point-to-point message latency {out['message_latency_s'] * 1e6:.0f} us). Job: "
        f"hidden 64, dense/MoE/MoE layers, 8 experts top-2, 1 shared expert, 8 sequences per "
        f"attention rank, {out['steps']} decode steps (median of steps 2..{out['steps']}); "
        f"{out['repeats']} runs per plan, interleaved. Prediction from the calibration alone.",
        "",
        "| plan | processes / cores | measured median s | spread (max-min)/median | predicted s "
        "| error | predicted bound | rank predicted | rank measured | disturbed runs |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['plan']} | {r['processes']} / {out['cores']:g}"
            f"{_shared(r)} | {r['measured_step_s']:.4f} | "
            f"{r['spread']:.0%} | {r['predicted_step_s']:.4f} | {r['error']:+.1%} | "
            f"{r['bound']} | {r['predicted_rank']} | {r['measured_rank']} | "
            f"{r['disturbed_runs']} of {r['runs']} |")
    tau, wrong = discordant(results)
    lines += ["", f"Within 15%: {summary['within_15_percent']} of {summary['plans']} plans "
              f"(worst {summary['worst_abs_error']:.1%}); same ranking: "
              f"{'yes' if summary['same_ranking'] else 'no'} (Kendall tau {tau:+.2f}"
              + (f"; in the wrong order: {'; '.join(wrong)}" if wrong else "") + ")."]
    prof = out["profile"]
    lines += ["", "Without calibrate's ping-pong terms (messages at send_recv's latency, "
              f"{out['send_recv_latency_s'] * 1e6:.0f} us, instead of p2p_latency_s "
              f"{prof.get('p2p_latency_s', 0.0) * 1e6:.0f} us; no resume_s, "
              f"{prof.get('resume_s', 0.0) * 1e6:.0f} us, after a wait"
              + (f"; no late_read_s, {prof['late_read_s'] * 1e6:.0f} us, for a micro-batch that "
                 "came while its rank computed" if prof.get("late_read_s") else "")
              + "):", "",
              "| plan | measured median s | predicted s | error | rank |",
              "|---|---:|---:|---:|---:|"]
    for r in results:
        a = r["variants"]["without_pingpong_terms"]
        lines.append(f"| {r['plan']} | {r['measured_step_s']:.4f} | {a['predicted_step_s']:.4f} "
                     f"| {a['error']:+.1%} | {a['rank']} |")
    sm = summary["without_pingpong_terms"]
    lines += ["", f"Without them: within 15%: {sm['within_15_percent']} of {summary['plans']} "
              f"(worst {sm['worst_abs_error']:.1%}); same ranking: "
              f"{'yes' if sm['same_ranking'] else 'no'}."]
    shown = [k for k in VARIANT_NAMES if all(k in r["variants"] for r in results)]
    if shown:
        lines += ["", "The same runs with the time-shared plans predicted as if their ranks "
                  "shared the cores evenly (`solvers.serving.shared_cores`, what check-run did "
                  "before the job pinned them, one core each, round-robin), and with each "
                  "`isend` / `irecv` priced as a torch call (as before calibrate timed posting "
                  "them, `Profile.p2p_post_s`). Error per plan:",
                  "",
                  "| plan | default | " + " | ".join(VARIANT_NAMES[k] for k in shown) + " |",
                  "|---|---:|" + "---:|" * len(shown)]
        for r in results:
            lines.append(f"| {r['plan']} | {r['error']:+.1%} | "
                         + " | ".join(f"{r['variants'][k]['error']:+.1%}" for k in shown)
                         + " |")
        lines.append("| within 15%, same ranking | "
                     f"{summary['within_15_percent']}, "
                     f"{'yes' if summary['same_ranking'] else 'no'} | "
                     + " | ".join(f"{summary[k]['within_15_percent']}, "
                                  f"{'yes' if summary[k]['same_ranking'] else 'no'}"
                                  for k in shown) + " |")
    return lines + speed_lines(results)


def speed_lines(results: list[dict]) -> list[str]:
    """Each run of the plans with a core per process against the machine's speed at that run
    (its speed probe over the calibration's, :func:`probe_ratios`): the prediction prices the
    calibration's speed, so a run on a slower machine reads as under-predicted whatever the
    model. The time-shared plans are left out: their probes ran time-shared too."""
    own = [r for r in results if not r["shared_cores"]
           and any(q is not None for q in r.get("runs_speed_ratio") or [])]
    if not own:
        return []
    pairs = [(q, e) for r in own for q, e in zip(r["runs_speed_ratio"], r["runs_error"])
             if q is not None]
    text = ("The machine's speed at each run against its calibration (the speed probe, "
            "`planner.run.speed_probe`, before and after the run's steps over calibrate's at "
            "its start and end; above 1: slower than calibrated), for the plans with a core "
            "per process, and each run's error: "
            + "; ".join(f"{r['plan']} " + ", ".join(
                f"{q:.2f}x {e:+.0%}" for q, e in zip(r["runs_speed_ratio"], r["runs_error"])
                if q is not None) for r in own) + ".")
    if len(pairs) >= 3 and len({q for q, _ in pairs}) > 1 and len({e for _, e in pairs}) > 1:
        text += (f" Error against that ratio over these {len(pairs)} runs: Pearson r "
                 f"{statistics.correlation(*zip(*pairs)):+.2f}.")
    return ["", text]


def history_entry(out: dict) -> dict:
    """One run of the benchmark in a line: when, what calibrate measured, each plan's error."""
    prof = out["profile"]
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "kernel_overhead_s": prof["kernel_overhead_s"],
            "eager_call_s": prof.get("eager_call_s", 0.0),
            "p2p_latency_s": prof.get("p2p_latency_s", 0.0), "resume_s": prof.get("resume_s", 0.0),
            "late_read_s": prof.get("late_read_s", 0.0),
            "p2p_post_s": prof.get("p2p_post_s", 0.0),
            "errors": {r["plan"]: r["error"] for r in out["results"]},
            "variant_errors": {k: {r["plan"]: r["variants"][k]["error"] for r in out["results"]
                                   if k in r["variants"]} for k in VARIANT_NAMES},
            "spreads": {r["plan"]: r["spread"] for r in out["results"]},
            "within_15_percent": out["summary"]["within_15_percent"],
            "same_ranking": out["summary"]["same_ranking"]}


def render_history(history: list[dict]) -> list[str]:
    """Every recorded run of the benchmark (its own calibration each): errors and spreads."""
    plans = list(history[-1]["errors"])
    lines = ["Every run of this benchmark since the ping-pong terms (each with its own "
             "`planner calibrate`): prediction error per plan (run-to-run spread of its "
             "repeats), plans within 15%, same ranking.", "",
             "| run | torch call | isend / irecv | p2p_latency_s | resume_s | late_read_s | "
             + " | ".join(plans) + " | within 15% | same ranking |",
             "|---|---:|---:|---:|---:|---:|" + "---:|" * len(plans) + "---:|---|"]
    for h in history:
        cells = [f"{h['errors'][p]:+.1%} ({h['spreads'][p]:.0%})" for p in plans]
        late = f"{h['late_read_s'] * 1e6:.0f} us" if h.get("late_read_s") else "-"
        post = f"{h['p2p_post_s'] * 1e6:.0f} us" if h.get("p2p_post_s") else "-"
        lines.append(f"| {h['date']} | {_call_us(h):.1f} us | {post} | "
                     f"{h['p2p_latency_s'] * 1e6:.0f} us | {h['resume_s'] * 1e6:.0f} us | "
                     f"{late} | "
                     + " | ".join(cells) + f" | {h['within_15_percent']} of {len(plans)} | "
                     f"{'yes' if h['same_ranking'] else 'no'} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of every plan")
    parser.add_argument("--calibration", type=Path, default=None,
                        help="use this calibration instead of running planner calibrate")
    parser.add_argument("--steps", type=int, default=20, help="decode steps per run")
    parser.add_argument("--quiet-wait", type=float, default=300.0,
                        help="seconds to wait at most for idle CPUs before each run")
    parser.add_argument("--max-external-cpu", type=float, default=0.5,
                        help="CPU seconds other processes may take during a run before it is "
                             "run again (and per 5 s of planner calibrate)")
    parser.add_argument("--attempts", type=int, default=3,
                        help="runs at most per measurement (see --max-external-cpu)")
    parser.add_argument("--render-only", action="store_true",
                        help="rewrite the docs section from the results JSON and the history; "
                             "run nothing")
    args = parser.parse_args()
    if args.render_only:
        out = json.loads(OUT.read_text())
        history = json.loads(HISTORY.read_text()) if HISTORY.exists() else []
        update_section("afd_executor_prediction", render(out) + [""] + render_history(history))
        print("\n".join(render(out)))
        return
    WORK.mkdir(parents=True, exist_ok=True)
    cal = args.calibration or CAL
    calibrations = []
    if args.calibration is None:
        steadiest = Steadiest(CAL, CAL.with_name(CAL.stem + ".cluster.yaml"))
        for _ in range(args.attempts):  # calibrate again while other processes disturbed it
            wait_quiet(args.quiet_wait)
            start = time.monotonic()
            b0, _ = _cpu()
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            planner("calibrate", "--out", str(CAL), "--cluster-out",
                    str(CAL.with_name(CAL.stem + ".cluster.yaml")))
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            b1, _ = _cpu()
            external = max(0.0, (b1 - b0) - (r1.ru_utime + r1.ru_stime - r0.ru_utime
                                              - r0.ru_stime))
            wall = time.monotonic() - start
            quality = json.loads(CAL.read_text())["quality"]
            calibrations.append({"wall_s": wall, "external_cpu_s": external,
                                 "speed_drift": quality.get("speed_drift"),
                                 "link_drift": quality.get("link_drift")})
            print(f"calibrated in {wall:.0f} s (other processes took {external:.1f} CPU s; "
                  f"speed probe {quality.get('speed_drift') or 0:.2f}x, link probe "
                  f"{quality.get('link_drift') or 0:.2f}x apart at start and end)", flush=True)
            # calibrate's own warning: the machine's speed moved while it measured
            steady = not drifted(quality)
            if external <= args.max_external_cpu * wall / 5.0 and steady:
                break
            steadiest.offer(quality)
        else:  # no try was steady: the steadiest of them (not the last)
            steadiest.restore()
    caldoc = json.loads(Path(cal).read_text())
    plans = {name: make_plan(name, model, nodes, want)
             for name, (model, nodes, want, _) in PLANS.items()}
    runs: dict[str, list[dict]] = {name: [] for name in PLANS}
    for rep in range(args.repeats):
        for name, (_, _, _, m) in PLANS.items():
            res = run_clean(name, plans[name], m, args.steps, cal, rep, args.quiet_wait,
                            args.max_external_cpu, args.attempts)
            runs[name].append(res)
            print(f"run {rep + 1}/{args.repeats} {name}: measured {res['measured_step_s']:.4f} s, "
                  f"predicted {res['predicted_step_s']:.4f} s (other processes took "
                  f"{res['external_cpu_s']:.2f} CPU s)", flush=True)
    results = [summarise(name, rs, caldoc) for name, rs in runs.items()]
    pred_rank = _ranks([r["predicted_step_s"] for r in results])
    meas_rank = _ranks([r["measured_step_s"] for r in results])
    for r, p, q in zip(results, pred_rank, meas_rank):
        r["predicted_rank"], r["measured_rank"] = p, q
    summary = {"plans": len(results),
               "worst_abs_error": max(abs(r["error"]) for r in results),
               "within_15_percent": sum(abs(r["error"]) <= 0.15 for r in results),
               "same_ranking": pred_rank == meas_rank}
    for key in VARIANTS:
        ranks = _ranks([r["variants"][key]["predicted_step_s"] for r in results])
        for r, p in zip(results, ranks):
            r["variants"][key]["rank"] = p
        errs = [r["variants"][key]["error"] for r in results]
        summary[key] = {"worst_abs_error": max(abs(e) for e in errs),
                        "within_15_percent": sum(abs(e) <= 0.15 for e in errs),
                        "same_ranking": ranks == meas_rank}
    first = results[0]
    pred0 = runs[first["plan"]][0]["prediction"]
    out = {"machine": caldoc["machine"], "profile": caldoc["profile"],
           "fit": {k: caldoc["fit"][k] for k in ("peak_flops", "memory_bw_bytes_per_s", "link")},
           "calibration": str(Path(cal).resolve().relative_to(ROOT))
           if Path(cal).resolve().is_relative_to(ROOT) else str(cal),
           "cpu_count": os.cpu_count(), "cores": pred0["cores"],
           "message_latency_s": pred0["message_latency_s"],
           "send_recv_latency_s": predict_afd_run(
               json.loads((ROOT / runs[first["plan"]][0]["record"]).read_text()),
               without_pingpong(caldoc)).message_latency_s,
           "steps": args.steps,
           "repeats": args.repeats, "calibrations": calibrations,
           "max_external_cpu_s": args.max_external_cpu, "summary": summary, "results": results,
           "runs": {name: [{k: v for k, v in r.items() if k != "rows"} for r in rs]
                    for name, rs in runs.items()}}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    history = json.loads(HISTORY.read_text()) if HISTORY.exists() else []
    history.append(history_entry(out))
    HISTORY.write_text(json.dumps(history, indent=1) + "\n")
    update_section("afd_executor_prediction", render(out) + [""] + render_history(history))
    print("\n".join(render(out)))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
