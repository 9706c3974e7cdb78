"""Turn rows of ``published_runs_calibration.json`` into planner inputs and targets.

Each row becomes (ModelSpec, Cluster, Workload, TrainingConfig) plus the published figure to
compare with. What a row does not state is filled by a documented rule, never per row:

* implementation era: rows from 2020-2022 (Megatron 2020 README, SC'21, Korthikanti et al.)
  ran unfused softmax attention with dropout, no gradient-reduce overlap and no distributed
  optimizer; rows from 2024 on ran flash attention, the distributed optimizer, the overlap
  flags their commands list, and sequence parallelism with TP;
* unknown micro-batch size: the fastest of 1, 2, 4, 8 that fits (the authors tuned it);
* unknown recompute: full for 2020/21 rows (Megatron's scripts of the time passed
  ``--checkpoint-activations``), else the fastest of none/selective/full that fits;
* TP communication overlap where the row's command lists ``--tp-comm-overlap``, and for the
  dense Megatron-Bridge rows as their release's config set it (``tp_comm_overlap`` in
  ``megatron_bridge_dense_settings.json``: on with TP > 1 except in NVFP4), with their
  recompute and CUDA graphs read from the same file;
* unknown interleaving: none (v = 1);
* unknown expert TP in MoE rows: 1 (the MoE model zoo's recommended setting);
* MoE token dispatcher, expert all-to-all overlap and recompute of a Megatron-Bridge row: what
  Megatron-Bridge's performance config of that release set for the row's layout
  (``megatron_bridge_moe_settings.json``, each value with its tag:path:line); a row no config
  matches keeps the rules above (all-to-all dispatcher, no overlap, fastest recompute that
  fits). Rows that name their dispatcher (the MoE model zoo: DeepEP or A2A) use it;
* every Megatron-Bridge row (its performance configs, all families, every release) reduces
  gradients in bf16 and fuses the cross-entropy on bf16 logits: ``grad_reduce_in_fp32 = False``
  in each family's perf config (e.g. ``scripts/performance/configs/llama/llama3_llm_pretrain.py``
  and ``qwen/qwen3_llm_pretrain.py`` at v0.3.0-v0.5.1, ``utils/helpers.py`` at v0.2.0,
  ``perf_recipes/_common.py:71-72`` at v0.6.0) and ``cross_entropy_fusion_impl = "te"`` in
  ``_set_common_perf_overrides`` (``set_common_perf_overrides`` at v0.2.0, ``_benchmark_common``
  at v0.6.0); the DeepSeek-V3 rows also keep Adam's moments in bf16 (precision-aware
  optimizer; ``megatron_bridge_moe_settings.json``);
* fp8 attention and TransformerEngine's fused grouped MLP where a Megatron-Bridge row's
  release config turned them on (26.06 on; ``_fused_kernels``);
* Megatron-Bridge's DeepSeek-V3 rows without interleaving cut the pipeline as its recipe's
  layout map does (fewer layers on the last stage, which holds MTP and the loss);
* Megatron-Bridge's DeepSeek-V3 rows run the multi-token-prediction module from release 26.02
  on (and in 25.11 where the table says "w/mtp"): ``_ran_mtp``;
* a DGX Cloud Benchmarking row (``dgxc_runs.json``) runs what its release's launch code set
  (``dgxc_settings.json``): TP overlap, recompute, CUDA graphs (Megatron-Core's per-layer
  graphs count as whole-step capture of the launches), gradient dtype, cross-entropy fusion,
  DeepSeek-V3's MTP layer and uneven pipeline, and the layout where its table disagrees with
  the code (:func:`as_launched`);
* a job on NVL72 racks (GB200/GB300) whose GPU count is a multiple of 64 but not of 72 runs on
  16 of each rack's 18 trays (64 GPUs per NVLink domain), so power-of-two groups align with
  racks.

FLOP conventions for rows published as TFLOP/s or MFU: ``sc21`` is SC'21 eq. (3),
96*B*s*l*h^2*(1 + s/6h + V/16lh), which counts the recompute forward pass; ``megatron`` is
``num_floating_point_operations`` of Megatron-LM ``training.py`` (GQA, SwiGLU and MoE aware;
72*B*s*l*h^2*(1 + s/6h + V/12lh) for GPT), the convention of the 2024 H100 table and
Korthikanti et al.'s MFU; ``megatron-causal`` is the same function from March 2025 on (core
attention halved for the causal mask, MLA, dense and MoE layers apart), the convention of the
MoE model zoo and the DeepSeek-V3 GB200 guide.
"""
from __future__ import annotations

from dataclasses import replace

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from cost_models.model_spec import MoESpec, ModelSpec
from cost_models.parallel import Degrees
from cost_models.training.config import TrainingConfig, Workload, check_config
from cost_models.profile import Profile
from cost_models.training.step import Estimate, estimate
from topologies.catalog import get_gpu
from topologies.cluster import Cluster
from topologies.standard import homogeneous_cluster

DATA = Path(__file__).parent / "data" / "published_runs_calibration.json"
EXTRA = Path(__file__).parent / "data" / "published_runs_extra.json"
MB_SETTINGS = Path(__file__).parent / "data" / "megatron_bridge_moe_settings.json"
ZOO_SETTINGS = Path(__file__).parent / "data" / "modelzoo_moe_settings.json"
GUIDE_SETTINGS = Path(__file__).parent / "data" / "megatron_lm_guide_moe_settings.json"
MB_DENSE_SETTINGS = Path(__file__).parent / "data" / "megatron_bridge_dense_settings.json"
NEMO_SETTINGS = Path(__file__).parent / "data" / "nemo_2407_settings.json"
DGXC = Path(__file__).parent / "data" / "dgxc_runs.json"
DGXC_SETTINGS = Path(__file__).parent / "data" / "dgxc_settings.json"
MICRO_BATCHES = (1, 2, 4, 8)

# Short source names (leave-one-source-out holds out one of these at a time), by id prefix.
SOURCES = (("megatron-sc21", "megatron-sc21"),
           ("megatron-readme-jan2021", "megatron-readme-2021"),
           ("megatron-2020", "megatron-2020"), ("megatron-h100-2024", "megatron-h100-2024"),
           ("korthikanti", "korthikanti-2022"), ("modelzoo", "megatron-moe-modelzoo"),
           ("mbridge", "megatron-bridge"), ("mpt", "mosaicml-mpt"), ("nemo-2407", "nemo-24.07"),
           ("torchtitan", "torchtitan"), ("megatron-lm-dsv3-guide", "megatron-lm-dsv3-guide"),
           ("dgxc", "dgxc-benchmarking"))


def load_rows(path: Path = DATA) -> list[dict]:
    return json.loads(path.read_text())


def load_all_rows() -> list[dict]:
    """The reference set plus ``published_runs_extra.json`` and ``dgxc_runs.json`` (each when
    present), the latter with what its launch code ran (:func:`as_launched`)."""
    return load_rows(DATA) + (load_rows(EXTRA) if EXTRA.exists() else []) + (
        fold_republished([as_launched(r) for r in load_rows(DGXC)]) if DGXC.exists() else [])


def fold_republished(rows: list[dict]) -> list[dict]:
    """``rows`` less those that republish an earlier row's run: the same model (its citation
    aside), cluster, configuration (as launched) and step time. ``build_dgxc_runs.py`` folds
    repeats by the published configuration; v25.04 republished GPT-3 175B's v25.02 step
    times under a table that prints the VP 6 the v25.02 code ran (its title said 12), so
    only the launched layout shows them to be one run. The kept row lists the others in
    ``republished_as``."""
    first: dict[str, dict] = {}
    kept = []
    for row in rows:
        model = {k: v for k, v in row["model"].items() if k != "arch_source"}
        key = json.dumps([model, row["cluster"]["gpu_key"], row["cluster"]["num_gpus"],
                          row["config"], row["measured"]["step_time_s"]], sort_keys=True)
        if key in first:
            first[key].setdefault("republished_as", []).append(row["id"])
            continue
        first[key] = row
        kept.append(row)
    return kept


# A DGX Cloud Benchmarking row's layout fields, as its launch settings name them
# (``dgxc_settings.json`` ``parallelism``) and as the row's ``config`` does
LAUNCH_LAYOUT = (("tp", "tp"), ("pp", "pp"), ("cp", "cp"), ("dp", "dp"), ("vp", "vpp"),
                 ("ep", "ep"), ("etp", "expert_tp"), ("mbs", "micro_batch"),
                 ("gbs", "global_batch"))


def as_launched(row: dict) -> dict:
    """The row with the layout its release's launch code ran where the published table says
    otherwise (``dgxc_settings.json``: read from the launch scripts and recipes of the row's
    own release, each value with its ``commit:path:line``). The tables of three workloads
    disagree with their code: GPT-3 175B in v25.02-v25.03 (title VP=12; the code, and v25.04
    republishing the same step times, VP 6), v25.04's GPT-3 at 512 GPUs (GBS "1204", the code
    and the published throughput 1024), Nemotron-4 340B in v25.04 (VP "NA"; ``launch.sh``
    passes ``-vp 12``); and no table before v25.05 publishes Grok-1's expert TP (Megatron-Core's
    default then, TP: 4). ``config_from_launch`` records each replaced value."""
    known = (LAUNCH_SETTINGS.get(row["id"]) or {}).get("parallelism") or {}
    changed = {}
    for key, field in LAUNCH_LAYOUT:
        launched, published = known.get(key), row["config"].get(field)
        if launched is None or launched == published or (
                field in ("vpp", "ep", "expert_tp") and launched == (published or 1)):
            continue
        changed[field] = {"published": published, "launched": launched}
    if not changed:
        return row
    config = {**row["config"], **{k: v["launched"] for k, v in changed.items()}}
    return {**row, "config": config, "config_from_launch": changed}


# Rows whose launch settings are known: one config constant matches the row exactly, or in
# everything but the global batch, which Megatron-Bridge's performance scripts take from the
# command line (``-gb``) after the workload config (``megatron_bridge_moe_settings.json``).
MATCHED = ("exact", "exact_but_gbs")


def _load_launch_settings() -> dict[str, dict]:
    """Row id -> the settings the row's own launch code gave it (``MATCHED`` rows only):
    Megatron-Bridge's config of the row's release (``megatron_bridge_moe_settings.json``) and
    the MoE model zoo's launch scripts (``modelzoo_moe_settings.json``) and the Megatron-LM
    DeepSeek-V3 guide's (``megatron_lm_guide_moe_settings.json``); for the dense Llama rows,
    Megatron-Bridge's config of the row's release (``megatron_bridge_dense_settings.json``); for
    the NeMo 24.07 rows, NeMo-Framework-Launcher's configs of the time where the attribution is
    of high or medium confidence (``nemo_2407_settings.json``); for the DGX Cloud Benchmarking
    rows, their release's launch code and recipes (``dgxc_settings.json``)."""
    out = {}
    for path in (MB_SETTINGS, ZOO_SETTINGS, GUIDE_SETTINGS, MB_DENSE_SETTINGS, NEMO_SETTINGS,
                 DGXC_SETTINGS):
        if path.exists():
            out.update({r["id"]: r for r in json.loads(path.read_text())["rows"]
                        if r["match"] in MATCHED})
    return out


# (MoE and dense rows alike, whichever file holds them)
LAUNCH_SETTINGS = _load_launch_settings()


MEGATRON_BRIDGE_SOURCE = "github:NVIDIA-NeMo/Megatron-Bridge"


def _moment_bytes(row: dict) -> int:
    """Bytes of each Adam moment the row's framework kept (2 where its Megatron-Bridge config
    stored them in bf16)."""
    known = LAUNCH_SETTINGS.get(row["id"])
    return 2 if known is not None and known.get("adam_moment_dtype") == "bf16" else 4


def _dispatcher(row: dict) -> str:
    """The MoE token dispatcher the row ran (TrainingConfig.moe_dispatcher)."""
    known = LAUNCH_SETTINGS.get(row["id"])
    if known is not None and "dispatcher" in known:
        return "flex" if known["dispatcher"] == "flex" else "alltoall"
    named = str(row["config"].get("dispatcher") or "").lower()
    return "flex" if named in ("deepep", "hybridep", "flex") else "alltoall"


def _cuda_graphs(row: dict) -> str:
    """What CUDA graphs captured in the row's run (TrainingConfig.cuda_graphs): from its
    release's Megatron-Bridge config (``cuda_graph_impl`` and ``cuda_graph_scope``); none
    where unknown (Megatron-Core's default, and every other framework's here)."""
    known = LAUNCH_SETTINGS.get(row["id"])
    if known is None:
        return "none"
    impl, scope = known.get("cuda_graph_impl"), known.get("cuda_graph_scope") or []
    if impl == "full_iteration" or (impl == "local" and (
            "full_iteration" in scope or "full" in scope)):
        return "full"
    if impl == "transformer_engine":
        return "attn+moe_router" if "attn" in scope else "moe_router"
    return "none"


def _offload_layers(row: dict) -> int:
    """Layers whose activations the row's launch code moved to the host
    (``cpu_offloading_num_layers`` with ``cpu_offloading``; TrainingConfig.offload_layers)."""
    off = (LAUNCH_SETTINGS.get(row["id"]) or {}).get("offloading") or {}
    return int(off.get("cpu_offloading_num_layers") or 0) if off.get("cpu_offloading") else 0


def _offload_modules(row: dict) -> tuple[str, ...]:
    """Activations the row's launch code offloaded to the host (TrainingConfig.offload_modules)."""
    return tuple((LAUNCH_SETTINGS.get(row["id"]) or {}).get("offload_modules", ()))


def _fused_kernels(row: dict) -> dict:
    """FP8 attention and TransformerEngine's fused grouped MLP as the row's release config set
    them (``fp8_dot_product_attention``, ``cutedsl_fused_grouped_mlp`` in
    ``megatron_bridge_moe_settings.json``; both arrive with 26.06), on fp8 rows only."""
    known = LAUNCH_SETTINGS.get(row["id"]) or {}
    fp8 = row_workload(row).precision == "fp8"
    return {"fp8_attention": fp8 and bool(known.get("fp8_dot_product_attention")),
            "fused_grouped_mlp": fp8 and bool(known.get("cutedsl_fused_grouped_mlp"))}


def _published_recompute(row: dict) -> str | None:
    """Recompute of a Megatron-Bridge row from its release's config: full when its granularity
    is full, selective when it names modules to recompute, none when it names none (or an
    empty list); None when unknown."""
    known = LAUNCH_SETTINGS.get(row["id"])
    if known is None or "recompute_granularity" not in known:
        return None
    if known["recompute_granularity"] == "full":
        return "full"
    return "selective" if (known["recompute_granularity"] == "selective"
                           and known["recompute_modules"]) else "none"


def _recompute_modules(row: dict, recompute: str) -> tuple[str, ...]:
    """The Megatron-Core submodules a row's selective recompute re-ran
    (``TrainingConfig.recompute_modules``), as its release's config names them; () when it
    names none or the row does not recompute selectively (the planner's default set)."""
    known = LAUNCH_SETTINGS.get(row["id"]) or {}
    if recompute != "selective":
        return ()
    return tuple(known.get("recompute_modules") or ())


def _recompute_layers(row: dict) -> int | None:
    """Layers per chunk that full recompute covers (``TrainingConfig.recompute_layers``):
    Megatron's ``recompute_method = "block"`` recomputes the first ``recompute_num_layers`` of
    each chunk; ``uniform`` (or unknown) recomputes them all."""
    known = LAUNCH_SETTINGS.get(row["id"]) or {}
    if known.get("recompute_granularity") == "full" and known.get("recompute_method") == "block":
        return known.get("recompute_num_layers")
    return None


def _tp_comm_overlap(row: dict) -> bool:
    """TP communication overlap (userbuffers): as the row's release config set it where known
    (Megatron-Bridge's Llama recipes keep ``tp_comm_overlap=True`` and the performance scripts
    turn it off for NVFP4, ``megatron_bridge_dense_settings.json``), else only where the row's
    command lists ``--tp-comm-overlap``."""
    known = LAUNCH_SETTINGS.get(row["id"]) or {}
    if known.get("tp_comm_overlap") is not None:
        return bool(known["tp_comm_overlap"]) and (row["config"].get("tp") or 1) > 1
    return "tp-comm-overlap" in str(row["config"].get("overlap", ""))


def source_name(row: dict) -> str:
    return next((name for prefix, name in SOURCES if row["id"].startswith(prefix)), "other")


def gpu_family(row: dict) -> str:
    g = row["cluster"]["gpu_key"]
    return ("A100" if g.startswith("A100") else "H100" if g.startswith("H100") else
            "V100" if g.startswith("V100") else "Blackwell" if g[-4:] in ("B200", "B300") else g)


def unsupported(row: dict) -> str | None:
    """Why the cost model cannot predict a row yet (None when it can)."""
    m = row["model"]
    if not m.get("preset") and not m.get("layers"):
        return f"model {m.get('name')} has no planner preset (architecture not in the model library)"
    try:
        get_gpu(row["cluster"]["gpu_key"])
    except Exception:  # noqa: BLE001 - any catalog miss
        return f"GPU {row['cluster']['gpu_key']} not in the catalog"
    return None


def era(row: dict) -> str:
    """``2021`` for the Megatron 2020/2021 and Korthikanti rows, else ``2024``."""
    return "2021" if row["id"].startswith(("megatron-sc21", "megatron-readme", "megatron-2020",
                                           "korthikanti")) else "2024"


def _launch_other(row: dict) -> dict:
    """The ``other`` block of the row's launch settings (environment variables such as
    ``NVTE_FUSED_ATTN``, MTP layers, uneven pipeline stages); {} where none is known."""
    return (LAUNCH_SETTINGS.get(row["id"]) or {}).get("other") or {}


def _ran_mtp(row: dict) -> bool:
    """Whether a DeepSeek-V3 row ran its multi-token-prediction module. Megatron-Bridge 25.11
    (v0.2.x) performance scripts left it out unless the table's model column says "w/mtp";
    from 26.02 (v0.3.0) on they build the recipe with its default ``mtp_num_layers = 1``
    (``scripts/performance/configs/deepseek/deepseek_llm_pretrain.py`` calls
    ``deepseek_v3_pretrain_config``, ``recipes/deepseek/deepseek_v3.py:198``), and every such
    row's published model TFLOP/s per token equals Megatron's count with one MTP layer within
    0.2% (4% off without it). Other sources ran MTP only where their launch flags say so
    (none here)."""
    rid = row["id"].lower()
    other = _launch_other(row)
    if "w/mtp" in rid or (other.get("mtp_num_layers") or 0) > 0:
        return True
    release = rid.split("-")[1] if rid.startswith("mbridge-") else ""
    return release[:5] >= "26.02" if release[:2].isdigit() else False


def row_model(row: dict) -> ModelSpec:
    m = row["model"]
    if m.get("preset"):
        from planner.inputs.models import load_model
        spec = load_model(m["preset"])
        if spec.mtp_layers and not _ran_mtp(row):
            spec = replace(spec, mtp_layers=0)
        return spec
    moe = None
    if m.get("moe"):
        mo = m["moe"]
        moe = MoESpec(mo["experts"], mo["topk"], mo["expert_ffn_hidden"],
                      mo.get("shared_experts") or 0)
    gpt = m.get("family", "").startswith("gpt")
    head_dim = m.get("head_dim") or m["hidden"] // m["heads"]
    ffn = m.get("ffn_hidden") or (moe.expert_ffn_hidden if moe else 4 * m["hidden"])
    return ModelSpec(
        name=m["name"], num_layers=m["layers"], hidden_size=m["hidden"], num_heads=m["heads"],
        num_kv_heads=m.get("kv_heads") or m["heads"], head_dim=head_dim, ffn_hidden_size=ffn,
        vocab_size=m["vocab"], glu=bool(m.get("glu")), activation=m.get("activation") or "gelu"
        if not m.get("glu") else "silu", tied_embeddings=m.get("tied", gpt),
        norm=m.get("norm") or ("layernorm" if gpt else "rmsnorm"),
        qkv_bias=gpt, attn_out_bias=gpt, mlp_bias=gpt, moe=moe)


def row_cluster(row: dict) -> Cluster:
    c = row["cluster"]
    per_node = min(c["gpus_per_node"], c["num_gpus"])
    n, domain = c["num_gpus"], get_gpu(c["gpu_key"]).nvlink_domain_gpus
    aligned = 64 if domain == 72 and n % 64 == 0 and n % 72 else None
    return homogeneous_cluster(c["gpu_key"], n // per_node, per_node, aligned)


def row_workload(row: dict) -> Workload:
    gb = row["config"].get("global_batch") or row["config"]["dp"] * 8
    published = str(row["config"].get("precision", "")).lower()
    precision = ("nvfp4" if "fp4" in published else "fp8" if "fp8" in published
                 else "fp16" if "fp16" in published else "bf16")
    return Workload(row["model"]["seq_len"], gb, precision)


def _zero(row: dict) -> int:
    z = str(row["config"].get("zero"))
    if "SHARD_GRAD_OP" in z:
        return 2
    if "FSDP" in z:
        return 3
    return 0 if era(row) == "2021" else 1


TORCHTITAN_SOURCE = "github:pytorch/torchtitan"


def _recompute(row: dict) -> str:
    """The row's recompute mode. torchtitan's "selective" is its per-op policy (``op``): the
    Llama 3 8B config both its benchmark files ran sets ``selective_ac_option = 'op'``
    (train_configs/llama3_8b.toml at 9dec370, the December 2024 tables;
    torchtitan/models/llama3/train_configs/llama3_8b.toml at 820504e, the June 2025 async-TP
    tables, which say "per op SAC")."""
    default = "full" if era(row) == "2021" else "none"  # 2020/21 scripts: --checkpoint-activations
    r = str(row["config"].get("recompute") or default).lower()
    if r.startswith("selective") and row["source"].startswith(TORCHTITAN_SOURCE):
        return "op"
    return "full" if r.startswith("full") else "selective" if r.startswith("selective") else "none"


# What the framework a row ran on does that the training config must say (its source names the
# framework): PyTorch FSDP (llm-foundry's Composer, FSDP1; torchtitan, FSDP2) keeps no
# low-precision weight shard ("outside forward and backward, the sharded parameters are kept
# in full precision", torch.distributed.fsdp.MixedPrecision); llm-foundry's MPT computes its
# loss with flash-attn's fused cross-entropy (ComposerMPTCausalLM: ``loss_fn`` defaults to
# ``fused_crossentropy``), which keeps the logits and their gradient in bf16, and so does
# Megatron-Bridge's TE cross-entropy (``cross_entropy_fusion_impl = "te"``, module docstring).
TORCH_FSDP_SOURCES = ("github:mosaicml/llm-foundry", "github:pytorch/torchtitan")
# The same two frameworks ran FlashAttention-2-generation attention kernels (``flash2``), which
# are slower on Hopper than the cuDNN fused attention Megatron's Transformer Engine runs
# (``cost_models.compute.FA2_ON_SM90_PLUS``): llm-foundry's MPT (2023) runs flash-attn 2.x or
# its Triton flash kernel (``attn_impl``); torchtitan's Llama calls PyTorch SDPA, whose default
# on H100 was the FLASH (FA2) backend: the cuDNN backend became opt-in again after 2.5
# (pytorch/pytorch#138522, #138649), and torchtitan switched to cuDNN attention only in March
# 2025 (pytorch/torchtitan#1000), after its paper's tables (arXiv 2410.06511, December 2024).
FA2_SOURCES = TORCH_FSDP_SOURCES
FUSED_CROSS_ENTROPY_SOURCES = ("github:mosaicml/llm-foundry", "github:NVIDIA-NeMo/Megatron-Bridge")


def _fused_cross_entropy(row: dict) -> bool:
    """Whether the loss kept the logits in bf16: the sources' frameworks above, or a row
    whose launch settings name TransformerEngine's fused cross-entropy (``cross_entropy.impl``
    "te"; Megatron-Core's native fusion is not taken as keeping them in bf16)."""
    known = (LAUNCH_SETTINGS.get(row["id"]) or {}).get("cross_entropy") or {}
    if known.get("impl") is not None:
        return bool(known.get("loss_fusion")) and known["impl"] == "te"
    return row["source"].startswith(FUSED_CROSS_ENTROPY_SOURCES)


def _grad_reduce_in_fp32(row: dict) -> bool:
    """Whether the row reduced its gradients in fp32 (Megatron's default): its launch
    settings' ``grad_dtype`` where known, else every source but Megatron-Bridge."""
    known = (LAUNCH_SETTINGS.get(row["id"]) or {}).get("grad_dtype")
    if known in ("bf16", "fp32"):
        return known == "fp32"
    return not row["source"].startswith(MEGATRON_BRIDGE_SOURCE)


# TransformerEngine of the NeMo containers whose version NVIDIA's "Software Component Versions"
# page lists (docs.nvidia.com/nemo-framework/user-guide/24.09/softwarecomponentversions.html):
# up to v1.10 its flash backend is FlashAttention-2 only (``transformer_engine/pytorch/
# attention.py`` imports ``flash_attn.flash_attn_interface``'s v2 functions; v1.11 adds
# FlashAttention-3 through ``flashattn-hopper``)
NEMO_CONTAINER_TE = {"24.05": (1, 6), "24.07": (1, 8), "24.09": (1, 10)}


def _nemo_container(row: dict) -> str | None:
    """The NeMo container release a row ran in (``24.09``): its ``container`` field, or the one
    its source names ("(NeMo 24.07 container)"); None where neither says."""
    m = re.search(r"nvidia/nemo:(\d\d\.\d\d)(?![.\d])", row.get("container") or "") or \
        re.search(r"NeMo (\d\d\.\d\d) container", row["source"])
    return m.group(1) if m else None


def _attention(row: dict) -> str:
    """The row's attention kernels: unfused in the 2020/21 rows; FlashAttention-2 in the
    sources above, and where the launch code turned TransformerEngine's cuDNN fused
    attention off (``NVTE_FUSED_ATTN=0``) in a container whose TransformerEngine has no other
    flash backend (``NEMO_CONTAINER_TE``, up to v1.10); else the GPU's fused kernel."""
    if era(row) == "2021":
        return "unfused"
    other = _launch_other(row)
    te = NEMO_CONTAINER_TE.get(_nemo_container(row) or "")
    if row["source"].startswith(FA2_SOURCES) or (
            str(other.get("NVTE_FUSED_ATTN")) == "0" and te is not None and te <= (1, 10)):
        return "flash2"
    return "flash"


def row_config(row: dict, micro_batch: int = 1) -> TrainingConfig:
    c, old = row["config"], era(row) == "2021"
    tp = c.get("tp") or 1
    sp = bool(c.get("seq_parallel")) if old or c.get("seq_parallel") is not None else tp > 1
    degrees = Degrees(tp=tp, pp=c.get("pp") or 1, dp=c.get("dp") or 1, cp=c.get("cp") or 1,
                      ep=c.get("ep") or 1,
                      etp=c.get("expert_tp") or (1 if c.get("ep") else None))
    recompute = _recompute(row)
    return TrainingConfig(
        degrees=degrees, vpp=c.get("vpp") or 1, micro_batch=c.get("micro_batch") or micro_batch,
        recompute=recompute, recompute_modules=_recompute_modules(row, recompute),
        sequence_parallel=sp, zero=_zero(row),
        attention=_attention(row), dropout=old, overlap_grad_reduce=not old,
        overlap_param_gather=not old,
        tp_comm_overlap=_tp_comm_overlap(row), recompute_layers=_recompute_layers(row),
        moe_a2a_overlap=_a2a_overlap(row), moe_dispatcher=_dispatcher(row),
        low_precision_shard=not row["source"].startswith(TORCH_FSDP_SOURCES),
        fused_cross_entropy=_fused_cross_entropy(row),
        grad_reduce_in_fp32=_grad_reduce_in_fp32(row),
        optimizer_moment_bytes=_moment_bytes(row), cuda_graphs=_cuda_graphs(row),
        offload_modules=_offload_modules(row), stage_layer_counts=_stage_layer_counts(row),
        quantized_saved_inputs=not row["source"].startswith(TORCHTITAN_SOURCE),
        offload_layers=_offload_layers(row),
        **_fused_kernels(row))


# Megatron-Bridge's DeepSeek-V3 recipe cuts the pipeline by this map when the performance
# config passes no layout (``recipes/deepseek/deepseek_v3.py``, ``layout_map`` of
# ``set_deepseek_v3_pipeline_model_parallel_layout``, the same at v0.2.0:237-240 through
# v0.6.0): the first stage holds the embedding, the last stage the MTP module and the loss
# after fewer layers. The B200/B300 performance configs pass none (v0.3.0
# ``deepseek_workload_base_configs.py:90-117``). Plain pipelines only (vpp 1): the cost model
# takes uneven splits for those.
DEEPSEEK_V3_MB_LAYOUT = {4: (16, 16, 16, 13), 8: (8,) * 7 + (5,), 16: (4,) * 15 + (1,)}


def _stage_layer_counts(row: dict) -> tuple[int, ...] | None:
    c = row["config"]
    pp = c.get("pp") or 1
    if (row["id"].startswith("mbridge-") and row["model"].get("preset") == "deepseek-v3"
            and (c.get("vpp") or 1) == 1):
        return DEEPSEEK_V3_MB_LAYOUT.get(pp)
    return _launched_stage_layers(row, pp)


def _launched_stage_layers(row: dict, pp: int) -> tuple[int, ...] | None:
    """An uneven pipeline the row's launch code set (Megatron's
    ``num_layers_in_first_pipeline_stage`` / ``..._last_...``, the rest spread evenly; the
    dgxc DeepSeek-V3 rows: NeMo's ``pretrain_deepseek_v3.py`` gives the first stage one layer
    and the last two fewer than the middle ones); None where it set none or the layers do not
    divide."""
    other = _launch_other(row)
    first, last = (other.get("num_layers_in_first_pipeline_stage"),
                   other.get("num_layers_in_last_pipeline_stage"))
    if not (first and last) or pp < 3 or (row["config"].get("vpp") or 1) > 1:
        return None
    middle, rest = divmod(row_model(row).num_layers - first - last, pp - 2)
    return None if rest or middle <= 0 else (first,) + (middle,) * (pp - 2) + (last,)


def _a2a_overlap(row: dict) -> bool:
    """Expert all-to-all overlapped with the other micro-batch's compute (Megatron's
    ``--overlap-moe-expert-parallel-comm``) only where the row, or its release's
    Megatron-Bridge config, says it ran so."""
    known = LAUNCH_SETTINGS.get(row["id"])
    if known is not None:
        return bool(known.get("a2a_overlap"))
    text = f"{row['config'].get('overlap', '')} {row.get('notes', '')}".lower()
    return "a2a overlap" in text


def megatron_flops(model: ModelSpec, batch: int, seq: int) -> float:
    """Megatron-LM ``num_floating_point_operations`` (fwd + bwd, no recompute) before March
    2025: attention over the full s x s score matrix."""
    h, L, a = model.hidden_size, model.num_layers, model.num_heads
    gated = 1.5 if model.glu else 1.0
    q_ratio = a * model.head_dim / h
    ffn, routed, shared = model.ffn_hidden_size, 1, 0
    if model.moe is not None:
        ffn, routed = model.moe.expert_ffn_hidden, model.moe.top_k
        shared = model.moe.num_shared_experts * model.moe.expert_ffn_hidden
    return 12 * batch * seq * L * h * h * (
        (1 + model.num_kv_heads / a + seq / h) * q_ratio + ffn / h * routed * gated
        + shared / h * gated + model.vocab_size / (2 * L * h))


def megatron_causal_flops(model: ModelSpec, batch: int, seq: int) -> float:
    """Megatron-LM ``num_floating_point_operations`` from March 2025 on (``transformer_flops``
    of ``megatron/training/training.py``; NVIDIA/Megatron-LM 8873b55d "Fixes in number of
    floating-point operation estimates for MoE and attention layer" halved the core attention
    for the causal mask; read at effebd81, the commit of the DeepSeek-V3 GB200 guide): per
    token 3 x 2 x (every GEMM's multiply-adds) with the core attention at s/2 keys, MLA's
    low-rank projections where the model has them, dense and MoE MLPs counted per layer, the
    MTP modules' projection and logits, and the logits."""
    h, a, s = model.hidden_size, model.num_heads, seq
    gated = 1.5 if model.glu else 1.0
    if model.mla is not None:
        m = model.mla
        q_term = (m.q_lora_rank * (h + a * m.qk_head_dim + 1) if m.q_lora_rank
                  else h * a * m.qk_head_dim)
        attn = 6 * (q_term + m.kv_lora_rank * (h + a * (m.qk_nope_head_dim + m.v_head_dim) + 1)
                    + h * m.qk_rope_head_dim + a * m.v_head_dim * h
                    + s * a * m.qk_head_dim / 2 + s * a * m.v_head_dim / 2)
    else:
        q, kv = a * model.head_dim, model.num_kv_heads * model.head_dim
        attn = 6 * (h * (q + 2 * kv) + q * s / 2 * 2 + q * h)
    mtp = model.mtp_layers
    dense, moe = model.num_dense_layers, model.num_moe_layers
    if model.moe is not None and not model.moe_layers:
        dense, moe = 0, model.num_layers
    last_is_moe = model.moe is not None and (not model.moe_layers
                                             or model.is_moe_layer(model.num_layers - 1))
    if mtp:  # MTP modules repeat the last layer's kind
        moe, dense = (moe + mtp, dense) if last_is_moe else (moe, dense + mtp)
    mlp = 12 * h * dense * model.ffn_hidden_size * gated
    if model.moe is not None:
        e = model.moe
        mlp += 12 * h * moe * (e.expert_ffn_hidden * e.top_k
                               + e.num_shared_experts * e.expert_ffn_hidden) * gated
    per_token = (mlp + attn * (model.num_layers + mtp) + 6 * mtp * (3 * h + 2 * h * h)
                 + 6 * h * model.vocab_size * (mtp + 1))
    return batch * s * per_token


def sc21_flops(model: ModelSpec, batch: int, seq: int) -> float:
    """SC'21 eq. (3): counts the full-recompute forward pass."""
    h, L, V = model.hidden_size, model.num_layers, model.vocab_size
    return 96 * batch * seq * L * h * h * (1 + seq / (6 * h) + V / (16 * L * h))


@dataclass(frozen=True)
class Target:
    """The published figure of a row: ``metric`` is step_time_s, tokens_per_s_per_gpu,
    tflops_per_gpu or mfu; ``scored`` rows count toward the headline median."""

    metric: str
    value: float
    convention: str  # "", "sc21", "megatron" or "megatron-causal"
    scored: bool
    note: str = ""


# Sources whose TFLOP/s were counted by Megatron-LM from March 2025 on (megatron_causal_flops):
# the MoE model zoo's tables (its H100 rows publish step time and TFLOP/s; the pair agrees
# with that count within 0.5% and not with the earlier one, 13% higher at 4k tokens; test) and
# the DeepSeek-V3 GB200 guide (Megatron-LM effebd81, October 2025).
CAUSAL_FLOP_SOURCES = ("megatron-moe-modelzoo", "megatron-lm-dsv3-guide")


# The note of a row its source marks a known regression (row_target); the report finds such
# rows by it.
KNOWN_REGRESSION_NOTE = "source marks it a known regression: "


def row_target(row: dict) -> Target | None:
    """The row's published figure. Rows whose source marks the number as a known performance
    regression (``known_regression``, copied from the table's footnote by
    ``data/build_published_runs_extra.py``) are predicted and listed but not scored: they
    measure a software defect the publisher names, not the configuration."""
    me, de, c = row["measured"], row.get("derived", {}), row["config"]
    complete = all(c.get(k) for k in ("tp", "pp", "dp", "global_batch"))
    if row.get("known_regression"):
        regression = KNOWN_REGRESSION_NOTE + row["known_regression"]
        for metric, value in (("step_time_s", me.get("step_time_s")),
                              ("tokens_per_s_per_gpu", de.get("tokens_per_sec_per_gpu"))):
            if value:
                return Target(metric, value, "", False, regression)
    if me.get("step_time_s"):
        return Target("step_time_s", me["step_time_s"], "", True)
    if de.get("tokens_per_sec_per_gpu"):
        return Target("tokens_per_s_per_gpu", de["tokens_per_sec_per_gpu"], "", True)
    conv = ("sc21" if row["id"].startswith(("megatron-sc21", "megatron-readme")) else
            "megatron-causal" if source_name(row) in CAUSAL_FLOP_SOURCES else "megatron")
    note = "" if complete else "config incomplete (degrees or batch not published)"
    if me.get("tflops_per_gpu"):
        return Target("tflops_per_gpu", me["tflops_per_gpu"], conv, complete, note)
    if me.get("mfu"):
        return Target("mfu", me["mfu"], "megatron", complete, note)
    return None


def predicted_metric(target: Target, est: Estimate, model: ModelSpec) -> float:
    """The estimate expressed in the row's own metric and FLOP convention."""
    if target.metric == "step_time_s":
        return est.step_time_s
    if target.metric == "tokens_per_s_per_gpu":
        return est.tokens_per_s_per_gpu
    w = est.workload
    count = {"sc21": sc21_flops, "megatron-causal": megatron_causal_flops}.get(
        target.convention, megatron_flops)
    flops = count(model, w.global_batch, w.seq_len)
    tflops = flops / est.step_time_s / est.num_gpus / 1e12
    return tflops if target.metric == "tflops_per_gpu" else tflops * 1e12 / est.peak_flops_per_gpu


def candidate_configs(row: dict, num_gpus: int):
    """The row's configuration with its unpublished choices enumerated (see module docstring):
    micro-batch, recompute for 2024+ rows, and for rows missing PP/DP: PP, EP and recompute."""
    c = row["config"]
    mbs = [c["micro_batch"]] if c.get("micro_batch") else MICRO_BATCHES
    recomputes = [_recompute(row)]
    if not c.get("recompute") and era(row) != "2021":
        published = _published_recompute(row)
        recomputes = [published] if published else ["none", "selective", "full"]
    if c.get("pp") and c.get("dp"):
        for mb, rc in ((mb, rc) for mb in mbs for rc in recomputes):
            cfg = _valid(lambda: replace(row_config(row, mb), recompute=rc,
                                         recompute_modules=_recompute_modules(row, rc)))
            if cfg is not None:
                yield cfg
        return
    tp, cp = c.get("tp") or 1, c.get("cp") or 1
    for pp in (1, 2, 4, 8, 16):
        dp = num_gpus // (tp * cp * pp)
        if dp * tp * cp * pp != num_gpus:
            continue
        for ep in (e for e in (1, 2, 4, 8, 16, 32, 64) if (tp * cp * dp) % e == 0):
            for rc in recomputes:
                cfg = row_config(row, 1)
                degrees = replace(cfg.degrees, pp=pp, dp=dp, ep=ep, etp=1)
                base = _valid(lambda: replace(cfg, degrees=degrees, recompute=rc,
                                              recompute_modules=_recompute_modules(row, rc)))
                if base is not None:
                    yield from (replace(base, micro_batch=mb) for mb in mbs)


def _valid(build) -> TrainingConfig | None:
    """``build()``, or None for a combination TrainingConfig refuses (e.g. the expert
    all-to-all overlap a row ran with beside full recompute, which Megatron does not allow)."""
    try:
        return build()
    except ValueError:
        return None


def best_estimate(row: dict, prof: Profile) -> Estimate:
    """Estimate of the row's configuration; what is unpublished is the fastest that fits."""
    model, cluster, workload = row_model(row), row_cluster(row), row_workload(row)
    results = []
    for cfg in candidate_configs(row, cluster.num_gpus):
        try:
            check_config(model, workload, cfg, cluster.num_gpus)
        except ValueError:
            continue
        results.append(estimate(model, cluster, workload, cfg, prof))
    if not results:
        raise ValueError(f"row {row['id']}: no consistent configuration")
    fitting = [e for e in results if e.memory.fits] or results
    return min(fitting, key=lambda e: e.step_time_s)


def profile_for(row: dict, profiles: dict[str, Profile]) -> Profile:
    return profiles[row["cluster"]["gpu_key"]]
