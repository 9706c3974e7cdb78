"""Build ``published_runs_extra.json`` from the published tables (run once; kept for provenance).

    python benchmarks/data/build_published_runs_extra.py MEGATRON_BRIDGE_GIT_DIR LLM_FOUNDRY_GIT_DIR

Reads, with ``git show <commit>:<path>`` from snapshots of the public repositories:

* NVIDIA-NeMo/Megatron-Bridge ``docs/performance-summary.md`` and
  ``docs/performance-summary-archive.md`` (pre-training tables of every NeMo container release:
  system, #GPUs, precision, GBS, MBS, sequence length, FSDP, TP, PP, CP, VP, EP,
  tokens/s/GPU, model TFLOP/s/GPU). SFT and LoRA tables are skipped (not pre-training).
* NVIDIA/NeMo ``docs/source/performance/performance_summary.md`` (NeMo 24.07, DGX-H100, FP8
  pre-training table; hand-entered below from the page's last version) and pytorch/torchtitan
  ``benchmarks/*.md`` (Llama 3.1 on H100, Dec 2024 and June 2025; hand-entered below).
* NVIDIA/Megatron-LM's DeepSeek-V3 GB200 optimisation guide (hand-entered below; the
  guide was removed from the repository after eb0783b6, read there).
* mosaicml/llm-foundry ``scripts/train/benchmarking/README.md`` (MPT throughput tables:
  model, sequence length, #GPUs, GPU, micro-batch, grad-accum, global batch, precision,
  FSDP sharding strategy, activation checkpointing, tokens/s/GPU); model shapes from
  ``scripts/train/yamls/pretrain/mpt-*.yaml``.

Every row keeps its source (repository, commit, file, container / table heading). Values are
copied, never adjusted. Where the same configuration appears in several container releases
of Megatron-Bridge, every release is kept (``source_table`` names it): the spread between
releases is the software drift of the same run.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).parent / "published_runs_extra.json"

# Megatron-Bridge model names -> planner preset (planner/data/models) and published shape.
MB_MODELS = {
    "LLAMA3_8B": ("llama-3.1-8b", "llama3-dense"), "LLAMA3_70B": ("llama-3.1-70b", "llama3-dense"),
    "LLAMA3.1_405B": ("llama-3.1-405b", "llama3-dense"), "LLAMA31_405B": ("llama-3.1-405b", "llama3-dense"),
    "DeepSeekV3": ("deepseek-v3", "deepseek-moe"),
    "DeepSeekV3 (w/ MTP)": ("deepseek-v3", "deepseek-moe"), "GPT OSS 120B": ("gpt-oss-120b", "gpt-oss-moe"),
    "Qwen3_30B_a3B": ("qwen3-30b-a3b", "qwen3-moe"), "Qwen3_235B_a22B": ("qwen3-235b-a22b", "qwen3-moe"),
    "Kimi_K2": ("kimi-k2", "kimi-moe"),
}
MB_SYSTEMS = {"DGX-GB300": ("GB300", 4), "DGX-GB200": ("GB200", 4), "DGX-B300": ("B300", 8),
              "DGX-B200": ("B200", 8), "DGX-H100": ("H100-SXM5-80GB", 8)}
MPT_GPUS = {"h100_80gb": "H100-SXM5-80GB", "a100_80gb": "A100-SXM4-80GB",
            "a100_40gb": "A100-SXM4-40GB"}
MPT_SHAPES = {"1b": (24, 2048, 16), "3b": (32, 2560, 20), "7b": (32, 4096, 32),
              "13b": (40, 5120, 40), "30b": (48, 7168, 56), "70b": (80, 8192, 64)}


def git_show(repo: str, path: str) -> tuple[str, str]:
    commit = subprocess.run(["git", "--git-dir", repo, "rev-parse", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    text = subprocess.run(["git", "--git-dir", repo, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout
    return commit, text


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _num(x: str):
    x = re.sub(r"\[\^[^\]]*\]", "", x).strip()
    if x.lower() in ("n/a", "", "-"):
        return None
    return float(x) if "." in x else int(x)


# A table footnote that says the published number is a performance regression the publisher
# knows of (e.g. "[^gpt-oss-note]: Performance regression in GPT-OSS 120B pre-training is a
# known issue (cudnn-frontend#256) ..."): the row keeps its number and carries the footnote as
# ``known_regression``; published_runs.row_target leaves such rows unscored.
REGRESSION_NOTE = re.compile(r"performance regression", re.IGNORECASE)


def _footnotes(text: str) -> dict[str, str]:
    """``[^name]: text`` definitions of a Markdown page."""
    return {m.group(1): m.group(2).strip()
            for m in re.finditer(r"^\[\^([^\]]+)\]:\s*(.+)$", text, re.MULTILINE)}


def regression_notes(line: str, notes: dict[str, str]) -> list[str]:
    """The footnotes a table line cites that call its number a performance regression."""
    cited = dict.fromkeys(re.findall(r"\[\^([^\]]+)\]", line))
    return [notes[n] for n in cited if REGRESSION_NOTE.search(notes.get(n, ""))]


def megatron_bridge(repo: str) -> list[dict]:
    rows = []
    for path in ("docs/performance-summary.md", "docs/performance-summary-archive.md"):
        commit, text = git_show(repo, path)
        notes = _footnotes(text)
        container = section = model = system = None
        header: list[str] | None = None
        for line in text.splitlines():
            if line.startswith("## ") and "Container" in line:
                container = line[3:].strip()
            elif line.startswith("### "):
                section = line[4:].strip()
            elif line.startswith("#### Model:"):
                model, header = line.split(":", 1)[1].strip(), None
            elif line.startswith("#### System:"):
                system, header = line.split(":", 1)[1].strip(), None
            elif line.startswith("|") and ("System" in line or "Model" in line):
                header = _cells(line)
            elif line.startswith("|") and header and not line.startswith("|--"):
                if section != "Pre-Training Performance" or container is None:
                    continue
                if "Precision" not in header:  # 25.09 tables: precision not stated
                    continue
                v = dict(zip(header, _cells(line)))
                v.setdefault("System", system)
                name = v.get("Model", model).replace("(w/o MTP)", "").strip()
                regressions = regression_notes(line, notes)
                for alt in _alternatives(v):
                    row = _mb_row(alt, name, container, path, commit)
                    if regressions:
                        row["known_regression"] = " ".join(regressions)
                    rows.append(row)
    return rows


def _alternatives(v: dict) -> list[dict]:
    """'FP8-CS (FP8-MX)' with '37556 (36108)': two published runs, the second in parentheses."""
    if "(" not in v["Precision"]:
        return [{k: re.sub(r"\s*\(.*\)", "", x) for k, x in v.items()}]
    first = {k: re.sub(r"\s*\(.*\)", "", x) for k, x in v.items()}
    second = {k: (re.search(r"\(([^)]*)\)", x).group(1) if re.search(r"\(([^)]*)\)", x)
                  else x) for k, x in v.items()}
    return [first, second]


def _mb_row(v: dict, model: str, container: str, path: str, commit: str) -> dict:
    gpu, per_node = MB_SYSTEMS[v["System"]]
    n = _num(v["#-GPUs"])
    tp, pp, cp = (_num(v[k]) or 1 for k in ("TP", "PP", "CP"))
    fsdp = _num(v.get("FSDP", "0")) or 0
    ep = _num(v["EP"])
    preset, family = MB_MODELS.get(model, (None, "unknown"))
    tok = _num(v["Tokens / sec / GPU"])
    cid = re.sub(r"[^0-9.]", "", container.split()[0]) or container
    rid = (f"mbridge-{cid}-{model.lower().replace(' ', '').replace('_', '').replace('.', '')}-"
           f"{v['System'].lower().replace('dgx-', '')}-{n}-{v['Precision'].lower()}-"
           f"tp{tp}pp{pp}cp{cp}vp{_num(v['VP']) or 1}ep{ep or 1}mbs{_num(v['MBS'])}"
           f"gbs{_num(v['GBS'])}{'-fsdp' if fsdp else ''}")
    moe = family.endswith("moe")
    return {
        "id": rid, "kind": "training",
        "source": f"github:NVIDIA-NeMo/Megatron-Bridge {path} @ {commit[:8]}",
        "source_url": f"https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/{commit}/{path}",
        "source_table": f"{container}, Pre-Training Performance, Model: {model}",
        "confidence": "A",
        "model": {"name": model, "preset": preset, "family": family,
                  "seq_len": _num(v["Sequence Length"]), "moe": {} if moe else None,
                  "arch_source": f"planner preset {preset} (HF config.json of the public checkpoint)"
                  if preset else "no planner preset"},
        "cluster": {"gpu": v["System"], "gpu_key": gpu, "num_gpus": n, "gpus_per_node": per_node,
                    "interconnect": f"{v['System']} (NVL72 racks counted as 4-GPU trays)"
                    if per_node == 4 else f"{v['System']}: 8 GPUs per node, NVLink + InfiniBand"},
        "config": {"tp": tp, "pp": pp, "cp": cp, "dp": n // (tp * pp * cp), "ep": ep,
                   "vpp": _num(v["VP"]), "micro_batch": _num(v["MBS"]),
                   "global_batch": _num(v["GBS"]), "recompute": None, "seq_parallel": None,
                   "zero": f"FSDP {fsdp}" if fsdp else "distributed optimizer (Megatron-Bridge default)",
                   "precision": v["Precision"]},
        "measured": {"tokens_per_sec_per_gpu": tok,
                     "model_tflops_per_gpu": _num(v["Model TFLOP / sec / GPU"])},
        "derived": {"tokens_per_sec_per_gpu": tok},
        "notes": "MoE benchmarks force-balance tokens among experts and are dropless (page footnote)."
        if moe else "",
    }


def mpt(repo: str) -> list[dict]:
    path = "scripts/train/benchmarking/README.md"
    commit, text = git_show(repo, path)
    rows, table, header = [], None, None
    for line in text.splitlines():
        if line.startswith("## "):
            table, header = line[3:].strip(), None
        elif line.startswith("|") and "Model" in line and "SeqLen" in line:
            header = _cells(line)
        elif line.startswith("|") and header and not line.replace(" ", "").startswith("|---"):
            v = dict(zip(header, _cells(line)))
            size = v["Model"]
            if size not in MPT_SHAPES:
                continue
            L, h, a = MPT_SHAPES[size]
            n, seq = int(v["# GPUs"]), int(v["SeqLen (T)"])
            mb, gb = int(v["MicroBatchSize"]), int(v["GlobalBatchSize"])
            ckpt = v["Activation Checkpointing"] == "True"
            prec = v["Precision"]
            rid = f"mpt-{v['GPU'].replace('_', '')}-{size}-s{seq}-{n}gpu-mb{mb}-gb{gb}-{prec}"
            tok = int(v["Throughput (T/s/GPU)"])
            rows.append({
                "id": rid, "kind": "training",
                "source": f"github:mosaicml/llm-foundry {path} @ {commit[:8]}",
                "source_url": f"https://github.com/mosaicml/llm-foundry/blob/{commit}/{path}",
                "source_table": table, "confidence": "A",
                "model": {"name": f"MPT-{size}", "family": "mpt-dense", "layers": L, "hidden": h,
                          "heads": a, "kv_heads": a, "ffn_hidden": 4 * h, "vocab": 50368,
                          "seq_len": seq, "params": int(v["NumParams"]), "activation": "gelu",
                          "glu": False, "arch_source": f"scripts/train/yamls/pretrain/mpt-{size}.yaml"
                          " (d_model, n_heads, n_layers, expansion_ratio 4, vocab 50368)"},
                "cluster": {"gpu": v["GPU"], "gpu_key": MPT_GPUS[v["GPU"]], "num_gpus": n,
                            "gpus_per_node": 8, "interconnect": table},
                "config": {"tp": 1, "pp": 1, "cp": 1, "dp": n, "ep": None, "vpp": None,
                           "micro_batch": mb, "global_batch": gb,
                           "recompute": "full" if ckpt else "none", "seq_parallel": False,
                           "zero": f"FSDP {v['Sharding Strategy']}", "precision": prec,
                           "grad_accum_published": int(v["GradAccum"])},
                "measured": {"tokens_per_sec_per_gpu": tok, "mfu": float(v["MFU"]) / 100,
                             "hfu": float(v["HFU"]) / 100},
                "derived": {"tokens_per_sec_per_gpu": tok},
                "notes": "Composer + FSDP (PyTorch), FlashAttention/Triton attention, ALiBi; "
                         "MPT uses no biases and a low-precision LayerNorm.",
            })
    return rows


# --- Hand-entered tables (values copied from the files named in each row's source) -----------

NEMO_COMMIT = "a2aa70a2281a9c9eda7493c4278117c18d936be2"  # the commit that removed the page;
NEMO_PATH = "docs/source/performance/performance_summary.md"  # rows read from its parent
NEMO_ARCH = {  # nemo/collections/llm/gpt/model/{base,llama}.py (GPTConfig*B, Llama2Config*B)
    "GPT3-5B": dict(family="gpt-dense", layers=24, hidden=4096, heads=32, ffn_hidden=16384),
    "GPT3-20B": dict(family="gpt-dense", layers=44, hidden=6144, heads=48, ffn_hidden=24576),
    "GPT3-175B": dict(family="gpt-dense", layers=96, hidden=12288, heads=96, ffn_hidden=49152),
    "LLAMA2-7B": dict(family="llama2-dense", layers=32, hidden=4096, heads=32, kv_heads=32,
                      ffn_hidden=11008, glu=True, activation="silu", vocab=32000),
    "LLAMA2-13B": dict(family="llama2-dense", layers=40, hidden=5120, heads=40, kv_heads=40,
                       ffn_hidden=13824, glu=True, activation="silu", vocab=32000),
    "LLAMA2-70B": dict(family="llama2-dense", layers=80, hidden=8192, heads=64, kv_heads=8,
                       ffn_hidden=28672, glu=True, activation="silu", vocab=32000),
    # nemo/collections/llm/gpt/model/nemotron.py (Nemotron3Config8B, Nemotron3Config22B,
    # Nemotron4Config340B; NemotronConfig: squared ReLU, LayerNorm, no bias, untied embeddings)
    # with the 256,000-token Nemotron vocabulary: Megatron's FLOP count of these shapes equals
    # the table's model TFLOP/s per token within 0.1% (51.39 / 130.2 / 2104.8 GFLOP)
    **{name: dict(family="nemotron-dense", layers=layers, hidden=hidden, heads=heads,
                  kv_heads=kv, ffn_hidden=ffn, glu=False, activation="relu2", vocab=256000,
                  norm="layernorm", tied=False,
                  arch_source="NeMo nemo/collections/llm/gpt/model/nemotron.py "
                  f"({cls}; vocab 256000)")
       for name, cls, layers, hidden, heads, kv, ffn in (
           ("Nemotron-8B", "Nemotron3Config8B", 32, 4096, 32, 32, 16384),
           ("Nemotron-22B", "Nemotron3Config22B", 40, 6144, 48, 48, 24576),
           ("Nemotron-340B", "Nemotron4Config340B", 96, 18432, 96, 8, 73728))},
}
# Model | #GPUs | GBS | MBS | seq | TP | PP | CP | VP | tokens/s/GPU | model TFLOP/s/GPU
NEMO_2407 = """GPT3-5B 64 2048 4 2048 1 1 1 1 23406 765
GPT3-20B 64 256 2 2048 2 1 1 1 5851 750
GPT3-175B 128 256 1 2048 4 8 1 6 716 771
GPT3-175B 512 2048 2 2048 4 8 1 6 825 888
LLAMA2-7B 8 128 1 4096 1 1 1 1 16934 780
LLAMA2-13B 16 128 1 4096 1 4 1 10 8715 760
LLAMA2-70B 64 128 1 4096 4 4 1 20 1728 768
Nemotron-8B 64 256 4 4096 2 1 1 1 12507 643
Nemotron-22B 64 256 2 4096 2 4 1 10 4312 562
Nemotron-340B 128 32 1 4096 8 8 1 12 326 686
LLAMA3-8B 8 128 1 8192 1 1 2 1 12273 711
LLAMA3-70B 64 128 1 8192 4 4 2 5 1524 734"""


def nemo_2407() -> list[dict]:
    rows = []
    for line in NEMO_2407.splitlines():
        name, *v = line.split()
        n, gbs, mbs, seq, tp, pp, cp, vp, tok, tfl = (int(x) for x in v)
        arch = dict(NEMO_ARCH.get(name, {}))
        preset = {"LLAMA3-8B": "llama-3.1-8b", "LLAMA3-70B": "llama-3.1-70b"}.get(name)
        family = arch.pop("family", "llama3-dense" if preset else "nemotron-dense")
        model = {"name": name, "family": family, "seq_len": seq, "preset": preset}
        if arch:
            model.update({"vocab": 50304, "kv_heads": arch["heads"], "glu": False,
                          "activation": "gelu",
                          "arch_source": "NeMo nemo/collections/llm/gpt/model/{base,llama}.py "
                          "(GPT3 vocab 50304 = GPT-2 BPE padded, assumed)", **arch})
        elif not preset:
            model["arch_source"] = "no planner preset"
        rows.append({
            "id": f"nemo-2407-{name.lower()}-h100-{n}", "kind": "training",
            "source": f"github:NVIDIA/NeMo {NEMO_PATH} @ {NEMO_COMMIT[:10]}^ (NeMo 24.07 container)",
            "source_url": f"https://github.com/NVIDIA/NeMo/blob/{NEMO_COMMIT}~1/{NEMO_PATH}",
            "source_table": "Pretraining (FP8, container NeMo24.07, DGX-H100)",
            "confidence": "A", "model": model,
            "cluster": {"gpu": "DGX-H100", "gpu_key": "H100-SXM5-80GB", "num_gpus": n,
                        "gpus_per_node": 8, "interconnect": "DGX-H100 (NVLink4, 8x400 Gb/s IB)"},
            "config": {"tp": tp, "pp": pp, "cp": cp, "dp": n // (tp * pp * cp), "ep": None,
                       "vpp": vp, "micro_batch": mbs, "global_batch": gbs, "recompute": None,
                       "seq_parallel": None, "zero": "distributed optimizer (NeMo default)",
                       "precision": "FP8"},
            "measured": {"tokens_per_sec_per_gpu": tok, "model_tflops_per_gpu": tfl},
            "derived": {"tokens_per_sec_per_gpu": tok}, "notes": ""})
    return rows


TT_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
TT_2412 = "benchmarks/llama3_h100_202412_torchtitan.md"
TT_2506 = "benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md"
# (path, table, preset, gpus, fsdp, tp, pp, cp, vpp, local batch, global batch, seq, recompute,
#  precision, async TP, tokens/s/GPU, label)
TT = [
    (TT_2412, "Table 1", "llama-3.1-8b", 8, 8, 1, 1, 1, 1, 2, 16, 8192, "selective", "bf16", 0, 6667, "FSDP + torch.compile"),
    (TT_2412, "Table 1", "llama-3.1-8b", 8, 8, 1, 1, 1, 1, 2, 16, 8192, "selective", "fp8", 0, 8532, "FSDP + torch.compile + Float8"),
    (TT_2412, "Table 2", "llama-3.1-8b", 8, 8, 1, 1, 1, 1, 1, 8, 32768, "full", "fp8", 0, 3890, "FSDP 8, CP 1"),
    (TT_2412, "Table 2", "llama-3.1-8b", 8, 4, 1, 1, 2, 1, 1, 4, 65536, "full", "fp8", 0, 2540, "FSDP 4, CP 2"),
    (TT_2412, "Table 2", "llama-3.1-8b", 8, 2, 1, 1, 4, 1, 1, 2, 131072, "full", "fp8", 0, 1071, "FSDP 2, CP 4"),
    (TT_2412, "Table 2", "llama-3.1-8b", 8, 1, 1, 1, 8, 1, 1, 1, 262144, "full", "fp8", 0, 548, "FSDP 1, CP 8"),
    (TT_2412, "Table 3", "llama-3.1-8b", 128, 128, 1, 1, 1, 1, 2, 256, 8192, "selective", "bf16", 0, 6514, "FSDP + torch.compile"),
    (TT_2412, "Table 3", "llama-3.1-8b", 128, 128, 1, 1, 1, 1, 2, 256, 8192, "selective", "fp8", 0, 8380, "FSDP + torch.compile + Float8"),
    (TT_2412, "Table 4", "llama-3.1-70b", 256, 32, 8, 1, 1, 1, 16, 512, 8192, "full", "fp8", 0, 829, "2D"),
    (TT_2412, "Table 4", "llama-3.1-70b", 256, 32, 8, 1, 1, 1, 16, 512, 8192, "full", "fp8", 1, 876, "2D + AsyncTP"),
    (TT_2412, "Table 5", "llama-3.1-405b", 512, 8, 8, 8, 1, 1, 32, 256, 8192, "full", "fp8", 1, 100, "1F1B"),
    (TT_2412, "Table 5", "llama-3.1-405b", 512, 8, 8, 8, 1, None, 32, 256, 8192, "full", "fp8", 1, 128, "Interleaved 1F1B"),
    (TT_2412, "Table 6", "llama-3.1-405b", 512, 8, 8, 8, 1, 1, 8, 64, 32768, "full", "fp8", 1, 76, "FSDP 8, CP 1"),
    (TT_2412, "Table 6", "llama-3.1-405b", 512, 4, 8, 8, 2, 1, 8, 32, 65536, "full", "fp8", 1, 47, "FSDP 4, CP 2"),
    (TT_2412, "Table 6", "llama-3.1-405b", 512, 2, 8, 8, 4, 1, 8, 16, 131072, "full", "fp8", 1, 31, "FSDP 2, CP 4"),
    (TT_2412, "Table 6", "llama-3.1-405b", 512, 1, 8, 8, 8, 1, 8, 8, 262144, "full", "fp8", 1, 16, "FSDP 1, CP 8"),
    (TT_2506, "Llama3 70b on 256 H100s", "llama-3.1-70b", 256, 32, 8, 1, 1, 1, 16, 512, 8192, "full", "bf16", 0, 597.3, "bf16 vanilla TP"),
    (TT_2506, "Llama3 70b on 256 H100s", "llama-3.1-70b", 256, 32, 8, 1, 1, 1, 16, 512, 8192, "full", "bf16", 1, 652.4, "bf16 async TP"),
    (TT_2506, "Llama3 70b on 256 H100s", "llama-3.1-70b", 256, 32, 8, 1, 1, 1, 16, 512, 8192, "full", "fp8", 0, 809.8, "float8 tensorwise vanilla TP"),
    (TT_2506, "Llama3 70b on 256 H100s", "llama-3.1-70b", 256, 32, 8, 1, 1, 1, 16, 512, 8192, "full", "fp8", 1, 942.4, "float8 tensorwise async TP"),
    (TT_2506, "Llama3 8b on 64 H100s", "llama-3.1-8b", 64, 8, 8, 1, 1, 1, 12, 96, 8192, "selective", "bf16", 0, 4378, "bf16 vanilla TP"),
    (TT_2506, "Llama3 8b on 64 H100s", "llama-3.1-8b", 64, 8, 8, 1, 1, 1, 12, 96, 8192, "selective", "bf16", 1, 4809.4, "bf16 async TP"),
    (TT_2506, "Llama3 8b on 64 H100s", "llama-3.1-8b", 64, 8, 8, 1, 1, 1, 12, 96, 8192, "selective", "fp8", 0, 5078.1, "float8 tensorwise vanilla TP"),
    (TT_2506, "Llama3 8b on 64 H100s", "llama-3.1-8b", 64, 8, 8, 1, 1, 1, 12, 96, 8192, "selective", "fp8", 1, 5570.1, "float8 tensorwise async TP"),
]


def torchtitan() -> list[dict]:
    rows = []
    for (path, table, preset, n, fsdp, tp, pp, cp, vpp, lbs, gbs, seq, rc, prec, async_tp, tok,
         label) in TT:
        slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
        rows.append({
            "id": f"torchtitan-{path.split('_')[-2] if '2025' in path else '2412'}-"
                  f"{preset.replace('llama-3.1-', 'llama31-')}-{n}-s{seq}-{slug}",
            "kind": "training",
            "source": f"github:pytorch/torchtitan {path} @ {TT_COMMIT[:8]}",
            "source_url": f"https://github.com/pytorch/torchtitan/blob/{TT_COMMIT}/{path}",
            "source_table": f"{table}: {label}",
            "confidence": "B" if seq == 8192 and "Table 2" not in table and "Table 6" not in table
            else "A",
            "model": {"name": preset, "preset": preset, "family": "llama3-dense", "seq_len": seq,
                      "arch_source": f"planner preset {preset}"},
            "cluster": {"gpu": "H100 SXM HBM2e 96GB at 500 W (Grand Teton)",
                        "gpu_key": "H100-SXM5-96GB-HBM2e-500W", "num_gpus": n, "gpus_per_node": 8,
                        "interconnect": "Grand Teton: 8 H100 per host on NVLink, 400 Gb/s RDMA per GPU"},
            "config": {"tp": tp, "pp": pp, "cp": cp, "dp": fsdp, "ep": None, "vpp": vpp,
                       "micro_batch": 1 if pp > 1 else lbs, "global_batch": gbs,
                       "recompute": rc, "seq_parallel": tp > 1, "zero": f"FSDP {fsdp}",
                       "precision": prec, "overlap": "tp-comm-overlap (async TP)" if async_tp else "",
                       "schedule": "interleaved 1F1B (stages per rank not published)"
                       if vpp is None else None},
            "measured": {"tokens_per_sec_per_gpu": tok},
            "derived": {"tokens_per_sec_per_gpu": tok},
            "notes": "torch.compile on (Tables 1/3: the compiled rows). Sequence length is "
                     "torchtitan's llama3 training default (8192), not stated in the table, "
                     "where the table gives none. H100 with 96 GB HBM2e at 500 W: catalog entry "
                     "H100-SXM5-96GB-HBM2e-500W (GEMM efficiency of its family, H100); "
                     "pipeline micro-batch 1 "
                     "(torchtitan default)."})
    return rows


GUIDE_COMMIT = "eb0783b6d35607ef1953eaca60b37b886b1a25d0"  # last commit with the guide;
GUIDE_DIR = "docs/discussions/deepseek-v3-gb200-optimization"  # 3c1b98ef removed it ("draft
# being updated"); the launch script is its reproduce guide's, at the same commit


def megatron_lm_dsv3_guide() -> list[dict]:
    """NVIDIA/Megatron-LM "Optimizing DeepSeek-V3 Training Performance on NVIDIA GB200 NVL72"
    (section 3, the optimisation history table): its final row, 970.01 TFLOP/s per GPU, the
    one whose software and launch script are published (the reproduce guide: Megatron-LM
    effebd81, TransformerEngine 7dd39147 on release 2.9, HybridEP 3f601f7a, cuDNN 9.14, and
    the full argument list). The earlier rows of the history differ by unreleased kernel
    fusions and CPU-side changes that no published configuration pins down, so they are not
    rows here."""
    return [{
        "id": "megatron-lm-dsv3-guide-gb200-256-mxfp8-tp1pp8vp4ep32mbs1gbs2048",
        "kind": "training",
        "source": f"github:NVIDIA/Megatron-LM {GUIDE_DIR}/deepseek-v3-gb200-optimization.md "
                  f"@ {GUIDE_COMMIT[:8]}",
        "source_url": f"https://github.com/NVIDIA/Megatron-LM/blob/{GUIDE_COMMIT}/{GUIDE_DIR}/"
                      "deepseek-v3-gb200-optimization.md",
        "source_table": "3. Summary and Outlook: optimization history, last row (Fuse "
                        "quantization to normalization (cuDNN 9.14))",
        "confidence": "A",
        "model": {"name": "DeepSeek-V3", "preset": "deepseek-v3", "family": "deepseek-moe",
                  "seq_len": 4096, "moe": {},
                  "arch_source": "planner preset deepseek-v3; the launch script's --num-layers "
                                 "61 ... --moe-layer-freq ([0]*3+[1]*58), no --mtp-num-layers"},
        "cluster": {"gpu": "GB200 NVL72", "gpu_key": "GB200", "num_gpus": 256,
                    "gpus_per_node": 4,
                    "interconnect": "GB200 NVL72; every 32 GPUs (8 trays) in one NVLink domain "
                                    "(reproduce guide, section 3)"},
        "config": {"tp": 1, "pp": 8, "cp": 1, "dp": 32, "ep": 32, "vpp": 4, "micro_batch": 1,
                   "global_batch": 2048, "recompute": "selective: moe_act mlp",
                   "seq_parallel": False, "zero": "distributed optimizer",
                   "precision": "MXFP8", "dispatcher": "hybridep"},
        "measured": {"tflops_per_gpu": 970.01},
        "derived": {},
        "notes": "Forced load balance (--moe-router-force-load-balancing). Pipeline layout "
                 "Et|(tt|)*30L (32 virtual stages: embedding + 1 layer, 30 x 2 layers, loss). "
                 "TFLOP/s counted by Megatron-LM's num_floating_point_operations at effebd81 "
                 "(causal attention halved). The script's --sequence-parallel is a no-op at TP1. "
                 "Settings (dispatcher, CUDA graphs, recompute, "
                 "bf16 Adam moments) in megatron_lm_guide_moe_settings.json.",
    }]


def main() -> None:
    mb_repo, foundry_repo = sys.argv[1], sys.argv[2]
    rows = (megatron_bridge(mb_repo) + mpt(foundry_repo) + nemo_2407() + torchtitan()
            + megatron_lm_dsv3_guide())
    seen, unique = set(), []
    for r in rows:  # the current summary repeats the latest archive block verbatim
        key = (r["id"], r["source_table"].split(",")[0], str(r["measured"]))
        if key in seen:
            continue
        seen.add(key)
        unique.append(r)
    ids: dict[str, int] = {}
    for r in unique:  # ids stay unique where a table lists the same configuration twice
        k = ids[r["id"]] = ids.get(r["id"], 0) + 1
        if k > 1:
            r["id"] += f"-{k}"
    OUT.write_text(json.dumps(unique, indent=1) + "\n")
    print(f"{len(unique)} rows -> {OUT}")


if __name__ == "__main__":
    main()
