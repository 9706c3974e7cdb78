"""A published breakdown against the cost model's terms: NVIDIA's optimisation history of
DeepSeek-V3 on 256 GB200 (``benchmarks/data/dsv3_gb200_feature_steps.json``). Each step of
the guide that toggles a setting the cost model has (token dispatcher, recompute modules, CUDA
graphs) is predicted by the shipped profile with that step's settings on the calibration row's
configuration; the published gain of the step sits beside the predicted one. The other steps
(kernel fusions, host speed, HybridEP's bandwidth) have no setting here: the cost model prices
the current software, whose kernels and launch counts are those of the last step.

Run by ``benchmarks/calibration.py`` (its results and ``docs/calibration.md``); alone:
``python benchmarks/feature_steps.py`` prints the table.
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cost_models.profile import Profile, default_profile  # noqa: E402
from cost_models.training.step import estimate  # noqa: E402
from published_runs import (candidate_configs, load_all_rows, predicted_metric,  # noqa: E402
                            row_cluster, row_model, row_target, row_workload)

DATA = Path(__file__).resolve().parent / "data" / "dsv3_gb200_feature_steps.json"


def feature_steps(prof: Profile | None = None) -> dict:
    """Published and predicted TFLOP/s of every step (a step without a setting keeps the
    previous prediction), and each modelled step's gain over the step before it."""
    data = json.loads(DATA.read_text())
    row = next(r for r in load_all_rows() if r["id"] == data["row"])
    model, cluster, workload = row_model(row), row_cluster(row), row_workload(row)
    (final,) = candidate_configs(row, cluster.num_gpus)  # the row's settings, all published
    prof = prof or default_profile(row["cluster"]["gpu_key"])
    target = row_target(row)
    options: dict = {}
    steps, previous = [], None
    for step in data["steps"]:
        modelled = "options" in step
        options.update(step.get("options") or {})
        cfg = replace(final, **{k: tuple(v) if isinstance(v, list) else v
                                for k, v in options.items()})
        predicted = predicted_metric(target, estimate(model, cluster, workload, cfg, prof), model)
        out = {"step": step["step"], "published": step["tflops"], "predicted": predicted,
               "modelled": modelled, "options": step.get("options") or {},
               "why_not": step.get("not_modelled")}
        if previous is not None and modelled:
            out["published_gain"] = step["tflops"] / previous["published"] - 1
            out["predicted_gain"] = predicted / previous["predicted"] - 1
        steps.append(out)
        previous = out
    return {"source": data["source"], "row": data["row"], "steps": steps,
            "final_config_matches_row": cfg == final}


def lines(result: dict) -> list[str]:
    """The markdown section of ``docs/calibration.md``."""
    s = result["steps"]
    modelled = [x for x in s if "published_gain" in x]
    pub = 1.0
    pred = 1.0
    for x in modelled:
        pub *= 1 + x["published_gain"]
        pred *= 1 + x["predicted_gain"]
    rows = []
    for x in s:
        setting = (", ".join(f"{k} {'+'.join(v) if isinstance(v, list) else v}"
                             for k, v in x["options"].items()) if x["modelled"]
                   else f"none ({x['why_not']})")
        gains = (f"{x['published_gain']:+.1%} | {x['predicted_gain']:+.1%}"
                 if "published_gain" in x else " | ")
        predicted = f"{x['predicted']:.0f}" if x["modelled"] or x is s[-1] else ""
        rows.append(f"| {x['step']} | {setting} | {x['published']:.0f} | {predicted} | {gains} |")
    return [
        "## A published breakdown: DeepSeek-V3 on GB200, step by step",
        "",
        "NVIDIA's guide to DeepSeek-V3 pre-training on 256 GB200 (MXFP8, TP1 PP8 VPP4 EP32) "
        f"gives the TFLOP/s after each optimisation ({result['source']}). The steps that "
        "toggle a setting the cost model has are predicted with that setting on the "
        f"calibration row's configuration ({result['row']}), by the shipped profile "
        "(`benchmarks/feature_steps.py`, not fitted):",
        "",
        "| step | setting in the cost model | published TFLOP/s | predicted | published gain "
        "| predicted gain |",
        "|---|---|---:|---:|---:|---:|",
        *rows,
        "",
        f"The three modelled steps gained {pub - 1:+.1%} together as published and "
        f"{pred - 1:+.1%} as predicted; the whole history "
        f"{s[-1]['published'] / s[0]['published']:.2f}x. "
        "The guide measured each step on the software of its day, host bound at first (its "
        "section 2: \"the CPU kernel launch speed cannot keep up\"), so recompute launches and "
        "CUDA graphs were worth more then; the cost model prices the last step's kernels and "
        "launches, at which the layer's GPU work exceeds its launches and graphs change "
        "little. The final prediction is the calibration row's.",
        "",
    ]


if __name__ == "__main__":
    print("\n".join(lines(feature_steps())))
