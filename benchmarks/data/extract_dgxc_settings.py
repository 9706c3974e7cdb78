"""Extract the launch settings of NVIDIA/dgxc-benchmarking's NeMo/Megatron pre-training
benchmarks (releases v24.11.1 .. v25.05.04) into ``dgxc_settings.json``.

Reads local git snapshots only (``git show <rev>:<path>``):
  DGXC  github:NVIDIA/dgxc-benchmarking   (READMEs, launch.sh/configure.sh/setup.sh, hydra YAMLs,
                                          pretrain_llama31.py, llama31_utils.py, gsw_nemo.patch)
  NEMO  github:NVIDIA/NeMo                (NeMo 1.0 megatron_gpt_model/megatron_base_model at the
                                          container's release tag; NeMo 2.0 recipes, perf scripts and
                                          runtime callbacks/plugins at the commits the releases pin)
  MLM   github:NVIDIA/Megatron-LM         (Megatron-Core dataclass defaults)

Every value is resolved by code below that reads the value's line and records it as evidence
(``commit:path:line: text`` for dgxc, ``NVIDIA/NeMo@rev:path:line: text`` and
``NVIDIA/Megatron-LM@rev:path:line: text`` for the frameworks). A pattern that is not found
raises, so a wrong assumption about a file cannot pass silently.

Run:  python3 benchmarks/data/extract_dgxc_settings.py  (writes benchmarks/data/dgxc_settings.json)
"""
from __future__ import annotations

import json
import math
import re
import subprocess
from functools import lru_cache
from pathlib import Path

DGXC = "/work/.mirror/NVIDIA+dgxc-benchmarking/repo"
NEMO = "/work/.mirror/NVIDIA+NeMo/repo"
MLM = "/work/.mirror/NVIDIA+Megatron-LM/repo"
OUT = Path(__file__).parent / "dgxc_settings.json"

RELEASES = [  # (commit, release id string, tag/label)
    ("35a9aec", "24.11.1", "v24.11.1"),
    ("143b90d", "25.01", "v25.01"),
    ("e6afea3", "25.01.1", "v25.01.1"),
    ("8f5cbb3", "25.02", "v25.02"),
    ("0b71cfd", "25.02.01", "v25.02.01"),
    ("5f23b67", "25.02.01_a", "v25.02.01_a"),
    ("1b9bb6b", "25.03", "v25.03"),
    ("741c886", "25.04", "v25.04"),
    ("85380ff", "25.04.01", "v25.04.01"),
    ("68eaf7e", "25.05", "v25.05"),
    ("60d6fd3", "25.05.01", "v25.05.01"),
    ("f041145", "25.05.02", "release 25.05.02 (merge f041145)"),
    ("1f6d9f4", "25.05.04", "v25.05.04"),
]
WORKLOAD_DIRS = {"llama3.1": "llama3.1", "nemotron": "nemotron4", "nemo_megatron": "gpt3",
                 "grok1": "grok1", "deepseek_v3": "deepseek-v3"}

# NeMo code inside each NeMo-1.0 container (hydra runs execute /opt/NeMo of the container).
# 24.09 = NeMo 2.0.0 (NeMo docs: "Nemo 2.0 (NGC container nvcr.io/nvidia/nemo:24.09)");
# 24.12 = NeMo 2.1.0; 24.05 = NeMo 2.0.0rc0. The Megatron-Core each ships is the MCORE_TAG of
# that tag's Dockerfile.ci.
NEMO1 = {
    "24.05": ("v2.0.0rc0", "338af51452a53982d202e8386db6233adad1ce86"),
    "24.09": ("v2.0.0", "refs/tags/core_r0.9.0"),
    "24.12": ("v2.1.0", "refs/tags/core_r0.10.0"),
    "dev-sha256:9c876dce": ("v2.0.0", "refs/tags/core_r0.9.0"),
}
# NeMo 2.0 runtime (container side) for the two NeMo-2.0 eras; the frontend builds the recipe
# from the NeMo commit the release pins (setup.sh NEMO_COMMIT), the container instantiates it
# with its own NeMo (run.Packager() ships no code).
NEMO2_RUNTIME = {"25.02.01": "v2.2.0", "25.04.00": "v2.3.0", "25.04.01": "v2.3.0"}
MCORE_OF_NEMO2_RUNTIME = {"25.02.01": "refs/tags/core_r0.11.0",
                          "25.04.00": "7094270c6fa1dbc6b2e99072171e3a559ca36d0f",
                          "25.04.01": "7094270c6fa1dbc6b2e99072171e3a559ca36d0f"}


# ----------------------------------------------------------------------------------------------
# git helpers
# ----------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def show(repo: str, rev: str, path: str) -> list[str]:
    out = subprocess.run(["git", "-C", repo, "show", f"{rev}:{path}"], capture_output=True,
                         text=True, check=True).stdout
    return out.split("\n")


def label(repo: str, rev: str) -> str:
    short = rev.replace("refs/tags/", "")
    if repo == DGXC:
        return short
    if repo == NEMO:
        return f"NVIDIA/NeMo@{short}"
    return f"NVIDIA/Megatron-LM@{short}"


def find(repo: str, rev: str, path: str, pattern: str, start: int = 1, end: int | None = None,
         nth: int = 1) -> tuple[int, str]:
    lines = show(repo, rev, path)
    rx = re.compile(pattern)
    hit = 0
    for i in range(start - 1, len(lines) if end is None else min(end, len(lines))):
        if rx.search(lines[i]):
            hit += 1
            if hit == nth:
                return i + 1, lines[i]
    raise LookupError(f"{label(repo, rev)}:{path}: /{pattern}/ not found (from {start})")


def E(repo: str, rev: str, path: str, pattern: str, note: str | None = None, **kw) -> str:
    ln, text = find(repo, rev, path, pattern, **kw)
    s = f"{label(repo, rev)}:{path}:{ln}: {text.strip()}"
    return s + (f"  [{note}]" if note else "")


def has(repo: str, rev: str, path: str, pattern: str) -> bool:
    try:
        find(repo, rev, path, pattern)
        return True
    except LookupError:
        return False


def yfind(rev: str, path: str, dotted: str) -> tuple[int, str, str]:
    """Line of a nested YAML key (indentation-based), its raw text and scalar value."""
    lines = show(DGXC, rev, path)
    want = dotted.split(".")
    stack: list[tuple[int, str]] = []
    for i, raw in enumerate(lines):
        s = raw.split("#", 1)[0].rstrip() if not raw.strip().startswith("- ") else raw.rstrip()
        if not s.strip() or s.strip().startswith("-"):
            continue
        m = re.match(r"^(\s*)([A-Za-z0-9_+.]+)\s*:(.*)$", s)
        if not m:
            continue
        ind, key, val = len(m.group(1)), m.group(2), m.group(3).strip()
        while stack and stack[-1][0] >= ind:
            stack.pop()
        stack.append((ind, key))
        if [k for _, k in stack] == want:
            return i + 1, raw, val.strip("'\"")
    raise LookupError(f"{rev}:{path}: yaml key {dotted} not found")


def Y(rev: str, path: str, dotted: str, note: str | None = None) -> tuple[str, str]:
    ln, raw, val = yfind(rev, path, dotted)
    s = f"{rev}:{path}:{ln}: {raw.strip()}"
    return val, s + (f"  [{note}]" if note else "")


def ybool(v: str) -> bool | None:
    v = v.lower()
    if v in ("true", "yes"):
        return True
    if v in ("false", "no"):
        return False
    if v in ("null", "none", "~", ""):
        return None
    raise ValueError(v)


def yint(v: str) -> int | None:
    return None if v.lower() in ("null", "none", "") else int(v)


def pad_vocab(v: int, divisible: int, tp: int) -> int:
    m = divisible * tp
    return int(math.ceil(v / m) * m)


# ----------------------------------------------------------------------------------------------
# README tables -> combinations
# ----------------------------------------------------------------------------------------------
GPU_RX = re.compile(r"(\d+)\s*x?\s*(H100|GB200|B200)", re.I)


def parse_tables(commit: str) -> list[dict]:
    files = subprocess.run(["git", "-C", DGXC, "ls-tree", "-r", "--name-only", commit],
                           capture_output=True, text=True, check=True).stdout.split()
    combos = []
    for f in files:
        top = f.split("/")[0]
        if top not in WORKLOAD_DIRS or "README" not in f:
            continue
        lines = show(DGXC, commit, f)
        for i, line in enumerate(lines):
            if not line.startswith("|"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            first = cells[0]
            m_dt = re.search(r"\b(BF16|FP8)\b", first)
            gpus = [GPU_RX.search(c) for c in cells[1:]]
            if not m_dt or not any(gpus) or "Precision" in first:
                continue
            # size
            m_sz = re.search(r"\b(\d+)\s*[bB]\b", first)
            size = (m_sz.group(1) + "b") if m_sz else {"nemo_megatron": "175b", "grok1": "314b", "deepseek_v3": "671b"}.get(top)
            if size is None:
                m_sz = re.search(r"_(\d+b)\.md$", f)
                size = m_sz.group(1) if m_sz else None
            strong = "strong scaling" in first.lower()
            # find the step-time row of this table
            j = i + 1
            step = None
            # data rows may or may not start with '|' (v25.04+ Nemotron, DeepSeek-V3)
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                if "Training step time" in lines[j]:
                    step = (j, [c.strip() for c in lines[j].strip().strip("|").split("|")][1:])
                    break
                j += 1
            if step is None:
                continue
            for k, g in enumerate(gpus):
                if not g or k >= len(step[1]):
                    continue
                val = step[1][k].replace(" ", "")
                if not re.match(r"^\d+(\.\d+)?$", val):
                    continue
                gbs_m = re.search(r"GBS=(\d+)", cells[1 + k])
                combos.append(dict(
                    workload=WORKLOAD_DIRS[top], dir=top, size=size.lower(), gpu=g.group(2).lower(),
                    dtype=m_dt.group(1).lower(), num_gpus=int(g.group(1)), strong=strong,
                    gbs_in_header=int(gbs_m.group(1)) if gbs_m else None,
                    step_time=float(val), readme=f, header_line=i + 1, step_line=step[0] + 1,
                    header=first))
    return combos


# ----------------------------------------------------------------------------------------------
# common evidence for NeMo 1.0 / Megatron-Core semantics
# ----------------------------------------------------------------------------------------------
BASE = "nemo/collections/nlp/models/language_modeling/megatron_base_model.py"
GPTM = "nemo/collections/nlp/models/language_modeling/megatron_gpt_model.py"
MPC = "megatron/core/model_parallel_config.py"
TC = "megatron/core/transformer/transformer_config.py"


def nemo1_refs(tag: str, mcore: str) -> dict[str, str]:
    r = {
        "sp_off_tp1": E(NEMO, tag, BASE, r"if self.cfg.get\('sequence_parallel', False\) and self.cfg.get\('tensor_model_parallel_size', 1\) == 1",
                        "SP forced off when TP == 1"),
        "ub_off_no_sp": E(NEMO, tag, BASE, r"self.cfg.ub_tp_comm_overlap = False",
                          "ub_tp_comm_overlap forced off without sequence_parallel"),
        "ub_default_cfg": E(NEMO, tag, GPTM, r"ub_cfgs = self.cfg.get\('ub_tp_comm_overlap_cfg', None\)",
                            "no ub_tp_comm_overlap_cfg -> TE's built-in userbuffers defaults"),
        "tc_from_cfg": E(NEMO, tag, BASE, r"elif field.name in cfg:",
                         "TransformerConfig fields: NeMo cfg value if the key is present, else Megatron-Core default"),
        "mp_from_cfg": E(NEMO, tag, BASE, r"^\s+if field.name in cfg:",
                         "ModelParallelConfig fields: NeMo cfg value if present, else Megatron-Core default"),
        "recompute_map": E(NEMO, tag, BASE, r"recompute_granularity = self.cfg.get\('activations_checkpoint_granularity', None\)"),
        "fp8_model_init": E(NEMO, tag, GPTM, r"if HAVE_TE and self.cfg.get\('fp8', False\) and self.cfg.get\('fp8_params', False\)",
                            "fp8_params only take effect with fp8 (TE fp8_model_init)"),
        "mcore_ddp_grad": E(NEMO, tag, GPTM, r"grad_reduce_in_fp32=\(self.cfg.optim.get\('grad_sync_dtype', 'fp32'\) == 'fp32'\)",
                            "mcore_distributed_optim: grad reduce in fp32 unless optim.grad_sync_dtype is set"),
        "apex_dtype": E(NEMO, tag, BASE, r"optim_dtype = str_to_dtype\(get_config_arg\('dtype', torch.float32\)\)",
                        "distributed_fused_adam (apex): optimizer-state dtype = optim.dtype, default fp32"),
        "vocab_pad": E(NEMO, tag, BASE, r"multiple = make_vocab_size_divisible_by \* tensor_model_parallel_size",
                       "padded vocab = ceil(V / (make_vocab_size_divisible_by*TP)) * (make_vocab_size_divisible_by*TP)"),
        "cpu_off": E(MLM, mcore, MPC, r"cpu_offloading: bool = False", "Megatron-Core default"),
        "cpu_off_n": E(MLM, mcore, MPC, r"cpu_offloading_num_layers: int = 0", "Megatron-Core default"),
        "fp8_dpa": E(MLM, mcore, TC, r"fp8_dot_product_attention: bool = False", "Megatron-Core default (key absent from the YAMLs)"),
        "ce_default": (E(MLM, mcore, MPC, r"cross_entropy_loss_fusion: bool = False", "Megatron-Core default")
                       if has(MLM, mcore, MPC, r"cross_entropy_loss_fusion: bool") else None),
        "p2p_default": E(MLM, mcore, MPC, r"overlap_p2p_comm: bool = False", "Megatron-Core default"),
        "batch_default": E(MLM, mcore, MPC, r"batch_p2p_comm: bool = True", "Megatron-Core default"),
        "selective_core_attn": E(MLM, mcore, "megatron/core/transformer/attention.py",
                                 r"self.checkpoint_core_attention = self.config.recompute_granularity == 'selective'",
                                 "selective recompute = core attention only (no recompute_modules field at this Megatron-Core)"),
    }
    if has(NEMO, tag, GPTM, r"'enable_cuda_graph': self.cfg.get\('enable_cuda_graph', False\)"):
        r["cuda_graph"] = E(NEMO, tag, GPTM, r"'enable_cuda_graph': self.cfg.get\('enable_cuda_graph', False\)",
                            "enable_cuda_graph absent from the YAML -> False")
    else:
        r["cuda_graph"] = E(MLM, mcore, TC, r"enable_cuda_graph: bool = False",
                            "this NeMo has no enable_cuda_graph key: the Megatron-Core default (False) stands")
    if has(NEMO, tag, GPTM, r"fp8_param_gather=self.cfg.get\('fp8_params', False\)"):
        r["mcore_fp8_gather"] = E(NEMO, tag, GPTM, r"fp8_param_gather=self.cfg.get\('fp8_params', False\)")
    return r


def empty_entry() -> dict:
    return {
        "tp_comm_overlap": None, "tp_comm_overlap_cfg": None, "sequence_parallel": None,
        "overlap_p2p_comm": None, "batch_p2p_comm": None,
        "recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None,
        "recompute_modules": None,
        "offloading": {"cpu_offloading": None, "cpu_offloading_num_layers": None,
                       "fine_grained_activation_offloading": None, "offload_modules": None},
        "cuda_graph_impl": None, "cuda_graph_scope": None,
        "fp8_dot_product_attention": None, "fp8_param_gather": None,
        "precision_recipe": None, "grad_dtype": None,
        "cross_entropy": {"loss_fusion": None, "impl": None},
        "adam_moment_dtype": None, "precision_aware_optimizer": None,
        "overlap_grad_reduce": None, "overlap_param_gather": None,
        "overlap_param_gather_with_optimizer_step": None,
        "use_distributed_optimizer": None, "distributed_optimizer_impl": None,
        "use_megatron_fsdp": None,
    }


def prec(dtype: str, recipe: str = "delayed") -> dict:
    if dtype == "fp8":
        return {"fp8": "hybrid", "fp8_recipe": recipe, "fp4": None}
    return {"fp8": None, "fp8_recipe": None, "fp4": None}


# ----------------------------------------------------------------------------------------------
# Era A: NeMo 1.0 (megatron_gpt_pretraining.py + hydra YAML), releases 24.11.1 .. 25.04.01
# ----------------------------------------------------------------------------------------------
def fw_version(commit: str, d: str, size: str) -> tuple[str, list[str]]:
    ev = []
    launch = f"{d}/launch.sh"
    if d == "nemotron" and has(DGXC, commit, launch, r"if \[\[ \$MODEL_SIZE = 15b \]\]"):
        pat = r"export FW_VERSION=24.12" if size == "15b" else r"export FW_VERSION=24.09"
        ln, text = find(DGXC, commit, launch, pat)
        ev.append(E(DGXC, commit, launch, pat, f"{size}"))
        fw = text.split("=")[1].strip()
    else:
        ln, text = find(DGXC, commit, launch, r"^export FW_VERSION=")
        fw = text.split("=")[1].strip()
        ev.append(E(DGXC, commit, launch, r"^export FW_VERSION="))
    if d == "grok1" and has(DGXC, commit, f"{d}/setup.sh", r"sha256:9c876dce"):
        ev.append(E(DGXC, commit, f"{d}/setup.sh", r"sha256:9c876dce",
                    "image actually pulled: nemo:dev digest; FW_VERSION=24.09 is a label"))
        return "dev-sha256:9c876dce", ev
    if has(DGXC, commit, f"{d}/setup.sh", r"docker://nvcr.io#nvidia/nemo:" + re.escape(fw)):
        ev.append(E(DGXC, commit, f"{d}/setup.sh", r"docker://nvcr.io#nvidia/nemo:" + re.escape(fw)))
    elif has(DGXC, commit, f"{d}/setup.sh", r"docker://nvcr.io#nvidia/nemo:\$\{FW_VERSION\}"):
        ev.append(E(DGXC, commit, f"{d}/setup.sh", r"docker://nvcr.io#nvidia/nemo:\$\{FW_VERSION\}"))
    return fw, ev


def container_name(fw: str) -> str:
    if fw.startswith("dev-"):
        return "nvcr.io/nvidia/nemo:dev@sha256:9c876dce0621f954d1733063e2af642682b188d757fb280cc55755fb8e194400"
    return f"nvcr.io/nvidia/nemo:{fw}"


def era_a(commit: str, rel: str, c: dict) -> dict:
    d, size, dtype, n = c["dir"], c["size"], c["dtype"], c["num_gpus"]
    fw, fw_ev = fw_version(commit, d, size)
    tag, mcore = NEMO1[fw]
    refs = nemo1_refs(tag, mcore)
    e = empty_entry()
    ev: list[str] = list(fw_ev)
    notes: list[str] = []
    par: dict = {}
    other: dict = {}
    cfgdir = "cfg/" if subprocess.run(["git", "-C", DGXC, "cat-file", "-e", f"{commit}:{d}/cfg"],
                                      capture_output=True).returncode == 0 else ""
    conf = f"{d}/configure.sh" if subprocess.run(["git", "-C", DGXC, "cat-file", "-e", f"{commit}:{d}/configure.sh"],
                                                 capture_output=True).returncode == 0 else f"{d}/launch.sh"
    fp8 = dtype == "fp8"
    moe = None

    if d == "llama3.1":
        yml = f"{d}/{cfgdir}llama3.1_{size}.yaml"
        tp = int(Y(commit, yml, "model.tensor_model_parallel_size")[0]); ev.append(Y(commit, yml, "model.tensor_model_parallel_size")[1])
        pp, pe = Y(commit, yml, "model.pipeline_model_parallel_size"); pp = int(pp)
        vp, ve = Y(commit, yml, "model.virtual_pipeline_model_parallel_size"); vp = yint(vp)
        cp, ce = Y(commit, yml, "model.context_parallel_size"); cp = int(cp)
        ev += [pe, ve, ce]
        layers = int(Y(commit, yml, "model.num_layers")[0])
        mbs = int(Y(commit, yml, "model.micro_batch_size")[0])
        seq = int(Y(commit, yml, "model.encoder_seq_length")[0])
        if size == "405b":
            if n in (192, 96, 32):
                blk = {192: r"\$JOB_TOTAL_GPUS = 192", 96: r"\$JOB_TOTAL_GPUS = 96", 32: r"\$JOB_TOTAL_GPUS = 32"}[n]
                ln, _ = find(DGXC, commit, conf, blk)
                ev.append(E(DGXC, commit, conf, blk, "405b proxy scale"))
                ln_l, t_l = find(DGXC, commit, conf, r"NUM_LAYERS=", start=ln)
                ln_p, t_p = find(DGXC, commit, conf, r"PP=", start=ln)
                layers, pp = int(t_l.split("=")[1]), int(t_p.split("=")[1])
                ev.append(E(DGXC, commit, conf, r"NUM_LAYERS=", start=ln))
                ev.append(E(DGXC, commit, conf, r"PP=", start=ln))
                if n == 32:
                    vp = None
                    ev.append(E(DGXC, commit, conf, r"VP=null", start=ln))
                    ev.append(E(DGXC, commit, conf, r"model.defer_embedding_wgrad_compute=false", start=ln))
            gbs = c.get("gbs_in_header")
            ev.append(E(DGXC, commit, conf, r"GBS=\$\{GBS:-\$\(\(252 \* JOB_TOTAL_GPUS / 576\)\)\}"))
        elif size == "8b":
            ev.append(E(DGXC, commit, conf, r"GBS=\$\{GBS:-\$\(\(128 \* JOB_TOTAL_GPUS / 8\)\)\}"))
        else:
            ev.append(E(DGXC, commit, conf, r"GBS=\$\{GBS:-\$\(\(128 \* JOB_TOTAL_GPUS / 64\)\)\}"))
        sp_cfg, spe = Y(commit, yml, "model.sequence_parallel"); sp_cfg = ybool(sp_cfg)
        ub_cfg, ube = Y(commit, yml, "model.ub_tp_comm_overlap"); ub_cfg = ybool(ub_cfg)
        ev += [spe, ube]
        sp = bool(sp_cfg and tp > 1)
        if sp_cfg and tp == 1:
            ev.append(refs["sp_off_tp1"])
        ub = bool(ub_cfg and sp)
        if ub_cfg and not sp:
            ev.append(refs["ub_off_no_sp"])
        e["sequence_parallel"], e["tp_comm_overlap"] = sp, ub
        if ub:
            ln, _, _ = yfind(commit, yml, "model.ub_tp_comm_overlap_cfg")
            e["tp_comm_overlap_cfg"] = f"inline model.ub_tp_comm_overlap_cfg of {yml} (from line {ln})"
            ev.append(f"{commit}:{yml}:{ln}: ub_tp_comm_overlap_cfg:  [per-GEMM userbuffers methods inline]")
            if size == "405b":
                ev.append(E(DGXC, commit, conf, r"model.ub_tp_comm_overlap_cfg.proj_fprop.fp8_buf=\$FP8_ENABLED",
                            f"fp8_buf={str(fp8).lower()}"))
                ev.append(E(DGXC, commit, conf, r"model.ub_tp_comm_overlap_cfg.fc2_fprop.fp8_buf=\$FP8_ENABLED",
                            f"fp8_buf={str(fp8).lower()}"))
        # p2p
        try:
            v, pe2 = Y(commit, yml, "model.overlap_p2p_comm"); e["overlap_p2p_comm"] = ybool(v); ev.append(pe2)
            v, be = Y(commit, yml, "model.batch_p2p_comm"); e["batch_p2p_comm"] = ybool(v); ev.append(be)
        except LookupError:
            e["overlap_p2p_comm"], e["batch_p2p_comm"] = False, True
            ev += [refs["p2p_default"], refs["batch_default"]]
        if pp == 1:
            notes.append("PP=1: p2p settings moot")
        # recompute
        g, ge = Y(commit, yml, "model.activations_checkpoint_granularity"); ev.append(ge)
        e["recompute_granularity"] = None if g in ("null", "") else g
        e["recompute_method"] = None if Y(commit, yml, "model.activations_checkpoint_method")[0] == "null" else Y(commit, yml, "model.activations_checkpoint_method")[0]
        e["recompute_num_layers"] = yint(Y(commit, yml, "model.activations_checkpoint_num_layers")[0])
        ev.append(refs["recompute_map"])
        # precision
        ev.append(E(DGXC, commit, conf, r'CONFIG_OVERRIDES\+=" model.fp8=\$FP8_ENABLED"', f"fp8={str(fp8).lower()}"))
        ev.append(E(DGXC, commit, conf, r'CONFIG_OVERRIDES\+=" model.fp8_hybrid=\$FP8_ENABLED"', f"fp8_hybrid={str(fp8).lower()}"))
        ev.append(E(DGXC, commit, conf, r'CONFIG_OVERRIDES\+=" \+model.fp8_params=\$FP8_ENABLED"', f"fp8_params={str(fp8).lower()}"))
        if fp8:
            ev.append(Y(commit, yml, "model.fp8_amax_history_len")[1])
            ev.append(Y(commit, yml, "model.fp8_amax_compute_algo")[1])
        # cross entropy
        v, cee = Y(commit, yml, "model.cross_entropy_loss_fusion"); ev.append(cee)
        e["cross_entropy"] = {"loss_fusion": ybool(v), "impl": "native"}
        # optimizer
        oname, oe = Y(commit, yml, "model.optim.name"); ev.append(oe)
        gsd, ge2 = Y(commit, yml, "model.optim.grad_sync_dtype"); ev.append(ge2)
        e["grad_dtype"] = gsd
        og, oge = Y(commit, yml, "model.optim.overlap_grad_sync"); op, ope = Y(commit, yml, "model.optim.overlap_param_sync")
        ev += [oge, ope]
        e["overlap_grad_reduce"], e["overlap_param_gather"] = ybool(og), ybool(op)
        e["adam_moment_dtype"] = "fp32"; ev.append(refs["apex_dtype"] + " (no optim.dtype in the YAML)")
        e["use_distributed_optimizer"] = True
        e["distributed_optimizer_impl"] = "apex DistributedFusedAdam (NeMo MegatronDistributedFusedAdam, optim.name distributed_fused_adam)"
        # tokenizer / vocab
        mvd = int(Y(commit, yml, "model.make_vocab_size_divisible_by")[0]); ev.append(Y(commit, yml, "model.make_vocab_size_divisible_by")[1])
        if size == "405b":
            if has(DGXC, commit, conf, r"model.tokenizer.type=/megatron-gpt2-345m"):
                ev.append(E(DGXC, commit, conf, r"model.tokenizer.library=huggingface"))
                ev.append(E(DGXC, commit, conf, r"model.tokenizer.type=/megatron-gpt2-345m",
                            "HF AutoTokenizer of nvidia/megatron-gpt2-345m = GPT-2 BPE, len 50257"))
                ev.append(E(DGXC, commit, "llama3.1/setup.sh", r"nvidia/megatron-gpt2-345m"))
                tok = "GPT-2 BPE (HF nvidia/megatron-gpt2-345m tokenizer files), 50257 tokens"
            else:
                ev.append(Y(commit, yml, "model.tokenizer.type", "megatron GPT2BPETokenizer = GPT-2 BPE, 50257 tokens")[1])
                tok = "GPT2BPETokenizer (megatron library, GPT-2 BPE), 50257 tokens"
            rd = f"llama3.1/README_{size}.md"
            ev.append(E(DGXC, commit, rd, r"uses the GPT2BPETokenizer as a proxy"))
            orig = 50257
        else:
            ev.append(Y(commit, yml, "model.tokenizer.library")[1])
            ev.append(E(DGXC, commit, conf, r'model.tokenizer.type=/dataset/llama', "HF tokenizer files of meta-llama/Meta-Llama-3-8B"))
            ev.append(E(DGXC, commit, "llama3.1/setup.sh", r"meta-llama/Meta-Llama-3-8B"))
            tok = "Llama 3 tokenizer (HF meta-llama/Meta-Llama-3-8B files; len(tokenizer) 128256)"
            orig = 128256
        ev.append(refs["vocab_pad"])
        e["vocab_size"] = pad_vocab(orig, mvd, tp)
        e["tokenizer"] = tok
        par = dict(tp=tp, pp=pp, cp=cp, vp=vp, ep=1, etp=None, mbs=mbs, layers=layers, seq_len=seq)
        other["NVTE_FUSED_ATTN"] = 1
        ev.append(E(DGXC, commit, conf, r"export NVTE_FUSED_ATTN=1"))
        try:
            v, dee = Y(commit, yml, "model.defer_embedding_wgrad_compute")
            other["defer_embedding_wgrad_compute"] = ybool(v) and not (size == "405b" and n == 32)
        except LookupError:
            pass

    elif d == "nemotron":
        yml = f"{d}/{cfgdir}nemotron4-{size}-synth.yaml"
        blk = r"if \[\[ \$MODEL_SIZE = 15b \]\]" 
        ln0, _ = find(DGXC, commit, conf, blk)
        start = ln0 if size == "15b" else find(DGXC, commit, conf, r"^else", start=ln0)[0]
        def cv(name):
            ln, t = find(DGXC, commit, conf, rf"^\s*{name}=", start=start)
            return t.split("=", 1)[1].strip(), E(DGXC, commit, conf, rf"^\s*{name}=", start=start)
        tp, a = cv("TP"); pp, b = cv("PP"); vp, cvv = cv("VP"); mbs, m = cv("MBS"); ev += [a, b, cvv, m]
        tp, pp, mbs = int(tp), int(pp), int(mbs); vp = None if vp == "null" else int(vp)
        if has(DGXC, commit, conf, r"model.context_parallel_size=\$CP"):
            cp_s, cpe = cv("CP"); cp = int(cp_s); ev.append(cpe)
            if size == "340b" and has(DGXC, commit, conf, r"if \[\[ \$DTYPE = bf16 \]\]"):
                ev.append(E(DGXC, commit, conf, r"if \[\[ \$DTYPE = bf16 \]\]", start=start))
                ev.append(E(DGXC, commit, conf, r"CP=2", start=start))
                if dtype == "bf16":
                    cp = 2
            ev.append(E(DGXC, commit, conf, r"model.context_parallel_size=\$CP"))
        else:
            cp = int(Y(commit, yml, "model.context_parallel_size")[0]); ev.append(Y(commit, yml, "model.context_parallel_size")[1])
        layers = int(Y(commit, yml, "model.num_layers")[0]); seq = int(Y(commit, yml, "model.encoder_seq_length")[0])
        ev.append(E(DGXC, commit, conf, r"model.sequence_parallel=True"))
        ev.append(E(DGXC, commit, conf, r"model.ub_tp_comm_overlap=True"))
        e["sequence_parallel"] = tp > 1
        e["tp_comm_overlap"] = tp > 1
        e["tp_comm_overlap_cfg"] = "none given: TE userbuffers defaults (no model.ub_tp_comm_overlap_cfg in the YAML or overrides)"
        ev.append(refs["ub_default_cfg"])
        if size == "340b":
            ev.append(E(DGXC, commit, conf, r"model.overlap_p2p_comm=True"))
            ev.append(E(DGXC, commit, conf, r"model.batch_p2p_comm=False"))
            e["overlap_p2p_comm"], e["batch_p2p_comm"] = True, False
        else:
            v, pe2 = Y(commit, yml, "model.overlap_p2p_comm"); e["overlap_p2p_comm"] = ybool(v)
            v, be = Y(commit, yml, "model.batch_p2p_comm"); e["batch_p2p_comm"] = ybool(v)
            ev += [pe2, be]; notes.append("PP=1: p2p settings moot")
        g, ge = Y(commit, yml, "model.activations_checkpoint_granularity"); ev.append(ge)
        e["recompute_granularity"] = None if g == "null" else g
        e["recompute_method"] = None if Y(commit, yml, "model.activations_checkpoint_method")[0] == "null" else Y(commit, yml, "model.activations_checkpoint_method")[0]
        e["recompute_num_layers"] = yint(Y(commit, yml, "model.activations_checkpoint_num_layers")[0])
        ev.append(refs["recompute_map"])
        if e["recompute_granularity"] == "selective":
            e["recompute_modules"] = ["core_attn"]
            ev.append(refs["selective_core_attn"])
        ev.append(E(DGXC, commit, conf, r"model.fp8=\$\{FP8_ENABLED\^\}", f"fp8={fp8}"))
        ev.append(E(DGXC, commit, conf, r"model.fp8_hybrid=True"))
        ev.append(E(DGXC, commit, conf, r"\+model.fp8_params=\$\{FP8_ENABLED\^\}", f"fp8_params={fp8}"))
        if fp8:
            ev.append(Y(commit, yml, "model.fp8_amax_history_len")[1]); ev.append(Y(commit, yml, "model.fp8_amax_compute_algo")[1])
        v, cee = Y(commit, yml, "model.cross_entropy_loss_fusion"); ev.append(cee)
        e["cross_entropy"] = {"loss_fusion": ybool(v), "impl": "native"}
        oname, oe = Y(commit, yml, "model.optim.name"); ev.append(oe)
        og, oge = Y(commit, yml, "model.optim.overlap_grad_sync"); op, ope = Y(commit, yml, "model.optim.overlap_param_sync")
        ev += [oge, ope]
        e["overlap_grad_reduce"], e["overlap_param_gather"] = ybool(og), ybool(op)
        e["use_distributed_optimizer"] = True
        if oname == "distributed_fused_adam":
            gsd, ge2 = Y(commit, yml, "model.optim.grad_sync_dtype"); ev.append(ge2); e["grad_dtype"] = gsd
            try:
                odt, ode = Y(commit, yml, "model.optim.dtype"); ev.append(ode + ("  [apex optimizer-state dtype: Adam moments bf16; fp8_params -> store_params True (bf16 master copy)]" if fp8 else
                                          "  [apex optimizer-state dtype: Adam moments bf16; optim dtype == model dtype -> store_params False, no separate master params]"))
                e["adam_moment_dtype"] = odt
                ev.append(refs["apex_dtype"])
                ev.append(E(NEMO, tag, BASE, r"elif optim_dtype == model_dtype:"))
            except LookupError:
                e["adam_moment_dtype"] = "fp32"; ev.append(refs["apex_dtype"] + " (no optim.dtype in the YAML)")
            e["distributed_optimizer_impl"] = "apex DistributedFusedAdam (NeMo MegatronDistributedFusedAdam, optim.name distributed_fused_adam)"
        else:
            e["grad_dtype"] = "fp32"
            ev.append(refs["mcore_ddp_grad"] + " (optim.grad_sync_dtype not in the YAML)")
            e["adam_moment_dtype"] = "fp32"
            ev.append(E(MLM, mcore, "megatron/core/optimizer/optimizer_config.py", r"class OptimizerConfig",
                        "Megatron-Core distributed optimizer at this pin keeps fp32 Adam states (no precision-aware optimizer)"))
            e["distributed_optimizer_impl"] = "Megatron-Core DistributedOptimizer + DDP (optim.name mcore_distributed_optim)"
        mvd = int(Y(commit, yml, "model.make_vocab_size_divisible_by")[0]); ev.append(Y(commit, yml, "model.make_vocab_size_divisible_by")[1])
        ev.append(Y(commit, yml, "model.tokenizer.library")[1])
        ev.append(E(DGXC, commit, conf, r"model.tokenizer.model=/cfg/nemotron_2_256k.model"))
        rd = f"{d}/README_{size}.md" if subprocess.run(["git", "-C", DGXC, "cat-file", "-e", f"{commit}:{d}/README_{size}.md"], capture_output=True).returncode == 0 else f"{d}/README.md"
        ev.append(E(DGXC, commit, rd, r"vocab size = 256000"))
        ev.append(refs["vocab_pad"])
        e["vocab_size"] = pad_vocab(256000, mvd, tp)
        e["tokenizer"] = "Nemotron sentencepiece nemotron_2_256k.model, 256000 tokens"
        par = dict(tp=tp, pp=pp, cp=cp, vp=vp, ep=1, etp=None, mbs=mbs, layers=layers, seq_len=seq)
        fa = 1 if size == "15b" else 0
        other["NVTE_FUSED_ATTN"] = fa
        ev.append(E(DGXC, commit, conf, rf"export NVTE_FUSED_ATTN={fa}", start=start))

    elif d == "nemo_megatron":
        yml = f"{d}/{cfgdir}gpt3_175b_hydra.yaml"
        tp = int(Y(commit, yml, "model.tensor_model_parallel_size")[0]); ev.append(Y(commit, yml, "model.tensor_model_parallel_size")[1])
        pp, pe = Y(commit, yml, "model.pipeline_model_parallel_size"); vp, ve = Y(commit, yml, "model.virtual_pipeline_model_parallel_size")
        cp, ce = Y(commit, yml, "model.context_parallel_size"); ev += [pe, ve, ce]
        pp, vp, cp = int(pp), yint(vp), int(cp)
        mbs = int(Y(commit, yml, "model.micro_batch_size")[0]); layers = int(Y(commit, yml, "model.num_layers")[0])
        seq = int(Y(commit, yml, "model.encoder_seq_length")[0])
        ev.append(E(DGXC, commit, conf, r"GBS=\$\(\( SLURM_JOB_NUM_NODES \* 16 \)\)"))
        v, spe = Y(commit, yml, "model.sequence_parallel"); sp = ybool(v) and tp > 1
        v2, ube = Y(commit, yml, "model.ub_tp_comm_overlap"); ub = ybool(v2) and sp
        ev += [spe, ube]
        e["sequence_parallel"], e["tp_comm_overlap"] = sp, ub
        ln, _, _ = yfind(commit, yml, "model.ub_tp_comm_overlap_cfg")
        e["tp_comm_overlap_cfg"] = f"inline model.ub_tp_comm_overlap_cfg of {yml} (from line {ln})"
        ev.append(f"{commit}:{yml}:{ln}: ub_tp_comm_overlap_cfg:  [per-GEMM userbuffers methods inline]")
        v, pe2 = Y(commit, yml, "model.overlap_p2p_comm"); v3, be = Y(commit, yml, "model.batch_p2p_comm")
        e["overlap_p2p_comm"], e["batch_p2p_comm"] = ybool(v), ybool(v3); ev += [pe2, be]
        g, ge = Y(commit, yml, "model.activations_checkpoint_granularity"); ev.append(ge)
        e["recompute_granularity"] = None if g == "null" else g
        ev.append(refs["recompute_map"])
        fpat = r"model.fp8=\$\{FP8_ENABLED\}"
        ev.append(E(DGXC, commit, conf, fpat, f"fp8={fp8}"))
        ev.append(Y(commit, yml, "model.fp8_hybrid")[1])
        fpv, fpe = Y(commit, yml, "model.fp8_params"); ev.append(fpe)
        if not fp8:
            ev.append(refs["fp8_model_init"])
        else:
            ev.append(Y(commit, yml, "model.fp8_amax_history_len")[1]); ev.append(Y(commit, yml, "model.fp8_amax_compute_algo")[1])
        if refs["ce_default"]:
            ev.append(refs["ce_default"] + " (cross_entropy_loss_fusion absent from the YAML)")
        e["cross_entropy"] = {"loss_fusion": False, "impl": "native"}
        oname, oe = Y(commit, yml, "model.optim.name"); ev.append(oe)
        gsd, ge2 = Y(commit, yml, "model.optim.grad_sync_dtype"); ev.append(ge2); e["grad_dtype"] = gsd
        og, oge = Y(commit, yml, "model.optim.overlap_grad_sync"); op, ope = Y(commit, yml, "model.optim.overlap_param_sync")
        ev += [oge, ope]; e["overlap_grad_reduce"], e["overlap_param_gather"] = ybool(og), ybool(op)
        e["adam_moment_dtype"] = "fp32"; ev.append(refs["apex_dtype"] + " (no optim.dtype in the YAML)")
        e["use_distributed_optimizer"] = True
        e["distributed_optimizer_impl"] = "apex DistributedFusedAdam (NeMo MegatronDistributedFusedAdam, optim.name distributed_fused_adam)"
        mvd = int(Y(commit, yml, "model.make_vocab_size_divisible_by")[0]); ev.append(Y(commit, yml, "model.make_vocab_size_divisible_by")[1])
        ev.append(Y(commit, yml, "model.tokenizer.type", "GPT-2 BPE, 50257 tokens")[1])
        ev.append(refs["vocab_pad"])
        e["vocab_size"] = pad_vocab(50257, mvd, tp)
        e["tokenizer"] = "GPT2BPETokenizer (GPT-2 BPE), 50257 tokens"
        par = dict(tp=tp, pp=pp, cp=cp, vp=vp, ep=1, etp=None, mbs=mbs, layers=layers, seq_len=seq)
        fa = 1 if has(DGXC, commit, conf, r"export NVTE_FUSED_ATTN=1") else 0
        other["NVTE_FUSED_ATTN"] = fa
        ev.append(E(DGXC, commit, conf, rf"export NVTE_FUSED_ATTN={fa}"))

    elif d == "grok1":
        yml = f"{d}/{cfgdir}grok1_314b.yaml"
        nodes = n // 8
        ev.append(E(DGXC, commit, conf, r"^TP=4"))
        defaults = {}
        for k in ("NUM_LAYERS", "PP", "VP", "EP", "CP", "SEQ_LEN", "OPTIM_OVERLAP"):
            defaults[k] = find(DGXC, commit, conf, rf"^{k}=")[1].split("=", 1)[1].split("#")[0].strip()
        defaults["GBS"] = str(nodes * 16)
        vals = dict(defaults)
        if nodes in (32, 16, 8, 4, 2, 1):
            ln, _ = find(DGXC, commit, conf, rf"SLURM_JOB_NUM_NODES = {nodes} \]\]")
            ev.append(E(DGXC, commit, conf, rf"SLURM_JOB_NUM_NODES = {nodes} \]\]", "grok1 proxy scale"))
            nxt = find(DGXC, commit, conf, r"^(elif|else)", start=ln + 1)[0]
            for k in ("GBS", "NUM_LAYERS", "PP", "CP", "EP", "VP", "SEQ_LEN", "OPTIM_OVERLAP"):
                try:
                    l2, t2 = find(DGXC, commit, conf, rf"^\s+{k}=", start=ln, end=nxt)
                    vals[k] = t2.split("=", 1)[1].split("#")[0].strip()
                    ev.append(E(DGXC, commit, conf, rf"^\s+{k}=", start=ln, end=nxt))
                except LookupError:
                    pass
        else:
            ev.append(E(DGXC, commit, conf, r"^GBS=\$\(\( SLURM_JOB_NUM_NODES \* 16 \)\)", "default (>=64 nodes)"))
        for k in ("NUM_LAYERS", "PP", "VP", "EP", "CP", "SEQ_LEN", "OPTIM_OVERLAP"):
            if str(vals[k]) == str(defaults[k]):
                ev.append(E(DGXC, commit, conf, rf"^{k}="))
        tp = 4; pp = int(vals["PP"]); cp = int(vals["CP"]); ep = int(vals["EP"])
        vp = None if str(vals["VP"]) == "null" else int(vals["VP"])
        layers = int(vals["NUM_LAYERS"]); seq = int(vals["SEQ_LEN"])
        ev.append(E(DGXC, commit, conf, r"model.sequence_parallel=true"))
        ev.append(E(DGXC, commit, conf, r"model.ub_tp_comm_overlap=true"))
        ev.append(Y(commit, yml, "model.ub_tp_comm_overlap_cfg", "null -> TE userbuffers defaults")[1])
        ev.append(refs["ub_default_cfg"])
        e["sequence_parallel"], e["tp_comm_overlap"] = True, True
        e["tp_comm_overlap_cfg"] = "none given: TE userbuffers defaults (model.ub_tp_comm_overlap_cfg: null)"
        v, pe2 = Y(commit, yml, "model.overlap_p2p_comm"); v3, be = Y(commit, yml, "model.batch_p2p_comm")
        e["overlap_p2p_comm"], e["batch_p2p_comm"] = ybool(v), ybool(v3); ev += [pe2, be]
        if pp == 1:
            notes.append("PP=1: p2p settings moot")
        g, ge = Y(commit, yml, "model.activations_checkpoint_granularity"); ev.append(ge)
        e["recompute_granularity"] = None if g == "null" else g
        ev.append(refs["recompute_map"])
        ev.append(E(DGXC, commit, conf, r"model.fp8=\$\{FP8_ENABLED\^\}", f"fp8={fp8}"))
        ev.append(E(DGXC, commit, conf, r"model.fp8_hybrid=true"))
        ev.append(E(DGXC, commit, conf, r"model.fp8_params=\$\{FP8_ENABLED\^\}", f"fp8_params={fp8}"))
        if fp8:
            ev.append(Y(commit, yml, "model.fp8_amax_history_len")[1]); ev.append(Y(commit, yml, "model.fp8_amax_compute_algo")[1])
            if "mcore_fp8_gather" in refs:
                ev.append(refs["mcore_fp8_gather"])
        if refs["ce_default"]:
            ev.append(refs["ce_default"] + " (cross_entropy_loss_fusion absent from the YAML)")
        e["cross_entropy"] = {"loss_fusion": False, "impl": "native"}
        oname, oe = Y(commit, yml, "model.optim.name"); ev.append(oe)
        gsd, ge2 = Y(commit, yml, "model.optim.grad_sync_dtype"); ev.append(ge2); ev.append(refs["mcore_ddp_grad"])
        e["grad_dtype"] = gsd
        og, oge = Y(commit, yml, "model.optim.overlap_grad_sync"); op, ope = Y(commit, yml, "model.optim.overlap_param_sync")
        ev += [oge, ope]; e["overlap_grad_reduce"], e["overlap_param_gather"] = ybool(og), ybool(op)
        ev.append(E(DGXC, commit, conf, r"model.optim.overlap_param_gather_with_optimizer_step=\$OPTIM_OVERLAP",
                    f"OPTIM_OVERLAP={vals['OPTIM_OVERLAP']}"))
        e["overlap_param_gather_with_optimizer_step"] = str(vals["OPTIM_OVERLAP"]).lower() == "true"
        e["adam_moment_dtype"] = "fp32"
        ev.append(E(MLM, mcore, "megatron/core/optimizer/optimizer_config.py", r"class OptimizerConfig",
                    "Megatron-Core distributed optimizer at this pin keeps fp32 Adam states (no precision-aware optimizer)"))
        e["use_distributed_optimizer"] = True
        e["distributed_optimizer_impl"] = "Megatron-Core DistributedOptimizer + DDP (optim.name mcore_distributed_optim)"
        # MoE
        disp, de = Y(commit, yml, "model.moe_token_dispatcher_type"); gg, gge = Y(commit, yml, "model.moe_grouped_gemm")
        padc, pade = Y(commit, yml, "model.moe_pad_expert_input_to_capacity"); capf, cape = Y(commit, yml, "model.moe_expert_capacity_factor")
        ev += [de, gge, pade, cape]
        etp_ev = (E(NEMO, tag, "nemo/collections/nlp/modules/common/megatron/megatron_init.py",
                    r"expert_tensor_parallel_size_ = tensor_model_parallel_size",
                    "expert TP defaults to TP (no expert_tensor_parallel_size in the YAML or overrides)")
                  if has(NEMO, tag, "nemo/collections/nlp/modules/common/megatron/megatron_init.py", r"expert_tensor_parallel_size_ = tensor_model_parallel_size")
                  else E(MLM, mcore, MPC, r"moe_extended_tp: bool = False",
                         "no expert_tensor_parallel_size at this Megatron-Core: experts are sharded over the full TP group"))
        ev.append(etp_ev)
        moe = {"dispatcher": disp, "flex_backend": None, "a2a_overlap": False,
               "moe_permute_fusion": False, "moe_grouped_gemm": ybool(gg), "expert_tp": tp,
               "moe_expert_capacity_factor": float(capf), "moe_pad_expert_input_to_capacity": ybool(padc)}
        if has(MLM, mcore, TC, r"moe_permute_fusion: bool = False"):
            ev.append(E(MLM, mcore, TC, r"moe_permute_fusion: bool = False", "Megatron-Core default; key absent from the YAML"))
        else:
            notes.append("moe_permute_fusion does not exist at this Megatron-Core (reported False)")
        mvd = int(Y(commit, yml, "model.make_vocab_size_divisible_by")[0]); ev.append(Y(commit, yml, "model.make_vocab_size_divisible_by")[1])
        ev.append(Y(commit, yml, "model.tokenizer.type", "HF Llama 3 tokenizer, len 128256")[1])
        ev.append(refs["vocab_pad"])
        e["vocab_size"] = pad_vocab(128256, mvd, tp)
        e["tokenizer"] = "Llama 3 tokenizer (HF meta-llama/Meta-Llama-3-70B, len 128256)"
        gbs = int(vals["GBS"])
        par = dict(tp=tp, pp=pp, cp=cp, vp=vp, ep=ep, etp=tp, mbs=1, gbs=gbs, layers=layers, seq_len=seq)
        other["NVTE_FUSED_ATTN"] = 0
        ev.append(E(DGXC, commit, conf, r"export NVTE_FUSED_ATTN=0"))

    # shared NeMo 1.0 defaults
    e["offloading"] = {"cpu_offloading": False, "cpu_offloading_num_layers": 0,
                       "fine_grained_activation_offloading": False, "offload_modules": None}
    ev += [refs["cpu_off"], refs["cpu_off_n"]]
    e["cuda_graph_impl"], e["cuda_graph_scope"] = "none", []
    ev.append(refs["cuda_graph"])
    e["fp8_dot_product_attention"] = False
    ev.append(refs["fp8_dpa"])
    e["fp8_param_gather"] = fp8
    if fp8:
        ev.append(refs["fp8_model_init"])
    e["precision_recipe"] = prec(dtype, "delayed")
    e["precision_aware_optimizer"] = False
    e["use_megatron_fsdp"] = False
    if e["overlap_param_gather_with_optimizer_step"] is None:
        e["overlap_param_gather_with_optimizer_step"] = False
    ev.append(refs["tc_from_cfg"]); ev.append(refs["mp_from_cfg"])
    e["parallelism"] = par
    e["container"] = container_name(fw)
    e["framework_code"] = {"kind": "NeMo 1.0 (examples/nlp/language_modeling/megatron_gpt_pretraining.py + hydra YAML)",
                           "nemo": f"NVIDIA/NeMo@{tag} (the container's /opt/NeMo; tag inferred from the container version)",
                           "megatron_core": label(MLM, mcore)}
    if moe:
        e.update(moe)
    e["other"] = other
    e["_ev"], e["_notes"] = ev, notes
    return e


# ----------------------------------------------------------------------------------------------
# Era B: NeMo 2.0, dgxc's own pretrain_llama31.py (25.04, 25.04.01)
# ----------------------------------------------------------------------------------------------
def era_b(commit: str, rel: str, c: dict) -> dict:
    size, dtype, n = c["size"], c["dtype"], c["num_gpus"]
    e = empty_entry(); ev: list[str] = []; notes: list[str] = []
    fp8 = dtype == "fp8"
    launch, utils, pre, setup = "llama3.1/launch.sh", "llama3.1/llama31_utils.py", "llama3.1/pretrain_llama31.py", "llama3.1/setup.sh"
    fw = find(DGXC, commit, launch, r"^export FW_VERSION=")[1].split("=")[1].strip()
    ev.append(E(DGXC, commit, launch, r"^export FW_VERSION="))
    ev.append(E(DGXC, commit, setup, r"docker://nvcr.io#nvidia/nemo:\$\{FW_VERSION\}"))
    nc = find(DGXC, commit, setup, r'NEMO_COMMIT=')[1].split('"')[1]
    mc = find(DGXC, commit, setup, r'MEGATRON_COMMIT=')[1].split('"')[1]
    ev += [E(DGXC, commit, setup, r'NEMO_COMMIT='), E(DGXC, commit, setup, r'MEGATRON_COMMIT='),
           E(DGXC, commit, setup, r"git apply \$LLM_REPO/gsw_nemo.patch")]
    rt = NEMO2_RUNTIME[fw]; rt_mc = MCORE_OF_NEMO2_RUNTIME[fw]
    ev.append(E(DGXC, commit, utils, r"packager=run.Packager\(\)", "no code packaged: the container's NeMo instantiates the recipe"))
    # auto configs
    ln0 = find(DGXC, commit, utils, rf'case "{size}":', start=find(DGXC, commit, utils, r"mbs = 1 if args.micro_batch_size is None")[0])[0]
    nxt = find(DGXC, commit, utils, r'case "|enable_cuda_graphs = args.cuda_graphs', start=ln0 + 1)[0]
    def av(name, start=ln0, end=nxt):
        ln, t = find(DGXC, commit, utils, rf"^\s+{name} = ", start=start, end=end)
        return t, E(DGXC, commit, utils, rf"^\s+{name} = ", start=start, end=end)
    def num(t):
        return int(re.search(r"=\s*(\d+)", t).group(1))
    tpt, a = av("tp_size"); ppt, b = av("pp_size"); cpt, cc = av("cp_size"); vpt, d_ = av("vp_size")
    lt, l_ = av("num_layers"); ht, h_ = av("hidden_size"); gt, g_ = av("gbs")
    tp, pp, cp, vp, layers = num(tpt), num(ppt), num(cpt), num(vpt), num(lt)
    ev += [a, b, cc, d_, l_, g_]
    gbs = {"8b": n * 16, "70b": n * 2, "405b": n // 2}[size]
    if size == "70b" and fp8:
        l2 = find(DGXC, commit, utils, r'if args.compute_dtype == "fp8":', start=ln0, end=nxt)[0]
        t, x = av("pp_size", l2, nxt); pp = num(t); ev.append(x)
        t, x = av("cp_size", l2, nxt); cp = num(t); ev.append(x)
    if size == "405b" and n in (128, 64, 32):
        l2 = find(DGXC, commit, utils, rf"if args.num_gpus == {n}:|elif args.num_gpus == {n}:", start=ln0, end=nxt)[0]
        ev.append(E(DGXC, commit, utils, rf"args.num_gpus == {n}:", start=ln0, end=nxt, note="405b proxy"))
        l3 = find(DGXC, commit, utils, r"elif args.num_gpus ==|^\s*$", start=l2 + 1)[0]
        t, x = av("gbs", l2, l3); gbs = num(t); ev.append(x)
        t, x = av("pp_size", l2, l3); pp = num(t); ev.append(x)
        t, x = av("num_layers", l2, l3); layers = num(t); ev.append(x)
        try:
            t, x = av("vp_size", l2, l3); vp = num(t); ev.append(x)
        except LookupError:
            pass
    vpn = None if vp == 1 else vp
    dp = n // (tp * pp * cp)
    ev.append(E(NEMO, nc, "scripts/performance/utils.py", r"virtual_pipeline_model_parallel_size = None if vp_size == 1 else vp_size"))
    # SP / TP overlap
    ev.append(E(NEMO, nc, "scripts/performance/utils.py", r"recipe.trainer.strategy.sequence_parallel = bool\(tp_size > 1\)"))
    sp = tp > 1
    e["sequence_parallel"] = sp
    recipe = {"8b": "nemo/collections/llm/recipes/llama3_8b.py", "70b": "nemo/collections/llm/recipes/llama3_70b.py",
              "405b": "nemo/collections/llm/recipes/llama31_405b.py"}[size]
    ev.append(E(DGXC, commit, pre, rf'recipe = pretrain_recipe_{size}\(performance_mode=True\)'))
    pstart = find(NEMO, nc, recipe, r"def pretrain_performance_optimizations")[0]
    tpo = find(NEMO, nc, recipe, r"tp_comm_overlap=(True|False)", start=pstart)[1]
    ev.append(E(NEMO, nc, recipe, r"tp_comm_overlap=(True|False)", start=pstart))
    user_tpo = "True" in tpo
    CB = "nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py"
    if user_tpo:
        ev.append(E(NEMO, rt, CB, r"if parallelism_cfg.tensor_model_parallel_size < 2:", "runtime: TP overlap kept only with TP>=2 and SP"))
    e["tp_comm_overlap"] = bool(user_tpo and tp > 1 and sp)
    if e["tp_comm_overlap"]:
        key = "fp8" if fp8 else "bf16"
        cfgname = {"70b": f"userbuffers_{key}_h100_h8192_tp4_mbs1_seqlen8192",
                   "405b": f"userbuffers_{key}_h100_h16384_tp8_cp2_mbs1_seqlen8192"}[size]
        ev.append(E(DGXC, commit, pre, rf'"{key}": {cfgname},'))
        ev.append(E(DGXC, commit, pre, r"recipe.trainer.callbacks\[comm_overlap_callback_idx\].tp_comm_overlap_cfg = tp_comm_overlap_cfg"))
        ev.append(E(NEMO, nc, "nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py", rf"^{cfgname} = "))
        e["tp_comm_overlap_cfg"] = cfgname
    # p2p
    ev.append(E(NEMO, rt, CB, r"if parallelism_cfg.pipeline_model_parallel_size > 1:"))
    if pp > 1 and (vpn or 1) > 1:
        e["overlap_p2p_comm"], e["batch_p2p_comm"] = True, False
        ev.append(E(NEMO, rt, CB, r"comm_overlap_cfg.overlap_p2p_comm = True"))
    elif pp > 1:
        e["overlap_p2p_comm"], e["batch_p2p_comm"] = False, True
        ev.append(E(NEMO, rt, CB, r"comm_overlap_cfg.batch_p2p_comm = True"))
    else:
        e["overlap_p2p_comm"], e["batch_p2p_comm"] = False, False
        ev.append(E(NEMO, rt, CB, r"comm_overlap_cfg.batch_p2p_comm = False", nth=2))
    # DP overlap
    ev.append(E(NEMO, rt, CB, r"if data_parallel_size > 1:"))
    e["overlap_grad_reduce"] = e["overlap_param_gather"] = dp > 1
    ev.append(E(NEMO, nc, "scripts/performance/utils.py", r"dp_size > 1 and pp_size > 1 and vp_size and vp_size > 1"))
    e["overlap_param_gather_with_optimizer_step"] = bool(dp > 1 and pp > 1 and vp and vp > 1)
    # recompute / offload / graphs
    e["recompute_granularity"] = None
    ev.append(E(MLM, rt_mc, TC, r"recompute_granularity: str = None|recompute_granularity: Optional\[str\] = None",
                "no recompute set by recipe or script"))
    e["offloading"] = {"cpu_offloading": False, "cpu_offloading_num_layers": 0,
                       "fine_grained_activation_offloading": False, "offload_modules": None}
    ev.append(E(MLM, rt_mc, MPC, r"cpu_offloading: bool = False", "Megatron-Core default"))
    ev.append(E(DGXC, commit, utils, r"enable_cuda_graphs = False if enable_cuda_graphs is None else bool"))
    ev.append(E(DGXC, commit, pre, r"recipe.model.config.enable_cuda_graph = enable_cuda_graphs"))
    e["cuda_graph_impl"], e["cuda_graph_scope"] = "none", []
    # precision
    MP = "nemo/collections/llm/recipes/precision/mixed_precision.py"
    if fp8:
        ev.append(E(DGXC, commit, pre, r"recipe.trainer.plugins = bf16_with_fp8_mixed\(\)"))
        ev.append(E(NEMO, nc, MP, r"cfg.fp8 = 'hybrid'"))
        ev.append(E(NEMO, nc, MP, r"cfg.fp8_amax_history_len = 1024"))
        ev.append(E(NEMO, nc, MP, r"cfg.fp8_params = True"))
        ev.append(E(NEMO, rt, "nemo/lightning/pytorch/plugins/mixed_precision.py", r"fp8_param_gather = True",
                    "runtime plugin: fp8 params -> fp8 param all-gather; no fp8_recipe argument at this NeMo = TE delayed scaling"))
        ev.append(E(DGXC, commit, pre, r"recipe.trainer.plugins.grad_reduce_in_fp32 = False"))
    else:
        ev.append(E(NEMO, nc, recipe, r"recipe.trainer.plugins.grad_reduce_in_fp32 = False", start=pstart))
    e["precision_recipe"] = prec(dtype, "delayed")
    e["fp8_param_gather"] = fp8
    e["fp8_dot_product_attention"] = False
    ev.append(E(NEMO, rt, "nemo/lightning/pytorch/plugins/mixed_precision.py", r"fp8_dot_product_attention: bool = False"))
    e["grad_dtype"] = "bf16"
    ev.append(E(NEMO, rt, "nemo/lightning/pytorch/strategies/megatron_strategy.py", r"self.ddp_config = update_config_with_dtype_overrides\(dtype_config, self.ddp_config\)",
                "plugin grad_reduce_in_fp32 overrides the recipe's DDP config"))
    e["cross_entropy"] = {"loss_fusion": True, "impl": "native"}
    ev.append(E(NEMO, rt, "nemo/collections/llm/gpt/model/base.py", r"cross_entropy_loss_fusion: bool = True"))
    notes.append("cross-entropy: Megatron-Core fused vocab-parallel kernel (no cross_entropy_fusion_impl is set by this release's scripts; 'native')")
    AD = "nemo/collections/llm/recipes/optim/adam.py"
    ev.append(E(NEMO, nc, AD, r"use_distributed_optimizer=True"))
    e["use_distributed_optimizer"] = True
    e["distributed_optimizer_impl"] = "Megatron-Core DistributedOptimizer (MegatronOptimizerModule)"
    e["adam_moment_dtype"] = "fp32"; e["precision_aware_optimizer"] = False
    ev.append(E(MLM, rt_mc, "megatron/core/optimizer/optimizer_config.py", r"exp_avg_dtype: torch.dtype = torch.float32"))
    e["use_megatron_fsdp"] = False
    # vocab
    uri = {"8b": "meta-llama/Meta-Llama-3-8B", "70b": "meta-llama/Meta-Llama-3-70B", "405b": "meta-llama/Llama-3.1-405B"}[size]
    ev.append(E(DGXC, commit, pre, rf'HF_MODEL_URI = "{uri}"'))
    ev.append(E(DGXC, commit, pre, r"recipe.data.tokenizer = hf_tokenizer\(HF_MODEL_URI\)"))
    ev.append(E(NEMO, rt, "nemo/collections/llm/gpt/model/base.py", r"vocab_size = get_vocab_size\(self, tokenizer.vocab_size, self.make_vocab_size_divisible_by\)"))
    ev.append(E(NEMO, rt, "nemo/lightning/base.py", r"multiple = make_vocab_size_divisible_by \* config.tensor_model_parallel_size"))
    ev.append(E(NEMO, nc, "nemo/collections/llm/gpt/model/llama.py", r"make_vocab_size_divisible_by: int = 128"))
    e["vocab_size"] = pad_vocab(128256, 128, tp)
    e["tokenizer"] = f"real Llama 3/3.1 tokenizer (HF {uri}, len 128256)"
    e["parallelism"] = dict(tp=tp, pp=pp, cp=cp, vp=vpn, ep=1, etp=None, mbs=1, gbs=gbs, layers=layers, seq_len=8192, dp=dp)
    e["container"] = f"nvcr.io/nvidia/nemo:{fw}"
    e["framework_code"] = {"kind": "NeMo 2.0 (nemo_run; dgxc llama3.1/pretrain_llama31.py as scripts.performance.llm.pretrain_llama31)",
                           "recipe_built_from": f"NVIDIA/NeMo@{nc} + llama3.1/gsw_nemo.patch (frontend venv, megatron-core {mc[:10]})",
                           "runtime_nemo": f"NVIDIA/NeMo@{rt} (container nvcr.io/nvidia/nemo:{fw}; inferred tag)",
                           "runtime_megatron_core": label(MLM, rt_mc) + " (inferred)"}
    e["other"] = {"NVTE_FUSED_ATTN": 1, "defer_embedding_wgrad_compute": size != "8b",
                  "vboost": True}
    ev.append(E(DGXC, commit, utils, r'"NVTE_FUSED_ATTN": "1"'))
    ev.append(E(DGXC, commit, pre, r"PerfEnvPlugin\(enable_vboost=True"))
    e["_ev"], e["_notes"] = ev, notes
    return e


def era_b_nemotron(commit: str, rel: str, c: dict) -> dict:
    """v25.04/25.04.01 Nemotron-4: NeMo 2.0 scripts/performance/llm/pretrain_nemotron4_<size>.py of NeMo d2b21556
    with gsw_nemo.patch applied, container nemo:25.02.01."""
    size, dtype, n = c["size"], c["dtype"], c["num_gpus"]
    e = empty_entry(); ev: list[str] = []; notes: list[str] = []
    fp8 = dtype == "fp8"
    launch, setup, patch = "nemotron/launch.sh", "nemotron/setup.sh", "nemotron/gsw_nemo.patch"
    fw = find(DGXC, commit, launch, r"^export FW_VERSION=")[1].split("=")[1].strip()
    ev.append(E(DGXC, commit, launch, r"^export FW_VERSION="))
    ev.append(E(DGXC, commit, setup, r"docker://nvcr.io#nvidia/nemo:\$\{FW_VERSION\}"))
    nc = find(DGXC, commit, setup, r'NEMO_COMMIT=')[1].split('"')[1]
    mc = find(DGXC, commit, setup, r'MEGATRON_COMMIT=')[1].split('"')[1]
    ev += [E(DGXC, commit, setup, r'NEMO_COMMIT='), E(DGXC, commit, setup, r'MEGATRON_COMMIT='),
           E(DGXC, commit, setup, r"git apply \$LLM_REPO/gsw_nemo.patch")]
    rt = NEMO2_RUNTIME[fw]; rt_mc = MCORE_OF_NEMO2_RUNTIME[fw]
    U = "scripts/performance/utils.py"
    CB = "nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py"
    ev.append(E(DGXC, commit, patch, r"^\+        packager=run.Packager\(\),", "gsw_nemo.patch: no code packaged, the container's NeMo runs the recipe"))
    ln_s = find(DGXC, commit, launch, rf"(if|elif) \[ \$MODEL_SIZE = {size} \]")[0]
    def lv(k):
        ln, t = find(DGXC, commit, launch, rf"^\s*{k}=", start=ln_s)
        return t.split("=", 1)[1].strip(), E(DGXC, commit, launch, rf"^\s*{k}=", start=ln_s)
    tp, a = lv("TP"); pp, b = lv("PP"); cp, cc = lv("CP"); mbs, m = lv("MBS"); vp, v_ = lv("VP"); nl_, nle = lv("NUM_LAYERS")
    ev += [a, b, cc, m, v_, nle]
    tp, pp, cp, mbs, vp, layers = int(tp), int(pp), int(cp), int(mbs), int(vp), int(nl_)
    csv = "scripts/performance/recommended_model_configs/model_configs_h100.csv"
    row = None
    for i, line in enumerate(show(NEMO, nc, csv)):
        f = line.split(",")
        if len(f) > 4 and f[0] == "pre_train" and f[1] == "nemotron4" and f[2] == size and f[4] == dtype:
            row = (i + 1, f, line); break
    hdr = show(NEMO, nc, csv)[0].split(",")
    ev.append(f"{label(NEMO, nc)}:{csv}:{row[0]}: {row[2]}  [first matching recommended-config row (no num_gpus filter at this commit); CLI values override]")
    ev.append(E(NEMO, nc, U, r'& \(df\["dtype"\] == args.compute_dtype\)'))
    if vp == 0:
        ev.append(E(DGXC, commit, launch, r"if \[ \$VP != 0 \]; then", "VP=0: -vp not passed, CSV vp_size used"))
        vp = int(float(row[1][hdr.index("vp_size")]))
    if size == "340b":
        ev.append(E(DGXC, commit, launch, r"GBS=\$\(\( \$JOB_TOTAL_GPUS / 4 \)\)", start=ln_s)); gbs = n // 4
        rd_ln = find(DGXC, commit, "nemotron/README.md", r"^\| 340b \| BF16/FP8  \| " + str(n))
        ev.append(E(DGXC, commit, "nemotron/README.md", r"^\| 340b \| BF16/FP8  \| " + str(n),
                    "README config table says VP NA; launch.sh passes -vp 12 (and the CSV has vp_size 12): VP=12 taken"))
        notes.append("README config table lists VP as NA for 340B but launch.sh passes -vp 12: VP=12 taken (launch code)")
    else:
        ev.append(E(DGXC, commit, launch, r"GBS=\$\(\( \$JOB_TOTAL_GPUS \* 4 \)\)", start=ln_s)); gbs = n * 4
    cg = row[1][hdr.index("cuda_graphs")]
    cuda_graphs = bool(int(float(cg))) if cg else False
    ev.append(E(NEMO, nc, U, r'enable_cuda_graphs = config.get\("cuda_graphs"\) if args.cuda_graphs is None else args.cuda_graphs'))
    script = f"scripts/performance/llm/pretrain_nemotron4_{size}.py"
    recipe = f"nemo/collections/llm/recipes/nemotron4_{size}.py"
    ev.append(E(DGXC, commit, launch, r"python -m scripts.performance.llm.pretrain_nemotron4_\$\{MODEL_SIZE\}"))
    ev.append(E(DGXC, commit, launch, r"--gpu h100"))
    ev.append(E(NEMO, nc, script, r"recipe = pretrain_recipe\(performance_mode=True\)"))
    pstart = find(NEMO, nc, recipe, r"def pretrain_performance_optimizations")[0]
    ev.append(E(NEMO, nc, recipe, r"tp_comm_overlap=True", start=pstart))
    defer = has(NEMO, nc, recipe, r"defer_embedding_wgrad_compute=True")
    if defer:
        ev.append(E(NEMO, nc, recipe, r"defer_embedding_wgrad_compute=True", start=pstart))
    ev.append(E(NEMO, nc, script, r'if gpu_type == "b200":', "H100: no userbuffers config passed"))
    ev.append(E(NEMO, rt, CB, r"Tensor parallel overlap: No overlap config provided"))
    vpn = None if vp == 1 else vp
    dp = n // (tp * pp * cp)
    ev.append(E(NEMO, nc, U, r"recipe.trainer.strategy.sequence_parallel = bool\(tp_size > 1\)"))
    ev.append(E(NEMO, nc, U, r"virtual_pipeline_model_parallel_size = None if vp_size == 1 else vp_size"))
    sp = tp > 1
    e["sequence_parallel"] = sp
    ev.append(E(NEMO, rt, CB, r"if parallelism_cfg.tensor_model_parallel_size < 2:", "runtime: TP overlap kept only with TP>=2 and SP"))
    e["tp_comm_overlap"] = sp
    e["tp_comm_overlap_cfg"] = "none given: TE userbuffers defaults" if sp else None
    ev.append(E(NEMO, rt, CB, r"if parallelism_cfg.pipeline_model_parallel_size > 1:"))
    if pp > 1 and (vpn or 1) > 1:
        e["overlap_p2p_comm"], e["batch_p2p_comm"] = True, False
        ev.append(E(NEMO, rt, CB, r"comm_overlap_cfg.overlap_p2p_comm = True"))
    elif pp > 1:
        e["overlap_p2p_comm"], e["batch_p2p_comm"] = False, True
        ev.append(E(NEMO, rt, CB, r"comm_overlap_cfg.batch_p2p_comm = True"))
    else:
        e["overlap_p2p_comm"], e["batch_p2p_comm"] = False, False
        ev.append(E(NEMO, rt, CB, r"comm_overlap_cfg.batch_p2p_comm = False", nth=2))
    ev.append(E(NEMO, rt, CB, r"if data_parallel_size > 1:"))
    e["overlap_grad_reduce"] = e["overlap_param_gather"] = dp > 1
    ev.append(E(NEMO, nc, U, r"dp_size > 1 and pp_size > 1 and vp_size and vp_size > 1"))
    e["overlap_param_gather_with_optimizer_step"] = bool(dp > 1 and pp > 1 and vp and vp > 1)
    e["recompute_granularity"] = None
    ev.append(E(MLM, rt_mc, TC, r"recompute_granularity: str = None|recompute_granularity: Optional\[str\] = None",
                "no recompute set by recipe or script"))
    e["offloading"] = {"cpu_offloading": False, "cpu_offloading_num_layers": 0,
                       "fine_grained_activation_offloading": False, "offload_modules": None}
    ev.append(E(MLM, rt_mc, MPC, r"cpu_offloading: bool = False", "Megatron-Core default"))
    ev.append(E(NEMO, nc, script, r"recipe.model.config.enable_cuda_graph = enable_cuda_graphs"))
    if cuda_graphs:
        e["cuda_graph_impl"], e["cuda_graph_scope"] = "local", ["full"]
    else:
        e["cuda_graph_impl"], e["cuda_graph_scope"] = "none", []
    MP = "nemo/collections/llm/recipes/precision/mixed_precision.py"
    if fp8:
        ev.append(E(NEMO, nc, script, r"recipe.trainer.plugins = bf16_with_fp8_mixed\(\)"))
        ev.append(E(NEMO, nc, MP, r"cfg.fp8 = 'hybrid'"))
        ev.append(E(NEMO, nc, MP, r"cfg.fp8_params = True"))
        ev.append(E(NEMO, rt, "nemo/lightning/pytorch/plugins/mixed_precision.py", r"fp8_param_gather = True",
                    "runtime plugin: fp8 params -> fp8 param all-gather; no fp8_recipe argument at this NeMo = TE delayed scaling"))
        ev.append(E(NEMO, nc, script, r"recipe.trainer.plugins.grad_reduce_in_fp32 = False"))
    else:
        ev.append(E(NEMO, nc, recipe, r"recipe.trainer.plugins.grad_reduce_in_fp32 = False", start=pstart))
    e["precision_recipe"] = prec(dtype, "delayed")
    e["fp8_param_gather"] = fp8
    e["fp8_dot_product_attention"] = False
    ev.append(E(NEMO, rt, "nemo/lightning/pytorch/plugins/mixed_precision.py", r"fp8_dot_product_attention: bool = False"))
    e["grad_dtype"] = "bf16"
    ev.append(E(NEMO, rt, "nemo/lightning/pytorch/strategies/megatron_strategy.py", r"self.ddp_config = update_config_with_dtype_overrides\(dtype_config, self.ddp_config\)",
                "plugin grad_reduce_in_fp32 overrides the recipe's DDP config"))
    e["cross_entropy"] = {"loss_fusion": True, "impl": "native"}
    ev.append(E(NEMO, nc, "nemo/collections/llm/gpt/model/nemotron.py", r"cross_entropy_loss_fusion: bool = True"))
    notes.append("cross-entropy: Megatron-Core fused vocab-parallel kernel (no cross_entropy_fusion_impl is set by this release's scripts; 'native')")
    AD = "nemo/collections/llm/recipes/optim/adam.py"
    ev.append(E(NEMO, nc, recipe, r"optim=distributed_fused_adam_with_cosine_annealing\("))
    ev.append(E(NEMO, nc, AD, r"use_distributed_optimizer=True"))
    e["use_distributed_optimizer"] = True
    e["distributed_optimizer_impl"] = "Megatron-Core DistributedOptimizer (MegatronOptimizerModule)"
    e["adam_moment_dtype"] = "fp32"; e["precision_aware_optimizer"] = False
    ev.append(E(MLM, rt_mc, "megatron/core/optimizer/optimizer_config.py", r"exp_avg_dtype: torch.dtype = torch.float32"))
    e["use_megatron_fsdp"] = False
    ev.append(E(NEMO, nc, script, r'get_nmt_tokenizer, library="null", model_name="NullTokenizer", vocab_size=256000'))
    ev.append(E(NEMO, rt, "nemo/collections/common/tokenizers/null_tokenizer.py", r"return self._vocab_size_without_eod \+ 1",
                "NullTokenizer(256000).vocab_size = 256001 (EOD appended)"))
    ev.append(E(NEMO, rt, "nemo/collections/llm/gpt/model/base.py", r"vocab_size = get_vocab_size\(self, tokenizer.vocab_size, self.make_vocab_size_divisible_by\)"))
    ev.append(E(NEMO, rt, "nemo/lightning/base.py", r"multiple = make_vocab_size_divisible_by \* config.tensor_model_parallel_size"))
    e["vocab_size"] = pad_vocab(256001, 128, tp)
    e["tokenizer"] = "NullTokenizer(vocab_size=256000) -> 256001 ids with EOD (mock data; the Nemotron-4 256k vocabulary)"
    e["parallelism"] = dict(tp=tp, pp=pp, cp=cp, vp=vpn, ep=1, etp=None, mbs=mbs, gbs=gbs, layers=layers, seq_len=4096, dp=dp)
    e["container"] = f"nvcr.io/nvidia/nemo:{fw}"
    e["framework_code"] = {"kind": "NeMo 2.0 (nemo_run) scripts/performance/llm/pretrain_nemotron4_<size>.py",
                           "recipe_built_from": f"NVIDIA/NeMo@{nc} + nemotron/gsw_nemo.patch (frontend venv, megatron-core {mc[:10]})",
                           "runtime_nemo": f"NVIDIA/NeMo@{rt} (container nvcr.io/nvidia/nemo:{fw}; inferred tag)",
                           "runtime_megatron_core": label(MLM, rt_mc) + " (inferred)"}
    e["other"] = {"defer_embedding_wgrad_compute": defer, "NVTE_FUSED_ATTN": 1, "vboost": True}
    ev.append(E(NEMO, nc, U, r'"NVTE_FUSED_ATTN": "1"'))
    e["_ev"], e["_notes"] = ev, notes
    return e


# ----------------------------------------------------------------------------------------------
# Era C: NeMo 2.0 scripts/performance at the llmb-nemo-r2.3.0 commits (25.05 .. 25.05.04)
# ----------------------------------------------------------------------------------------------
def era_c(commit: str, rel: str, c: dict) -> dict:
    d, size, dtype, n, gpu = c["dir"], c["size"], c["dtype"], c["num_gpus"], c["gpu"]
    e = empty_entry(); ev: list[str] = []; notes: list[str] = []
    fp8 = dtype == "fp8"
    base = "deepseek_v3/pretraining" if d == "deepseek_v3" else d
    launch, setup = f"{base}/launch.sh", f"{base}/setup.sh"
    fw = find(DGXC, commit, launch, r"^export FW_VERSION=")[1].split("=")[1].strip()
    ev.append(E(DGXC, commit, launch, r"^export FW_VERSION="))
    ev.append(E(DGXC, commit, f"{base}/metadata.yaml", r"nvidia/nemo:"))
    nc = find(DGXC, commit, setup, r'NEMO_COMMIT=')[1].split('"')[1]
    mc = find(DGXC, commit, setup, r'MEGATRON_COMMIT=')[1].split('"')[1]
    ev += [E(DGXC, commit, setup, r'NEMO_COMMIT='), E(DGXC, commit, setup, r'MEGATRON_COMMIT=')]
    rt = NEMO2_RUNTIME[fw]; rt_mc = mc  # Megatron-Core: the commit the release pins (launch venv)
    U = "scripts/performance/utils.py"
    CB = "nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py"
    ev.append(E(NEMO, nc, U, r"packager=run.Packager\(\)", "no code packaged: the container's NeMo instantiates the recipe"))
    csv = f"scripts/performance/recommended_model_configs/model_configs_{gpu}.csv"
    model_key = {"llama3.1": ("llama31", "405b"), "nemotron": ("nemotron4", size), "grok1": ("grok1", "314b"),
                 "deepseek_v3": ("deepseek", "v3")}[d]
    csv_row = None
    for i, line in enumerate(show(NEMO, nc, csv)):
        f = line.split(",")
        if len(f) > 6 and f[0] == "pre_train" and f[1] == model_key[0] and f[2] == model_key[1] and f[4] == dtype \
                and f[5] and float(f[5]) == n:
            csv_row = (i + 1, f, line)
    hdr = show(NEMO, nc, csv)[0].split(",")
    def csvv(col):
        if csv_row is None:
            return None
        v = csv_row[1][hdr.index(col)]
        return None if v == "" else v
    if csv_row:
        ev.append(f"{label(NEMO, nc)}:{csv}:{csv_row[0]}: {csv_row[2]}  [recommended-config row selected by num_gpus; CLI values override]")
    else:
        ev.append(E(NEMO, nc, U, r"& \(args.num_gpus is None or df\['num_gpus'\] == args.num_gpus\)",
                    f"no {model_key[0]} {model_key[1]} {dtype} {gpu} row with num_gpus={n}: every tunable comes from the CLI or its default"))
    ev.append(E(NEMO, nc, U, r'enable_cuda_graphs = config.get\("cuda_graphs"\) if args.cuda_graphs is None else args.cuda_graphs'))
    ev.append(E(NEMO, nc, U, r'recompute_layers = config.get\("recompute_layers"\) if args.recompute_layers is None'))
    ev.append(E(NEMO, nc, U, r'use_mcore_fsdp = config.get\("use_mcore_fsdp"\) if args.use_mcore_fsdp is None'))
    moe = None
    if d == "llama3.1":
        l = lambda pat: (find(DGXC, commit, launch, pat)[1], E(DGXC, commit, launch, pat))
        if has(DGXC, commit, launch, r"DEF_TP="):
            deftp_line = r"DEF_TP=8" if gpu == "h100" else r"DEF_TP=4"
            ev.append(E(DGXC, commit, launch, deftp_line)); tp = 8 if gpu == "h100" else 4
            ev.append(E(DGXC, commit, launch, r"^TP=\$\{TP:-\$DEF_TP\}"))
        else:
            t, x = l(r"^TP=\$\{TP:-"); tp = int(re.search(r":-(\d+)", t).group(1)); ev.append(x)
        vals = {}
        for k in ("PP", "CP", "VP", "MBS"):
            t, x = l(rf"^{k}=\$\{{{k}:-"); vals[k] = int(re.search(r":-(\d+)", t).group(1)); ev.append(x)
        ev.append(E(DGXC, commit, launch, r"^GBS=\$\{GBS:-\$\(\( JOB_TOTAL_GPUS / 2\)\)\}"))
        ev.append(E(DGXC, commit, launch, r"^FSDP=\$\{FSDP:-0\}"))
        ev.append(E(DGXC, commit, launch, r"-fsdp \$FSDP"))
        pp, cp, vp, mbs = vals["PP"], vals["CP"], vals["VP"], vals["MBS"]
        gbs = n // 2; layers = 126; ep = 1; etp = None
        cuda_graphs = bool(int(float(csvv("cuda_graphs")))) if csvv("cuda_graphs") else False
        ev.append(E(DGXC, commit, launch, r"python3 -m scripts.performance.llm.pretrain_llama31_405b"))
        script = "scripts/performance/llm/pretrain_llama31_405b.py"
        recipe = "nemo/collections/llm/recipes/llama31_405b.py"
        ev.append(E(NEMO, nc, script, r"recipe = pretrain_recipe\(performance_mode=True\)"))
        key = "fp8" if fp8 else "bf16"
        cfg_suffix = ""
        if gpu == "h100":
            cfgname = f"userbuffers_{key}_h100_h16384_tp8_cp2_mbs1_seqlen8192"
            if has(NEMO, nc, script, rf"{cfgname}.qkv_fprop.aggregate = False"):
                ev.append(E(NEMO, nc, script, rf"{cfgname}.qkv_fprop.aggregate = False",
                            "ring-exchange aggregate turned off for qkv_fprop/proj_dgrad/fc1_fprop/fc2_dgrad"))
                cfg_suffix = " with ring-exchange aggregate=False for qkv_fprop/proj_dgrad/fc1_fprop/fc2_dgrad (set by the script)"
            elif has(NEMO, nc, "nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py", r"qkv_fprop=RingExchangeOverlapCfg\(aggregate=True\)"):
                cfg_suffix = ""
        else:
            cfgname = f"userbuffers_{key}_b200_h16384_tp4_cp2_mbs1_seqlen8192"
        ln_g = find(NEMO, nc, script, rf'"{gpu}": {{')[0]
        ev.append(E(NEMO, nc, script, rf'"{key}": {cfgname},', start=ln_g))
        ev.append(E(NEMO, nc, "nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py", rf"^{cfgname} = "))
        pstart = find(NEMO, nc, recipe, r"def pretrain_performance_optimizations")[0]
        ev.append(E(NEMO, nc, recipe, r"tp_comm_overlap=True", start=pstart))
        ev.append(E(NEMO, nc, recipe, r"defer_embedding_wgrad_compute=True", start=pstart))
        ev.append(E(NEMO, nc, script, r'recipe.data.tokenizer = hf_tokenizer\("meta-llama/Llama-3.1-405B"\)'))
        ev.append(E(NEMO, nc, "nemo/collections/llm/gpt/model/llama.py", r"make_vocab_size_divisible_by: int = 128"))
        e["vocab_size"] = pad_vocab(128256, 128, tp)
        e["tokenizer"] = "real Llama 3.1 tokenizer (HF meta-llama/Llama-3.1-405B, len 128256)"
        user_tpo = True; ub_cfg = cfgname + (cfg_suffix if gpu == "h100" else "")
        e["other"] = {"defer_embedding_wgrad_compute": True}
    elif d == "nemotron":
        ln_g = find(DGXC, commit, launch, rf"if \[ \$GPU_TYPE = {gpu} \]|elif \[ \$GPU_TYPE = {gpu} \]")[0]
        ln_s = find(DGXC, commit, launch, rf"(if|elif) \[ \$MODEL_SIZE = {size} \]", start=ln_g)[0]
        ev.append(E(DGXC, commit, launch, rf"(if|elif) \[ \$MODEL_SIZE = {size} \]", start=ln_g))
        def lv(k):
            ln, t = find(DGXC, commit, launch, rf"^\s*{k}=", start=ln_s)
            return t.split("=", 1)[1].strip(), E(DGXC, commit, launch, rf"^\s*{k}=", start=ln_s)
        tp, a = lv("TP"); pp, b = lv("PP"); cp, cc = lv("CP"); mbs, m = lv("MBS"); vp, v_ = lv("VP")
        nl_, nle = lv("NUM_LAYERS")
        ev += [a, b, cc, m, v_, nle]
        tp, pp, cp, mbs, vp, layers = int(tp), int(pp), int(cp), int(mbs), int(vp), int(nl_)
        if vp == 0:
            ev.append(E(DGXC, commit, launch, r"if \[ \$VP != 0 \]; then", "VP=0: -vp not passed"))
            vp = int(float(csvv("vp_size"))) if csvv("vp_size") else 1
        if c["strong"]:
            ev.append(E(DGXC, commit, launch, r"GBS=512", start=ln_s)); gbs = 512
        elif size == "340b":
            ev.append(E(DGXC, commit, launch, r"GBS=\$\(\( \$JOB_TOTAL_GPUS / 4 \)\)", start=ln_s)); gbs = n // 4
        else:
            ev.append(E(DGXC, commit, launch, r"GBS=\$\(\( \$JOB_TOTAL_GPUS \* 4 \)\)", start=ln_s)); gbs = n * 4
        ep = 1; etp = None
        if gpu == "gb200":
            ev.append(E(DGXC, commit, launch, r'CONFIG_OVERRIDES\+=" -fsdp 0 --cuda_graphs true "'))
            cuda_graphs = True
        else:
            cuda_graphs = bool(int(float(csvv("cuda_graphs")))) if csvv("cuda_graphs") else False
        script = f"scripts/performance/llm/pretrain_nemotron4_{size}.py"
        recipe = f"nemo/collections/llm/recipes/nemotron4_{size}.py"
        ev.append(E(DGXC, commit, launch, r"python3 -m scripts.performance.llm.pretrain_nemotron4_\$\{MODEL_SIZE\}"))
        ev.append(E(NEMO, nc, script, r"recipe = pretrain_recipe\(performance_mode=True\)"))
        pstart = find(NEMO, nc, recipe, r"def pretrain_performance_optimizations")[0]
        ev.append(E(NEMO, nc, recipe, r"tp_comm_overlap=True", start=pstart))
        defer = has(NEMO, nc, recipe, r"defer_embedding_wgrad_compute=True")
        if defer:
            ev.append(E(NEMO, nc, recipe, r"defer_embedding_wgrad_compute=True", start=pstart))
        key = "fp8" if fp8 else "bf16"
        if gpu in ("b200", "gb200"):
            ub_cfg = (f"userbuffers_{key}_b200_h18432_tp8_mbs1_seqlen4096" if size == "340b"
                      else "userbuffers_bf16_b200_h6144_tp2_mbs1_seqlen4096")
            ev.append(E(NEMO, nc, script, r'if gpu_type in \["b200", "gb200"\]:'))
            ev.append(E(NEMO, nc, "nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py", rf"^{ub_cfg} = "))
        else:
            ub_cfg = "none given: TE userbuffers defaults (the script sets a config for b200/gb200 only)"
            ev.append(E(NEMO, nc, script, r'if gpu_type in \["b200", "gb200"\]:', "H100: no userbuffers config passed"))
            ev.append(E(NEMO, rt, CB, r"Tensor parallel overlap: No overlap config provided"))
        user_tpo = True
        ev.append(E(NEMO, nc, script, r'get_nmt_tokenizer, library="null", model_name="NullTokenizer", vocab_size=256000'))
        ev.append(E(NEMO, rt, "nemo/collections/common/tokenizers/null_tokenizer.py", r"return self._vocab_size_without_eod \+ 1",
                    "NullTokenizer(256000).vocab_size = 256001 (EOD appended)"))
        ev.append(E(NEMO, rt, "nemo/collections/llm/gpt/model/base.py", r"vocab_size = get_vocab_size\(self, tokenizer.vocab_size, self.make_vocab_size_divisible_by\)"))
        ev.append(E(NEMO, rt, "nemo/lightning/base.py", r"multiple = make_vocab_size_divisible_by \* config.tensor_model_parallel_size"))
        ev.append(E(NEMO, nc, "nemo/collections/llm/gpt/model/base.py", r"make_vocab_size_divisible_by: int = 128"))
        e["vocab_size"] = pad_vocab(256001, 128, tp)
        e["tokenizer"] = "NullTokenizer(vocab_size=256000) -> 256001 ids with EOD (mock data; the Nemotron-4 256k vocabulary)"
        e["other"] = {"defer_embedding_wgrad_compute": defer}
    elif d == "grok1":
        ln_g = find(DGXC, commit, launch, rf'if \[ \$GPU_TYPE = "{gpu}" \]|elif \[ \$GPU_TYPE = "{gpu}" \]')[0]
        def lv(k):
            ln, t = find(DGXC, commit, launch, rf"^\s*{k}=\$\{{{k}:-", start=ln_g)
            return t.split(":-", 1)[1].rstrip("}").strip(), E(DGXC, commit, launch, rf"^\s*{k}=\$\{{{k}:-", start=ln_g)
        vals = {}
        for k in ("TP", "PP", "CP", "EP", "VP", "ET", "MBS", "CUDA_GRAPH"):
            v, x = lv(k); vals[k] = v; ev.append(x)
        ev.append(E(DGXC, commit, launch, r"GBS=\$\(\( JOB_TOTAL_GPUS \* 2 \)\)", start=ln_g))
        tp, pp, cp, ep, vp, mbs = (int(vals[k]) for k in ("TP", "PP", "CP", "EP", "VP", "MBS"))
        etp = int(vals["ET"]); gbs = n * 2; layers = 64
        cuda_graphs = vals["CUDA_GRAPH"].lower() == "true"
        ev.append(E(DGXC, commit, launch, r"--cuda_graphs \$CUDA_GRAPH"))
        ev.append(E(DGXC, commit, launch, r"-et \$ET"))
        if gpu == "gb200" and etp == 8:
            rd_ln = find(DGXC, commit, f"{d}/README.md", r"^\| 128\s+\| 8192")
            ev.append(E(DGXC, commit, f"{d}/README.md", r"^\| GPUs \| SeqLen \| Layers \| TP  \| PP  \| CP  \| EP  \| ETP"))
            ev.append(E(DGXC, commit, f"{d}/README.md", r"^\| 128\s+\| 8192", "README: ETP=4 for the published GB200 runs"))
            notes.append("launch.sh default ET=8 contradicts the README table (ETP=4) that the published GB200 numbers belong to; "
                         "v25.05.01 changed the default to ET=4 with the same numbers: expert TP taken as 4")
            etp = 4
        script = "scripts/performance/llm/pretrain_grok1_314b.py"
        ps = find(NEMO, nc, script, r"def pretrain_performance_optimizations")[0]
        ev.append(E(NEMO, nc, script, r"recipe = pretrain_recipe\(performance_mode=True\)"))
        ev.append(E(NEMO, nc, script, r"tp_comm_overlap=True", start=ps))
        ev.append(E(NEMO, nc, script, r"run.Config\(MegatronTokenDropCallback\)", start=ps))
        ev.append(E(NEMO, nc, script, r"tp_comm_overlap_cfg = userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192",
                    "same userbuffers config for every GPU and precision"))
        ub_cfg = "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192"
        if gpu == "h100" or dtype == "bf16":
            notes.append("the Grok-1 script passes the B200 FP8 TP4/CP2 userbuffers config for every GPU and precision")
        user_tpo = True
        ev.append(E(NEMO, nc, script, r"MixtralConfig8x7B,"))
        MX = "nemo/collections/llm/gpt/model/mixtral.py"
        ev.append(E(NEMO, nc, MX, r'moe_token_dispatcher_type: str = "alltoall"'))
        ev.append(E(NEMO, rt, "nemo/lightning/pytorch/callbacks/moe_token_drop.py", r"moe_expert_capacity_factor: float = 1.0"))
        ev.append(E(NEMO, rt, "nemo/lightning/pytorch/callbacks/moe_token_drop.py", r"moe_pad_expert_input_to_capacity: bool = True"))
        ev.append(E(MLM, rt_mc, TC, r"moe_grouped_gemm: bool = False", "not set by MixtralConfig or the script"))
        ev.append(E(MLM, rt_mc, TC, r"moe_permute_fusion: bool = False", "not set by MixtralConfig or the script"))
        ev.append(E(NEMO, nc, U, r"recipe.trainer.strategy.expert_tensor_parallel_size = etp_size"))
        moe = {"dispatcher": "alltoall", "flex_backend": None, "a2a_overlap": False, "moe_permute_fusion": False,
               "moe_grouped_gemm": False, "expert_tp": etp, "moe_expert_capacity_factor": 1.0,
               "moe_pad_expert_input_to_capacity": True}
        notes.append("a2a overlap (overlap_moe_expert_parallel_comm) does not exist at this Megatron-Core: False")
        ev.append(E(NEMO, nc, script, r'recipe.data.tokenizer = hf_tokenizer\("meta-llama/Meta-Llama-3-70B"\)'))
        ev.append(E(NEMO, nc, "nemo/collections/llm/gpt/model/base.py", r"make_vocab_size_divisible_by: int = 128"))
        e["vocab_size"] = pad_vocab(128256, 128, tp)
        e["tokenizer"] = "Llama 3 tokenizer (HF meta-llama/Meta-Llama-3-70B, len 128256)"
        e["other"] = {}
    elif d == "deepseek_v3":
        def lv(k, start=1):
            ln, t = find(DGXC, commit, launch, rf"^\s*{k}=", start=start)
            return t.split("=", 1)[1].split("#")[0].strip().strip("'"), E(DGXC, commit, launch, rf"^\s*{k}=", start=start)
        cp, a = lv("CP"); mbs, b = lv("MBS"); nl_, cc = lv("NUM_LAYERS"); ev += [a, b, cc]
        ev.append(E(DGXC, commit, launch, r"^GBS=\$\(\( \$JOB_TOTAL_GPUS \* 8 \)\)"))
        cp, mbs, layers, gbs = int(cp), int(mbs), int(nl_), n * 8
        ln_g = find(DGXC, commit, launch, rf'(if|elif) \[\[ \$GPU_TYPE = "{gpu}"\s*\]\]')[0]
        ev.append(E(DGXC, commit, launch, rf'(if|elif) \[\[ \$GPU_TYPE = "{gpu}"\s*\]\]'))
        nxt = find(DGXC, commit, launch, r"^(elif|fi)", start=ln_g + 1)[0]
        def gv(k):
            ln, t = find(DGXC, commit, launch, rf"^\s*{k}=", start=ln_g, end=nxt)
            return t.split("=", 1)[1].strip().strip("'"), E(DGXC, commit, launch, rf"^\s*{k}=", start=ln_g, end=nxt)
        tp, x = gv("TP"); ev.append(x); tp = int(tp)
        # PP / EP may be in an if-block keyed on JOB_TOTAL_GPUS
        def branchy(k):
            lines = show(DGXC, commit, launch)
            cand = [(i + 1, l) for i, l in enumerate(lines[ln_g - 1:nxt - 1], start=ln_g - 1) if re.match(rf"^\s*{k}=", l)]
            if len(cand) == 1:
                return int(cand[0][1].split("=")[1]), [f"{commit}:{launch}:{cand[0][0]}: {cand[0][1].strip()}"]
            cond_ln, cond = find(DGXC, commit, launch, rf"if \[\[ \$JOB_TOTAL_GPUS -eq (\d+) \]\]", start=ln_g, end=nxt)
            want = int(re.search(r"-eq (\d+)", cond).group(1))
            pick = cand[0] if n == want else cand[1]
            return int(pick[1].split("=")[1]), [f"{commit}:{launch}:{cond_ln}: {cond.strip()}", f"{commit}:{launch}:{pick[0]}: {pick[1].strip()}"]
        pp, x = branchy("PP"); ev += x
        ep, x = branchy("EP"); ev += x
        vp, x = gv("VP"); ev.append(x); vp = int(vp)
        etp, x = gv("ETP"); ev.append(x); etp = int(etp)
        aol, x = gv("AOL"); ev.append(x)
        rm, x = gv("RM"); ev.append(x)
        ev.append(E(DGXC, commit, launch, r"--expert_tensor_parallel_size \$ETP --activation_offload_layers \$AOL --recompute_modules \$RM"))
        ev.append(E(DGXC, commit, launch, r"-tp \$TP -pp \$PP -cp \$CP -vp \$VP -ep \$EP -mb \$MBS -gb \$GBS"))
        cuda_graphs = bool(int(float(csvv("cuda_graphs")))) if csvv("cuda_graphs") else False
        script = "scripts/performance/llm/pretrain_deepseek_v3.py"
        recipe = "nemo/collections/llm/recipes/deepseek_v3.py"
        DS = "nemo/collections/llm/gpt/model/deepseek.py"
        ev.append(E(NEMO, nc, script, r"recipe = pretrain_recipe\(\)", "no performance_mode"))
        ev.append(E(NEMO, nc, recipe, r"use_mtp: bool = True", "recipe default builds DeepSeek-V3 with one MTP layer"))
        ev.append(E(NEMO, nc, recipe, r"conf = run.Config\(DeepSeekV3Config, mtp_num_layers=1, mtp_loss_scaling_factor=0.1\)"))
        ev.append(E(NEMO, nc, script, r"tp_comm_overlap=False,"))
        ev.append(E(NEMO, nc, script, r'recipe.model.config.recompute_granularity = "selective"'))
        ev.append(E(NEMO, nc, U, r"recipe.model.config.recompute_modules = recompute_modules"))
        ev.append(E(NEMO, nc, script, r"recipe.model.config.moe_permute_fusion = True"))
        ev.append(E(NEMO, nc, script, r"callbacks.append\(run.Config\(MegatronTokenDropCallback\)\)"))
        ev.append(E(NEMO, rt, "nemo/lightning/pytorch/callbacks/moe_token_drop.py", r"moe_expert_capacity_factor: float = 1.0"))
        ev.append(E(NEMO, nc, DS, r'moe_token_dispatcher_type: str = "alltoall"'))
        ev.append(E(NEMO, nc, DS, r"moe_grouped_gemm: bool = True"))
        ev.append(E(NEMO, nc, DS, r"moe_shared_expert_overlap: bool = True"))
        ev.append(E(NEMO, nc, U, r"recipe.trainer.strategy.expert_tensor_parallel_size = etp_size"))
        ev.append(E(NEMO, nc, script, r"recipe.trainer.strategy.num_layers_in_first_pipeline_stage = num_layers_in_middle_pipeline_stages - 1"))
        ev.append(E(NEMO, nc, script, r"recipe.trainer.strategy.num_layers_in_last_pipeline_stage = num_layers_in_middle_pipeline_stages - 2"))
        ub_cfg = None; user_tpo = False
        moe = {"dispatcher": "alltoall", "flex_backend": None, "a2a_overlap": False, "moe_permute_fusion": True,
               "moe_grouped_gemm": True, "expert_tp": etp, "moe_expert_capacity_factor": 1.0,
               "moe_pad_expert_input_to_capacity": True}
        notes.append("a2a overlap (overlap_moe_expert_parallel_comm) does not exist at this Megatron-Core: False; "
                     "moe_shared_expert_overlap=True (shared-expert compute overlapped with the dispatch)")
        e["recompute_granularity"] = "selective"
        e["recompute_modules"] = rm.split(",")
        notes.append("recompute: selective over the modules the launch passes (-rm); recipe's full/uniform recompute is replaced by the script")
        ev.append(E(NEMO, nc, script, r"HF_MODEL_URI = \"deepseek-ai/DeepSeek-V3-Base\""))
        ev.append(E(NEMO, nc, script, r"recipe.data.tokenizer = hf_tokenizer\(HF_MODEL_URI\)"))
        ev.append(E(NEMO, nc, DS, r"make_vocab_size_divisible_by: int = 1280"))
        ev.append(E(NEMO, rt, "nemo/lightning/base.py", r"multiple = make_vocab_size_divisible_by \* config.tensor_model_parallel_size"))
        e["vocab_size"] = pad_vocab(129280, 1280, tp)
        e["tokenizer"] = ("DeepSeek-V3 tokenizer (HF deepseek-ai/DeepSeek-V3-Base); len(tokenizer) not read offline (HF config "
                          "vocab_size 129280): any length in 128001..130560 pads to 130560 at 1280 x TP2")
        e["other"] = {"mtp_num_layers": 1, "moe_shared_expert_overlap": True, "moe_router_dtype": "fp32",
                      "num_layers_in_first_pipeline_stage": 64 // pp - 1, "num_layers_in_last_pipeline_stage": 64 // pp - 2}
    if d != "grok1":
        ev.append(E(NEMO, nc, U, r"recipe.trainer.strategy.sequence_parallel = bool\(tp_size > 1\)"))
    else:
        ev.append(E(NEMO, nc, U, r"recipe.trainer.strategy.sequence_parallel = bool\(tp_size > 1\)"))
    vpn = None if vp == 1 else vp
    dp = n // (tp * pp * cp)
    sp = tp > 1
    e["sequence_parallel"] = sp
    e["tp_comm_overlap"] = bool(user_tpo and tp > 1 and sp)
    ev.append(E(NEMO, rt, CB, r"if parallelism_cfg.tensor_model_parallel_size < 2:", "runtime: TP overlap kept only with TP>=2 and SP"))
    e["tp_comm_overlap_cfg"] = ub_cfg if e["tp_comm_overlap"] else None
    ev.append(E(NEMO, rt, CB, r"if parallelism_cfg.pipeline_model_parallel_size > 1:"))
    if pp > 1 and (vpn or 1) > 1:
        e["overlap_p2p_comm"], e["batch_p2p_comm"] = True, False
        ev.append(E(NEMO, rt, CB, r"comm_overlap_cfg.overlap_p2p_comm = True"))
    elif pp > 1:
        e["overlap_p2p_comm"], e["batch_p2p_comm"] = False, True
        ev.append(E(NEMO, rt, CB, r"comm_overlap_cfg.batch_p2p_comm = True"))
    else:
        e["overlap_p2p_comm"], e["batch_p2p_comm"] = False, False
        ev.append(E(NEMO, rt, CB, r"comm_overlap_cfg.batch_p2p_comm = False", nth=2))
    ev.append(E(NEMO, rt, CB, r"if data_parallel_size > 1:"))
    e["overlap_grad_reduce"] = e["overlap_param_gather"] = dp > 1
    ev.append(E(NEMO, nc, U, r"dp_size > 1 and pp_size > 1 and vp_size and vp_size > 1"))
    e["overlap_param_gather_with_optimizer_step"] = bool(dp > 1 and pp > 1 and vp and vp > 1)
    # recompute / offload
    rl = int(float(csvv("recompute_layers"))) if csvv("recompute_layers") else 0
    ol = int(float(csvv("activation_offload_layers"))) if csvv("activation_offload_layers") else 0
    assert rl == 0 and ol == 0, (rl, ol)
    ev.append(E(NEMO, nc, U, r"if recompute_layers > 0:", "recompute_layers 0 -> no full recompute"))
    ev.append(E(NEMO, nc, U, r"if activation_offload_layers > 0:", "activation_offload_layers 0 -> no offloading"))
    if d != "deepseek_v3":
        assert not csvv("recompute_modules")
        e["recompute_granularity"] = None
        ev.append(E(MLM, rt_mc, TC, r"recompute_granularity: Optional\[str\] = None|recompute_granularity: str = None",
                    "no recompute set by the recipe or the script"))
    e["offloading"] = {"cpu_offloading": False, "cpu_offloading_num_layers": 0,
                       "fine_grained_activation_offloading": False, "offload_modules": None}
    ev.append(E(MLM, rt_mc, MPC, r"cpu_offloading: bool = False", "Megatron-Core default"))
    # graphs
    ev.append(E(NEMO, nc, U, r"recipe.model.config.enable_cuda_graph = enable_cuda_graphs"))
    if cuda_graphs:
        e["cuda_graph_impl"], e["cuda_graph_scope"] = "local", ["full"]
        ev.append(E(NEMO, nc, U, r"recipe.trainer.strategy.use_te_rng_tracker = enable_cuda_graphs"))
        ev.append(E(MLM, rt_mc, TC, r"enable_cuda_graph: bool = False",
                    "enable_cuda_graph=True: Megatron-Core's own per-TransformerLayer CUDA graphs (later named cuda_graph_impl='local')"))
        ev.append(E(MLM, rt_mc, TC, r'cuda_graph_scope: str = "full"', "default scope: the whole layer"))
    else:
        e["cuda_graph_impl"], e["cuda_graph_scope"] = "none", []
    # precision
    MP = "nemo/collections/llm/recipes/precision/mixed_precision.py"
    ev.append(E(NEMO, nc, "scripts/performance/argument_parser.py", r'default="ds",', "--fp8_recipe default ds (delayed scaling)"))
    if fp8:
        ev.append(E(NEMO, nc, U, r"recipe.trainer.plugins = bf16_with_fp8_mixed\(\)"))
        st = find(NEMO, nc, MP, r"def bf16_with_fp8_mixed")[0]
        ev.append(E(NEMO, nc, MP, r"cfg.fp8 = 'hybrid'", start=st))
        ev.append(E(NEMO, nc, MP, r'cfg.fp8_recipe = "delayed"', start=st))
        ev.append(E(NEMO, nc, MP, r"cfg.fp8_param_gather = True", start=st))
        ev.append(E(NEMO, nc, U, r"recipe.trainer.plugins.grad_reduce_in_fp32 = False"))
    else:
        ev.append(E(NEMO, nc, U, r"recipe.optim.config.use_precision_aware_optimizer = True", "bf16 runs only"))
        if d == "deepseek_v3":
            ev.append(E(NEMO, nc, "nemo/collections/llm/recipes/deepseek.py", r"plugins=bf16_mixed\(\)",
                        "no performance mode: the plugin keeps grad_reduce_in_fp32=True"))
            ev.append(E(NEMO, nc, "nemo/collections/llm/recipes/precision/mixed_precision.py", r"grad_reduce_in_fp32=True,"))
        elif d == "grok1":
            ev.append(E(NEMO, nc, "scripts/performance/llm/pretrain_grok1_314b.py", r"recipe.trainer.plugins.grad_reduce_in_fp32 = False"))
        else:
            ev.append(E(NEMO, nc, recipe, r"recipe.trainer.plugins.grad_reduce_in_fp32 = False",
                        start=find(NEMO, nc, recipe, r"def pretrain_performance_optimizations")[0]))
    e["precision_recipe"] = prec(dtype, "delayed")
    e["fp8_param_gather"] = fp8
    e["fp8_dot_product_attention"] = False
    ev.append(E(NEMO, rt, "nemo/lightning/pytorch/plugins/mixed_precision.py", r"fp8_dot_product_attention: bool = False,"))
    e["grad_dtype"] = "fp32" if d == "deepseek_v3" else "bf16"
    ev.append(E(NEMO, rt, "nemo/lightning/pytorch/strategies/megatron_strategy.py", r"self.ddp_config = update_config_with_dtype_overrides\(dtype_config, self.ddp_config\)",
                "the precision plugin's grad_reduce_in_fp32 overwrites the recipe's DDP config"))
    e["cross_entropy"] = {"loss_fusion": True, "impl": "te"}
    ev.append(E(NEMO, nc, U, r'recipe.model.config.cross_entropy_fusion_impl = "te"'))
    ev.append(E(NEMO, rt, "nemo/collections/llm/gpt/model/base.py", r"cross_entropy_loss_fusion: bool = True"))
    AD = "nemo/collections/llm/recipes/optim/adam.py"
    ev.append(E(NEMO, nc, AD, r"use_distributed_optimizer=True"))
    e["use_distributed_optimizer"] = True
    e["distributed_optimizer_impl"] = "Megatron-Core DistributedOptimizer (MegatronOptimizerModule)"
    e["precision_aware_optimizer"] = not fp8
    e["adam_moment_dtype"] = "fp32"
    ev.append(E(MLM, rt_mc, "megatron/core/optimizer/optimizer_config.py", r"exp_avg_dtype: torch.dtype = torch.float32",
                "precision-aware optimizer (bf16 runs) keeps the default fp32 moments: no exp_avg_dtype is set"))
    e["use_megatron_fsdp"] = False
    e["parallelism"] = dict(tp=tp, pp=pp, cp=cp, vp=vpn, ep=ep, etp=etp, mbs=mbs, gbs=gbs, layers=layers,
                            seq_len=4096 if d in ("nemotron", "deepseek_v3") else 8192, dp=dp)
    e["container"] = f"nvcr.io/nvidia/nemo:{fw}"
    e["framework_code"] = {"kind": "NeMo 2.0 scripts/performance (nemo_run) from the llmb-nemo-r2.3.0 branch",
                           "recipe_built_from": f"NVIDIA/NeMo@{nc} (frontend venv, megatron-core {mc[:10]})",
                           "runtime_nemo": f"NVIDIA/NeMo@{rt} (container nvcr.io/nvidia/nemo:{fw}; the runtime files cited are identical at v2.3.0 and the llmb commits)",
                           "runtime_megatron_core": label(MLM, rt_mc) + " (the commit the release's setup.sh pins for the launch venv; the 25.04 container's own Megatron-Core 0.12 build is assumed equivalent for the defaults cited)"}
    e["other"].update({"NVTE_FUSED_ATTN": 1, "vboost": True})
    ev.append(E(NEMO, nc, U, r'"NVTE_FUSED_ATTN": "1"'))
    if moe:
        e.update(moe)
    e["_ev"], e["_notes"] = ev, notes
    return e


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------
# Launch-code changes that matter for performance, by (workload, size, dtype) -> first release
# with the change. A table repeated unchanged across such a change is not attributable to the
# later release's code.
CODE_CHANGES = {
    ("nemotron4", "340b", "bf16"): ("25.02", "from v25.02 the 340b BF16 launch sets CP=2 (configure.sh), but the table header "
                                    "still says GA=16 (CP=1) and its numbers equal v24.11.1's (CP=1)"),
}
REL_ORDER = {r: i for i, (_, r, _) in enumerate(RELEASES)}


def main() -> None:
    rows = []
    last_sig: dict[tuple, tuple] = {}
    first_rel: dict[tuple, str] = {}
    for commit, rel, tagname in RELEASES:
        combos = parse_tables(commit)
        # table-level signature: the whole published column set of (workload,size,gpu,dtype,strong)
        sigs: dict[tuple, tuple] = {}
        for c in combos:
            tk = (c["workload"], c["size"], c["gpu"], c["dtype"], c["strong"])
            sigs.setdefault(tk, []).append((c["num_gpus"], c["step_time"]))
        carried_tab = {}
        for tk, sig in sigs.items():
            sig = tuple(sorted(sig))
            carried_tab[tk] = last_sig.get(tk) == sig
            if not carried_tab[tk]:
                first_rel[tk] = rel
            last_sig[tk] = sig
        for c in combos:
            tk = (c["workload"], c["size"], c["gpu"], c["dtype"], c["strong"])
            rid = f"dgxc-{rel}-{c['workload']}-{c['size']}-{c['gpu']}-{c['dtype']}-{c['num_gpus']}g"
            if c["strong"]:
                rid += "-gbs512"
            era = ("A" if (c["dir"] in ("nemotron", "nemo_megatron", "grok1") and commit in ("35a9aec", "143b90d", "e6afea3", "8f5cbb3", "0b71cfd", "5f23b67", "1b9bb6b", "741c886", "85380ff"))
                   or (c["dir"] == "llama3.1" and commit in ("35a9aec", "143b90d", "e6afea3", "8f5cbb3", "0b71cfd", "5f23b67", "1b9bb6b"))
                   else "B" if c["dir"] == "llama3.1" and commit in ("741c886", "85380ff")
                   else "B" if c["dir"] == "nemotron" and commit in ("741c886", "85380ff") else "C")
            if c["dir"] == "nemotron" and commit in ("741c886", "85380ff"):
                era = "B"
            e = (era_b_nemotron if (era == "B" and c["dir"] == "nemotron") else {"A": era_a, "B": era_b, "C": era_c}[era])(commit, rel, c)
            hdr_txt = show(DGXC, commit, c["readme"])[c["header_line"] - 1].strip()
            step_txt = show(DGXC, commit, c["readme"])[c["step_line"] - 1].strip()
            ev = [f"{commit}:{c['readme']}:{c['header_line']}: {hdr_txt[:240]}  [published table]",
                  f"{commit}:{c['readme']}:{c['step_line']}: {step_txt[:240]}  [step time {c['step_time']} s at {c['num_gpus']} GPUs]"]
            ev += e.pop("_ev")
            notes = e.pop("_notes")
            carried = carried_tab[tk]
            first = first_rel[tk]
            match = "exact"
            conf_level, conf_why = "high", []
            if era == "A":
                conf_why.append("values read from the release's hydra YAML and launch overrides; NeMo-1.0 semantics and defaults "
                                "from the NeMo tag of the container version (inferred mapping; the cited code paths are the same in "
                                "v2.0.0rc0, v2.0.0 and v2.1.0)")
                if e["container"].startswith("nvcr.io/nvidia/nemo:dev"):
                    conf_level = "medium"
                    conf_why.append("unversioned nemo:dev image (digest only): NeMo/Megatron-Core defaults taken from NeMo v2.0.0 / core_r0.9.0")
            elif era == "B":
                conf_level = "medium"
                conf_why.append("recipe values from the pinned NeMo commit + dgxc patch (read); runtime behaviour (comm-overlap callback, "
                                "precision plugin, vocab padding) from NeMo v2.2.0 as a stand-in for the 25.02.01 container's NeMo")
            else:
                conf_why.append("recipe/script values read at the pinned llmb-nemo commit; runtime files identical at NeMo v2.3.0")
            chg = CODE_CHANGES.get((c["workload"], c["size"], c["dtype"]))
            if carried and chg and REL_ORDER[first] < REL_ORDER[chg[0]] <= REL_ORDER[rel]:
                match = "none"
                conf_level = "low"
                notes.append(f"the table is an unchanged repeat of v{first} and {chg[1]}: the numbers are not attributable to "
                             f"this release's launch code (values below describe this release's code; see the {first} entry)")
            elif carried:
                notes.append(f"the table is an unchanged repeat of release {first} (launch settings equivalent): duplicate entry")
            if c["workload"] == "gpt3" and REL_ORDER["25.02"] <= REL_ORDER[rel] <= REL_ORDER["25.03"]:
                notes.append("the table header still says VP=12, but these numbers first appear with this code (YAML VP=6, "
                             "nemo:24.12) and v25.04 republishes them under a VP=6 header: VP=6 taken as what ran")
            if c["workload"] == "grok1" and c["gpu"] == "gb200" and rel == "25.05":
                conf_level = "medium" if conf_level == "high" else conf_level
            par = e["parallelism"]
            if c.get("gbs_in_header") and par.get("gbs") is None:
                par["gbs"] = c["gbs_in_header"]
            if par.get("gbs") is None and c["workload"] == "llama3.1" and era == "A":
                par["gbs"] = {"8b": 128 * c["num_gpus"] // 8, "70b": 128 * c["num_gpus"] // 64}.get(c["size"]) or (
                    {192: 252, 96: 126, 32: 126}.get(c["num_gpus"], 252 * c["num_gpus"] // 576))
            if par.get("gbs") is None and c["workload"] == "nemotron4" and era == "A":
                par["gbs"] = c["num_gpus"] * 4 if c["size"] == "15b" else (c["num_gpus"] // 8) * 2
            if par.get("gbs") is None and c["workload"] == "gpt3":
                par["gbs"] = (c["num_gpus"] // 8) * 16
            if "dp" not in par:
                par["dp"] = c["num_gpus"] // (par["tp"] * par["pp"] * par["cp"])
            row = {"id": rid, "dgxc_release": rel, "dgxc_commit": commit, "workload": c["workload"],
                   "size": c["size"], "gpu": c["gpu"], "dtype": c["dtype"], "num_gpus": c["num_gpus"],
                   "strong_scaling": c["strong"], "published_step_time_s": c["step_time"],
                   "numbers_first_published_in": first,
                   "container": e.pop("container"), "framework_code": e.pop("framework_code"),
                   "match": match, "confidence": f"{conf_level}: " + "; ".join(conf_why),
                   "parallelism": e.pop("parallelism")}
            row.update(e)
            row["evidence"] = ev
            row["notes"] = notes
            rows.append(row)
    rows = kept_rows(rows)
    doc = {
        "what": WHAT, "source": SOURCE, "method": METHOD, "release_commits": {r: c for c, r, _ in RELEASES},
        "rows": rows,
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT} with {len(rows)} rows")


RUNS = Path(__file__).parent / "dgxc_runs.json"


def kept_rows(rows: list[dict]) -> list[dict]:
    """The entries of the rows ``dgxc_runs.json`` keeps (``build_dgxc_runs.py``: a release that
    repeats an earlier one's numbers adds no row); all of them when that file is absent."""
    if not RUNS.exists():
        return rows
    ids = {r["id"] for r in json.loads(RUNS.read_text())}
    return [r for r in rows if r["id"] in ids]


WHAT = ("How each NeMo/Megatron pre-training measurement in the 'Expected Performance' tables of "
        "NVIDIA/dgxc-benchmarking (releases v24.11.1 .. v25.05.04: Llama 3.1 8B/70B/405B, Nemotron-4 15B/340B, "
        "GPT-3 175B ('nemo_megatron'), Grok-1 314B MoE, DeepSeek-V3 671B MoE (BF16, v25.05+); H100 throughout, GB200 from "
        "v25.05) was launched: TP "
        "communication overlap and its userbuffers config, sequence parallelism, pipeline p2p overlap, recompute, "
        "offloading, CUDA graphs, FP8 recipe / fp8 attention / fp8 parameter all-gather, gradient-reduction dtype, "
        "fused cross-entropy, Adam moment dtype, data-parallel overlap, distributed optimizer / FSDP, MoE dispatcher "
        "settings and the padded vocabulary the run used. One entry per (release, workload, size, GPU, dtype, GPU "
        "count) that has a number, keyed like the published rows (dgxc-{release}-{workload}-{size}-{gpu}-{dtype}-{n}g; "
        "the GB200 Nemotron-4 340B strong-scaling table, GBS 512, adds '-gbs512'). B200 has no numbers in these "
        "releases. Extracted 2026-11-28.")
SOURCE = ("Local snapshots of github:NVIDIA/dgxc-benchmarking (release commits in release_commits), github:NVIDIA/NeMo "
          "(tags v2.0.0rc0, v2.0.0, v2.1.0, v2.2.0, v2.3.0 and the commits the releases pin: d2b21556 for v25.04/25.04.01, "
          "7a8f1cc7 / 6f2c6fda / b4148d21 on branch llmb-nemo-r2.3.0 for v25.05..v25.05.04) and github:NVIDIA/Megatron-LM "
          "(tags core_r0.9.0, core_r0.10.0, core_r0.11.0, commits 338af514 and 7094270c). Three launch eras: "
          "(A) v24.11.1..v25.03 for all four workloads and v25.04/25.04.01 for GPT-3 and Grok-1: NeMo 1.0 "
          "examples/nlp/language_modeling/megatron_gpt_pretraining.py run in the container with the release's hydra YAML "
          "plus configure.sh/launch.sh overrides; containers nemo:24.09 (Llama, Nemotron), nemo:24.05 (GPT-3, until v25.01.1), "
          "nemo:dev@sha256:9c876dce (Grok-1, until v25.01.1), nemo:24.12 (from v25.02; Nemotron-340B stays on 24.09). "
          "(B) v25.04/v25.04.01 Llama 3.1 and Nemotron-4: NeMo 2.0 via the release's own llama3.1/pretrain_llama31.py + "
          "llama31_utils.py, resp. NeMo's scripts/performance/llm/pretrain_nemotron4_{15b,340b}.py, in a NeMo clone at "
          "d2b21556 with the release's gsw_nemo.patch applied, container nemo:25.02.01. (C) v25.05..v25.05.04: NeMo 2.0 "
          "scripts/performance/llm/pretrain_{llama31_405b,nemotron4_15b,nemotron4_340b,grok1_314b,deepseek_v3}.py of the "
          "pinned llmb-nemo commit, containers nemo:25.04.01 (Llama, DeepSeek-V3) and nemo:25.04.00 (Nemotron, Grok-1).")
METHOD = ("Enumeration: every README table of the workload directories whose first cell names BF16/FP8 and whose "
          "column headers name '<n>x <GPU>' was parsed; a (release, workload, size, GPU, dtype, n) combination is "
          "entered when its 'Training step time' cell is a number (data rows are read whether or not they start with '|', "
          "as in the v25.04+ Nemotron and DeepSeek-V3 tables; B200 has no numbers). 'numbers_first_published_in' names the release from which the "
          "whole table (all GPU counts of that workload/size/GPU/dtype) is unchanged. Values: per era, the launch path was followed by hand and encoded in "
          "benchmarks/data/extract_dgxc_settings.py, which reads every value from its line (git show) and records that "
          "line as evidence: (A) the hydra YAML key (indentation-resolved) unless a configure.sh/launch.sh CONFIG_OVERRIDES "
          "entry or a per-scale branch (405B/Grok-1 proxies) overrides it; keys absent from the YAML take NeMo 1.0's "
          "cfg.get default or the Megatron-Core dataclass default (NeMo builds ModelParallelConfig/TransformerConfig "
          "from cfg keys where present, else the dataclass default); NeMo 1.0 forces SP off at TP=1 and "
          "ub_tp_comm_overlap off without SP; fp8_params act only with fp8; distributed_fused_adam is apex's ZeRO-style "
          "optimizer with optimizer-state dtype optim.dtype (default fp32) and gradient sync dtype optim.grad_sync_dtype; "
          "mcore_distributed_optim reduces in fp32 unless grad_sync_dtype is given. The container -> NeMo mapping is "
          "24.05 -> v2.0.0rc0, 24.09 -> v2.0.0, 24.12 -> v2.1.0 (the lines cited exist in all three with the same logic). "
          "(B)/(C) recipe values from the NeMo commit the release's setup.sh pins (frontend: nemo_run builds and serialises "
          "the recipe there; the executor uses run.Packager(), so the container's own NeMo instantiates it): "
          "scripts/performance utils (set_primary_perf_configs: SP = TP>1, cross_entropy_fusion_impl 'te' in C, CUDA graphs, "
          "FSDP, recompute/offload from the CLI or the recommended-config CSV row matching num_gpus, precision-aware "
          "optimizer for bf16 in C, fp8 plugin bf16_with_fp8_mixed = hybrid delayed scaling with fp8 param gather and "
          "grad_reduce_in_fp32 False), the model recipe's pretrain_performance_optimizations (MegatronCommOverlapCallback "
          "tp_comm_overlap True except Llama 8B; userbuffers config named by the script) and the dgxc launch.sh CLI; "
          "runtime semantics from the container's NeMo (v2.2.0 for 25.02.01, v2.3.0 for 25.04.x; the callback and "
          "precision plugin files are line-identical between v2.3.0 and the llmb commits): the comm-overlap callback "
          "drops TP overlap at TP<2 or without SP, sets overlap_p2p_comm/batch_p2p_comm from PP and VP, and turns on DP "
          "grad-reduce/param-gather overlap when DP>1; the precision plugin overwrites the DDP config's "
          "grad_reduce_in_fp32 and fp8_param_gather. cuda_graph_impl 'local' with scope ['full'] = Megatron-Core 0.12's "
          "enable_cuda_graph (per-TransformerLayer graphs, default cuda_graph_scope 'full'); 'none' otherwise. "
          "recompute_modules ['core_attn'] for NeMo-1.0 'selective' (Megatron-Core <= 0.11 selective recompute is core "
          "attention only). cross_entropy.impl 'native' = Megatron-Core's fused vocab-parallel cross-entropy (the only "
          "implementation before Megatron-Core 0.12), 'te' = TransformerEngine's. vocab_size = the tokenizer's vocab_size "
          "padded to a multiple of make_vocab_size_divisible_by (128; DeepSeek-V3 1280) x TP, as NeMo 1.0 "
          "(_vocab_size_with_padding) and NeMo 2.0 (nemo.lightning.get_vocab_size) both do; HF tokenizers count "
          "len(tokenizer), NeMo 2.0's NullTokenizer(256000) counts 256001 (EOD appended), so NeMo-2.0 Nemotron-4 runs "
          "pad 256001, not 256000. DeepSeek-V3 (C, no performance_mode): pretrain_recipe() defaults (one MTP layer, "
          "bf16_mixed with grad_reduce_in_fp32=True) plus the script's overrides (selective recompute of the modules "
          "the launch passes, permute fusion, TE cross-entropy, token-drop callback: capacity factor 1.0 with padding, "
          "TP overlap off). match: 'exact' when the release's launch code for the "
          "workload/GPU/dtype/scale was read; 'none' for the 20 Nemotron-4 340B BF16 entries of v25.02..v25.03, whose "
          "table is an unchanged repeat of v24.11.1 (header GA=16, i.e. CP=1) while those releases' configure.sh runs "
          "340B BF16 with CP=2: their values describe the release's code, not the run that produced the numbers (use the "
          "v24.11.1 entries). Tables whose header lags the code but whose numbers are new with that code (GPT-3 175B "
          "v25.02..v25.03: header VP=12, YAML VP=6, republished under VP=6 in v25.04) are matched to the code and say so "
          "in notes. Entries of later releases that repeat a table unchanged with equivalent launch code are kept as "
          "'exact' duplicates (noted). Not modelled: environment-only knobs (NVTE_* margins, NCCL settings, "
          "vboost) beyond NVTE_FUSED_ATTN recorded in 'other'.")


if __name__ == "__main__":
    main()
