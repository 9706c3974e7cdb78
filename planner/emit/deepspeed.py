"""A DeepSpeed config (``ds_config.json``) and notes.

Fields (https://www.deepspeed.ai/docs/config-json/): ``train_batch_size`` =
``train_micro_batch_size_per_gpu`` x ``gradient_accumulation_steps`` x data-parallel size
(DeepSpeed checks this identity), ``gradient_clipping``, ``zero_optimization.stage`` and
``.overlap_comm``, ``bf16.enabled``, ``fp16.enabled``; tensor parallelism through AutoTP
training, ``"tensor_parallel": {"autotp_size": N}`` (https://www.deepspeed.ai/tutorials/
autotp-training/; ZeRO stages 0-2 only).

DeepSpeed has no config field for the pipeline degree (``PipelineModule(num_stages=...)`` in
code) or the expert-parallel degree (``deepspeed.moe.layer.MoE(ep_size=...)``); pipeline
parallelism supports ZeRO stage 0 or 1 only and MoE layers are refused with ZeRO-3 (engine
assertion "MoE not supported with Stage 3"); ``deepspeed_notes.txt`` lists those values and
the Megatron-DeepSpeed flags that carry them (``--tensor-model-parallel-size``,
``--pipeline-model-parallel-size`` / ``--no-pipeline-parallel``,
``--moe-expert-parallel-size``, ``--num-experts``, ``--zero-stage``, ``--deepspeed``,
``--deepspeed_config``). JSON cannot hold comments, so the header is in the notes file.
"""
from __future__ import annotations

import json

from planner.emit._facts import SLIMPIPE_NOTE, Facts, dp_shares_note, header_lines
from planner.emit.types import Emission, UnsupportedByFormat


def _check(f: Facts) -> None:
    cfg = f.cfg
    if cfg.degrees.cp > 1:
        raise UnsupportedByFormat(
            f"deepspeed: context parallelism (cp={cfg.degrees.cp}) has no DeepSpeed "
            "equivalent (DeepSpeed-Ulysses is a different sequence-parallel "
            "algorithm with other memory and traffic); use the megatron format")
    if cfg.vpp > 1:
        raise UnsupportedByFormat(
            f"deepspeed: the interleaved pipeline (vpp={cfg.vpp}) is not offered "
            "by DeepSpeed's pipeline engine; use the megatron format")
    if cfg.degrees.pp > 1 and cfg.zero >= 2:
        raise UnsupportedByFormat(
            f"deepspeed: pipeline parallelism (pp={cfg.degrees.pp}) works with ZeRO "
            f"stage 0 or 1 only, the plan uses ZeRO-{cfg.zero}")
    if f.model.is_moe and cfg.zero == 3:
        raise UnsupportedByFormat(
            "deepspeed: MoE layers are refused with ZeRO-3 (DeepSpeed engine: "
            "'MoE not supported with Stage 3')")
    if cfg.degrees.tp > 1 and cfg.zero == 3:
        raise UnsupportedByFormat(
            f"deepspeed: AutoTP tensor parallelism (tp={cfg.degrees.tp}) supports ZeRO "
            "stages 0-2, the plan uses ZeRO-3")


def ds_config(f: Facts) -> dict:
    """The DeepSpeed config as plain data (ValueError where DeepSpeed cannot run the plan)."""
    _check(f)
    cfg, w = f.cfg, f.workload
    config = {"train_batch_size": w.global_batch,
              "train_micro_batch_size_per_gpu": cfg.micro_batch,
              "gradient_accumulation_steps": f.micro_batches,
              "gradient_clipping": 1.0,
              "zero_optimization": {"stage": cfg.zero, "overlap_comm": cfg.overlap_grad_reduce},
              "bf16": {"enabled": w.precision == "bf16" or w.low_precision_gemms},
              "fp16": {"enabled": w.precision == "fp16"}}
    if cfg.degrees.tp > 1:
        config["tensor_parallel"] = {"autotp_size": cfg.degrees.tp}
    return config


def deepspeed_notes(f: Facts) -> list[str]:
    cfg, notes = f.cfg, []
    dp_world = cfg.degrees.num_gpus // (cfg.degrees.tp * cfg.degrees.pp)
    notes.append(f"Data-parallel size as DeepSpeed counts it: {cfg.degrees.num_gpus} GPUs / (tp {cfg.degrees.tp} "
                 f"x pp {cfg.degrees.pp}) = {dp_world}; {f.workload.global_batch} = "
                 f"{cfg.micro_batch} x {f.micro_batches} x {dp_world}.")
    if cfg.dp_shares is not None:
        notes.append(dp_shares_note(f, "DeepSpeed"))
    if cfg.degrees.pp > 1:
        notes.append(f"Pipeline: build the model as deepspeed.pipe.PipelineModule("
                     f"num_stages={cfg.degrees.pp}) with the plan's layers per stage "
                     f"{list(f.stage_layers)}.")
        if f.schedule == "slimpipe":
            notes.append(SLIMPIPE_NOTE.format(k=cfg.seq_slices, framework="DeepSpeed"))
        if f.schedule == "zb-h1":
            notes.append("Schedule ZB-H1 is not offered by DeepSpeed's pipeline engine (it runs "
                         "its 1F1B-style TrainSchedule); the predicted step time assumes ZB-H1.")
    if cfg.degrees.pp > 1 and cfg.degrees.tp > 1:
        notes.append("AutoTP (tensor_parallel.autotp_size) is documented with data parallelism "
                     "and ZeRO, not with PipelineModule; with both TP and PP prefer "
                     "Megatron-DeepSpeed (flags below).")
    if f.model.is_moe:
        notes.append(f"MoE: deepspeed.moe.layer.MoE(num_experts={f.model.moe.num_experts}, "
                     f"ep_size={cfg.degrees.ep}, k={f.model.moe.top_k}).")
        if cfg.degrees.expert_tp != cfg.degrees.tp:
            notes.append(f"Expert tensor parallelism etp={cfg.degrees.expert_tp} differs from tp="
                         f"{cfg.degrees.tp}; DeepSpeed-MoE shards experts by ep only.")
    if cfg.degrees.tp > 1 and cfg.sequence_parallel:
        notes.append("The plan uses Megatron sequence parallelism with TP; AutoTP has none "
                     "(activation memory will be higher than planned).")
    if cfg.recompute != "none":
        notes.append(f"Activation recompute ({cfg.recompute}) is applied in model code "
                     "(deepspeed.checkpointing.checkpoint around the transformer layers).")
    if f.workload.low_precision_gemms:
        name = "NVFP4" if f.workload.precision == "nvfp4" else "FP8"
        notes.append(f"{name}: DeepSpeed has no {name} config field; bf16 is enabled, use "
                     f"Transformer Engine layers in the model for {name} GEMMs.")
    flags = ["--tensor-model-parallel-size", str(cfg.degrees.tp)]
    flags += (["--pipeline-model-parallel-size", str(cfg.degrees.pp)] if cfg.degrees.pp > 1
              else ["--no-pipeline-parallel"])
    if f.model.is_moe:
        flags += ["--num-experts", str(f.model.moe.num_experts),
                  "--moe-expert-parallel-size", str(cfg.degrees.ep)]
    flags += ["--zero-stage", str(cfg.zero), "--deepspeed", "--deepspeed_config",
              "ds_config.json"]
    notes.append("Megatron-DeepSpeed flags for the same layout (then drop tensor_parallel from "
                 "ds_config.json, Megatron does the TP): " + " ".join(flags))
    return notes


def render_deepspeed(f: Facts) -> Emission:
    """``ds_config.json`` and ``deepspeed_notes.txt``."""
    config = ds_config(f)
    notes = deepspeed_notes(f)
    text = "\n".join([*(f"# {line}" for line in header_lines(f, "deepspeed")), "",
                      *notes]) + "\n"
    return Emission((("ds_config.json", json.dumps(config, indent=1) + "\n"),
                     ("deepspeed_notes.txt", text)), tuple(notes))
