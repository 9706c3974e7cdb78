"""Memory rows of the calibration set, and the JSON + Markdown outputs of calibration.py."""
from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from datetime import date
from pathlib import Path

from cost_models.profile import default_profile
from published_runs import KNOWN_REGRESSION_NOTE, best_estimate

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


def _p90_abs(results: list[dict]) -> float | None:
    errs = sorted(abs(r["error"]) for r in results)
    return errs[min(len(errs) - 1, math.ceil(0.9 * len(errs)) - 1)] if errs else None


def summary(results: list[dict], memory: list[dict]) -> dict:
    strict = [r for r in results if r["metric"] in ("step_time_s", "tokens_per_s_per_gpu")]
    scored = [r for r in results if r["scored"]]
    dense = [r for r in scored if not r["moe"]]
    moe = [r for r in scored if r["moe"]]
    return {
        "rows_scored_dense": len(dense), "median_abs_error_dense": _median_abs(dense),
        "rows_scored_moe": len(moe), "median_abs_error_moe": _median_abs(moe),
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


def _fmt_tau(v: float | None) -> str:
    return "-" if v is None else f"{v:+.2f}"


def _table(results: list[dict]) -> list[str]:
    lines = ["| row | GPUs | metric | published | predicted | error | fits (peak GiB) | mb |",
             "|---|---:|---|---:|---:|---:|---|---:|"]
    for r in results:
        flag = "" if r["scored"] else (
            " (not scored: the source marks it a known regression)"
            if _known_regression(r) else " (not scored)")
        lines.append(f"| {r['id']}{flag} | {r['gpus']} | {r['metric']} {r['convention']} | "
                     f"{r['published']:.4g} | {r['predicted']:.4g} | {r['error']:+.1%} | "
                     f"{'yes' if r['fits'] else 'NO'} ({r['peak_gib']:.1f}) | {r['micro_batch']} |")
    return lines


def _known_regression(r: dict) -> bool:
    """Whether the row's source marks its number a known regression (published_runs)."""
    return r.get("note", "").startswith(KNOWN_REGRESSION_NOTE)


def _regression_lines(results: list[dict]) -> list[str]:
    """The rows left unscored because their source marks them a known regression, with the
    source's own words."""
    notes: dict[str, list[str]] = defaultdict(list)
    for r in results:
        if _known_regression(r):
            notes[r["note"][len(KNOWN_REGRESSION_NOTE):]].append(r["id"])
    return [f"Not scored, in their source's words: {note} ({', '.join(ids)})"
            for note, ids in notes.items()] + ([""] if notes else [])


def _memory_table(memory: list[dict]) -> list[str]:
    lines = ["| row | states GiB (paper) | error | activations GiB (paper) | error | peak GiB |",
             "|---|---:|---:|---:|---:|---:|"]
    for m in memory:
        lines.append(f"| {m['id']} | {m['state_gib']:.2f} ({m['published_state_gib']:.2f}) | "
                     f"{m['state_error']:+.1%} | {m['activations_gib']:.2f} "
                     f"({m['published_activations_gib']:.2f}) | {m['activations_error']:+.1%} | "
                     f"{m['peak_gib']:.1f} |")
    return lines


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _groups(results: list[dict], key) -> dict:
    out = defaultdict(list)
    for r in results:
        if r["scored"]:
            out[key(r)].append(r)
    return dict(sorted(out.items()))


def error_tables(results: list[dict], loso: dict | None) -> tuple[list[str], dict]:
    """Median / p90 absolute error per GPU family x dense/MoE and per source: shipped defaults,
    and (with --loso) the in-memory refit on all sources and the leave-one-source-out refits."""
    cols = [("shipped", results)]
    if loso:
        cols += [("refit in-sample", loso["in_sample"]), ("LOSO", loso["held_out"])]
    keys = [("GPU family, dense/MoE", lambda r: f"{r['family']} {'MoE' if r['moe'] else 'dense'}"),
            ("source", lambda r: r["source"]), ("all", lambda r: "dense" if not r["moe"]
                                               else "MoE")]
    lines, data = [], {}
    for title, key in keys:
        head = "| " + title + " | rows | " + " | ".join(
            f"{c} median | {c} p90" for c, _ in cols) + " |"
        lines += [head, "|---|---:|" + "---:|---:|" * len(cols)]
        grouped = [_groups(res, key) for _, res in cols]
        for g in grouped[0]:
            cells, entry = [], {"rows": len(grouped[0][g])}
            for (c, _), gr in zip(cols, grouped):
                rs = gr.get(g, [])
                med, p90 = _median_abs(rs), _p90_abs(rs)
                cells.append(f"{_fmt(med)} | {_fmt(p90)}")
                entry[c] = {"median_abs_error": med, "p90_abs_error": p90, "rows": len(rs)}
            data[f"{title}: {g}"] = entry
            lines.append(f"| {g} | {len(grouped[0][g])} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines, data


# Sources whose tables republish one model and system release after release, retuning the
# layout: their sweeps collect the layouts over the releases
ACROSS_RELEASES = ("megatron-bridge", "dgxc-benchmarking")


def _sweep_key(r: dict) -> tuple:
    """One model on one cluster at one sequence length and precision, measured in one table
    (step-time rows also at one global batch): its rows differ only in the layout."""
    gb = r["global_batch"] if r["metric"] == "step_time_s" else None
    table = re.sub(r"\s*\(.*\)", "", r["table"]).split(":")[0]
    if r["source"] in ACROSS_RELEASES:
        table = ""  # one model and system over the container releases
    return (r["source"], table, r["model"], r["gpu"], r["gpus"], r["seq_len"],
            str(r["precision"]).lower(), r["metric"], gb)


def _kendall(a: list[float], b: list[float]) -> float:
    conc = disc = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            s = (a[i] - a[j]) * (b[i] - b[j])
            conc += s > 0
            disc += s < 0
    pairs = len(a) * (len(a) - 1) / 2
    return (conc - disc) / pairs if pairs else float("nan")


def sweeps(results: list[dict], min_layouts: int = 2) -> list[dict]:
    """Groups of rows with the same model, cluster and workload and at least ``min_layouts``
    distinct layouts; Kendall tau of predicted vs published throughput and top-1 (the layout
    predicted best is within 3% of the published best). Rows repeating a layout are averaged;
    rows their source marks a known regression are left out (they time a defect, not the
    layout)."""
    groups = defaultdict(lambda: defaultdict(list))
    for r in results:
        if not _known_regression(r):
            groups[_sweep_key(r)][r["layout"]].append(r)
    out = []
    for key, by_layout in groups.items():
        if len(by_layout) < min_layouts:
            continue
        sign = -1 if key[7] == "step_time_s" else 1  # higher score = faster
        lay = sorted(by_layout)
        pub = [sign * statistics.mean(x["published"] for x in by_layout[k]) for k in lay]
        pred = [sign * statistics.mean(x["predicted"] for x in by_layout[k]) for k in lay]
        best_pub, best_pred = max(range(len(lay)), key=pub.__getitem__), max(
            range(len(lay)), key=pred.__getitem__)
        ratio = pub[best_pred] / pub[best_pub] if sign > 0 else pub[best_pub] / pub[best_pred]
        cross = key[0] in ACROSS_RELEASES
        out.append({"sweep": f"{key[0]}: {key[2]} on {key[4]}x {key[3]}, s={key[5]}, "
                             f"{key[6]}" + (f" ({key[1]})" if key[1] else "")
                             + (" (across releases)" if cross else ""),
                    "kind": "across releases" if cross else "one table",
                    "layouts": len(lay), "kendall_tau": _kendall(pub, pred),
                    "top1": ratio >= 0.97, "published_best": lay[best_pub],
                    "predicted_best": lay[best_pred], "published_of_predicted_best": ratio,
                    "rows": [x["id"] for k in lay for x in by_layout[k]]})
    return sorted(out, key=lambda s: s["sweep"])


def sweep_summary(sw: list[dict], kind: str | None = None) -> dict:
    sw = [s for s in sw if kind is None or s["kind"] == kind]
    taus = [s["kendall_tau"] for s in sw]
    return {"sweeps": len(sw), "median_kendall_tau": statistics.median(taus) if taus else None,
            "top1_within_3pct": sum(s["top1"] for s in sw),
            "top1_fraction": sum(s["top1"] for s in sw) / len(sw) if sw else None}


def _sweep_table(sw: list[dict], loso_sw: dict | None) -> list[str]:
    extra = " LOSO tau | LOSO top-1 |" if loso_sw else ""
    lines = ["| sweep | layouts | Kendall tau | top-1 | published best | predicted best "
             "(its published / best) |" + extra,
             "|---|---:|---:|---|---|---|" + ("---:|---|" if loso_sw else "")]
    for s in sw:
        cell = ""
        if loso_sw:
            o = loso_sw.get(s["sweep"])
            cell = (f" {o['kendall_tau']:+.2f} | {'yes' if o['top1'] else 'no'} |" if o
                    else " - | - |")
        lines.append(f"| {s['sweep']} | {s['layouts']} | {s['kendall_tau']:+.2f} | "
                     f"{'yes' if s['top1'] else 'no'} | {s['published_best']} | "
                     f"{s['predicted_best']} ({s['published_of_predicted_best']:.1%}) |" + cell)
    return lines


def feature_lines(steps: dict) -> list[str]:
    from feature_steps import lines
    return lines(steps)


def write_outputs(results: list[dict], memory: list[dict], json_path: Path, md_path: Path,
                  skipped: dict[str, str], loso: dict | None = None,
                  steps: dict | None = None) -> None:
    s = summary(results, memory)
    sw = sweeps(results)
    ssum = sweep_summary(sw)
    s.update({f"sweep_{k}": v for k, v in ssum.items()})
    for kind, tag in (("one table", "table"), ("across releases", "release")):
        s.update({f"sweep_{tag}_{k}": v for k, v in sweep_summary(sw, kind).items()})
    err_lines, err_data = error_tables(results, loso)
    loso_sw = None
    if loso:
        lsw = sweeps(loso["held_out"])
        loso_sw = {x["sweep"]: x for x in lsw}
        s.update({f"loso_sweep_{k}": v for k, v in sweep_summary(lsw).items()})
        for name, res in (("refit_in_sample", loso["in_sample"]), ("loso", loso["held_out"])):
            for kind, moe in (("dense", False), ("moe", True)):
                rs = [r for r in res if r["scored"] and r["moe"] == moe]
                s[f"{name}_median_abs_error_{kind}"] = _median_abs(rs)
                s[f"{name}_p90_abs_error_{kind}"] = _p90_abs(rs)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({
        "date": str(date.today()), "summary": s, "errors_by_group": err_data, "sweeps": sw,
        "loso": None if not loso else {
            "params_all": loso["params_all"], "params_without": loso["params_without"],
            "sweeps": list(loso_sw.values()),
            "held_out_rows": [{k: r[k] for k in ("id", "source", "published", "predicted",
                                                 "error", "scored")} for r in loso["held_out"]]},
        "rows": results, "memory_rows": memory, "not_predicted": skipped,
        "feature_steps": steps}, indent=1) + "\n")
    template = (Path(__file__).parent / "calibration_doc_head.md").read_text()
    values = defaultdict(lambda: "n/a (run with --loso)", {
        k: (f"{v:+.2f}" if "tau" in k and isinstance(v, float) else
            f"{v:.1%}" if isinstance(v, float) else v) for k, v in s.items()})
    body = template.format_map(values)
    loso_note = (["Leave-one-source-out columns: `--loso` refits the parameters in memory on "
                  "all scored rows (\"refit in-sample\") and, for each source, on all other "
                  "sources, then predicts the held-out source (\"LOSO\"). Fitted parameters: "
                  "see `loso` in `benchmarks/results/calibration.json`.", ""] if loso else
                 ["Leave-one-source-out columns are missing: this run was made without "
                  "`--loso` (eleven refits, about 13 minutes on 2 cores).", ""])
    why = defaultdict(list)
    for rid, reason in skipped.items():
        why[reason].append(rid)
    md = "\n".join([body, "## Error by GPU family, dense/MoE and source (scored rows)", "",
                    "Absolute error of the predicted throughput (or step time); p90 = 90th "
                    "percentile.", "", *loso_note, *err_lines,
                    "## Layout sweeps (ranking)", "",
                    f"{ssum['sweeps']} sweeps: rows of one source with the same model, cluster, "
                    "sequence length and precision (step-time rows also the same global batch) "
                    "and two or more layouts; rows repeating a layout are averaged. Kendall tau "
                    "compares predicted with published throughput; top-1: the layout predicted "
                    "best is published within 3% of the best. \"One table\" sweeps were "
                    "measured together (Korthikanti Table 5 recompute pairs, the MoE model "
                    "zoo's Qwen3-235B layouts); \"across releases\" sweeps collect the layouts "
                    "Megatron-Bridge (containers 25.11-26.08) or DGX Cloud Benchmarking "
                    "(releases v24.11.1-v25.05.04) published for one model and system over "
                    "their releases, so software changes are mixed into the ranking.", "",
                    f"- all sweeps: median tau **{_fmt_tau(ssum['median_kendall_tau'])}**, "
                    f"top-1 in **{ssum['top1_within_3pct']} of {ssum['sweeps']}**;",
                    *[f"- {kind} sweeps: median tau {_fmt_tau(x['median_kendall_tau'])}, top-1 "
                      f"in {x['top1_within_3pct']} of {x['sweeps']};"
                      for kind, x in ((k, sweep_summary(sw, k))
                                      for k in ("one table", "across releases"))], "",
                    *_sweep_table(sw, loso_sw), "",
                    *(feature_lines(steps) if steps else []),
                    "## Throughput rows", "", *_table(results), "", *_regression_lines(results),
                    "## Memory rows (Korthikanti et al. 2022, Figure 1)", "",
                    *_memory_table(memory), "",
                    f"## Not predicted ({len(skipped)} rows)", "",
                    *[f"- not predicted: {reason} ({len(ids)} rows): {', '.join(ids)}"
                      for reason, ids in why.items()], ""])
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
        f"| scored dense / MoE | {s['rows_scored_dense']} / {s['rows_scored_moe']} | "
        f"{_fmt(s['median_abs_error_dense'])} / {_fmt(s['median_abs_error_moe'])} |",
        "", f"Training rows predicted to fit in memory: {s['training_rows_predicted_to_fit']} of "
        f"{s['rows_all']}. Korthikanti et al. memory rows: activations within "
        f"{s['memory_max_abs_error_activations']:.1%}, model states within "
        f"{s['memory_max_abs_error_state']:.1%}. Layout sweeps: {s['sweep_sweeps']}, median "
        f"Kendall tau {_fmt_tau(s['sweep_median_kendall_tau'])}, top-1 within 3% in "
        f"{s['sweep_top1_within_3pct']}. Leave-one-source-out (`--loso`): dense "
        f"{_fmt(s.get('loso_median_abs_error_dense'))}, MoE "
        f"{_fmt(s.get('loso_median_abs_error_moe'))}. Row by row: `docs/calibration.md`."])
    print(json.dumps(s, indent=1))
