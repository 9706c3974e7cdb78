"""The kernel timings of ``benchmarks/device/kernel_probe.py`` (one GPU session) beside the
cost model's prices for the same kernels, with the shipped profile.

Reads ``benchmarks/results/device-<gpu>-kernels/kernels.json`` and ``machine.txt``; writes
``summary.json`` there and the ``device_kernels`` section of ``docs/benchmarks.md``. Nothing is
fitted here except where a line says so (the attention curve's level and knee, to show the
measured shape; the shipped knee is taken from this run, ``cost_models/data/profiles.json``).
Usage: ``python benchmarks/device/kernel_report.py [--dir DIR]``.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(HERE))
from report import publish  # noqa: E402

from cost_models.compute import (FA2_ON_SM90_PLUS, Gemm, GpuRates,  # noqa: E402
                                 fused_attention_efficiency, gemm_time_s)
from cost_models.fitting import BWD_ATTN, attention_flops  # noqa: E402
from cost_models.profile import default_profile  # noqa: E402
from topologies.catalog import get_gpu  # noqa: E402

CATALOG_GPU = {"NVIDIA H200": "H200-SXM-141GB", "NVIDIA H100 80GB HBM3": "H100-SXM5-80GB"}


def attention_points(datas: list[dict], peak: float, backend: str) -> list[dict]:
    """Every timed causal forward + backward of ``backend`` at head dim 128 (both sections, all
    runs): keys per query, 128-query tiles, efficiency."""
    out = []
    for data in datas:
        for r in data.get("attention", []) + data.get("attention_shapes", []):
            if (r["backend"] != backend or "error" in r
                    or (r["head_dim_qk"], r["head_dim_v"]) != (128, 128)):
                continue
            flops = (1 + BWD_ATTN) * attention_flops(r["batch"], r["heads"], r["seq"], 128)
            out.append({"shape": r["shape"], "batch": r["batch"], "heads": r["heads"],
                        "kv_heads": r.get("kv_heads", r["heads"]), "seq": r["seq"],
                        "keys": r["seq"] / 2,
                        "tiles": r["batch"] * r["heads"] * math.ceil(r["seq"] / 128),
                        "eff": flops / r["fwd_bwd_s"] / peak})
    return out


def _rms(points: list[dict], shape: Callable[[dict], float]) -> tuple[float, float, float]:
    """(sum of squared log errors, level, count) of ``level * shape`` over ``points``, the
    level the geometric-mean one."""
    fs = [shape(p) for p in points]
    level = math.exp(statistics.fmean(math.log(p["eff"] / f) for p, f in zip(points, fs)))
    return sum(math.log(level * f / p["eff"]) ** 2 for p, f in zip(points, fs)), level, len(fs)


def tiles_shape(hk: float, ht: float) -> Callable[[dict], float]:
    """The cost model's curve over its level: keys' knee times tiles' knee."""
    return lambda p: p["keys"] / (p["keys"] + hk) * p["tiles"] / (p["tiles"] + ht)


def work_shape(hk: float, hw: float) -> Callable[[dict], float]:
    """The alternative: keys' knee times a knee in the call's work, tiles x keys / 128
    (128 x 128 blocks): a fixed cost per call."""
    return lambda p: (p["keys"] / (p["keys"] + hk) * p["tiles"] * p["keys"] / 128
                      / (p["tiles"] * p["keys"] / 128 + hw))


def fit_joint(groups: dict[str, list[dict]], form=tiles_shape,
              grid_b=range(0, 401, 4)) -> dict:
    """Knees shared by every group (kernel), one level per group, least rms log error over all
    points (keys' knee on a 10-key grid to 1,000, the other on ``grid_b``)."""
    best = None
    for hk in range(0, 1001, 10):
        for hb in grid_b:
            fits = {g: _rms(pts, form(hk, hb)) for g, pts in groups.items()}
            total = math.sqrt(sum(f[0] for f in fits.values()) / sum(f[2] for f in fits.values()))
            if best is None or total < best["rms_log"] - 1e-12:
                best = {"half_keys": float(hk), "half_b": float(hb), "rms_log": total,
                        "levels": {g: f[1] for g, f in fits.items()},
                        "rms_by_group": {g: math.sqrt(f[0] / f[2]) for g, f in fits.items()}}
    return best


def attention_rows(data: dict, peak: float) -> list[dict]:
    """Per sequence length: each backend's forward + backward efficiency (FLOPs as the cost
    model counts them: causal half, backward 2.5x forward)."""
    out: dict[int, dict] = {}
    for r in data["attention"]:
        if r["shape"] != "mha" or "error" in r:
            continue
        flops = (1 + BWD_ATTN) * attention_flops(r["batch"], r["heads"], r["seq"],
                                                 r["head_dim_qk"])
        out.setdefault(r["seq"], {"seq": r["seq"], "keys": r["seq"] / 2, "tiles": r["batch"]
                                  * r["heads"] * math.ceil(r["seq"] / 128)})[r["backend"]] = (
            flops / r["fwd_bwd_s"] / peak)
    return [out[s] for s in sorted(out)]


def published_tokens_per_expert() -> list[float]:
    """M of the grouped expert GEMM (tokens per local expert per micro-batch, the busiest
    rank's) in every predictable published MoE run, at the configuration the cost model
    estimates it with (``benchmarks/calibration.py``'s rows)."""
    from calibration import predictable
    from published_runs import best_estimate, load_all_rows, row_model, row_workload

    from cost_models.compute import Shard, tokens_per_expert
    out = []
    for row in predictable(load_all_rows())[0]:
        model = row_model(row)
        if model.moe is None:
            continue
        cfg = best_estimate(row, default_profile(row["cluster"]["gpu_key"])).config
        d = cfg.degrees
        sh = Shard(batch=cfg.micro_batch, seq_len=row_workload(row).seq_len, tp=d.tp, cp=d.cp,
                   ep=d.ep, etp=d.expert_tp, sequence_parallel=cfg.sequence_parallel,
                   unfused_attention=False, dropout=False, moe_imbalance=cfg.moe_imbalance)
        out.append(tokens_per_expert(model, sh))
    return sorted(out)


def gemm_model_eff(m: float, n: float, k: float, rates: GpuRates, prof) -> float:
    t = gemm_time_s(Gemm(m, n, k), rates, prof)
    return 2 * m * n * k / t / rates.peak_flops


def summarise(folder: Path) -> dict:
    data = json.loads((folder / "kernels.json").read_text())
    more = [json.loads(p.read_text()) for p in sorted(folder.glob("kernels[0-9]*.json"))]
    info = data["info"]
    gpu = get_gpu(CATALOG_GPU.get(info["gpu"], "H200-SXM-141GB"))
    peak, bw = gpu.peak_flops_for("bf16"), gpu.hbm_bw_bytes_per_s
    prof = default_profile(gpu.name)
    rates = GpuRates(peak, bw)
    attn = attention_rows(data, peak)
    sweep = {b: [{"keys": r["keys"], "tiles": r["tiles"], "eff": r[b]} for r in attn if b in r]
             for b in ("cudnn", "flash")}
    # the length sweep alone (8,192 tiles throughout): the keys' knee, no tiles' knee
    curves = {b: fit_joint({b: pts}, grid_b=(0,)) for b, pts in sweep.items()}
    points = {b: attention_points([data, *more], peak, b) for b in ("cudnn", "flash")}
    groups = {f"{b} {gpu_label}": attention_points(runs, peak, b)
              for gpu_label, runs in _attention_runs(folder).items() for b in ("cudnn", "flash")}
    by_kernel = {b: [p for g, pts in groups.items() if g.startswith(b) for p in pts]
                 for b in ("cudnn", "flash")}
    joint = fit_joint(by_kernel)  # the two GPUs share the chip's compute: one level per kernel
    work = fit_joint(by_kernel, work_shape, [0, *(int(250 * 1.15 ** i) for i in range(30))])
    for fit in (joint, work):
        curve = tiles_shape if fit is joint else work_shape
        fit["rms_by_group"] = {g: math.sqrt(_rms(pts, curve(fit["half_keys"], fit["half_b"]))[0]
                                            / len(pts)) for g, pts in groups.items()}
    shipped = {g: math.sqrt(_rms(pts, tiles_shape(prof.attention_half_keys,
                                                  prof.attention_half_tiles))[0] / len(pts))
               for g, pts in groups.items()}
    constant = {g: math.sqrt(_rms(pts, lambda p: 1.0)[0] / len(pts)) for g, pts in groups.items()}
    for b, pts in points.items():
        for p in pts:
            p["shipped_shape"] = fused_attention_efficiency(prof, p["keys"], p["tiles"]) / (
                prof.attention_efficiency)
    for r in attn:
        r["fa2_over_native"] = r["flash"] / r["cudnn"]
        r["shipped_curve_shape"] = fused_attention_efficiency(prof, r["keys"], r["tiles"]) / (
            prof.attention_efficiency)
    gemm = []
    for r in data["gemm"]:
        flops = 2 * r["m"] * r["n"] * r["k"]
        gemm.append({"shape": r["shape"], "m": r["m"], "n": r["n"], "k": r["k"],
                     "fwd": flops / r["fwd_s"] / peak, "wgrad": flops / r["wgrad_s"] / peak,
                     "model": gemm_model_eff(r["m"], r["n"], r["k"], rates, prof)})
    grouped = []
    for r in data["grouped"]:
        flops = 2 * r["groups"] * r["m_per_expert"] * r["n"] * r["k"]
        grouped.append({"shape": r["shape"], "groups": r["groups"], "m": r["m_per_expert"],
                        "grouped": flops / r["grouped_s"] / peak if "grouped_s" in r else None,
                        "loop": flops / r["loop_s"] / peak,
                        "model": gemm_model_eff(r["m_per_expert"], r["n"], r["k"], rates,
                                                prof)})
    stream_bw = data["stream"]["bytes_moved"] / data["stream"]["add_s"]
    permute = []
    for r in data["permute"]:
        copies = r["tokens"] * r["top_k"] * r["hidden"] * 2
        permute.append({"tokens": r["tokens"], "hidden": r["hidden"], "top_k": r["top_k"],
                        # index_select: read and write every routed copy
                        "permute_of_bw": 2 * copies / r["permute_s"] / bw,
                        # multiply by the probabilities (read copy, write copy) and index_add_
                        # (read copy, read and write the output rows)
                        "unpermute_of_bw": (4 * copies + 2 * r["tokens"] * r["hidden"] * 2)
                        / r["unpermute_s"] / bw})
    fp8 = [{"m": r["m"], "n": r["n"], "k": r["k"], "speedup": r["bf16_s"] / r["fp8_s"],
            "bf16": 2 * r["m"] * r["n"] * r["k"] / r["bf16_s"] / peak}
           for r in (data.get("fp8") or [{}])[0].get("gemm", []) if "fp8_s" in r]
    return {"info": info, "catalog": {"gpu": gpu.name, "bf16_tflops": peak / 1e12,
                                      "hbm_GBps": bw / 1e9},
            "shipped": {"attention_efficiency": prof.attention_efficiency,
                        "attention_half_keys": prof.attention_half_keys,
                        "attention_half_tiles": prof.attention_half_tiles,
                        "fa2_on_sm90_plus": FA2_ON_SM90_PLUS,
                        "gemm_efficiency": prof.gemm_efficiency,
                        "gemm_half_dim": prof.gemm_half_dim, "hbm_efficiency": prof.hbm_efficiency,
                        "fp8_speedup": prof.fp8_speedup},
            "stream_of_bw": stream_bw / bw, "attention": attn,
            "attention_curves": {b: {"level": c["levels"][b], "half_keys": c["half_keys"],
                                     "rms_log": c["rms_log"]} for b, c in curves.items()},
            "attention_points": points,
            "attention_joint": {"tiles_form": joint, "work_form": work,
                                "shipped_rms_by_group": shipped,
                                "constant_rms_by_group": constant,
                                "points_by_group": {g: len(p) for g, p in groups.items()}},
            "repeat_spread": _repeat_spread(data, more),
            **_same_shape_spread(folder),
            "attention_constant_rms_log": {b: math.sqrt(_rms(pts, lambda p: 1.0)[0] / len(pts))
                                           for b, pts in sweep.items()},
            "gemm": gemm, "grouped": grouped, "permute": permute, "fp8": fp8,
            "published_tokens_per_expert": published_tokens_per_expert(),
            "section_s": data.get("section_s", {})}


def _attention_runs(folder: Path) -> dict[str, list[dict]]:
    """Every probe run with attention timings, by GPU: this folder's and its sibling GPU's
    (``device-<gpu>-kernels``)."""
    out = {}
    for d in sorted(folder.parent.glob("device-*-kernels")):
        runs = [json.loads(p.read_text()) for p in sorted(d.glob("kernels*.json"))]
        runs = [r for r in runs if r.get("attention") or r.get("attention_shapes")]
        if runs:
            out[d.name.split("-")[1].upper()] = runs
    return out


def _same_shape_spread(folder: Path) -> dict:
    """Largest relative difference between two timings of one shape and kernel in one run
    (``attention`` and ``attention_shapes`` both time batch 8 x 32 heads x 4,096 tokens)."""
    worst, where = 0.0, ""
    for gpu, runs in _attention_runs(folder).items():
        for run in runs:
            seen: dict[tuple, float] = {}
            for r in run.get("attention", []) + run.get("attention_shapes", []):
                if "error" in r:
                    continue
                key = (r["backend"], r["batch"], r["heads"], r.get("kv_heads", r["heads"]),
                       r["seq"], r["head_dim_qk"], r["head_dim_v"])
                if key in seen:
                    diff = 1 - min(seen[key], r["fwd_bwd_s"]) / max(seen[key], r["fwd_bwd_s"])
                    if diff > worst:
                        worst, where = diff, f"{r['backend']}, {gpu}"
                seen[key] = r["fwd_bwd_s"]
    return {"same_shape_spread": worst, "same_shape_worst": where}


def _repeat_spread(first: dict, more: list[dict]) -> float:
    """Largest relative difference of a later run's forward + backward attention timing from
    the first run's, same backend and shape."""
    base = {(r["shape"], r["backend"], r["seq"]): r["fwd_bwd_s"] for r in first["attention"]
            if "error" not in r}
    diffs = [abs(r["fwd_bwd_s"] / base[(r["shape"], r["backend"], r["seq"])] - 1)
             for d in more for r in d.get("attention", []) if "error" not in r]
    return max(diffs, default=0.0)


def _pct(x: float) -> str:
    return f"{x:.2f}"


def render(s: dict, folder: str) -> list[str]:
    info, sh, cat = s["info"], s["shipped"], s["catalog"]
    cu, fl = s["attention_curves"]["cudnn"], s["attention_curves"]["flash"]
    lines = [f"## GPU kernels behind the MoE and attention terms, {info['gpu']} "
             "(`benchmarks/device/kernel_probe.py`, `benchmarks/device/kernel_report.py`)", "",
             f"Three runs (the later two: attention, and permutation in the second) on a lent {info['gpu']} (torch {info['torch']}, CUDA {info['cuda']}, "
             f"cuDNN {info['cudnn']}); raw timings in `benchmarks/results/{folder}/`. Each "
             "kernel as a fraction of the catalog's peak "
             f"({cat['bf16_tflops']:g} bf16 TFLOP/s, {cat['hbm_GBps']:g} GB/s; `c = a + b` "
             f"over 1 GiB streams at {s['stream_of_bw']:.2f} of it), each the median of three "
             "timed loops (CUDA events) after warm-ups, GEMM weights rotated through copies "
             "larger than the L2.", "",
             "**Causal attention, forward + backward** (PyTorch SDPA, bf16, 32 heads of 128, "
             "32k tokens (8,192 tiles) per call; FLOPs as the cost model counts them; shipped "
             "curve: the cost model's efficiency over its level, both knees):", "",
             "| tokens | keys per query | FA2 (FLASH backend) | cuDNN (native) | FA2 / cuDNN "
             "| shipped curve |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in s["attention"]:
        lines.append(f"| {r['seq']:,} | {r['keys']:,.0f} | {_pct(r['flash'])} | "
                     f"{_pct(r['cudnn'])} | {r['fa2_over_native']:.3f} | "
                     f"{r['shipped_curve_shape']:.3f} |")
    lines += ["",
              f"* Over these lengths both kernels follow `level * L / (L + knee)`, L = keys per "
              f"query: cuDNN level {cu['level']:.3f}, knee {cu['half_keys']:.0f} keys, rms "
              f"error {cu['rms_log'] * 100:.1f}%; FA2 level {fl['level']:.3f}, knee "
              f"{fl['half_keys']:.0f}, {fl['rms_log'] * 100:.1f}% (a constant efficiency: "
              f"{s['attention_constant_rms_log']['cudnn'] * 100:.0f}% and "
              f"{s['attention_constant_rms_log']['flash'] * 100:.0f}%).", ""]
    lines += ["**Fewer tiles, other head layouts** (H200, its last run; forward + backward, head "
              "dim 128; tiles = batch x heads x tokens/128, as a TP-sharded micro-batch gives a "
              "kernel call; the H100's in `benchmarks/results/device-h100-kernels/`):",
              "", "| shape | batch x heads (kv) x tokens | tiles | FA2 | cuDNN | shipped "
              "curve |", "|---|---|---:|---:|---:|---:|"]
    by = {(p["shape"], p["batch"], p["heads"], p["seq"]): p for p in s["attention_points"]["cudnn"]
          if p["shape"] != "mha"}
    fa = {(p["shape"], p["batch"], p["heads"], p["seq"]): p for p in s["attention_points"]["flash"]}
    for key, p in by.items():
        f = fa.get(key)
        lines.append(f"| {p['shape']} | {p['batch']} x {p['heads']} ({p['kv_heads']}) x "
                     f"{p['seq']:,} | {p['tiles']:,} | {_pct(f['eff']) if f else ''} | "
                     f"{_pct(p['eff'])} | {p['shipped_shape']:.3f} |")
    jt, jw = s["attention_joint"]["tiles_form"], s["attention_joint"]["work_form"]
    n = s["attention_joint"]["points_by_group"]
    lines += ["", "One curve for both kernels on both GPUs (head dim 128; "
              + ", ".join(f"{g} {c}" for g, c in n.items()) + " timings), knees shared and a "
              "level per kernel (the GPUs share the chip's compute), rms log error by kernel "
              "and GPU:", "",
              "| kernel, GPU | cost model's knees (" +
              f"{sh['attention_half_keys']:g} keys, {sh['attention_half_tiles']:g} tiles) | "
              "best shared tiles' knees | keys and work knees | constant |",
              "|---|---:|---:|---:|---:|"]
    for g in n:
        lines.append(f"| {g} | "
                     f"{s['attention_joint']['shipped_rms_by_group'][g]:.1%} | "
                     f"{jt['rms_by_group'][g]:.1%} | {jw['rms_by_group'][g]:.1%} | "
                     f"{s['attention_joint']['constant_rms_by_group'][g]:.1%} |")
    lines += ["",
              f"* Best shared knees: {jt['half_keys']:.0f} keys and {jt['half_b']:.0f} tiles "
              f"(rms {jt['rms_log']:.1%} over all); the tiles' knee sits near the 132 SMs of "
              "both GPUs. The shipped profile takes them (`attention_half_keys`, "
              "`attention_half_tiles`); only the level is fitted on published runs "
              f"(`attention_efficiency` {sh['attention_efficiency']:g}, against the native "
              f"kernel's {jt['levels']['cudnn']:.2f}: the "
              "fit puts on attention about twice the time its kernels take, time the model "
              "misses elsewhere and that grows with attention's share).",
              "* FA2 follows the tiles' knee (it parallelises over query tiles); cuDNN fits a "
              f"knee in the call's work better (keys {jw['half_keys']:.0f}, work "
              f"{jw['half_b']:.0f} blocks of 128 x 128; a fixed cost per call): at micro-batch 1 "
              "with few heads and very long sequences cuDNN runs faster than the tiles' knee "
              "says, and with few heads at 2k tokens slower. One form for both is what the cost "
              "model has; the cuDNN rows above are its error.",
              f"* FA2 / cuDNN, the ratio of their levels: "
              f"{jt['levels']['flash'] / jt['levels']['cudnn']:.3f}.",
              f"* `FA2_ON_SM90_PLUS` = {sh['fa2_on_sm90_plus']:g}: the two levels' ratio over "
              "both GPUs' timings together (PyTorch's report: 0.52, forward only, 4,608 tokens, "
              "H100).",
              "* Head dim 64 runs at about 0.8-0.9 of head dim 128 and GQA (4 query heads per "
              "KV head) as MHA; MLA's shape (q/k head dim 192, v 128): the FLASH backend has no "
              "kernel for it, cuDNN runs it (`kernels*.json`). Neither is priced apart.",
              "* Repeatability: the later runs' 1k-32k timings are within "
              f"{s['repeat_spread']:.0%} of the first's; within one run, two timings of one "
              "shape (`d128` and `mha` at 4,096 tokens) differed by up to "
              f"{s['same_shape_spread']:.0%} (the kernel and GPU of that: "
              f"{s['same_shape_worst']}).", ""]
    lines += ["**Expert GEMMs** (bf16): one grouped GEMM (`torch._grouped_mm`) over G local "
              "experts and G plain GEMMs, against the cost model's price of one expert's GEMM "
              f"(`gemm_efficiency` {sh['gemm_efficiency']:g} x n/(n + {sh['gemm_half_dim']:g}), "
              "n the smallest side, or its HBM traffic if slower), by tokens per expert M:", "",
              "| shape (N x K) | G | " + " | ".join(
                  f"M {m}" for m in sorted({g['m'] for g in s["grouped"]})) + " |",
              "|---|---:|" + "---:|" * len({g['m'] for g in s["grouped"]})]
    ms = sorted({g["m"] for g in s["grouped"]})
    keyed = {(g["shape"], g["groups"], g["m"]): g for g in s["grouped"]}
    for shape in dict.fromkeys(g["shape"] for g in s["grouped"]):
        for groups in sorted({g["groups"] for g in s["grouped"] if g["shape"] == shape}):
            cells = []
            for m in ms:
                g = keyed.get((shape, groups, m))
                cells.append("" if g is None else
                             f"{_pct(g['grouped'])} / {_pct(g['loop'])} / {_pct(g['model'])}")
            lines.append(f"| {shape} | {groups} | " + " | ".join(cells) + " |")
    lines += ["", "Cells: grouped / G plain GEMMs / cost model, fraction of peak.", ""]
    big = [g for g in s["gemm"] if g["m"] >= 512]
    small = [g for g in s["gemm"] if g["m"] <= 128]
    ratio = [g["fwd"] / g["model"] for g in big]
    gain = [g["grouped"] / g["loop"] for g in s["grouped"] if g["m"] == 128 and g["grouped"]]
    dev = [g["grouped"] / g["model"] - 1 for g in s["grouped"] if g["m"] >= 1024 and g["grouped"]]
    tpe = s["published_tokens_per_expert"]
    lines += [f"* Plain GEMMs at the same shapes and at a dense 8192 square (`kernels.json`): "
              f"for M >= 512 measured / model is {min(ratio):.2f}-{max(ratio):.2f} (median "
              f"{statistics.median(ratio):.2f}) in the forward; weight gradients (reduction over "
              f"M) run at {statistics.median(g['wgrad'] / g['fwd'] for g in big):.2f} of the "
              "forward's speed (median). At M <= 128 the model is optimistic: measured / model "
              f"{statistics.median(g['fwd'] / g['model'] for g in small):.2f} (median; launch "
              "and latency bound, a few microseconds a call).",
              f"* Grouping pays at small M: at M = 128 the grouped GEMM runs "
              f"{min(gain):.1f}-{max(gain):.1f}x the plain GEMMs' speed; from M = 1024 the "
              f"grouped GEMM is {min(dev):+.0%} to {max(dev):+.0%} off the model. In the "
              f"{len(tpe)} published MoE runs the calibration predicts, the busiest expert's M "
              f"per micro-batch is {tpe[0]:,.0f} to {tpe[-1]:,.0f} (median "
              f"{statistics.median(tpe):,.0f}; {sum(t >= 1024 for t in tpe)} of {len(tpe)} at "
              "1,024 or more), where the shipped curve and the grouped kernel agree.", ""]
    pm = s["permute"]
    lines += ["**Token permutation** (bf16, experts' copies sorted by expert): "
              + "; ".join(f"{p['tokens']:,} tokens x h {p['hidden']} top-{p['top_k']}: "
                          f"index_select {p['permute_of_bw']:.2f}, weighted index_add_ back "
                          f"{p['unpermute_of_bw']:.2f}" for p in pm)
              + " of the bandwidth. The cost model prices both at `hbm_efficiency` "
              f"{sh['hbm_efficiency']:g}: right for the gather; the eager scatter-add back "
              f"(atomics) runs {sh['hbm_efficiency'] / max(p['unpermute_of_bw'] for p in pm):.1f}"
              f"-{sh['hbm_efficiency'] / min(p['unpermute_of_bw'] for p in pm):.1f}x slower "
              "than that. Megatron-Core's fused permutation "
              "(`moe_permute_fusion`, Transformer Engine) gathers instead of scattering; the "
              "eager path is not priced separately.", ""]
    if s["fp8"]:
        sp = [f["speedup"] for f in s["fp8"]]
        lines += [f"**fp8 GEMMs** (`torch._scaled_mm`, e4m3, per-tensor scales) against bf16 on "
                  f"the same shapes: {min(sp):.2f}-{max(sp):.2f}x (median "
                  f"{statistics.median(sp):.2f}; the shipped `fp8_speedup`, fitted on published "
                  f"runs, is {sh['fp8_speedup']:g}). The smallest shape (2048 x 4096 x 1536) "
                  "gains least.", ""]
    lines.append("Section run times on the GPU: " + ", ".join(
        f"{k} {v:.1f} s" for k, v in s["section_s"].items()) + ".")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=ROOT / "benchmarks/results/device-h200-kernels")
    args = ap.parse_args()
    summary = summarise(args.dir)
    publish(args.dir, "device_kernels", summary, render(summary, args.dir.name))


if __name__ == "__main__":
    main()
