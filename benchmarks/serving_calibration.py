"""Calibrate the serving cost model on DistServe's published latency fits (OPT-13B/66B, A100).

DistServe ships, per model and TP degree, fitted prefill and decode latency formulas measured
under two engines (DistServe's own and vLLM): ``benchmarks/data/serving``. We evaluate those
formulas on a grid of batches and lengths inside the range they were fitted on, fit a few
physical parameters of our model (GEMM, attention and HBM efficiencies, the per-iteration
overheads) and report the error in sample and leave-one-source-out (a source = one engine's
profile of one model: fit on the other three, predict the fourth).

    python benchmarks/serving_calibration.py            # writes benchmarks/results/serving_calibration.json
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cost_models.profile import default_profile  # noqa: E402
from cost_models.serving.config import PoolLayout  # noqa: E402
from cost_models.serving.fit import fit, log_loss  # noqa: E402
from cost_models.serving.latency import Costing, decode_step, prefill_step  # noqa: E402
from cost_models.serving.profile import default_serving_profile  # noqa: E402
from planner.inputs.models import load_model  # noqa: E402
from planner.serving.estimate import instance_hardware  # noqa: E402
from topologies.catalog import get_gpu  # noqa: E402
from topologies.standard import homogeneous_cluster  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "serving"
OUT = ROOT / "benchmarks" / "results" / "serving_calibration.json"
GPU = "A100-SXM4-80GB"
MODELS = {"facebook/opt-13b": "opt-13b", "facebook/opt-66b": "opt-66b"}
SOURCES = ("distserve", "vllm")
# Fitted parameters: (profile it lives in, lower bound, upper bound)
PARAMS = {"gemm_efficiency": ("train", 0.3, 1.0), "attention_efficiency": ("train", 0.1, 1.0),
          "hbm_efficiency": ("train", 0.4, 1.0), "kv_read_efficiency": ("serve", 0.2, 1.0),
          "decode_step_overhead_s": ("serve", 1e-4, 0.03),
          "prefill_step_overhead_s": ("serve", 1e-4, 0.05)}
PREFILL_BATCHES = [(n,) for n in (128, 256, 512, 1024, 2048)] + [
    (256,) * 4, (512,) * 4, (128,) * 16, (1024,) * 2]
DECODE = [(b, ctx) for b in (1, 4, 16, 64, 128, 256) for ctx in (256, 1024, 2048)]


def published_ms(coef: dict, kind: str, case: tuple) -> float:
    """DistServe's fitted latency (ms) of one case (their estimator's formulas)."""
    if kind == "prefill":
        a, b, c = coef["prefill"]
        return a + b * sum(case) + c * sum(x * x for x in case)
    batch, ctx = case
    key = "decoding_smallbs" if batch < coef["decoding_large_small_bs_threshold"] else (
        "decoding_largebs")
    a, b, c = coef[key]
    return a + b * batch * ctx + c * batch


def cases_of(source: str) -> list[tuple[tuple, float]]:
    data = json.loads((DATA / f"profiler-a100-80g.{source}.json").read_text())
    out = []
    for hf_name, per_tp in sorted(data.items()):
        for tp, coef in sorted(per_tp.items(), key=lambda kv: int(kv[0])):
            key = (source, MODELS[hf_name], int(tp))
            out += [((key, "prefill", c), published_ms(coef, "prefill", c) / 1e3)
                    for c in PREFILL_BATCHES]
            out += [((key, "decode", c), published_ms(coef, "decode", c) / 1e3) for c in DECODE]
    return out


_CLUSTER = homogeneous_cluster(GPU, 1)
_GPU = get_gpu(GPU)
_MODELS = {m: load_model(m) for m in MODELS.values()}


_HW = {tp: instance_hardware(_CLUSTER, _GPU, PoolLayout(tp=tp)) for tp in (1, 2, 3, 4, 8)}
_PROFILES: dict = {}


def _profiles(params: dict):
    key = tuple(sorted(params.items()))
    if key not in _PROFILES:
        _PROFILES.clear()
        _PROFILES[key] = (
            replace(default_profile(GPU), **{k: v for k, v in params.items()
                                             if PARAMS[k][0] == "train"}),
            replace(default_serving_profile(GPU), **{k: v for k, v in params.items()
                                                     if PARAMS[k][0] == "serve"}))
    return _PROFILES[key]


def predict(params: dict, case: tuple) -> float:
    (source, model_name, tp), kind, shape = case
    layout = PoolLayout(tp=tp)
    prof, sprof = _profiles(params)
    c = Costing(model=_MODELS[model_name], layout=layout, hw=_HW[tp], prof=prof, sprof=sprof)
    if kind == "prefill":
        return prefill_step(c, tuple(float(x) for x in shape)).total_s
    batch, ctx = shape
    return decode_step(c, float(batch), float(ctx)).total_s


def errors(params: dict, cases) -> dict:
    rel = [abs(predict(params, c) / m - 1) for c, m in cases]
    return {"median_abs_rel_error": statistics.median(rel), "max_abs_rel_error": max(rel),
            "p90_abs_rel_error": sorted(rel)[int(0.9 * (len(rel) - 1))], "cases": len(rel)}


def start_params() -> dict:
    prof, sprof = default_profile(GPU), default_serving_profile(GPU)
    return {k: getattr(prof if where == "train" else sprof, k)
            for k, (where, _, _) in PARAMS.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    t0 = time.perf_counter()
    by_source = {(s, m): [c for c in cases_of(s) if c[0][0][1] == m]
                 for s in SOURCES for m in MODELS.values()}
    bounds = {k: (lo, hi) for k, (_, lo, hi) in PARAMS.items()}
    result: dict = {"gpu": GPU, "params": sorted(PARAMS), "per_source": {}}
    # the acceptance fit: DistServe's own engine, both models
    own = by_source[("distserve", "opt-13b")] + by_source[("distserve", "opt-66b")]
    fitted = fit(predict, own, bounds, start_params(), sweeps=3)
    result["distserve_fit"] = {"params": fitted, "in_sample": errors(fitted, own),
                               "defaults": errors(start_params(), own)}
    for (source, model), cases in sorted(by_source.items()):
        rest = [c for key, cs in by_source.items() if key != (source, model) for c in cs]
        loso = fit(predict, rest, bounds, start_params(), sweeps=3)
        everything = fit(predict, rest + cases, bounds, start_params(), sweeps=3)
        result["per_source"][f"{source}/{model}"] = {
            "in_sample": errors(everything, cases), "leave_one_source_out": errors(loso, cases),
            "loso_params": loso}
    result["seconds"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    d = result["distserve_fit"]
    print(f"DistServe engine, OPT-13B+66B, {d['in_sample']['cases']} cases: median error "
          f"{d['in_sample']['median_abs_rel_error']:.1%} (max {d['in_sample']['max_abs_rel_error']:.1%})"
          f"; with default parameters {d['defaults']['median_abs_rel_error']:.1%}")
    print({k: round(v, 6) for k, v in d["params"].items()})
    print("| source | in-sample median | in-sample max | LOSO median | LOSO max |")
    print("|---|---|---|---|---|")
    for key, r in result["per_source"].items():
        i, o = r["in_sample"], r["leave_one_source_out"]
        print(f"| {key} | {i['median_abs_rel_error']:.1%} | {i['max_abs_rel_error']:.1%} | "
              f"{o['median_abs_rel_error']:.1%} | {o['max_abs_rel_error']:.1%} |")


if __name__ == "__main__":
    main()
