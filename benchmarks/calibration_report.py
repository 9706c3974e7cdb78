"""Memory rows of the calibration set, and the JSON + Markdown outputs of calibration.py."""
from __future__ import annotations

import json
import statistics
from datetime import date
from pathlib import Path

from cost_models.profile import default_profile
from published_runs import best_estimate

GIB = 2**30


def memory_results(rows: list[dict]) -> list[dict]:
    """Korthikanti et al. Figure 1 rows: model states and activations per GPU, first stage."""
    out = []
    for row in rows:
        if row["kind"] != "memory":
            continue
        est = best_estimate(row, default_profile(row["cluster"]["gpu_key"]))
        mem, me = est.memory, row["measured"]
        state = (mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes) / GIB
        out.append({
            "id": row["id"], "stage": mem.stage,
            "state_gib": state, "published_state_gib": me["memory_params_grads_optimizer_gib_per_gpu"],
            "activations_gib": mem.activations_bytes / GIB,
            "published_activations_gib": me["memory_activations_gib_per_gpu"],
            "peak_gib": mem.peak_bytes / GIB, "fits": mem.fits})
    for r in out:
        r["state_error"] = r["state_gib"] / r["published_state_gib"] - 1
        r["activations_error"] = r["activations_gib"] / r["published_activations_gib"] - 1
    return out


def _median_abs(results: list[dict]) -> float | None:
    errs = [abs(r["error"]) for r in results]
    return statistics.median(errs) if errs else None


def summary(results: list[dict], memory: list[dict]) -> dict:
    strict = [r for r in results if r["metric"] in ("step_time_s", "tokens_per_s_per_gpu")]
    scored = [r for r in results if r["scored"]]
    return {
        "rows_strict_step_time_or_tokens": len(strict),
        "median_abs_error_strict": _median_abs(strict),
        "rows_scored": len(scored),
        "median_abs_error_scored": _median_abs(scored),
        "rows_all": len(results),
        "median_abs_error_all": _median_abs(results),
        "max_abs_error_scored": max(abs(r["error"]) for r in scored),
        "training_rows_predicted_to_fit": sum(r["fits"] for r in results),
        "memory_max_abs_error_activations": max(abs(m["activations_error"]) for m in memory),
        "memory_max_abs_error_state": max(abs(m["state_error"]) for m in memory),
    }


def _table(results: list[dict]) -> list[str]:
    lines = ["| row | GPUs | metric | published | predicted | error | fits (peak GiB) | mb |",
             "|---|---:|---|---:|---:|---:|---|---:|"]
    for r in results:
        flag = "" if r["scored"] else " (not scored)"
        lines.append(f"| {r['id']}{flag} | {r['gpus']} | {r['metric']} {r['convention']} | "
                     f"{r['published']:.4g} | {r['predicted']:.4g} | {r['error']:+.1%} | "
                     f"{'yes' if r['fits'] else 'NO'} ({r['peak_gib']:.1f}) | {r['micro_batch']} |")
    return lines


def _memory_table(memory: list[dict]) -> list[str]:
    lines = ["| row | states GiB (paper) | error | activations GiB (paper) | error | peak GiB |",
             "|---|---:|---:|---:|---:|---:|"]
    for m in memory:
        lines.append(f"| {m['id']} | {m['state_gib']:.2f} ({m['published_state_gib']:.2f}) | "
                     f"{m['state_error']:+.1%} | {m['activations_gib']:.2f} "
                     f"({m['published_activations_gib']:.2f}) | {m['activations_error']:+.1%} | "
                     f"{m['peak_gib']:.1f} |")
    return lines


def write_outputs(results: list[dict], memory: list[dict], json_path: Path, md_path: Path,
                  skipped: list[str]) -> None:
    s = summary(results, memory)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"date": str(date.today()), "summary": s, "rows": results,
                                     "memory_rows": memory, "not_predicted": skipped},
                                    indent=1) + "\n")
    template = (Path(__file__).parent / "calibration_doc_head.md").read_text()
    body = template.format(**{k: (f"{v:.1%}" if isinstance(v, float) else v)
                              for k, v in s.items()})
    md = "\n".join([body, "## Throughput rows", "", *_table(results), "",
                    "## Memory rows (Korthikanti et al. 2022, Figure 1)", "",
                    *_memory_table(memory), "",
                    "## Not predicted", "",
                    *[f"- {rid}: global batch not published, so no step time can be predicted"
                      for rid in skipped], ""])
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(md)
    from doc_tables import update_section
    update_section("calibration", [
        "## Cost-model calibration (`benchmarks/calibration.py`)", "",
        "| rows | count | median abs error |", "|---|---:|---:|",
        f"| published step time or tokens/s/GPU | {s['rows_strict_step_time_or_tokens']} | "
        f"{s['median_abs_error_strict']:.1%} |",
        f"| scored (also TFLOP/s, MFU with full config) | {s['rows_scored']} | "
        f"{s['median_abs_error_scored']:.1%} |",
        f"| all predicted training rows | {s['rows_all']} | {s['median_abs_error_all']:.1%} |",
        "", f"Training rows predicted to fit in memory: {s['training_rows_predicted_to_fit']} of "
        f"{s['rows_all']}. Korthikanti et al. memory rows: activations within "
        f"{s['memory_max_abs_error_activations']:.1%}, model states within "
        f"{s['memory_max_abs_error_state']:.1%}. Row by row: `docs/calibration.md`."])
    print(json.dumps(s, indent=1))
