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
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cost_models.profile import default_profile  # noqa: E402
from cost_models.serving.config import PoolLayout  # noqa: E402
from cost_models.serving.fit import fit  # noqa: E402
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
          "prefill_step_overhead_s": ("serve", 1e-4, 0.05),
          "per_request_overhead_s": ("serve", 1e-7, 1e-3),
          "all_reduce_latency_factor": ("comm", 1.0, 50.0),
          "nvswitch_efficiency": ("comm", 0.2, 1.0)}
PREFILL_BATCHES = [(n,) for n in (128, 256, 512, 1024, 2048)] + [
    (256,) * 4, (512,) * 4, (128,) * 16, (1024,) * 2]
DECODE = [(b, ctx) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) for ctx in (128, 256, 512, 1024,
                                                                          2048)]


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


def kv_capacity_tokens() -> dict[tuple[str, int], int]:
    """DistServe's KV capacity (tokens) per model and TP at PP 1 (``max_num_tokens.csv``)."""
    out = {}
    for line in (DATA / "max_num_tokens.csv").read_text().splitlines()[1:]:
        model, tp, pp, tokens = line.split(",")
        if model in MODELS and pp == "1":
            out[(MODELS[model], int(tp))] = int(tokens)
    return out


def cases_of(source: str) -> list[tuple[tuple, float]]:
    """Cases inside what the profiled engine could run: decode batches whose KV (batch x
    context) fits the engine's KV capacity at that TP (their formulas extrapolate beyond)."""
    data = json.loads((DATA / f"profiler-a100-80g.{source}.json").read_text())
    capacity = kv_capacity_tokens()
    out = []
    for hf_name, per_tp in sorted(data.items()):
        for tp, coef in sorted(per_tp.items(), key=lambda kv: int(kv[0])):
            key = (source, MODELS[hf_name], int(tp))
            cap = capacity.get((MODELS[hf_name], int(tp)), 0)
            out += [((key, "prefill", c), published_ms(coef, "prefill", c) / 1e3)
                    for c in PREFILL_BATCHES if sum(c) <= cap]
            out += [((key, "decode", c), published_ms(coef, "decode", c) / 1e3)
                    for c in DECODE if c[0] * c[1] <= cap]
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
        train = replace(default_profile(GPU), **{k: v for k, v in params.items()
                                                 if PARAMS[k][0] == "train"})
        if "all_reduce_latency_factor" in params:
            train = replace(train, collective_latency_factor={
                **train.collective_latency_factor,
                "all_reduce": params["all_reduce_latency_factor"]})
        if "nvswitch_efficiency" in params:
            train = replace(train, link_efficiency={**train.link_efficiency,
                                                    "nvswitch": params["nvswitch_efficiency"]})
        _PROFILES[key] = (
            train,
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
            "p90_abs_rel_error": sorted(rel)[int(0.9 * (len(rel) - 1))],
            "share_within_10pct": sum(r <= 0.10 for r in rel) / len(rel), "cases": len(rel)}


def kv_capacity_check(params: dict) -> list[dict]:
    """Our KV capacity (tokens per instance) next to DistServe's measured one, per model/TP."""
    from cost_models.serving.config import ServingWorkload
    from cost_models.serving.memory import pool_memory
    prof, sprof = _profiles(params)
    rows = []
    for (model, tp), theirs in sorted(kv_capacity_tokens().items()):
        if tp not in _HW:
            continue
        mem = pool_memory(_MODELS[model], PoolLayout(tp=tp), ServingWorkload(isl=1, osl=1),
                          _GPU.hbm_bytes, sprof, prof.reserved_bytes)
        rows.append({"model": model, "tp": tp, "distserve": theirs,
                     "planner": mem.kv_capacity_tokens,
                     "error": mem.kv_capacity_tokens / theirs - 1})
    return rows


def start_params() -> dict:
    prof, sprof = default_profile(GPU), default_serving_profile(GPU)
    out = {k: getattr(prof if where == "train" else sprof, k)
           for k, (where, _, _) in PARAMS.items() if where != "comm"}
    out["all_reduce_latency_factor"] = prof.op_factors("all_reduce")[0]
    out["nvswitch_efficiency"] = prof.link_eff("nvswitch")
    return out


SERVING_DEFAULTS = ("decode_step_overhead_s", "prefill_step_overhead_s", "kv_read_efficiency",
                    "per_request_overhead_s")


def write_serving_defaults(params: dict) -> None:
    """The serving-only parameters of the DistServe fit become the defaults of every GPU; the
    physical efficiencies stay the training profile's (fitted on training runs)."""
    path = ROOT / "cost_models" / "data" / "profiles.json"
    data = json.loads(path.read_text())
    data["serving"] = {
        "_doc": "Serving-only parameters (cost_models/serving/profile.py), fitted on "
                "DistServe's published OPT-13B/66B A100 latency fits (DistServe engine) by "
                "benchmarks/serving_calibration.py --write-defaults; the physical efficiencies "
                "stay the training profile's.",
        "common": {k: round(params[k], 9 if k.endswith("_s") else 4) for k in SERVING_DEFAULTS}}
    path.write_text(json.dumps(data, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--write-defaults", action="store_true", help="write the fitted "
                        "serving-only parameters to cost_models/data/profiles.json")
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
        # in sample: one fit on this engine's profiles of both models; leave-one-model-out:
        # fit on the engine's other model; leave-one-source-out: fit on the three other
        # sources (the other engine included, whose per-step costs differ)
        engine = [c for (s, _), cs in by_source.items() if s == source for c in cs]
        other_model = [c for (s, m), cs in by_source.items() if s == source and m != model
                       for c in cs]
        rest = [c for key, cs in by_source.items() if key != (source, model) for c in cs]
        in_engine = fit(predict, engine, bounds, start_params(), sweeps=3)
        lomo = fit(predict, other_model, bounds, start_params(), sweeps=3)
        loso = fit(predict, rest, bounds, start_params(), sweeps=3)
        result["per_source"][f"{source}/{model}"] = {
            "in_sample": errors(in_engine, cases),
            "leave_one_model_out": errors(lomo, cases),
            "leave_one_source_out": errors(loso, cases), "lomo_params": lomo,
            "loso_params": loso}
    result["kv_capacity_tokens"] = kv_capacity_check(fitted)
    result["seconds"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    d = result["distserve_fit"]
    if args.write_defaults:
        write_serving_defaults(d["params"])
    print(f"DistServe engine, OPT-13B+66B, {d['in_sample']['cases']} cases: median error "
          f"{d['in_sample']['median_abs_rel_error']:.1%} (max {d['in_sample']['max_abs_rel_error']:.1%}"
          f", {d['in_sample']['share_within_10pct']:.0%} within 10%)"
          f"; with default parameters {d['defaults']['median_abs_rel_error']:.1%}")
    print({k: round(v, 6) for k, v in d["params"].items()})
    for row in result["kv_capacity_tokens"]:
        print(f"KV capacity {row['model']} TP{row['tp']}: DistServe {row['distserve']}, "
              f"planner {row['planner']} ({row['error']:+.1%})")
    print("| source | cases | in-sample median / max / within 10% | leave-one-model-out "
          "median / max | leave-one-source-out median / max |")
    print("|---|---|---|---|---|")
    for key, r in result["per_source"].items():
        i, m, o = r["in_sample"], r["leave_one_model_out"], r["leave_one_source_out"]
        print(f"| {key} | {i['cases']} | {i['median_abs_rel_error']:.1%} / "
              f"{i['max_abs_rel_error']:.1%} / {i['share_within_10pct']:.0%} | "
              f"{m['median_abs_rel_error']:.1%} / {m['max_abs_rel_error']:.1%} | "
              f"{o['median_abs_rel_error']:.1%} / {o['max_abs_rel_error']:.1%} |")


if __name__ == "__main__":
    main()
