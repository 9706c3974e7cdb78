"""The inputs every training cost composition reads, bundled once per configuration.

:class:`StepContext` holds the model, workload, configuration and profile together with what
is derived from them before any stage is costed: the slowest GPU's rates, the per-stage group
views, the micro-batch's :class:`~cost_models.compute.Shard` and that of one SlimPipe slice.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from cost_models.compute import GpuRates, Shard
from cost_models.groups import GroupViews
from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile
from cost_models.training.config import TrainingConfig, Workload
from topologies.cluster import Cluster

__all__ = ["StepContext", "make_context"]


@dataclass(frozen=True, kw_only=True)
class StepContext:
    """One configuration's fixed inputs (see the module docstring)."""

    model: ModelSpec
    workload: Workload
    cfg: TrainingConfig
    prof: Profile
    rates: GpuRates
    views: tuple[GroupViews, ...]  # per stage; empty when only memory is asked for
    shard: Shard
    slice_shard: Shard  # one SlimPipe slice of a micro-batch (== shard without slicing)


def make_context(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: TrainingConfig,
                 prof: Profile, views: tuple[GroupViews, ...]) -> StepContext:
    """The context of ``cfg`` on ``cluster``: rates of its slowest GPU at the workload's
    precision (fp32 peak for fp32, else the bf16 peak; fp8 speeds GEMMs up in ``compute``)."""
    gpu = cluster.slowest_gpu
    fp8 = workload.precision == "fp8"
    peak = gpu.peak_flops_for("fp32" if workload.precision == "fp32" else "bf16")
    rates = GpuRates(peak_flops=peak, hbm_bytes_per_s=gpu.hbm_bw_bytes_per_s, fp8=fp8,
                     elem_bytes=workload.elem_bytes)
    d = cfg.degrees
    shard = Shard(batch=cfg.micro_batch, seq_len=workload.seq_len, tp=d.tp, cp=d.cp, ep=d.ep,
                  etp=d.expert_tp, sequence_parallel=cfg.sequence_parallel,
                  unfused_attention=cfg.attention == "unfused", dropout=cfg.dropout,
                  moe_imbalance=cfg.moe_imbalance, elem_bytes=workload.elem_bytes)
    slice_shard = shard if cfg.seq_slices == 1 else replace(
        shard, seq_len=workload.seq_len // cfg.seq_slices)
    return StepContext(model=model, workload=workload, cfg=cfg, prof=prof, rates=rates,
                       views=views, shard=shard, slice_shard=slice_shard)
