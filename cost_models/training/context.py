"""The inputs every training cost composition reads, bundled once per configuration.

:class:`StepContext` holds the model, workload, configuration and profile together with what
is derived from them before any stage is costed: the slowest GPU's rates, the per-stage group
views, the micro-batch's :class:`~cost_models.compute.Shard` and that of one SlimPipe slice.

On a mixed cluster each stage, and each data-parallel replica within a stage, runs at its own
GPU's rates (``replica_rates``, from :func:`cost_models.groups.replica_node_groups`) and holds
its own GPU's memory (``stage_hbm_bytes``): a stage of H100s is a faster stage than one of
A100s, which the layer-partition DP and the DP batch shares then exploit (Metis, Um et al.,
USENIX ATC'24: stages sized by their device group's compute and memory).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from cost_models.compute import GpuRates, Shard, attention_kernel_scale
from cost_models.groups import GroupViews, replica_node_groups
from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile, gemm_efficiency_ratio
from cost_models.training.config import TrainingConfig, Workload
from topologies.catalog import GpuSpec
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
    # [stage][dp replica] rates of the replica's slowest GPU; empty when only memory is asked for
    replica_rates: tuple[tuple[GpuRates, ...], ...] = ()
    stage_hbm_bytes: tuple[float, ...] = ()  # per stage: its smallest GPU's memory

    def stage_rates(self, stage: int) -> GpuRates:
        """The rates of ``stage``'s slowest replica (the cluster's slowest GPU without views)."""
        if not self.replica_rates:
            return self.rates
        return min(self.replica_rates[stage],
                   key=lambda r: (r.peak_flops * r.gemm_scale, r.hbm_bytes_per_s))

    def on_stage(self, stage: int, replica: int | None = None) -> "StepContext":
        """This context with the rates of ``stage``'s slowest replica (or of ``replica``)."""
        if not self.replica_rates:
            return self
        rates = (self.stage_rates(stage) if replica is None
                 else self.replica_rates[stage][replica])
        return self if rates == self.rates else replace(self, rates=rates)


def gpu_rates(gpu: GpuSpec, workload: Workload, profile_gpu: GpuSpec | None = None,
              attention: str = "flash") -> GpuRates:
    """``gpu``'s rates at the workload's precision (fp32 peak for fp32, else the bf16 peak;
    fp8 speeds GEMMs up in ``compute``, nvfp4 by its fp4 over fp8 peak more); ``profile_gpu``:
    the GPU the profile is for, when it is another type (its GEMM efficiency relative to it:
    :func:`cost_models.profile.gemm_efficiency_ratio`); ``attention``: the configuration's
    attention kernels (:func:`cost_models.compute.attention_kernel_scale`)."""
    peak = gpu.peak_flops_for("fp32" if workload.precision == "fp32" else "bf16")
    scale = (1.0 if profile_gpu is None or profile_gpu.name == gpu.name
             else gemm_efficiency_ratio(gpu.name, profile_gpu.name))
    fp4 = (gpu.peak_flops_for("nvfp4") / gpu.peak_flops_for("fp8")
           if workload.precision == "nvfp4" else 1.0)
    return GpuRates(peak_flops=peak, hbm_bytes_per_s=gpu.hbm_bw_bytes_per_s,
                    fp8=workload.low_precision_gemms, elem_bytes=workload.elem_bytes,
                    fp4_over_fp8=fp4, gemm_scale=scale,
                    attention_scale=attention_kernel_scale(gpu.arch, attention),
                    flops_per_exp=gpu.tensor_flops_per_exp2)


def config_shard(cfg: TrainingConfig, workload: Workload) -> Shard:
    """How ``cfg`` cuts each layer on one GPU for one micro-batch."""
    d = cfg.degrees
    return Shard(batch=cfg.micro_batch, seq_len=workload.seq_len, tp=d.tp, cp=d.cp, ep=d.ep,
                 etp=d.expert_tp, sequence_parallel=cfg.sequence_parallel,
                 unfused_attention=cfg.attention == "unfused", dropout=cfg.dropout,
                 moe_imbalance=cfg.moe_imbalance, elem_bytes=workload.elem_bytes,
                 cuda_graphs=cfg.cuda_graphs, fp8=workload.low_precision_gemms,
                 nvfp4=workload.precision == "nvfp4",
                 flex_dispatch=cfg.moe_dispatcher == "flex",
                 fp8_attention=cfg.fp8_attention and workload.precision == "fp8",
                 fused_grouped_mlp=cfg.fused_grouped_mlp and workload.precision == "fp8")


def make_context(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: TrainingConfig,
                 prof: Profile, views: tuple[GroupViews, ...],
                 node_order: tuple[int, ...] | None = None) -> StepContext:
    """The context of ``cfg`` on ``cluster``: rates of its slowest GPU (:func:`gpu_rates`);
    with ``views`` (ranks placed by ``node_order``) also each stage's and replica's own."""
    rates = gpu_rates(cluster.slowest_gpu, workload, attention=cfg.attention)
    replica_rates: tuple[tuple[GpuRates, ...], ...] = ()
    hbm: tuple[float, ...] = ()
    if views and len({g.gpu.name for g in cluster.node_groups}) > 1:
        groups = replica_node_groups(cluster, cfg.degrees, node_order)
        by_group = [gpu_rates(g.gpu, workload, cluster.slowest_gpu, cfg.attention)
                    for g in cluster.node_groups]
        replica_rates = tuple(tuple(by_group[g] for g in row) for row in groups)
        hbm = tuple(min(cluster.node_groups[g].gpu.hbm_bytes for g in row) for row in groups)
    shard = config_shard(cfg, workload)
    slice_shard = shard if cfg.seq_slices == 1 else replace(
        shard, seq_len=workload.seq_len // cfg.seq_slices)
    return StepContext(model=model, workload=workload, cfg=cfg, prof=prof, rates=rates,
                       views=views, shard=shard, slice_shard=slice_shard,
                       replica_rates=replica_rates, stage_hbm_bytes=hbm)
