"""planner's serving search side by side with NVIDIA aiconfigurator on the same cases.

    python benchmarks/serving_vs_aiconfigurator.py [--aic-venv PATH] [--case ID ...]

aiconfigurator (PyPI ``aiconfigurator``, Apache-2.0) is a peer tool, never a dependency of
planner: it lives in its own virtual environment (``--aic-venv``; created and given the pinned
version with pip when missing, the only network use of this script) and runs as a subprocess:

    <venv>/bin/aiconfigurator cli default --model HF_ID --system SYSTEM --total-gpus N
        --backend trtllm --isl I --osl O --ttft MS --tpot MS --top-n 1 --no-color --save-dir DIR

which searches aggregated ("agg", prefill and decode on the same engines; planner's
"colocated") and disaggregated serving and picks the mode with the higher output tokens/s per
GPU of the whole budget among configurations meeting the TTFT and TPOT targets. Its raw output
(log and the per-mode ``best_config_topn.csv`` / ``exp_config.yaml`` it writes) stays in a
temporary directory (``--raw-dir``); only the numbers parsed from it go to the JSON.

planner's side is ``python -m planner serve ... --engine BACKEND --precision P --kv-dtype K
--format json`` in the project's interpreter (precision matched to what aiconfigurator infers
from each checkpoint, see QUANT_NOTE), timed the same way (wall clock of the whole subprocess,
imports included). If that command fails, planner's columns are null and the error line is
recorded. ``--reuse-aic`` takes aiconfigurator's results from the existing JSON (same version,
backend and case inputs) and reruns planner only.

tokens/s per GPU is over every GPU of the budget on both sides (aiconfigurator's
``tokens/s/gpu_cluster``; planner's output tokens/s over the budget), so a plan leaving GPUs idle
is charged for them; the per-used-GPU numbers are in the JSON too.

Writes ``benchmarks/results/serving_vs_aiconfigurator.json`` and prints a markdown table.
aiconfigurator's own measured end-to-end runs shipped with the package are not read here.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "serving_vs_aiconfigurator.json"
AIC_PACKAGE = "aiconfigurator"
AIC_VERSION = "0.12.0"
# ".venv-aiconfigurator" in the repo root is not git-ignored (.gitignore has ".venv/" only), so
# the default environment lives in the temp directory, keyed by the pinned version.
DEFAULT_AIC_VENV = Path(tempfile.gettempdir()) / f"planner-aiconfigurator-{AIC_VERSION}-venv"
AIC_TIMEOUT_S = 1800
PLANNER_TIMEOUT_S = 600
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Case:
    id: str
    model: str           # planner preset
    aic_model: str       # aiconfigurator's HF id (its packaged config, no download)
    gpu: str             # planner GPU name
    aic_system: str      # aiconfigurator system
    gpus: int
    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float       # 50 ms = 20 tokens/s/user
    precision: str = "bf16"   # planner --precision / --kv-dtype matching what aiconfigurator
    kv_dtype: str = "bf16"    # infers from the checkpoint's config (see QUANT_NOTE)


# Dense and MoE, H100 / H200 / B200, 8 to 64 GPUs; one workload and SLO throughout.
CASES = (
    Case("llama70b-h100-8", "llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B",
         "H100-SXM5-80GB", "h100_sxm", 8, 4096, 512, 2000, 50),
    Case("llama8b-h200-8", "llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B",
         "H200-SXM-141GB", "h200_sxm", 8, 4096, 512, 2000, 50),
    Case("qwen3-30b-h100-16", "qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B",
         "H100-SXM5-80GB", "h100_sxm", 16, 4096, 512, 2000, 50),
    Case("qwen3-235b-h200-32", "qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B",
         "H200-SXM-141GB", "h200_sxm", 32, 4096, 512, 2000, 50),
    Case("deepseek-v3-h200-64", "deepseek-v3", "deepseek-ai/DeepSeek-V3",
         "H200-SXM-141GB", "h200_sxm", 64, 4096, 512, 2000, 50, "fp8", "fp8"),
    Case("gpt-oss-120b-b200-8", "gpt-oss-120b", "openai/gpt-oss-120b",
         "B200", "b200_sxm", 8, 4096, 512, 2000, 50, "fp4", "bf16"),
)
QUANT_NOTE = (
    "aiconfigurator takes precision from the checkpoint's quantization_config, else bf16: "
    "DeepSeek-V3 fp8_block GEMMs and experts with an fp8 KV cache; gpt-oss-120b bf16 "
    "attention GEMMs with MXFP4 experts (w4a8_mxfp4_mxfp8 on Blackwell with trtllm); the "
    "others bf16. planner has one weight precision for the whole model, so it gets fp8/fp8 "
    "and fp4/bf16 for those two and bf16/bf16 elsewhere. Per-pool quant modes aiconfigurator "
    "used are under best_agg/best_disagg pools[].quant.")

# Scalar search settings aiconfigurator writes to each mode's exp_config.yaml: its
# disagg-only latency/rate-matching corrections and batch limits.
AIC_SETTING_KEYS = (
    "database_mode", "backend_version", "prefill_latency_correction", "decode_latency_correction",
    "rate_match_prefill_degradation", "rate_match_decode_degradation",
    "autoscale_ttft_correction_factor", "prefill_max_batch_size", "decode_max_batch_size",
    "max_gpu_per_replica", "max_prefill_workers", "max_decode_workers",
    "enable_chunked_prefill", "free_gpu_memory_fraction",
)


AIC_INPUTS = ("aic_model", "aic_system", "gpus", "isl", "osl", "ttft_ms", "tpot_ms")
SUMMARY_KEYS = ("mode", "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user", "ttft_ms",
                "tpot_ms", "meets_slo")


# ---------------------------------------------------------------- aiconfigurator environment

def aic_bin(venv: Path, name: str) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / name


def installed_aic_version(venv: Path) -> str | None:
    py = aic_bin(venv, "python")
    if not py.exists():
        return None
    out = subprocess.run(
        [str(py), "-c", f"import importlib.metadata as m; print(m.version('{AIC_PACKAGE}'))"],
        capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def ensure_aic_venv(venv: Path) -> str:
    """Create ``venv`` and pip install the pinned aiconfigurator unless it is already there."""
    if installed_aic_version(venv) == AIC_VERSION and aic_bin(venv, AIC_PACKAGE).exists():
        return AIC_VERSION
    if not aic_bin(venv, "python").exists():
        print(f"creating {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"pip install {AIC_PACKAGE}=={AIC_VERSION} into {venv}", file=sys.stderr)
    subprocess.run([str(aic_bin(venv, "python")), "-m", "pip", "install", "--quiet",
                    f"{AIC_PACKAGE}=={AIC_VERSION}"], check=True)
    got = installed_aic_version(venv)
    if got != AIC_VERSION:
        raise SystemExit(f"{venv}: expected {AIC_PACKAGE} {AIC_VERSION}, found {got}")
    return got


# ---------------------------------------------------------------- parsing aiconfigurator output

def _num(s: str | None) -> float | None:
    if s is None or s == "":
        return None
    try:
        return float(s)
    except ValueError:
        return None


def _int(s: str | None) -> int | None:
    v = _num(s)
    return None if v is None else int(round(v))


def _pool(row: dict, prefix: str, role: str, workers: int) -> dict:
    """One aiconfigurator worker group in planner's pool vocabulary (tp/dp are attention
    tensor/data parallelism, ep/etp the MoE expert/expert-tensor parallelism, batch the running
    requests per attention rank, gpus the GPUs of the whole pool, workers its instances)."""
    g = lambda k: row.get(prefix + k)  # noqa: E731
    tp, pp, dp = _int(g("tp")), _int(g("pp")) or 1, _int(g("dp")) or 1
    return {"role": role, "gpus": tp * pp * dp * workers, "gpus_per_instance": tp * pp * dp,
            "tp": tp, "pp": pp, "dp": dp, "ep": _int(g("moe_ep")), "etp": _int(g("moe_tp")),
            "batch": _int(g("bs")), "workers": workers, "parallel": g("parallel"),
            "quant": {k: g(k) for k in ("gemm", "moe", "kvcache", "fmha", "comm")}}


def parse_aic_row(row: dict, mode: str, case: Case) -> dict:
    """The best configuration of one mode from its ``best_config_topn.csv`` first row."""
    per_replica = _int(row["num_total_gpus"])
    replicas = case.gpus // per_replica if per_replica else None
    if mode == "agg":
        pools = [_pool(row, "", "colocated", replicas)]
    else:
        pools = [_pool(row, "(p)", "prefill", _int(row["(p)workers"]) * replicas),
                 _pool(row, "(d)", "decode", _int(row["(d)workers"]) * replicas)]
    ttft, tpot = _num(row["ttft"]), _num(row["tpot"])
    return {
        "mode": mode,
        # tokens/s/gpu_cluster divides by the whole budget (what aiconfigurator ranks and
        # reports as "Per-GPU Throughput"); tokens/s/gpu divides by the GPUs a replica uses.
        "output_tokens_per_s_per_gpu": _num(row["tokens/s/gpu_cluster"]),
        "output_tokens_per_s_per_used_gpu": _num(row["tokens/s/gpu"]),
        "output_tokens_per_s_per_user": _num(row["tokens/s/user"]),
        "output_tokens_per_s": (_num(row["tokens/s"]) or 0.0) * (replicas or 0),
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "request_latency_ms": _num(row["request_latency"]),
        "concurrency": (_int(row["concurrency"]) or 0) * (replicas or 0),
        "meets_slo": (ttft is not None and tpot is not None
                      and ttft <= case.ttft_ms and tpot <= case.tpot_ms),
        "gpus_per_replica": per_replica,
        "replicas": replicas,
        "gpus_used": per_replica * replicas if per_replica and replicas else None,
        "pools": pools,
        "backend": row.get("backend") or row.get("(p)backend"),
        "backend_version": row.get("version") or row.get("(p)version"),
    }


def _yaml_scalars(path: Path, keys: tuple[str, ...]) -> dict:
    """Top-level ``key: scalar`` lines of an exp_config.yaml (no YAML library needed)."""
    out = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z_][\w]*):\s*(.*?)\s*$", line)
        if m and m.group(1) in keys and m.group(2) not in ("", "null"):
            v = m.group(2)
            out[m.group(1)] = (float(v) if re.fullmatch(r"-?\d+\.\d*", v)
                               else int(v) if re.fullmatch(r"-?\d+", v)
                               else {"true": True, "false": False}.get(v, v))
    return out


def parse_aic_output(save_dir: Path, log: str, case: Case) -> dict:
    best = {}
    settings = {}
    for mode in ("agg", "disagg"):
        csvs = sorted(save_dir.glob(f"**/{mode}/best_config_topn.csv"))
        rows = list(csv.DictReader(csvs[0].open())) if csvs else []
        best[mode] = parse_aic_row(rows[0], mode, case) if rows else None
        cfgs = sorted(save_dir.glob(f"**/{mode}/exp_config.yaml"))
        if cfgs:
            settings[mode] = _yaml_scalars(cfgs[0], AIC_SETTING_KEYS)
    m = re.search(r"Best Experiment Chosen: (\w+) at ([\d,.]+) tokens/s/gpu", log)
    chosen = m.group(1) if m else None
    if chosen not in best:  # not logged: the higher tokens/s per GPU of the budget
        found = [b for b in best.values() if b]
        found.sort(key=lambda b: (not b["meets_slo"], -(b["output_tokens_per_s_per_gpu"] or 0)))
        chosen = found[0]["mode"] if found else None
    top = best.get(chosen) if chosen else None
    m_int = re.search(r"All experiments completed in ([\d.]+) seconds", log)
    notes = sorted(set(re.findall(r"No config found with [^\n]*", log)))
    return {
        "chosen_mode": chosen,
        "chosen_tokens_per_s_per_gpu_logged": float(m.group(2).replace(",", "")) if m else None,
        # the chosen mode's headline numbers; its layout is in best_agg / best_disagg
        "best": None if top is None else {k: top[k] for k in SUMMARY_KEYS},
        "best_agg": best["agg"],
        "best_disagg": best["disagg"],
        "search_s_reported": float(m_int.group(1)) if m_int else None,
        "settings": settings,
        "notes": notes,
    }


def run_aic(case: Case, venv: Path, backend: str, raw_root: Path) -> dict:
    save_dir = raw_root / case.id
    save_dir.mkdir(parents=True, exist_ok=True)
    cmd = [str(aic_bin(venv, AIC_PACKAGE)), "cli", "default",
           "--model", case.aic_model, "--system", case.aic_system,
           "--total-gpus", str(case.gpus), "--backend", backend,
           "--isl", str(case.isl), "--osl", str(case.osl),
           "--ttft", f"{case.ttft_ms:g}", "--tpot", f"{case.tpot_ms:g}",
           "--top-n", "1", "--no-color", "--save-dir", str(save_dir)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", MPLBACKEND="Agg", PYTHONWARNINGS="ignore")
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=save_dir,
                           timeout=AIC_TIMEOUT_S)
        rc, log = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, log = None, f"timeout after {AIC_TIMEOUT_S} s\n{e.stdout or ''}{e.stderr or ''}"
    wall = time.perf_counter() - t0
    (save_dir / "aiconfigurator.log").write_text(log)
    out = {"command": " ".join(["aiconfigurator"] + cmd[1:-2]), "search_s": round(wall, 2),
           "returncode": rc, "error": None}
    if rc != 0:
        lines = [ln for ln in log.splitlines() if ln.strip()]
        out["error"] = lines[-1] if lines else f"exit {rc}"
        return out
    out.update(parse_aic_output(save_dir, log, case))
    if out["best"] is None:
        out["error"] = "no best configuration in aiconfigurator's output"
    return out


# ---------------------------------------------------------------- planner

def _planner_plan(b: dict, case: Case) -> dict:
    ttft_s, tpot_s, total = b.get("ttft_s"), b.get("tpot_s"), b.get("output_tokens_per_s")
    out = {
        "mode": b.get("mode"),
        # per GPU of the whole budget, as aiconfigurator's headline number
        "output_tokens_per_s_per_gpu": None if total is None else total / case.gpus,
        "output_tokens_per_s_per_used_gpu": b.get("output_tokens_per_s_per_gpu"),
        "output_tokens_per_s_per_user": b.get("output_tokens_per_s_per_user"),
        "output_tokens_per_s": total,
        "ttft_ms": None if ttft_s is None else ttft_s * 1e3,
        "tpot_ms": None if tpot_s is None else tpot_s * 1e3,
        "meets_slo": b.get("meets_slo"),
        "gpus_used": b.get("gpus"),
        "pools": [{k: pool.get(k) for k in ("role", "gpu", "gpus", "tp", "pp", "dp", "ep",
                                            "etp", "batch", "workers")}
                  for pool in b.get("pools") or []],
    }
    for p in out["pools"]:
        if p.get("gpus") and p.get("workers"):
            p["gpus_per_instance"] = p["gpus"] // p["workers"]
    return out


def run_planner(case: Case, engine: str) -> dict:
    nodes = -(-case.gpus // GPUS_PER_NODE)
    cmd = [sys.executable, "-m", "planner", "serve", "--model", case.model, "--gpu", case.gpu,
           "--nodes", str(nodes), "--gpus-per-node", str(GPUS_PER_NODE),
           "--isl", str(case.isl), "--osl", str(case.osl),
           "--ttft-ms", f"{case.ttft_ms:g}", "--tpot-ms", f"{case.tpot_ms:g}",
           "--engine", engine, "--precision", case.precision, "--kv-dtype", case.kv_dtype,
           "--format", "json"]
    out = {"command": " ".join(["planner"] + cmd[3:]), "search_s": None, "returncode": None,
           "error": None, "best": None, "best_colocated": None, "best_disagg": None,
           "plans": 0, "why": None}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                           timeout=PLANNER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        out["error"] = f"timeout after {PLANNER_TIMEOUT_S} s"
        return out
    wall = round(time.perf_counter() - t0, 3)
    out["returncode"] = p.returncode
    doc, err = None, None
    if p.returncode == 0:
        try:
            doc = json.loads(p.stdout)
        except ValueError as e:
            err = f"unparsable output: {e}"
    plans = (doc or {}).get("plans") if isinstance(doc, dict) else None
    if not plans:
        lines = [ln for ln in (p.stderr + "\n" + p.stdout).splitlines() if ln.strip()]
        out["error"] = err or (lines[-1].strip() if lines and p.returncode else "no plans")
        return out
    out["search_s"] = wall
    out["plans"] = len(plans)
    out["best"] = _planner_plan(plans[0], case)
    for key in ("engine", "precision", "kv_dtype"):
        if key in plans[0]:
            out["best"][key] = plans[0][key]
    for key in ("best_colocated", "best_disagg"):
        if isinstance(doc.get(key), dict):
            out[key] = _planner_plan(doc[key], case)
    why = doc.get("why")
    out["why"] = why if isinstance(why, str) else None
    return out


def planner_version() -> dict:
    try:
        import importlib.metadata as md
        version = md.version("planner")
    except Exception:  # noqa: BLE001
        version = None
    g = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True,  # noqa: E731
                                  text=True).stdout.strip()
    return {"version": version, "git_commit": g("rev-parse", "HEAD") or None,
            # uncommitted changes outside benchmarks/ (the code planner serve runs)
            "git_dirty": bool(g("status", "--porcelain", "--", ".", ":!benchmarks"))}


# ---------------------------------------------------------------- report

def _f(v, fmt="{:,.0f}"):
    return "-" if v is None else fmt.format(v)


def _mode_cell(best: dict | None) -> str:
    if not best:
        return "-"
    return best["mode"] + ("" if best.get("meets_slo") in (True, None) else " (misses SLO)")


def _layout(best: dict | None) -> str:
    if not best:
        return "-"
    parts = []
    for p in best["pools"]:
        deg = "".join(f"{k}{p[k]}" for k in ("tp", "pp", "dp", "ep", "etp")
                      if p.get(k) not in (None, 1) or k == "tp")
        parts.append(f"{p['role'][0]}:{p.get('workers')}x{deg} b{p.get('batch')}")
    return ", ".join(parts)


def _plan_cell(b: dict | None) -> str:
    if not b:
        return "-"
    return (f"{_layout(b)}; {b['output_tokens_per_s_per_gpu']:,.0f} tok/s/GPU, "
            f"{b['output_tokens_per_s_per_user']:.1f} tok/s/user, TTFT {b['ttft_ms']:.0f} ms, "
            f"TPOT {b['tpot_ms']:.1f} ms" + ("" if b.get("meets_slo") is not False
                                           else " (misses SLO)"))


def markdown(results: list[dict]) -> str:
    head = ("| case | model | GPU | GPUs | aic mode | aic tok/s/GPU | aic search s | planner mode "
            "| planner tok/s/GPU | planner search s | ratio |")
    lines = [head, "|" + "---|" * 11]
    for r in results:
        a, p = r["aiconfigurator"].get("best"), r["planner"].get("best")
        at = a and a["output_tokens_per_s_per_gpu"]
        pt = p and p["output_tokens_per_s_per_gpu"]
        ratio = pt / at if at and pt is not None else None
        lines.append(
            f"| {r['case']} | {r['model']} | {r['gpu']} | {r['gpus']} | {_mode_cell(a)} "
            f"| {_f(at)} | {_f(r['aiconfigurator']['search_s'], '{:.1f}')} | {_mode_cell(p)} "
            f"| {_f(pt)} | {_f(r['planner']['search_s'], '{:.2f}')} | {_f(ratio, '{:.2f}')} |")
    lines += ["", "tok/s/GPU: output tokens/s over all GPUs of the budget (idle ones included); "
              "ratio: planner / aiconfigurator. Layouts: c/p/d = colocated/prefill/decode, "
              "workers x degrees, b = running requests per attention rank.", "",
              "| case | aic best agg | aic best disagg | planner best colocated "
              "| planner best disagg | error |", "|---|---|---|---|---|---|"]
    for r in results:
        a, pl = r["aiconfigurator"], r["planner"]
        err = "; ".join(e for e in (a.get("error") and f"aic: {a['error']}",
                                    pl.get("error") and f"planner: {pl['error']}") if e)
        lines.append(f"| {r['case']} | {_plan_cell(a.get('best_agg'))} "
                     f"| {_plan_cell(a.get('best_disagg'))} "
                     f"| {_plan_cell(pl.get('best_colocated'))} "
                     f"| {_plan_cell(pl.get('best_disagg'))} | {err} |")
    return "\n".join(lines)


def _reusable_aic(path: Path, aic_version: str, backend: str) -> dict[str, dict]:
    """aiconfigurator results of an earlier run of the same version and backend, by case, for
    cases whose inputs have not changed."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if old.get("aiconfigurator", {}).get("version") != aic_version or \
            old["aiconfigurator"].get("backend") != backend:
        return {}
    by_id = {c.id: c for c in CASES}
    keep = {}
    for r in old.get("cases", []):
        c = by_id.get(r.get("case"))
        if c and all(r.get(k) == getattr(c, k) for k in AIC_INPUTS) \
                and not r["aiconfigurator"].get("error"):
            keep[c.id] = r["aiconfigurator"]
    return keep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aic-venv", type=Path, default=DEFAULT_AIC_VENV,
                    help=f"aiconfigurator's own virtual environment (default {DEFAULT_AIC_VENV}); "
                         f"created with {AIC_PACKAGE}=={AIC_VERSION} when missing")
    ap.add_argument("--aic-backend", default="trtllm", choices=("trtllm", "vllm", "sglang"),
                    help="aiconfigurator backend (its own default: trtllm); planner's plans are "
                         "labelled with the same --engine, which does not change its estimate")
    ap.add_argument("--case", action="append", choices=[c.id for c in CASES],
                    help="run only these cases (repeatable); default all")
    ap.add_argument("--reuse-aic", action="store_true",
                    help="take aiconfigurator's results from the existing --output for cases "
                         "whose inputs, version and backend match; rerun only planner")
    ap.add_argument("--raw-dir", type=Path, default=None,
                    help="where aiconfigurator's raw output goes (default: a new temp dir)")
    ap.add_argument("--output", type=Path, default=RESULT)
    args = ap.parse_args(argv)

    venv = args.aic_venv.resolve()
    aic_version = ensure_aic_venv(venv)
    reuse = _reusable_aic(args.output, aic_version, args.aic_backend) if args.reuse_aic else {}
    cases = [c for c in CASES if not args.case or c.id in args.case]
    raw_root = None
    if any(c.id not in reuse for c in cases):
        raw_root = args.raw_dir or Path(tempfile.mkdtemp(prefix="aic_raw_"))
        raw_root.mkdir(parents=True, exist_ok=True)

    planner_at_start = planner_version()
    results = []
    for c in cases:
        if c.id in reuse:
            aic = reuse[c.id]
            print(f"[{c.id}] aiconfigurator: reused", file=sys.stderr)
        else:
            print(f"[{c.id}] aiconfigurator ...", file=sys.stderr, flush=True)
            aic = run_aic(c, venv, args.aic_backend, raw_root)
            print(f"[{c.id}]   {aic['search_s']} s, {aic.get('chosen_mode')}, "
                  f"error={aic['error']}", file=sys.stderr)
        print(f"[{c.id}] planner serve ...", file=sys.stderr, flush=True)
        pl = run_planner(c, args.aic_backend)
        print(f"[{c.id}]   {pl['search_s']} s, error={pl['error']}", file=sys.stderr)
        fields = asdict(c)
        results.append({"case": fields.pop("id"), **fields, "aiconfigurator": aic,
                        "planner": pl})

    doc = {
        "description": "planner serve vs aiconfigurator cli default, same model / GPU / budget / "
                       "ISL / OSL / TTFT / TPOT; best plan of each; output_tokens_per_s_per_gpu "
                       "is over every GPU of the budget (aiconfigurator's tokens/s/gpu_cluster), "
                       "..._per_used_gpu over the GPUs the plan uses; search_s = wall clock of "
                       "the whole subprocess",
        "quantization": QUANT_NOTE,
        "aiconfigurator": {"package": AIC_PACKAGE, "version": aic_version,
                           "backend": args.aic_backend},
        # the checkout planner ran from; changed_during_run when a commit or edit landed mid-run
        "planner": {**planner_at_start,
                    "changed_during_run": planner_version() != planner_at_start},
        "host": {"python": platform.python_version(), "machine": platform.machine(),
                 "cpus": os.cpu_count()},
        "cases": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=1) + "\n")
    print(markdown(results))
    print(f"\nwrote {args.output}" + (f"; aiconfigurator raw output in {raw_root}"
                                      if raw_root else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
