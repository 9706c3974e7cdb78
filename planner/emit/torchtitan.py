"""A torchtitan job config (TOML).

Keys follow torchtitan's ``JobConfig`` (``torchtitan/config/job_config.py``):
``[job] description``; ``[model] name, flavor, converters``; ``[training] local_batch_size``
(per data-parallel rank), ``global_batch_size``, ``seq_len``, ``max_norm``,
``mixed_precision_param``; ``[parallelism] data_parallel_replicate_degree``,
``data_parallel_shard_degree``, ``tensor_parallel_degree``, ``pipeline_parallel_degree``,
``context_parallel_degree``, ``expert_parallel_degree``, ``expert_tensor_parallel_degree``,
``pipeline_parallel_schedule``, ``pipeline_parallel_microbatch_size`` (the schedule runs
``local_batch_size / pipeline_parallel_microbatch_size`` micro-batches) and
``module_fqns_per_model_part`` (the modules of each model chunk, in stage order; with it
torchtitan builds exactly these chunks, ``pipeline_llm`` / ``pipeline_module_split``);
``[activation_checkpoint] mode`` (``none`` / ``selective`` / ``full``) and
``selective_ac_option``.

Schedules are ``torch.distributed.pipelining`` names (``get_schedule_class``): ``1F1B``,
``Interleaved1F1B``; ZB-H1 maps to ``InterleavedZeroBubble`` ("implementing the ZB1P schedule
in the paper", one chunk per rank here).

Expert parallelism in torchtitan borrows ranks from ``data_parallel_shard_degree`` x
``context_parallel_degree`` (and ``tensor_parallel_degree`` when
``expert_tensor_parallel_degree`` is 1): only ``etp = tp`` or ``etp = 1`` exist, with
``cp <= ep <= dp_shard * cp`` (resp. ``cp * tp <= ep <= dp_shard * cp * tp``) and the
divisibility rules of the ``expert_parallel_degree`` docstring. Plans outside that raise
ValueError.

torchtitan's device mesh order is pp, dp_replicate, dp_shard, cp, tp (tp innermost), the
same rank order as Megatron's tp-cp-dp-pp that the plan's rank table uses.
"""
from __future__ import annotations

import re

from planner.emit._facts import (SLIMPIPE_NOTE, Facts, comment_safe, dp_shares_note,
                                 header_lines)
from planner.emit._options import EmitOptions
from planner.emit._toml import toml_document
from planner.emit.types import Emission, UnsupportedByFormat

SCHEDULES = {"1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B",
             "zb-h1": "InterleavedZeroBubble", "slimpipe": "1F1B"}
_FAMILIES = (("llama-3", "llama3"), ("llama3", "llama3"), ("deepseek-v3", "deepseek_v3"),
             ("qwen3", "qwen3"))
_SIZE = re.compile(r"(\d+(?:\.\d+)?[bBmM](?:-[aA]\d+(?:\.\d+)?[bB])?)$")


def model_name_flavor(name: str) -> tuple[str, str, bool]:
    """(torchtitan model name, flavor, known): a guess from the plan's model name; unknown
    families keep the plan's name as a placeholder."""
    lower = name.lower()
    for prefix, family in _FAMILIES:
        if lower.startswith(prefix):
            size = _SIZE.search(name)
            return family, size.group(1).upper() if size else name, bool(size)
    return name, name, False


def _check_expert(f: Facts) -> None:
    cfg = f.cfg
    if not f.model.is_moe:
        return
    tp, cp, ep, etp = cfg.degrees.tp, cfg.degrees.cp, cfg.degrees.ep, cfg.degrees.expert_tp
    if ep == 1:
        if etp != tp:
            raise UnsupportedByFormat(
                f"torchtitan: without expert parallelism the experts use the full "
                f"tensor-parallel degree ({tp}); the plan has etp={etp}")
        return
    if cfg.zero < 3:
        raise UnsupportedByFormat(
            f"torchtitan: expert parallelism (ep={ep}) borrows ranks from "
            f"data_parallel_shard_degree (FSDP), but the plan replicates weights "
            f"(ZeRO-{cfg.zero}); re-plan with zero=3 or use the megatron format")
    shard = cfg.degrees.dp
    if etp == tp:
        span, low = shard * cp, cp
    elif etp == 1:
        span, low = shard * cp * tp, cp * tp
    else:
        raise UnsupportedByFormat(
            f"torchtitan: expert_tensor_parallel_degree must equal "
            f"tensor_parallel_degree ({tp}) or 1; the plan has etp={etp}")
    if not (low <= ep <= span and ep % low == 0 and span % ep == 0):
        raise UnsupportedByFormat(
            f"torchtitan: expert_parallel_degree {ep} must satisfy {low} <= ep <= "
            f"{span}, ep % {low} == 0 and {span} % ep == 0 (etp={etp})")


def module_fqns(f: Facts) -> list[list[str]]:
    """The modules of each model chunk (virtual-stage order), torchtitan's llama-style names:
    ``tok_embeddings`` on the first chunk, ``layers.<i>``, ``norm`` and ``output`` on the last."""
    parts, first = [], 0
    n = len(f.chunk_layers)
    for j, count in enumerate(f.chunk_layers):
        part = ["tok_embeddings"] if j == 0 else []
        part += [f"layers.{i}" for i in range(first, first + count)]
        if j == n - 1:
            part += ["norm", "output"]
        parts.append(part)
        first += count
    return parts


def torchtitan_tables(f: Facts, o: EmitOptions) -> tuple[tuple, list[str]]:
    """The TOML tables and the notes (ValueError where torchtitan cannot run the plan)."""
    cfg, w = f.cfg, f.workload
    if w.precision == "fp16":
        raise UnsupportedByFormat(
            "torchtitan: fp16 is not offered (mixed_precision_param is bfloat16 "
            "or float32); use the megatron or deepspeed format")
    if w.precision == "nvfp4":
        raise UnsupportedByFormat(
            "torchtitan: nvfp4 is not written here (torchtitan's experimental "
            "NVFP4 converter, a torchao prototype, is set in its Python configs, "
            "not in the TOML this format writes); use the megatron format")
    _check_expert(f)
    notes: list[str] = []
    name, flavor, known = model_name_flavor(f.model.name)
    if not known:
        notes.append(f"[model] name/flavor are placeholders from {comment_safe(f.model.name)}: "
                     "set the torchtitan model and flavor.")
    model = [("name", name), ("flavor", flavor)]
    if w.precision == "fp8":
        model.append(("converters", ["float8"]))
        notes.append("FP8 via the float8 converter (torchao); the key is "
                     "model.converters in TOML-era torchtitan.")
        if cfg.quantized_saved_inputs:
            notes.append("The plan's memory counts each Linear's saved input in fp8 "
                         "(TransformerEngine); torchao's float8 saves it in bf16, so "
                         "activations take more than the plan's estimate.")
    if cfg.degrees.pp > 1:
        local = cfg.micro_batch * f.micro_batches
    else:
        local = cfg.micro_batch  # torchtitan accumulates global / (local x dp) micro-batches
    training = [("local_batch_size", local), ("global_batch_size", w.global_batch),
                ("seq_len", w.seq_len), ("max_norm", 1.0),
                ("mixed_precision_param", "bfloat16")]
    replicate, shard = (1, cfg.degrees.dp) if cfg.zero == 3 else (cfg.degrees.dp, 1)
    if cfg.zero in (1, 2) and cfg.degrees.dp > 1:
        notes.append(f"ZeRO-{cfg.zero} has no torchtitan equivalent: data parallelism is DDP "
                     "(data_parallel_replicate_degree), so optimizer state is replicated and "
                     "memory is above the plan's; data_parallel_shard_degree = dp with "
                     "fsdp_reshard_after_forward = \"never\" is the ZeRO-2-like alternative.")
    parallelism: list[tuple[str, object]] = [
        ("data_parallel_replicate_degree", replicate), ("data_parallel_shard_degree", shard),
        ("tensor_parallel_degree", cfg.degrees.tp), ("pipeline_parallel_degree", cfg.degrees.pp),
        ("context_parallel_degree", cfg.degrees.cp)]
    if f.model.is_moe:
        parallelism += [("expert_parallel_degree", cfg.degrees.ep),
                        ("expert_tensor_parallel_degree", cfg.degrees.expert_tp if cfg.degrees.ep > 1 else 1)]
    if cfg.degrees.pp > 1:
        parallelism += [("pipeline_parallel_schedule", SCHEDULES[f.schedule]),
                        ("pipeline_parallel_microbatch_size", cfg.micro_batch),
                        ("module_fqns_per_model_part", module_fqns(f))]
        notes.append("module_fqns_per_model_part uses torchtitan's llama-style module names "
                     "(tok_embeddings, layers.<i>, norm, output).")
        if f.schedule == "slimpipe":
            notes.append(SLIMPIPE_NOTE.format(k=cfg.seq_slices, framework="torchtitan"))
        if f.schedule == "zb-h1":
            notes.append("ZB-H1 -> InterleavedZeroBubble with one model chunk per rank "
                         "(torch's ZB1P); torchtitan's layers-per-stage path would ask for two "
                         "chunks per rank, module_fqns_per_model_part keeps the plan's one.")
    if cfg.dp_shares is not None:
        notes.append(dp_shares_note(f, "torchtitan"))
    if cfg.degrees.tp > 1 and not cfg.sequence_parallel:
        notes.append("torchtitan's tensor parallelism always shards activations along the "
                     "sequence (sequence parallel); the plan has it off.")
    ac: list[tuple[str, object]] = [
        ("mode", "selective" if cfg.recompute == "op" else cfg.recompute)]
    if cfg.recompute in ("op", "selective"):  # "op" is exactly torchtitan's per-op policy
        ac.append(("selective_ac_option", "op"))
    if cfg.recompute == "selective":
        notes.append("Selective recompute -> per-op selective activation checkpointing "
                     "(selective_ac_option = \"op\"), torchtitan's closest policy.")
    if cfg.recompute == "full" and cfg.recompute_layers is not None:
        notes.append(f"The plan recomputes {cfg.recompute_layers} layers per chunk; torchtitan's "
                     "full mode recomputes every layer.")
    tables = (("job", (("description", o.job_name),)),
              ("model", tuple(model)),
              ("training", tuple(training)),
              ("parallelism", tuple(parallelism)),
              ("activation_checkpoint", tuple(ac)))
    return tables, notes


def render_torchtitan(f: Facts, o: EmitOptions) -> Emission:
    """``torchtitan.toml``."""
    tables, notes = torchtitan_tables(f, o)
    head = (*header_lines(f, "torchtitan"), *notes)
    return Emission((("torchtitan.toml", toml_document(tables, head)),), tuple(notes))
