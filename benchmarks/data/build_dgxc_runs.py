"""Build ``dgxc_runs.json`` from NVIDIA/dgxc-benchmarking (run once; kept for provenance).

    python benchmarks/data/build_dgxc_runs.py [--repo DGXC_GIT_DIR]

Reads, with ``git show <commit>:<path>`` from a snapshot of github:NVIDIA/dgxc-benchmarking, the
"Expected Performance" tables of the NeMo pre-training workloads of releases v24.11.1 through
v25.05.04 (``RELEASES``; v25.05.02 is the merge f041145 of release/25.05.02):

* ``llama3.1/README_{8b,70b,405b}.md`` (to v25.03) and ``llama3.1/README.md`` (from v25.04),
  ``nemo_megatron/README_175b.md`` (GPT-3 175B, to v25.04.01), ``nemotron/README_{15b,340b}.md``
  and ``nemotron/README.md`` (Nemotron-4), ``grok1/README_314b.md`` and ``grok1/README.md``
  (Grok-1, MoE), ``deepseek_v3/pretraining/README.md`` (from v25.05).
* Two table formats. Performance tables: a title cell naming model, size and precision (before
  v25.04 also the parallel layout, "(TP=8, PP=9, CP=2, VP=7, MBS=1, GA=63)"), one column per
  GPU count ("Throughput on 576x H100 GPUs (GBS=252)", "128x GB200 GPUs"), rows for the step
  time, throughput, MFU, TFLOPS_per_GPU, and in v24.11.1-v25.03 Llama 3.1 405B per-column
  Layers/GBS/PP/VP rows. Configuration tables (GPUs, SeqLen, Layers, [FSDP,] TP, PP, CP, EP,
  [ETP,] DP, VP, MBS, GBS, GA; some with Size and Precision columns), under a "**GB200**" /
  "# H100s specifications" heading that names the GPU. A performance column takes the one
  configuration row of its GPU, GPU count, size, precision (and GBS where its header gives
  one); without a configuration table, the title's layout, the column's GBS and the per-column
  rows are the configuration.
* Skipped: maxtext/ and paxml/ (JAX), fine-tuning (ft_llama3/, llama3/finetuning/, hf-llama2/,
  hf-mistral/), and two NeMo pre-training tables the planner's row schema cannot describe:
  llama4/ (Llama 4 Maverick, MoE in every other layer) and nemotronh/ (Nemotron-H, hybrid
  Mamba). From 856bfc4 (v25.07) on the READMEs keep the configuration tables but no
  performance tables, so no later release is read.

Rules. Every number comes from the tables; nothing is typed by hand and no value is adjusted.
A malformed cell ("8.7  5") is read by an explicit rule and the row says so in ``notes``. A
value the table does not give but the same README does (the sequence length in its Notes,
"sequence length = 8192") is used and noted; one the README does not publish at all is taken
from the release's recipe YAML (the context parallel size) and makes the row confidence "B"
with the field named. ``dp`` is GPUs / (TP x PP x CP); a published DP column that disagrees is
kept as ``dp_published`` and noted. The vocabulary is the one the run had: the tokenizer the
release's recipe loaded, padded by NeMo to a multiple of make_vocab_size_divisible_by x TP
(``MegatronBaseModel._vocab_size_with_padding`` in NeMo 1, ``nemo.lightning.get_vocab_size`` in
NeMo 2; the same rule from v2.0.0 to v2.3.1); where it differs from the planner preset's, the
row gives explicit dimensions. Notes also say where the published configuration and the
release's launch code disagree (``CONFLICTS``, each checked against the cited file) and what
the recipe ran that the tables do not say (``RECIPE_NOTES``). Deduplication: a later release
that publishes the same (workload, size, GPU, precision, GPU count) with the same
configuration and step time adds no row; its release is appended to the first row's
``repeated_in``, and the row notes what the repeat restates differently (MFU, container).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections import Counter
from pathlib import Path

OUT = Path(__file__).parent / "dgxc_runs.json"
MODELS_DIR = Path(__file__).parents[2] / "planner" / "data" / "models"
DEFAULT_REPO = "/work/.mirror/NVIDIA+dgxc-benchmarking/repo"
GITHUB = "https://github.com/NVIDIA/dgxc-benchmarking/blob"

RELEASES = (("24.11.1", "35a9aec"), ("25.01", "143b90d"), ("25.01.1", "e6afea3"),
            ("25.02", "8f5cbb3"), ("25.02.01", "0b71cfd"), ("25.02.01_a", "5f23b67"),
            ("25.03", "1b9bb6b"), ("25.04", "741c886"), ("25.04.01", "85380ff"),
            ("25.05", "68eaf7e"), ("25.05.01", "60d6fd3"), ("25.05.02", "f041145"),
            ("25.05.04", "1f6d9f4"))

# README path pattern -> (workload id, recipe directory)
WORKLOADS = ((r"llama3\.1/README(_\w+)?\.md", "llama3.1", "llama3.1"),
             (r"nemo_megatron/README_175b\.md", "gpt3", "nemo_megatron"),
             (r"nemotron/README(_\w+)?\.md", "nemotron4", "nemotron"),
             (r"grok1/README(_314b)?\.md", "grok1", "grok1"),
             (r"deepseek_v3/pretraining/README\.md", "deepseek-v3", "deepseek_v3/pretraining"))
DEFAULT_SIZE = {"gpt3": "175b", "deepseek-v3": "671b"}
GPUS = {"H100": ("DGX-H100", "H100-SXM5-80GB", 8, "DGX-H100: 8 GPUs per node, NVLink + InfiniBand"),
        "GB200": ("DGX-GB200", "GB200", 4, "DGX-GB200 (NVL72 racks counted as 4-GPU trays)"),
        "B200": ("DGX-B200", "B200", 8, "DGX-B200: 8 GPUs per node, NVLink + InfiniBand")}

# Full-size architectures. NeMo 1 releases: replaced by the release's recipe YAML where it
# differs (``arch_from_yaml``; the Llama 3.1 405B YAML has 16 query groups); NeMo 2 releases:
# the NeMo config class named (nemo/collections/llm/gpt/model/*.py, the same at v2.2.1 and
# v2.3.1). Llama/GPT-3 sizes also have planner presets.
ARCH = {
    ("llama3.1", "8b"): dict(name="Llama 3.1 8B", family="llama3-dense", preset="llama-3.1-8b",
                             cls="llama.py Llama3Config8B", layers=32, hidden=4096, heads=32,
                             kv_heads=8, ffn_hidden=14336, glu=True, activation="silu",
                             norm="rmsnorm", tied=False),
    ("llama3.1", "70b"): dict(name="Llama 3.1 70B", family="llama3-dense", preset="llama-3.1-70b",
                              cls="llama.py Llama3Config70B", layers=80, hidden=8192, heads=64,
                              kv_heads=8, ffn_hidden=28672, glu=True, activation="silu",
                              norm="rmsnorm", tied=False),
    ("llama3.1", "405b"): dict(name="Llama 3.1 405B", family="llama3-dense",
                               preset="llama-3.1-405b", cls="llama.py Llama31Config405B",
                               layers=126, hidden=16384, heads=128, kv_heads=8, ffn_hidden=53248,
                               glu=True, activation="silu", norm="rmsnorm", tied=False),
    ("gpt3", "175b"): dict(name="GPT-3 175B", family="gpt-dense", preset="gpt3-175b", cls=None,
                           layers=96, hidden=12288, heads=96, kv_heads=96, ffn_hidden=49152,
                           glu=False, activation="gelu", norm="layernorm", tied=True),
    ("nemotron4", "15b"): dict(name="Nemotron-4 15B", family="nemotron-dense", preset=None,
                               cls="nemotron.py Nemotron4Config15B", layers=32, hidden=6144,
                               heads=48, kv_heads=8, ffn_hidden=24576, glu=False,
                               activation="relu2", norm="layernorm", tied=False),
    ("nemotron4", "340b"): dict(name="Nemotron-4 340B", family="nemotron-dense", preset=None,
                                cls="nemotron.py Nemotron4Config340B", layers=96, hidden=18432,
                                heads=96, kv_heads=8, ffn_hidden=73728, glu=False,
                                activation="relu2", norm="layernorm", tied=False),
    # Grok-1 (xai-org/grok-1: 64 layers, d 6144, 48 q / 8 kv heads, 8 experts top-2, expert
    # FFN 32768). NeMo 1 recipe grok1_314b.yaml: activation fast-geglu; NeMo 2 performance
    # script pretrain_grok1_314b.py: MixtralConfig8x7B with these dims (SwiGLU).
    ("grok1", "314b"): dict(name="Grok-1 314B", family="grok1-moe", preset=None,
                            cls="scripts/performance/llm/pretrain_grok1_314b.py model(): "
                                "MixtralConfig8x7B(num_layers=64, hidden_size=6144, "
                                "num_attention_heads=48, num_query_groups=8, "
                                "ffn_hidden_size=32768, num_moe_experts=8)",
                            layers=64, hidden=6144, heads=48, kv_heads=8, ffn_hidden=32768,
                            glu=True, activation="silu", norm="rmsnorm", tied=False,
                            moe={"experts": 8, "topk": 2, "expert_ffn_hidden": 32768,
                                 "shared_experts": 0}),
    ("deepseek-v3", "671b"): dict(name="DeepSeek-V3", family="deepseek-moe", preset="deepseek-v3",
                                  cls="deepseek.py DeepSeekV3Config", layers=61),
}
YAML_DIMS = (("layers", "num_layers"), ("hidden", "hidden_size"), ("ffn_hidden", "ffn_hidden_size"),
             ("heads", "num_attention_heads"), ("kv_heads", "num_query_groups"))

# (release, workload) -> (container image, file, text in that file that names it)
_NEMO1 = {"llama3.1": ("24.09", "llama3.1/setup.sh", "nvidia/nemo:24.09"),
          "gpt3": ("24.05", "nemo_megatron/setup.sh", "nvidia/nemo:24.05"),
          "nemotron4": ("24.09", "nemotron/setup.sh", "nvidia/nemo:24.09"),
          "grok1": ("dev@sha256:9c876dce0621f954d1733063e2af642682b188d757fb280cc55755fb8e194400",
                    "grok1/setup.sh", "nemo:sha256:9c876dce0621")}
_R2502 = {"llama3.1": ("24.12", "llama3.1/launch.sh", "FW_VERSION=24.12"),
          "gpt3": ("24.12", "nemo_megatron/launch.sh", "FW_VERSION=24.12"),
          "nemotron4/15b": ("24.12", "nemotron/launch.sh", "export FW_VERSION=24.12"),
          "nemotron4/340b": ("24.09", "nemotron/launch.sh", "export FW_VERSION=24.09"),
          "grok1": ("24.12", "grok1/launch.sh", "FW_VERSION=24.12")}
_R2504 = {"llama3.1": ("25.02.01", "llama3.1/launch.sh", "FW_VERSION=25.02.01"),
          "gpt3": ("24.12", "nemo_megatron/launch.sh", "FW_VERSION=24.12"),
          "nemotron4": ("25.02.01", "nemotron/launch.sh", "FW_VERSION=25.02.01"),
          "grok1": ("24.12", "grok1/launch.sh", "FW_VERSION=24.12")}
_R2505 = {"llama3.1": ("25.04.01", "llama3.1/metadata.yaml", "nvidia/nemo:25.04.01"),
          "nemotron4": ("25.04.00", "nemotron/metadata.yaml", "nvidia/nemo:25.04.00"),
          "grok1": ("25.04.00", "grok1/metadata.yaml", "nvidia/nemo:25.04.00"),
          "deepseek-v3": ("25.04.01", "deepseek_v3/pretraining/metadata.yaml", "nemo:25.04.01")}
CONTAINERS = {**{r: _NEMO1 for r in ("24.11.1", "25.01", "25.01.1")},
              **{r: _R2502 for r in ("25.02", "25.02.01", "25.02.01_a", "25.03")},
              **{r: _R2504 for r in ("25.04", "25.04.01")},
              **{r: _R2505 for r in ("25.05", "25.05.01", "25.05.02", "25.05.04")}}

# Where the published configuration and the release's own launch code disagree:
# (workload, size, gpu, releases) -> (file, text in it, note)
CONFLICTS = (
    ("gpt3", "175b", "H100", ("25.02", "25.02.01", "25.02.01_a", "25.03"),
     "nemo_megatron/gpt3_175b_hydra.yaml", "virtual_pipeline_model_parallel_size: 6",
     "The title says VP=12 but the release's gpt3_175b_hydra.yaml sets "
     "virtual_pipeline_model_parallel_size: 6 (configure.sh does not override it); v25.04 "
     "republishes the same step times with VP 6."),
    ("nemotron4", "340b", "H100", ("25.04", "25.04.01"), "nemotron/launch.sh", "VP=12",
     "The configuration table says VP NA but the release's nemotron/launch.sh sets VP=12 for "
     "340b and passes -vp 12."),
    ("grok1", "314b", "GB200", ("25.05",), "grok1/launch.sh", "ET=${ET:-8}",
     "The configuration table says ETP 4 but this release's grok1/launch.sh defaults "
     "ET=${ET:-8} for gb200 (4 from v25.05.01 on)."),
)

# Notes on what the recipe ran that the tables do not say: (workload, NeMo era) -> note
RECIPE_NOTES = {
    ("grok1", "nemo1"): "Token-dropping MoE: grok1_314b.yaml sets moe_expert_capacity_factor 1.0 "
                        "with moe_pad_expert_input_to_capacity true.",
    ("grok1", "nemo2"): "Token-dropping MoE: pretrain_grok1_314b.py adds MegatronTokenDropCallback "
                        "(capacity factor 1.0, padded to capacity).",
    ("deepseek-v3", "nemo2"): "Ran the recipe's MTP layer (deepseek_v3.pretrain_recipe "
                              "use_mtp=True: mtp_num_layers 1), token dropping "
                              "(MegatronTokenDropCallback), an uneven pipeline (first stage "
                              "64/PP - 1 layers, last 64/PP - 2) and selective recompute "
                              "(launch.sh --recompute_modules), per NeMo "
                              "scripts/performance/llm/pretrain_deepseek_v3.py at NEMO_COMMIT.",
}


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True,
                          text=True).stdout


def show(repo: str, commit: str, path: str) -> str:
    return git(repo, "show", f"{commit}:{path}")


def tree(repo: str, commit: str) -> list[str]:
    return git(repo, "ls-tree", "-r", "--name-only", commit).split()


def cells(line: str) -> list[str]:
    s = line.strip()
    s = s[1:] if s.startswith("|") else s
    s = s[:-1] if s.endswith("|") else s
    return [c.strip() for c in s.split("|")]


def is_separator(line: str) -> bool:
    return all(re.fullmatch(r":?-+:?", c) for c in cells(line) if c) and "-" in line


def tables(text: str) -> list[tuple[str | None, list[str], list[list[str]]]]:
    """(GPU named by the last heading or bold line before it, header, rows) of every table.
    Rows need not start with "|" (some v25.04+ tables write "Training step time ...| 2.66")."""
    out, lines, gpu, i = [], text.splitlines(), None, 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(("#", "**")) and re.search(r"GB200|B200|H100", line):
            gpu = re.search(r"GB200|B200|H100", line).group(0)
        if (line.lstrip().startswith("|") and i + 1 < len(lines)
                and is_separator(lines[i + 1])):
            j, rows = i + 2, []
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                rows.append(cells(lines[j]))
                j += 1
            out.append((gpu, cells(line), rows))
            i = j
            continue
        i += 1
    return out


def number(cell: str) -> tuple[float | int | None, str | None]:
    """A published number and, for a malformed cell, how it was read."""
    s = cell.strip().replace(",", "")
    if s.lower() in ("", "n/a", "na", "-"):
        return None, None
    if re.fullmatch(r"\d+(\.\d+)?(\s+\d+)+", s):
        joined = re.sub(r"\s+", "", s)
        return float(joined), f"cell {cell!r} read as {joined} (spaces inside the number)"
    s = s.rstrip("%").strip()
    return (float(s) if "." in s else int(s)), None


def percent(cell: str) -> float | None:
    value, _ = number(cell)
    return None if value is None else round(value / 100, 6)


def params(text: str) -> dict[str, int | None]:
    """KEY=value pairs of a "(TP=8, PP=9, ..., GA=63)" or "(GBS=128)" group."""
    out = {}
    for group in re.findall(r"\(([^)]*=[^)]*)\)", text):
        for k, v in re.findall(r"([A-Za-z]+)\s*=\s*([\w/]+)", group):
            out[k.upper()] = number(v)[0] if v.lower() not in ("null", "none") else None
    return out


def size_of(text: str) -> str | None:
    m = re.search(r"\b(\d+)\s*[bB]\b", text)
    return f"{m.group(1)}b" if m else None


def precision_of(text: str) -> str | None:
    m = re.search(r"\b(BF16|FP8)\b", text, re.IGNORECASE)
    return m.group(1).upper() if m else None


def gpu_column(header: str) -> tuple[int, str] | None:
    m = re.search(r"(\d+)\s*x?\s*(GB200|B200|H100)", header)
    return (int(m.group(1)), m.group(2)) if m else None


CONFIG_KEYS = {"gpus": "n", "seqlen": "seq_len", "layers": "layers", "fsdp": "fsdp", "tp": "tp",
               "pp": "pp", "cp": "cp", "ep": "ep", "etp": "etp", "dp": "dp", "vp": "vp",
               "mbs": "mbs", "gbs": "gbs", "ga": "ga"}
PERF_ROWS = (("training step time", "step_time_s"), ("throughput in tokens", "tokens_per_sec"),
             ("model flops utilization", "mfu"), ("tflops_per_gpu", "tflops_per_gpu"),
             ("layers", "layers"), ("gbs", "gbs"), ("pp", "pp"), ("vp", "vp"))


def config_rows(gpu: str | None, header: list[str], rows: list[list[str]]) -> list[dict]:
    """Rows of a configuration table: GPU (from the heading), size, precisions, values."""
    names = [h.lower().replace("model size", "size").strip() for h in header]
    out = []
    for r in rows:
        v = dict(zip(names, r))
        row = {"gpu": gpu or "H100", "size": size_of(v.get("size", "")),
               "precisions": set(re.findall(r"BF16|FP8", v.get("precision", "BF16/FP8").upper())),
               "cells": {CONFIG_KEYS[k]: x for k, x in v.items() if k in CONFIG_KEYS}}
        row["values"] = {k: number(x)[0] for k, x in row["cells"].items()}
        out.append(row)
    return out


def perf_columns(header: list[str], rows: list[list[str]]) -> list[dict]:
    """One entry per GPU-count column of a performance table."""
    title, out = header[0], []
    for idx, h in enumerate(header[1:], 1):
        col = gpu_column(h)
        if col is None:
            continue
        entry = {"n": col[0], "gpu": col[1], "title": title, "column": h,
                 "gbs_hint": params(h).get("GBS"), "metrics": {}, "per_column": {}, "cells": {}}
        for r in rows:
            label = r[0].lower()
            key = next((k for p, k in PERF_ROWS if label.startswith(p) and
                        (len(p) > 3 or label.strip() == p)), None)
            if key is None or idx >= len(r):
                continue
            entry["cells"][key] = r[idx]
            target = "per_column" if key in ("layers", "gbs", "pp", "vp") else "metrics"
            entry[target][key] = percent(r[idx]) if key == "mfu" else number(r[idx])[0]
        if entry["metrics"].get("step_time_s") is not None:
            out.append(entry)
    return out


def match_config(col: dict, size: str, dtype: str, configs: list[dict]) -> dict | None:
    found = [c for c in configs if c["gpu"] == col["gpu"] and c["values"].get("n") == col["n"]
             and dtype in c["precisions"] and c["size"] in (None, size)
             and col["gbs_hint"] in (None, c["values"].get("gbs"))]
    if len(found) > 1:
        raise ValueError(f"ambiguous configuration for {col['title']} / {col['column']}")
    if not found and any(c["gpu"] == col["gpu"] for c in configs):
        raise ValueError(f"no configuration row for {col['title']} / {col['column']}")
    return found[0] if found else None


# --- the release's recipe --------------------------------------------------------------------

def recipe_yaml(files: list[str], workload_dir: str, size: str) -> str | None:
    """The NeMo 1 (NeMo-Framework-Launcher) recipe YAML of the workload and size, if any."""
    found = [f for f in files if f.startswith(workload_dir + "/") and f.endswith(".yaml")
             and "metadata" not in f and re.search(rf"[_-]{size}[_.-]", f)]
    return found[0] if found else None


def yaml_value(text: str, key: str) -> int | str | None:
    m = re.search(rf"^\s+{key}:\s*([^\s#]+)", text, re.MULTILINE)
    if m is None or m.group(1).lower() in ("null", "none"):
        return None
    return int(m.group(1)) if m.group(1).isdigit() else m.group(1).strip("'\"")


def notes_seq_len(readme: str) -> int | None:
    """The README's own "sequence length = N" (its Notes section's MFU calculation)."""
    found = set(re.findall(r"sequence length = (\d+)", readme))
    if len(found) > 1:
        raise ValueError(f"several sequence lengths in one README: {found}")
    return int(found.pop()) if found else None


def nemo_commit(text: str) -> str | None:
    m = re.search(r'NEMO_COMMIT="([0-9a-f]+)"', text)
    return m.group(1) if m else None


def arch_from_yaml(arch: dict, yaml_text: str) -> tuple[dict, list[str]]:
    """NeMo 1 releases: the dimensions the recipe YAML gives (and where they differ from the
    published model's)."""
    out, diffs = dict(arch), []
    for key, ykey in YAML_DIMS:
        value = yaml_value(yaml_text, ykey)
        value = arch["heads"] if key == "kv_heads" and value is None else value
        if value != arch[key]:
            diffs.append(f"{ykey} {value} (the published {arch['name']} has {arch[key]})")
            out[key] = value
    return out, diffs


# Tokenizer lengths (what NeMo pads): GPT-2 BPE vocab.json 50,257 tokens; Llama 3 / 3.1
# tokenizer len() 128,256 (128,000 BPE + 256 reserved special tokens; NeMo's AutoTokenizer
# wrapper's vocab_size is len(tokenizer)); Nemotron SentencePiece nemotron_2_256k.model 256,000
# (the READMEs' "vocab size = 256000"); NeMo's NullTokenizer(vocab_size=256000).vocab_size is
# 256,001 (null_tokenizer.py: _vocab_size_without_eod + 1, v2.2.0-v2.3.1).
GPT2, LLAMA3, NEMOTRON_SP, NULL_256K = 50257, 128256, 256000, 256001


def tokenizer(workload: str, size: str, era: str, text: dict[str, str]) -> dict:
    """The tokenizer the release's recipe loaded: length, NeMo divisor, evidence (file, text)."""
    d = {"divisible_by": 128}
    if workload == "llama3.1" and era == "nemo1" and size == "405b":
        if "megatron-gpt2-345m" in text.get("llama3.1/configure.sh", ""):
            return {**d, "length": GPT2, "what": "GPT-2 BPE from HF nvidia/megatron-gpt2-345m "
                    "(configure.sh: model.tokenizer.type=/megatron-gpt2-345m)",
                    "evidence": ("llama3.1/configure.sh",
                                 "model.tokenizer.type=/megatron-gpt2-345m")}
        return {**d, "length": GPT2, "what": "GPT2BPETokenizer (llama3.1_405b.yaml; README: "
                "'uses the GPT2BPETokenizer as a proxy')",
                "evidence": ("llama3.1/llama3.1_405b.yaml", "GPT2BPETokenizer")}
    if workload == "llama3.1" and era == "nemo1":
        return {**d, "length": LLAMA3, "what": "Llama 3 HF tokenizer (configure.sh: "
                "model.tokenizer.type=/dataset/llama, setup.sh downloads Meta-Llama-3-8B's)",
                "evidence": ("llama3.1/configure.sh", "model.tokenizer.type=/dataset/llama")}
    if workload == "llama3.1" and "llama3.1/pretrain_llama31.py" in text:
        return {**d, "length": LLAMA3, "what": "Llama 3 HF tokenizer (pretrain_llama31.py: "
                "recipe.data.tokenizer = hf_tokenizer(HF_MODEL_URI), meta-llama/Meta-Llama-3-8B"
                " / -70B / Llama-3.1-405B)",
                "evidence": ("llama3.1/pretrain_llama31.py", "hf_tokenizer(HF_MODEL_URI)")}
    if workload == "llama3.1":
        return {**d, "length": LLAMA3, "what": "Llama 3.1 HF tokenizer (NeMo scripts/performance/"
                "llm/pretrain_llama31_405b.py at NEMO_COMMIT: hf_tokenizer("
                "\"meta-llama/Llama-3.1-405B\"))",
                "evidence": ("llama3.1/launch.sh", "scripts.performance.llm.pretrain_llama31_405b")}
    if workload == "gpt3":
        path = next(p for p in text if p.endswith("gpt3_175b_hydra.yaml"))
        return {**d, "length": GPT2, "what": f"GPT2BPETokenizer ({path.split('/')[-1]})",
                "evidence": (path, "type: GPT2BPETokenizer")}
    if workload == "nemotron4" and era == "nemo1":
        return {**d, "length": NEMOTRON_SP, "what": "SentencePiece nemotron_2_256k.model "
                "(configure.sh: model.tokenizer.model=/cfg/nemotron_2_256k.model)",
                "evidence": ("nemotron/configure.sh", "nemotron_2_256k.model")}
    if workload == "nemotron4":
        return {**d, "length": NULL_256K, "what": "NullTokenizer(vocab_size=256000), whose "
                "vocab_size is 256001 (NeMo scripts/performance/llm/pretrain_nemotron4_*.py at "
                "NEMO_COMMIT; null_tokenizer.py)",
                "evidence": ("nemotron/launch.sh", "scripts.performance.llm.pretrain_nemotron4")}
    if workload == "grok1" and era == "nemo1":
        path = next(p for p in text if p.endswith("grok1_314b.yaml"))
        return {**d, "length": LLAMA3, "what": "Llama 3 HF tokenizer (grok1_314b.yaml: "
                "meta-llama/Meta-Llama-3-70B)", "evidence": (path, "meta-llama/Meta-Llama-3-70B")}
    if workload == "grok1":
        return {**d, "length": LLAMA3, "what": "Llama 3 HF tokenizer (NeMo scripts/performance/"
                "llm/pretrain_grok1_314b.py at NEMO_COMMIT: hf_tokenizer(\"meta-llama/"
                "Meta-Llama-3-70B\"); README: the script 'utilizes the Llama 3 tokenizer')",
                "evidence": ("grok1/launch.sh", "scripts.performance.llm.pretrain_grok1_314b")}
    return {"divisible_by": 1280, "length": None, "what": "HF deepseek-ai/DeepSeek-V3-Base "
            "(NeMo pretrain_deepseek_v3.py at NEMO_COMMIT); DeepSeekV3Config "
            "make_vocab_size_divisible_by 1280",
            "evidence": ("deepseek_v3/pretraining/launch.sh",
                         "scripts.performance.llm.pretrain_deepseek_v3")}


def padded_vocab(length: int, divisible_by: int, tp: int) -> int:
    multiple = divisible_by * tp
    return (length + multiple - 1) // multiple * multiple


def preset_vocab(preset: str) -> int:
    for ext in ("json", "yaml"):
        path = MODELS_DIR / f"{preset}.{ext}"
        if path.exists():
            text = path.read_text()
            return int(json.loads(text)["vocab_size"] if ext == "json"
                       else re.search(r"^vocab_size:\s*(\d+)", text, re.MULTILINE).group(1))
    raise FileNotFoundError(preset)


def require(text: dict[str, str], path: str, needle: str) -> None:
    if needle not in text.get(path, ""):
        raise ValueError(f"evidence {needle!r} not found in {path}")


# --- one performance column -> one row --------------------------------------------------------

INLINE = {"TP": "tp", "PP": "pp", "CP": "cp", "VP": "vp", "MBS": "mbs", "GA": "ga",
          "SEQ": "seq_len"}


def published_config(col: dict, cfg: dict | None) -> tuple[dict, list[str]]:
    """The configuration the file publishes for one column (title layout, column GBS,
    per-column rows, then its configuration-table row) and the disagreements among them."""
    pub, notes = {}, []
    pub.update({INLINE[k]: v for k, v in params(col["title"]).items() if k in INLINE})
    if col["gbs_hint"] is not None:
        pub["gbs"] = col["gbs_hint"]
    pub.update(col["per_column"])
    for k, v in (cfg["values"] if cfg else {}).items():
        if k != "n" and k in pub and pub[k] != v:
            notes.append(f"{k.upper()} {pub[k]} in the performance table but {v} in the "
                         "configuration table (the configuration table's value is used)")
        pub[k] = v
    return pub, notes


def fill_unpublished(pub: dict, ctx: dict) -> tuple[dict, list[str], list[str]]:
    """Values the file does not publish for the row: from the README's Notes (same file) or
    the recipe YAML (inferred). Returns values, inferred fields, notes."""
    v, inferred, notes = dict(pub), [], []
    yaml_text, yaml_path = ctx["yaml_text"], ctx["yaml_path"]
    if v.get("seq_len") is None and ctx["readme_seq"]:
        v["seq_len"] = ctx["readme_seq"]
        notes.append(f"Sequence length {v['seq_len']} from the README's Notes "
                     f"(\"sequence length = {v['seq_len']}\"), not the table.")
    if v.get("layers") is None:
        v["layers"] = ctx["arch"]["layers"]
        v["layers_from_model"] = True
    for key, ykey in (("seq_len", "encoder_seq_length"), ("cp", "context_parallel_size"),
                      ("mbs", "micro_batch_size"), ("vp", "virtual_pipeline_model_parallel_size")):
        if key in v or (key == "vp" and v.get("pp") == 1):
            continue
        if yaml_text is None:
            raise ValueError(f"{ctx['where']}: {key} not published and no recipe YAML")
        y = yaml_value(yaml_text, ykey)
        v[key] = 1 if key == "cp" and y is None else y
        inferred.append(f"{key} {v[key]} ({yaml_path}: {ykey} {y})")
    return v, inferred, notes


def degrees(v: dict, n: int, moe: bool, dtype: str) -> tuple[dict, list[str]]:
    tp, pp, cp = v["tp"], v["pp"], v.get("cp") or 1
    notes = []
    if n % (tp * pp * cp):
        raise ValueError(f"{n} GPUs not divisible by TP x PP x CP = {tp * pp * cp}")
    dp = n // (tp * pp * cp)
    out = {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "ep": v.get("ep") if moe else None}
    if moe:
        out["expert_tp"] = v.get("etp")
    out.update({"vpp": v.get("vp") or 1, "micro_batch": v["mbs"], "global_batch": v["gbs"],
                "recompute": None, "seq_parallel": None,
                "zero": "FSDP" if v.get("fsdp") else "distributed optimizer (NeMo default)",
                "precision": dtype})
    if v.get("dp") is not None and v["dp"] != dp:
        out["dp_published"] = v["dp"]
        notes.append(f"Published DP {v['dp']} but TP x PP x CP x DP = {tp * pp * cp * v['dp']} "
                     f"!= {n} GPUs; dp here is {n}/(TP x PP x CP) = {dp}"
                     + (f" (the published DP equals DP/EP = {dp}/{v['ep']})"
                        if moe and v.get("ep") and dp == v["dp"] * v["ep"] else "") + ".")
    if v.get("ga") is not None and dp * v["mbs"] * v["ga"] != v["gbs"]:
        notes.append(f"Published GA {v['ga']} but DP x MBS x GA = {dp * v['mbs'] * v['ga']} "
                     f"!= GBS {v['gbs']}.")
    if moe and v.get("etp") is None:
        notes.append("Expert TP not published (Megatron-Core's default expert tensor "
                     "parallelism is the TP size).")
    return out, notes


def deepseek_model(arch: dict, seq_len: int, tp: int, tok: dict) -> dict:
    """The planner preset (explicit dims cannot describe MLA), with the run's vocabulary."""
    hf_vocab = preset_vocab(arch["preset"])
    padded = padded_vocab(hf_vocab, tok["divisible_by"], tp)
    low = padded - tok["divisible_by"] * tp + 1
    return {"name": arch["name"], "preset": arch["preset"], "family": arch["family"],
            "seq_len": seq_len, "moe": {},
            "arch_source": f"planner preset {arch['preset']} (61 layers, per the table). The "
            f"run's vocabulary: {tok['what']}, padded to a multiple of "
            f"{tok['divisible_by']} x TP {tp} gives {padded} for any tokenizer length from {low} "
            f"to {padded}; the preset has the HF config's {hf_vocab}. Kept as the preset "
            "because explicit dims cannot describe MLA"}


def model_entry(workload: str, size: str, v: dict, tp: int, ctx: dict) -> dict:
    arch, tok, layers, seq_len = ctx["arch"], ctx["tokenizer"], v["layers"], v["seq_len"]
    dims_src = (f"{ctx['yaml_path']} @ {ctx['commit'][:8]}" if ctx["era"] == "nemo1" else
                f"NeMo nemo/collections/llm/gpt/model/{arch['cls']}" if workload != "grok1" else
                f"NeMo {arch['cls']} at NEMO_COMMIT {ctx['nemo_commit']}")
    if workload == "deepseek-v3":
        return deepseek_model(arch, seq_len, tp, tok)
    vocab = padded_vocab(tok["length"], tok["divisible_by"], tp)
    vocab_src = (f"vocab {vocab} = {tok['what']}: {tok['length']} tokens padded to a multiple "
                 f"of make_vocab_size_divisible_by {tok['divisible_by']} x TP {tp}")
    full = layers == arch["layers"]
    if full and arch["preset"] and not ctx["arch_diffs"] and preset_vocab(arch["preset"]) == vocab:
        return {"name": arch["name"], "preset": arch["preset"], "family": arch["family"],
                "seq_len": seq_len, "moe": None,
                "arch_source": f"planner preset {arch['preset']}; {vocab_src} (the preset's)"}
    name = arch["name"] if full else f"{arch['name']} proxy ({layers} layers)"
    activation = "gelu" if workload == "grok1" and ctx["era"] == "nemo1" else arch["activation"]
    out = {"name": name, "family": arch["family"], "seq_len": seq_len, "preset": None,
           "vocab": vocab, "kv_heads": arch["kv_heads"], "glu": arch["glu"],
           "activation": activation, "arch_source": "", "layers": layers,
           "hidden": arch["hidden"], "heads": arch["heads"], "ffn_hidden": arch["ffn_hidden"],
           "norm": arch["norm"], "tied": arch["tied"]}
    if arch.get("moe"):
        out["moe"] = dict(arch["moe"])
    where = "the full model's" if v.get("layers_from_model") else "per the table"
    out["arch_source"] = (f"{dims_src} (layers {layers} {where}"
                          + ("" if full else f"; the full model has {arch['layers']}")
                          + f"); {vocab_src}"
                          + "".join(f"; the recipe YAML sets {d}" for d in ctx["arch_diffs"])
                          + ("; NeMo 1 activation fast-geglu" if activation == "gelu"
                             and arch["glu"] else "")
                          + (f"; the preset {arch['preset']} has vocab "
                             f"{preset_vocab(arch['preset'])}" if arch["preset"] else ""))
    return out


def measured(col: dict) -> tuple[dict, list[str]]:
    m, notes = {}, []
    for key in ("step_time_s", "tokens_per_sec", "mfu", "tflops_per_gpu"):
        if col["metrics"].get(key) is not None:
            m[key] = col["metrics"][key]
    for key, cell in col["cells"].items():
        note = number(cell)[1] if cell.strip() else None
        if note:
            notes.append(f"The {key} {note}.")
    return m, notes


def throughput_note(me: dict, seq: int, gbs: int, n: int,
                    alt_gbs: int | None) -> tuple[dict, list[str]]:
    """Derived tokens/s/GPU, and a note where the published throughput disagrees (saying so
    when it matches the GBS that DP x MBS x GA gives instead)."""
    tokens = seq * gbs / me["step_time_s"]
    derived = {"tokens_per_sec_per_gpu": round(tokens / n, 1)}
    published = me.get("tokens_per_sec")
    if not published or abs(published / tokens - 1) <= 0.01:
        return derived, []
    note = (f"Published throughput {published} tokens/s differs by "
            f"{100 * (published / tokens - 1):+.1f}% from SeqLen x GBS / step time "
            f"= {seq} x {gbs} / {me['step_time_s']} = {tokens:.0f}")
    if alt_gbs and abs(published / (seq * alt_gbs / me["step_time_s"]) - 1) <= 0.01:
        note += f"; it matches GBS = DP x MBS x GA = {alt_gbs} (the GBS cell may be a typo)"
    return derived, [note + "."]


def container_of(release: str, workload: str, size: str, text: dict[str, str]) -> tuple[str, str]:
    table = CONTAINERS[release]
    tag, path, needle = table.get(f"{workload}/{size}") or table[workload]
    require(text, path, needle)
    return f"nvcr.io/nvidia/nemo:{tag}", f"{path}: '{needle}'"


def conflict_notes(workload: str, size: str, gpu: str, release: str,
                   text: dict[str, str]) -> list[str]:
    out = []
    for w, s, g, releases, path, needle, note in CONFLICTS:
        if (w, s, g) == (workload, size, gpu) and release in releases:
            require(text, path, needle)
            out.append(note)
    return out


def provenance_notes(ctx: dict, container: str, container_src: str, table: bool) -> list[str]:
    """What the recipe ran that the table does not say, the container and its evidence."""
    out = [RECIPE_NOTES[(ctx["workload"], ctx["era"])]] if (ctx["workload"], ctx["era"]) in \
        RECIPE_NOTES else []
    out.append(f"Container {container} ({container_src} @ {ctx['commit'][:8]})"
               + (f"; NeMo scripts at NEMO_COMMIT {ctx['nemo_commit'][:10]}"
                  if ctx["nemo_commit"] else "") + ".")
    return out + (["Configuration from the README's configuration table."] if table else [])


def build_row(col: dict, size: str, dtype: str, cfg: dict | None, ctx: dict) -> dict:
    workload, release, commit, path = ctx["workload"], ctx["release"], ctx["commit"], ctx["path"]
    moe = bool(ctx["arch"].get("moe")) or workload == "deepseek-v3"
    pub, notes = published_config(col, cfg)
    v, inferred, more = fill_unpublished(pub, ctx)
    config, deg_notes = degrees(v, col["n"], moe, dtype)
    me, cell_notes = measured(col)
    alt_gbs = config["dp"] * v["mbs"] * v["ga"] if v.get("ga") else None
    derived, tp_notes = throughput_note(me, v["seq_len"], v["gbs"], col["n"],
                                        alt_gbs if alt_gbs != v["gbs"] else None)
    if cell_notes and not tp_notes and me.get("tokens_per_sec"):
        cell_notes[-1] = cell_notes[-1][:-1] + "; the published throughput agrees."
    gpu_name, gpu_key, per_node, interconnect = GPUS[col["gpu"]]
    container, container_src = container_of(release, workload, size, ctx["text"])
    require(ctx["text"], *ctx["tokenizer"]["evidence"])
    layers = v["layers"]
    notes = ([f"Proxy configuration: {layers} of the model's {ctx['arch']['layers']} layers."]
             if layers != ctx["arch"]["layers"] else []) + notes + more + deg_notes
    notes += cell_notes + tp_notes + conflict_notes(workload, size, col["gpu"], release,
                                                    ctx["text"])
    if "strong scaling" in col["column"].lower():
        notes.append("Strong-scaling table (constant GBS across GPU counts).")
    if inferred:
        notes.append("Inferred (not in the README): " + "; ".join(inferred) + ".")
    notes += provenance_notes(ctx, container, container_src, cfg is not None)
    return {
        "id": f"dgxc-{release}-{workload}-{size}-{col['gpu'].lower()}-{dtype.lower()}-{col['n']}g",
        "kind": "training",
        "source": f"github:NVIDIA/dgxc-benchmarking {path} @ {commit[:8]}",
        "source_url": f"{GITHUB}/{commit}/{path}",
        "source_table": col["title"],
        "confidence": "B" if inferred else "A",
        "dgxc_release": release, "container": container, "repeated_in": [],
        "model": model_entry(workload, size, v, config["tp"], ctx),
        "cluster": {"gpu": gpu_name, "gpu_key": gpu_key, "num_gpus": col["n"],
                    "gpus_per_node": per_node, "interconnect": interconnect},
        "config": config, "measured": me, "derived": derived, "notes": " ".join(notes),
    }


# --- a README -> rows ------------------------------------------------------------------------

def readme_rows(readme: str, ctx: dict) -> list[dict]:
    found = tables(readme)
    configs = [c for gpu, h, rows in found if {"gpus", "tp"} <= {x.lower() for x in h}
               for c in config_rows(gpu, h, rows)]
    out = []
    for _, header, rows in found:
        dtype = precision_of(header[0])
        if dtype is None or not any(gpu_column(h) for h in header[1:]):
            continue
        size = table_size(header[0], ctx["path"], ctx["workload"])
        sctx = size_context(ctx, size)
        for col in perf_columns(header, rows):
            cfg = match_config(col, size, dtype, configs)
            out.append(build_row(col, size, dtype, cfg, sctx))
    return out


def table_size(title: str, path: str, workload: str) -> str:
    """From the title ("Llama 3.1 405b ..."), else the file name (README_175b.md)."""
    m = re.search(r"_(\d+b)\.md$", path)
    return size_of(title) or (m.group(1) if m else None) or DEFAULT_SIZE[workload]


def size_context(ctx: dict, size: str) -> dict:
    """Per-size recipe facts: architecture, recipe YAML (NeMo 1), tokenizer."""
    workload = ctx["workload"]
    yaml_path = recipe_yaml(list(ctx["text"]), ctx["workload_dir"], size)
    era = "nemo1" if yaml_path else "nemo2"
    arch, diffs = ARCH[(workload, size)], []
    if yaml_path:
        arch, diffs = arch_from_yaml(arch, ctx["text"][yaml_path])
    setup = next((t for p, t in ctx["text"].items() if p.endswith("setup.sh")), "")
    out = {**ctx, "size": size, "arch": arch, "arch_diffs": diffs, "era": era,
           "yaml_path": yaml_path,
           "yaml_text": ctx["text"].get(yaml_path) if yaml_path else None,
           "nemo_commit": nemo_commit(setup) if era == "nemo2" else None,
           "readme_seq": notes_seq_len(ctx["readme"])}
    out["tokenizer"] = tokenizer(workload, size, era, ctx["text"])
    return out


def workload_files(repo: str, commit: str, files: list[str], directory: str) -> dict[str, str]:
    """Text of the workload's recipe files (shell, YAML, Python, Markdown) at the commit."""
    return {f: show(repo, commit, f) for f in files
            if f.startswith(directory + "/") and f.endswith((".sh", ".yaml", ".py", ".md"))}


def release_rows(repo: str, release: str, short: str) -> list[dict]:
    commit = git(repo, "rev-parse", short).strip()
    subject = git(repo, "log", "-1", "--format=%s", commit)
    if release not in subject:
        raise ValueError(f"{short}: subject {subject!r} does not name release {release}")
    files, rows = tree(repo, commit), []
    for pattern, workload, directory in WORKLOADS:
        text = None
        for path in sorted(f for f in files if re.fullmatch(pattern, f)):
            text = text or workload_files(repo, commit, files, directory)
            ctx = {"workload": workload, "workload_dir": directory, "release": release,
                   "commit": commit, "path": path, "readme": text[path], "text": text,
                   "where": f"{release} {path}"}
            rows += readme_rows(text[path], ctx)
    return rows


# --- deduplication and summary ----------------------------------------------------------------

SIGNATURE = ("tp", "pp", "cp", "dp", "ep", "expert_tp", "vpp", "micro_batch", "global_batch",
             "precision", "zero")
MODEL_KEYS = ("seq_len", "layers", "vocab", "kv_heads", "preset")


def run_key(row: dict) -> tuple:
    """(workload, size, GPU, precision, GPU count) and the published step time."""
    return (row["id"].split("-", 2)[2].rsplit("-", 3)[0], row["cluster"]["gpu_key"],
            row["cluster"]["num_gpus"], row["config"]["precision"],
            row["measured"]["step_time_s"])


def configuration(row: dict) -> dict:
    return {**{k: row["model"].get(k) for k in MODEL_KEYS},
            **{k: row["config"].get(k) for k in SIGNATURE}}


def repeat_note(repeats: list[tuple[str, str]]) -> str:
    """"Repeated in v25.01, v25.01.1 (same figures)." with releases grouped by what differs."""
    groups: dict[str, list[str]] = {}
    for release, diff in repeats:
        groups.setdefault(diff, []).append(f"v{release}")
    return " ".join(f"Repeated in {', '.join(rs)}" + (f" with {d}." if d else ".")
                    for d, rs in groups.items())


def deduplicate(rows: list[dict]) -> tuple[list[dict], int]:
    """Fold a later release's repeat of a row (same run key, configuration and step time) into
    the first row's ``repeated_in``; note what the repeat restates differently, and note a new
    row whose step time an earlier release published with another configuration."""
    first: dict[tuple, list[dict]] = {}
    latest: dict[tuple, dict] = {}
    kept, repeats = [], {}
    for row in rows:
        same_time = first.setdefault(run_key(row), [])
        match = next((r for r in same_time if configuration(r) == configuration(row)), None)
        same_config = (*run_key(row)[:4], tuple(configuration(row).items()))
        before = latest.get(same_config)
        if match is None and before is not None:
            row["notes"] += (f" v{before['dgxc_release']} published "
                             f"{before['measured']['step_time_s']} s for this configuration "
                             f"({before['id']}).")
            before["notes"] += (f" v{row['dgxc_release']} publishes "
                                f"{row['measured']['step_time_s']} s for this configuration.")
        if match is None:
            latest[same_config] = row
            for r in same_time[:1]:
                diff = {k: (a, configuration(row)[k]) for k, a in configuration(r).items()
                        if a != configuration(row)[k]}
                row["notes"] += (f" Same step time as {r['id']}, published with "
                                 + ", ".join(f"{k} {a}" for k, (a, _) in diff.items()) + ".")
            same_time.append(row)
            kept.append(row)
            continue
        match["repeated_in"].append(row["dgxc_release"])
        diffs = [f"{k} {row['measured'][k]}" for k in ("tokens_per_sec", "mfu", "tflops_per_gpu")
                 if row["measured"].get(k) != match["measured"].get(k)]
        if row["container"] != match["container"]:
            diffs.append(f"container {row['container']}")
        repeats.setdefault(match["id"], []).append((row["dgxc_release"], ", ".join(diffs)))
    for row in kept:
        if row["id"] in repeats:
            row["notes"] += " " + repeat_note(repeats[row["id"]])
    return kept, sum(len(r) for r in repeats.values())


def unique_ids(rows: list[dict]) -> None:
    """Two tables of one release with the same GPU count (weak and strong scaling)."""
    seen = set()
    for row in rows:
        if row["id"] in seen:
            row["id"] += f"-gbs{row['config']['global_batch']}"
        if row["id"] in seen:
            raise ValueError(f"duplicate id {row['id']}")
        seen.add(row["id"])


def workload_of(row: dict) -> str:
    rest = row["id"].split("-", 2)[2]
    return next(w for _, w, _ in WORKLOADS if rest.startswith(w + "-"))


def summary(rows: list[dict], folded: int) -> str:
    by_release = Counter(r["dgxc_release"] for r in rows)
    repeats = Counter(rel for r in rows for rel in r["repeated_in"])
    by_kind = Counter((workload_of(r), r["cluster"]["gpu_key"], r["config"]["precision"])
                      for r in rows)
    lines = [f"{len(rows)} rows ({folded} repeats folded into repeated_in) -> {OUT}",
             "release: new rows / repeats folded into earlier rows:"]
    lines += [f"  v{rel:11s} {by_release[rel]:3d} / {repeats[rel]}" for rel, _ in RELEASES]
    lines.append("rows per workload/GPU/precision:")
    lines += [f"  {w:12s} {g:15s} {p:5s} {n}" for (w, g, p), n in sorted(by_kind.items())]
    lines.append("confidence: " + ", ".join(f"{k} {v}" for k, v in
                                            sorted(Counter(r["confidence"] for r in rows).items())))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", default=DEFAULT_REPO, help="dgxc-benchmarking git directory")
    args = parser.parse_args()
    rows = [row for release, short in RELEASES for row in release_rows(args.repo, release, short)]
    kept, folded = deduplicate(rows)
    unique_ids(kept)
    OUT.write_text(json.dumps(kept, indent=1) + "\n")
    print(summary(kept, folded))


if __name__ == "__main__":
    main()
