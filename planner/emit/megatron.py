"""Megatron-LM ``pretrain_gpt.py`` arguments.

Flag names and constraints follow ``megatron/training/arguments.py`` (NVIDIA/Megatron-LM):

* parallelism: ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
  ``--context-parallel-size``, ``--expert-model-parallel-size``,
  ``--expert-tensor-parallel-size``, ``--sequence-parallel``;
* interleaving: ``--num-layers-per-virtual-pipeline-stage`` (layers per model chunk); uneven
  stages: ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
  (each > 0; the other stages split the rest evenly, ``TransformerConfig``), otherwise
  ``--pipeline-model-parallel-layout``: one ``|``-separated entry per model chunk in
  virtual-stage order (entry ``v * pp + s``), ``E`` embedding, ``t`` decoder layer, ``m`` MTP
  layer, ``L`` loss, ``x*n`` repetition (``PipelineParallelLayerLayout.parse_str_to_list``);
  at most one of the three VPP/layout options may be given;
* model: ``--num-layers``, ``--hidden-size``, ``--ffn-hidden-size``,
  ``--num-attention-heads``, ``--group-query-attention`` + ``--num-query-groups``,
  ``--kv-channels``, ``--seq-length``, ``--max-position-embeddings``,
  ``--position-embedding-type``, ``--rotary-base`` (the model's ``rope_theta``; Megatron's
  default is 10,000), ``--use-rope-scaling`` + ``--rope-scaling-factor`` (Llama 3's RoPE
  scaling; ``megatron/training/arguments.py``), ``--normalization``, ``--swiglu``,
  ``--untie-embeddings-and-output-weights``, ``--disable-bias-linear``, ``--add-qkv-bias``,
  ``--attention-dropout`` / ``--hidden-dropout``, MLA (``--multi-latent-attention``,
  ``--q-lora-rank``, ``--kv-lora-rank``, ``--qk-head-dim``, ``--qk-pos-emb-head-dim``,
  ``--v-head-dim``), ``--mtp-num-layers``;
* batch: ``--micro-batch-size``, ``--global-batch-size``;
* memory: ``--use-distributed-optimizer`` (ZeRO-1); ZeRO-2/3 via Megatron-FSDP
  (``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads|optim_grads_params
  --no-gradient-accumulation-fusion --use-distributed-optimizer --ckpt-format fsdp_dtensor``,
  the required set in ``docs/discussions/megatron-fsdp-user-guide``; ``--use-custom-fsdp`` is
  its deprecated older name; ``--use-torch-fsdp2`` is refused with pipeline or expert
  parallelism); ``--recompute-granularity full|selective``, ``--recompute-method
  uniform|block``, ``--recompute-num-layers``, ``--recompute-modules``;
* MoE: ``--num-experts``, ``--moe-router-topk``, ``--moe-ffn-hidden-size``,
  ``--moe-shared-expert-intermediate-size``, ``--moe-layer-freq``, ``--moe-grouped-gemm``
  (bf16 only), ``--moe-token-dispatcher-type alltoall``, or with the plan's flex dispatcher
  ``--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep`` (Megatron-Core
  MoE guide: "Enable DeepEP token dispatcher");
* precision: ``--bf16`` / ``--fp16``, ``--fp8-format hybrid``, ``--fp4-format e2m1
  --fp4-recipe nvfp4 --fp4-param-gather`` (4-bit weights, as the estimate assumes;
  Megatron-LM ``arguments.py``, "FP4 related arguments"); gradients reduced in bf16
  (``--grad-reduce-in-bf16``) and Adam's moments in bf16 (``--use-precision-aware-optimizer
  --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16``) where the plan's config says so;
* overlap: ``--overlap-grad-reduce``, ``--overlap-param-gather`` (needs the distributed
  optimizer or Megatron-FSDP), ``--tp-comm-overlap`` (needs ``--sequence-parallel``);
* CUDA graphs: ``--cuda-graph-impl transformer_engine --cuda-graph-scope ...`` or
  ``--cuda-graph-impl full_iteration`` as the plan's ``cuda_graphs`` says
  (:data:`CUDA_GRAPH_ARGS`); ``--fine-grained-activation-offloading --offload-modules ...``
  with the plan's ``offload_modules``.

ZB-H1 is not a mainline Megatron-LM schedule; the files say so.
"""
from __future__ import annotations

import json
import shlex

from planner.emit._facts import SLIMPIPE_NOTE, Facts, dp_shares_note, header_lines
from planner.emit.types import Emission


def _layout_entry(count: int, first: bool, last: bool, mtp: int) -> str:
    parts = ["E"] if first else []
    if count:
        parts.append("t" if count == 1 else f"t*{count}")
    if last:
        if mtp:
            parts.append("m" if mtp == 1 else f"m*{mtp}")
        parts.append("L")
    return "".join(parts)


def pipeline_layout(chunk_layers: tuple[int, ...], mtp_layers: int = 0) -> str:
    """``--pipeline-model-parallel-layout`` for these per-chunk layer counts (virtual-stage
    order): embedding with the first chunk, MTP layers and loss with the last."""
    n = len(chunk_layers)
    return "|".join(_layout_entry(c, j == 0, j == n - 1, mtp_layers)
                    for j, c in enumerate(chunk_layers))


def _first_last(counts: tuple[int, ...]) -> list[tuple[str, int]] | None:
    """The fewest of ``--decoder-first/last-pipeline-num-layers`` that reproduce ``counts``
    under Megatron's rule (the stages not named split the rest evenly; named ones > 0), or
    None when they cannot."""
    pp, total = len(counts), sum(counts)
    options = (("first",), ("last",), ("first", "last"))
    for names in options:
        fixed = {"first": (0, counts[0]), "last": (pp - 1, counts[-1])}
        chosen = [fixed[n] for n in names]
        if any(c <= 0 for _, c in chosen):
            continue
        middle = [s for s in range(pp) if s not in {i for i, _ in chosen}]
        rest = total - sum(c for _, c in chosen)
        if bool(middle) != bool(rest) or (middle and rest % len(middle)):
            continue
        share = rest // len(middle) if middle else 0
        if all(counts[s] == share for s in middle):
            flag = {"first": "--decoder-first-pipeline-num-layers",
                    "last": "--decoder-last-pipeline-num-layers"}
            return [(flag[n], c) for n, (_, c) in zip(names, chosen)]
    return None


def pipeline_args(f: Facts) -> tuple[list[str], list[str]]:
    """(arguments, comment lines) that place the plan's layers on the pipeline stages."""
    cfg, chunks = f.cfg, f.chunk_layers
    if cfg.degrees.pp == 1:
        return [], []
    if len(set(chunks)) == 1:
        if cfg.vpp > 1:
            return ["--num-layers-per-virtual-pipeline-stage", str(chunks[0])], []
        return [], []
    if cfg.vpp == 1:
        flags = _first_last(chunks)
        if flags is not None:
            return [x for flag, c in flags for x in (flag, str(c))], []
    layout = pipeline_layout(chunks, f.model.mtp_layers)
    return (["--pipeline-model-parallel-layout", layout],
            [f"Uneven stages {list(f.stage_layers)} (per chunk {list(chunks)}): "
             "--pipeline-model-parallel-layout."])


def _model_args(f: Facts) -> tuple[list[str], list[str]]:
    m, w = f.model, f.workload
    args = ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size),
            "--ffn-hidden-size", str(m.ffn_hidden_size),
            "--num-attention-heads", str(m.num_heads)]
    notes: list[str] = []
    if m.mla is not None:
        args += ["--multi-latent-attention", "--kv-lora-rank", str(m.mla.kv_lora_rank),
                 "--qk-head-dim", str(m.mla.qk_nope_head_dim),
                 "--qk-pos-emb-head-dim", str(m.mla.qk_rope_head_dim),
                 "--v-head-dim", str(m.mla.v_head_dim)]
        if m.mla.q_lora_rank is not None:
            args += ["--q-lora-rank", str(m.mla.q_lora_rank)]
    else:
        if m.num_kv_heads != m.num_heads:
            args += ["--group-query-attention", "--num-query-groups", str(m.num_kv_heads)]
        if m.head_dim * m.num_heads != m.hidden_size:
            args += ["--kv-channels", str(m.head_dim)]
    if m.position_embeddings:
        args += ["--max-position-embeddings", str(max(m.position_embeddings, w.seq_len))]
    else:
        args += ["--position-embedding-type", "rope", "--max-position-embeddings",
                 str(w.seq_len)]
        if m.rope_theta is not None:  # Megatron's default base is 10,000
            args += ["--rotary-base", str(round(m.rope_theta))]
        else:
            notes.append("the plan's model gives no RoPE base (rope_theta): Megatron-LM uses "
                          "its default, 10,000; add --rotary-base if the model's differs")
        if m.rope_llama3_factor is not None:
            args += ["--use-rope-scaling", "--rope-scaling-factor", f"{m.rope_llama3_factor:g}"]
    args += ["--seq-length", str(w.seq_len)]
    if m.norm == "rmsnorm":
        args += ["--normalization", "RMSNorm"]
    if m.glu and m.activation == "silu":
        args.append("--swiglu")
    elif not m.glu and m.activation == "relu2":
        args.append("--squared-relu")
    elif m.glu or m.activation not in ("gelu", "silu"):
        notes.append(f"Activation {json.dumps(m.activation)} (GLU {m.glu}): add the matching "
                     "Megatron activation flag.")
    if not m.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not (m.mlp_bias or m.attn_out_bias):
        args.append("--disable-bias-linear")
        if m.qkv_bias:
            args.append("--add-qkv-bias")
    if not f.cfg.dropout:
        args += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    if m.mtp_layers:
        args += ["--mtp-num-layers", str(m.mtp_layers)]
    if m.sliding_window:
        notes.append(f"Sliding-window attention (window {m.sliding_window}): set --window-size "
                     "/ --window-attn-skip-freq for your Megatron version.")
    return args, notes


def _moe_args(f: Facts) -> list[str]:
    m = f.model
    if not m.is_moe:
        return []
    moe = m.moe
    args = ["--num-experts", str(moe.num_experts), "--moe-router-topk", str(moe.top_k),
            "--moe-ffn-hidden-size", str(moe.expert_ffn_hidden)]
    if f.cfg.moe_dispatcher == "flex":
        args += ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"]
    else:
        args += ["--moe-token-dispatcher-type", "alltoall"]
    if moe.num_shared_experts:
        args += ["--moe-shared-expert-intermediate-size", str(moe.shared_width)]
    if m.moe_layers and not all(m.moe_layers):
        args += ["--moe-layer-freq", "[" + ",".join("1" if x else "0" for x in m.moe_layers) + "]"]
    if f.workload.precision == "bf16" or f.workload.low_precision_gemms:
        args.append("--moe-grouped-gemm")
    return args


def _memory_args(f: Facts) -> tuple[list[str], list[str]]:
    cfg = f.cfg
    args: list[str] = []
    notes: list[str] = []
    if cfg.zero == 1:
        args.append("--use-distributed-optimizer")
    elif cfg.zero >= 2:
        strategy = "optim_grads" if cfg.zero == 2 else "optim_grads_params"
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy,
                 "--no-gradient-accumulation-fusion", "--use-distributed-optimizer",
                 "--ckpt-format", "fsdp_dtensor"]
        notes.append(f"ZeRO-{cfg.zero} -> Megatron-FSDP ({strategy}); older Megatron-LM names "
                     "the flag --use-custom-fsdp. --use-torch-fsdp2 is the alternative only "
                     "without pipeline and expert parallelism.")
    if cfg.recompute == "full":
        if cfg.recompute_layers is None:
            args += ["--recompute-granularity", "full", "--recompute-method", "uniform",
                     "--recompute-num-layers", "1"]
        else:
            args += ["--recompute-granularity", "full", "--recompute-method", "block",
                     "--recompute-num-layers", str(cfg.recompute_layers)]
    elif cfg.recompute == "op":
        notes.append("Recompute 'op' is torchtitan's per-op selective checkpointing, which "
                     "Megatron has no flag for: nothing is recomputed here; --recompute-"
                     "granularity selective with --recompute-modules is the closest.")
    elif cfg.recompute == "selective":
        # the plan's modules as named, or its default set (moe_act only where there are MoE
        # layers: Megatron refuses it without grouped-GEMM experts)
        modules = list(cfg.recompute_modules) or [
            m for m in sorted(cfg.selective_modules()) if m != "moe_act" or f.model.is_moe]
        args += ["--recompute-granularity", "selective", "--recompute-modules", *modules]
    if cfg.attention == "unfused":
        args += ["--attention-backend", "unfused"]
    if not cfg.grad_reduce_in_fp32 and f.workload.precision != "fp32":
        args.append("--grad-reduce-in-bf16")
    if cfg.optimizer_moment_bytes == 2:
        args += ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16",
                 "--exp-avg-sq-dtype", "bf16"]
    return args, notes


def _precision_args(f: Facts) -> list[str]:
    p = f.workload.precision
    if p == "fp16":
        return ["--fp16"]
    if p == "fp8":
        return ["--bf16", "--fp8-format", "hybrid"]
    if p == "nvfp4":
        return ["--bf16", "--fp4-format", "e2m1", "--fp4-recipe", "nvfp4", "--fp4-param-gather"]
    return ["--bf16"]


def _overlap_args(f: Facts) -> list[str]:
    cfg, args = f.cfg, []
    if cfg.overlap_grad_reduce:
        args.append("--overlap-grad-reduce")
        if cfg.overlap_param_gather and cfg.zero >= 1:
            args.append("--overlap-param-gather")
    if cfg.tp_comm_overlap and cfg.sequence_parallel and cfg.degrees.tp > 1:
        args.append("--tp-comm-overlap")
    return args


# TrainingConfig.cuda_graphs -> Megatron-LM's flags (megatron/training/arguments.py,
# TransformerConfig.cuda_graph_impl; the scope names of core_r0.16, which later releases take
# as the deprecated spelling of --cuda-graph-modules). Full-iteration graphs need the NaN check
# of the loss off.
CUDA_GRAPH_ARGS = {
    "none": [],
    "moe_router": ["--cuda-graph-impl", "transformer_engine",
                   "--cuda-graph-scope", "moe_router", "moe_preprocess"],
    "attn+moe_router": ["--cuda-graph-impl", "transformer_engine",
                        "--cuda-graph-scope", "attn", "moe_router", "moe_preprocess"],
    "full": ["--cuda-graph-impl", "full_iteration", "--no-check-for-nan-in-loss-and-grad"],
}


def megatron_args(f: Facts) -> tuple[list[str], list[str]]:
    """(``pretrain_gpt.py`` arguments, comment lines) for the plan."""
    cfg = f.cfg
    args = ["--tensor-model-parallel-size", str(cfg.degrees.tp),
            "--pipeline-model-parallel-size", str(cfg.degrees.pp),
            "--context-parallel-size", str(cfg.degrees.cp)]
    if f.model.is_moe:
        args += ["--expert-model-parallel-size", str(cfg.degrees.ep),
                 "--expert-tensor-parallel-size", str(cfg.degrees.expert_tp)]
    if cfg.sequence_parallel and cfg.degrees.tp > 1:
        args.append("--sequence-parallel")
    pipe, notes = pipeline_args(f)
    model, model_notes = _model_args(f)
    memory, memory_notes = _memory_args(f)
    args += pipe + model + _moe_args(f)
    args += ["--micro-batch-size", str(cfg.micro_batch),
             "--global-batch-size", str(f.workload.global_batch)]
    args += memory + _precision_args(f) + _overlap_args(f) + CUDA_GRAPH_ARGS[cfg.cuda_graphs]
    if cfg.offload_modules:
        args += ["--fine-grained-activation-offloading", "--offload-modules",
                 *cfg.offload_modules]
    notes = notes + model_notes + memory_notes
    if cfg.offload_layers:  # TransformerConfig fields without pretrain_gpt.py flags
        notes.append(f"Activation offloading of {cfg.offload_layers} layers per stage: "
                     "pretrain_gpt.py has no flag for it; set TransformerConfig.cpu_offloading "
                     f"= True, cpu_offloading_num_layers = {cfg.offload_layers} (Megatron-"
                     "Bridge: model.cpu_offloading, model.cpu_offloading_num_layers).")
    if cfg.fp8_attention:  # a TransformerConfig field without a pretrain_gpt.py flag
        notes.append("FP8 attention: pretrain_gpt.py has no flag for it; set "
                     "TransformerConfig.fp8_dot_product_attention = True (Megatron-Bridge: "
                     "mixed_precision.fp8_dot_product_attention).")
    if f.schedule == "slimpipe":
        notes.insert(0, SLIMPIPE_NOTE.format(k=cfg.seq_slices, framework="Megatron-LM"))
    if f.schedule == "zb-h1":
        notes.insert(0, "Schedule ZB-H1 (zero bubble) is not in mainline Megatron-LM: these "
                        "arguments run 1F1B; the plan's predicted step time assumes ZB-H1.")
    if cfg.dp_shares is not None:
        notes.insert(0, dp_shares_note(f, "Megatron-LM"))
    if f.cfg.degrees.ep > 1 and f.cfg.moe_imbalance > 1.0:
        notes.append(f"The plan assumes MoE load imbalance {f.cfg.moe_imbalance:g} "
                     "(busiest / average expert).")
    return args, notes


def _env_lines(f: Facts) -> list[str]:
    cfg = f.cfg
    lines = []
    if cfg.fused_grouped_mlp:  # read when TransformerEngine registers its fused ops
        lines = ["# TransformerEngine's fused grouped MLP (MXFP8, Blackwell), set before import.",
                 "export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1"]
    if cfg.zero >= 2:
        return lines + ["# Megatron-FSDP wants CUDA_DEVICE_MAX_CONNECTIONS unset (or > 1).",
                        "unset CUDA_DEVICE_MAX_CONNECTIONS"]
    if cfg.degrees.tp > 1 or cfg.degrees.cp > 1:
        return lines + ["# Megatron-LM requires this with tensor or context parallelism "
                        "(Hopper and older).", "export CUDA_DEVICE_MAX_CONNECTIONS=1"]
    return lines


def render_megatron(f: Facts) -> Emission:
    """``megatron_args.sh`` (a bash array to source) and ``megatron_args.json``."""
    args, notes = megatron_args(f)
    lines = ["#!/usr/bin/env bash",
             *[f"# {line}" for line in header_lines(f, "megatron")],
             "# Source this file, then: torchrun ... pretrain_gpt.py \"${MEGATRON_ARGS[@]}\" "
             "<data, tokenizer and schedule arguments>",
             *[f"# NOTE: {n}" for n in notes],
             *_env_lines(f),
             "MEGATRON_ARGS=("]
    i = 0
    while i < len(args):
        # a flag and the values that follow it on one line
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        lines.append("  " + " ".join(shlex.quote(a) for a in args[i:j]))
        i = j
    lines.append(")")
    return Emission((("megatron_args.sh", "\n".join(lines) + "\n"),
                     ("megatron_args.json", json.dumps(args, indent=1) + "\n")), tuple(notes))
