"""Step time and memory of one parallel configuration: the composition of the cost models.

Owns :func:`estimate` and its result (:class:`Estimate`, :class:`TimeBreakdown`), the
memory-only entries :func:`estimate_memory` and :func:`memory_fits`, and the lower bound
:func:`compute_floor_s` the search prunes with. A step is

    m * (slowest stage's micro-batch time) + bubble + exposed DP communication + optimizer

with the stage times from ``stage``, the bubble from ``pipeline``, the data-parallel terms of
the stage whose exposed communication plus optimizer step is longest from ``data_parallel``,
and per-stage memory from ``stage_memory``; the layer split is ``layers``'.

Groups are placed by ``node_order`` (see ``cost_models.groups``) and viewed per stage, so a
stage on slower nodes is a slower stage (which the layer-partition DP can then give fewer
layers: ``TrainingConfig.stage_layer_counts``, inputs from ``partition``).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from cost_models.compute import backward_time_s, layer_forward_time, layer_work
from cost_models.compute import lm_head_forward_time, model_flops_per_token
from cost_models.groups import GroupViews, KINDS, stage_views, worst_of
from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.context import StepContext, gpu_rates, make_context
from cost_models.training.data_parallel import stage_sync
from cost_models.training.layers import config_stage_layers
from cost_models.training.memory import MemoryBreakdown
from cost_models.training.pipeline import bubble_s
from cost_models.training.stage import StageCost, stage_cost
from cost_models.training.stage_memory import stage_memory
from topologies.cluster import Cluster

__all__ = ["Estimate", "TimeBreakdown", "bottleneck_tiers", "compute_floor_s", "estimate",
           "estimate_memory", "memory_fits"]


@dataclass(frozen=True, kw_only=True)
class TimeBreakdown:
    """One training step (seconds). The parts add up to ``step_s``."""

    compute_s: float
    recompute_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    pp_comm_s: float
    bubble_s: float
    dp_comm_s: float  # exposed part only
    optimizer_s: float

    @property
    def step_s(self) -> float:
        return (self.compute_s + self.recompute_s + self.tp_comm_s + self.cp_comm_s
                + self.ep_comm_s + self.pp_comm_s + self.bubble_s + self.dp_comm_s
                + self.optimizer_s)


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """Predicted step time, throughput and memory of one configuration."""

    model: str
    cluster: str
    num_gpus: int
    workload: Workload
    config: TrainingConfig
    time: TimeBreakdown
    memory: MemoryBreakdown
    stages: tuple[StageCost, ...]
    model_flops_per_step: float
    peak_flops_per_gpu: float
    tiers: dict[str, str] = field(default_factory=dict)  # group kind -> bottleneck tier
    dp_comm_total_s: float = 0.0  # before overlap
    node_order: tuple[int, ...] | None = None  # placement (None: the cluster's listing order)
    stage_memory: tuple[MemoryBreakdown, ...] = ()  # per stage; ``memory`` is the binding one
    # per DP replica, one micro-batch through its slowest stage at its own GPUs (mixed clusters
    # only; empty when every replica is alike)
    replica_micro_batch_s: tuple[float, ...] = ()

    @property
    def step_time_s(self) -> float:
        return self.time.step_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.workload.tokens / self.step_time_s / self.num_gpus

    @property
    def model_tflops_per_gpu(self) -> float:
        return self.model_flops_per_step / self.step_time_s / self.num_gpus / 1e12

    @property
    def mfu(self) -> float:
        return self.model_tflops_per_gpu * 1e12 / self.peak_flops_per_gpu


def estimate_memory(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: TrainingConfig,
                    prof: Profile) -> MemoryBreakdown:
    """Peak per-GPU memory of ``cfg`` (the stage that needs most); no time, no group views."""
    ctx = make_context(model, cluster, workload, cfg, prof, ())
    split = config_stage_layers(model.num_layers, cfg)
    return max((stage_memory(ctx, s, layers, cluster.min_hbm_bytes)
                for s, layers in enumerate(split)), key=lambda mb: mb.peak_bytes)


def memory_fits(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: TrainingConfig,
                prof: Profile) -> bool:
    """Whether every stage of ``cfg`` fits (``estimate_memory(...).fits``), stopping at the
    first stage that does not: the first (most activations in flight) and the last (logits)
    are checked before the others."""
    ctx = make_context(model, cluster, workload, cfg, prof, ())
    split = config_stage_layers(model.num_layers, cfg)
    order = [0] + ([len(split) - 1] if len(split) > 1 else []) + list(range(1, len(split) - 1))
    return all(stage_memory(ctx, s, split[s], cluster.min_hbm_bytes).fits for s in order)


def estimate(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: TrainingConfig,
             prof: Profile, node_order: tuple[int, ...] | None = None,
             views: tuple[GroupViews, ...] | None = None) -> Estimate:
    """Predict step time and per-GPU memory of ``cfg`` on ``cluster``, its ranks placed on the
    nodes in ``node_order`` (None: listing order, Megatron's default). ``views`` (from
    :func:`cost_models.groups.stage_views`) may be passed in when already computed."""
    if views is None:
        views = stage_views(cluster, cfg.degrees, node_order)
    ctx = make_context(model, cluster, workload, cfg, prof, views, node_order)
    split = config_stage_layers(model.num_layers, cfg)
    # Step 1: one micro-batch through each stage at its slowest replica's GPU; the slowest
    # stage sets the pace
    cache: dict[tuple, tuple[float, ...]] = {}  # layer costs, shared by stages with equal views
    stages = tuple(stage_cost(ctx.on_stage(s), s, layers, cache)
                   for s, layers in enumerate(split))
    m = cfg.micro_batches(workload)
    slow = max(stages, key=lambda s: s.total_s)
    replica_s = replica_micro_batch_s(ctx, split, cache)
    # Step 1b: with DP batch shares, replica r runs shares[r] micro-batches at its own pace
    # (uneven per-replica batches on mixed GPUs: HexiScale, Yan et al. 2024; Cephalo, Guo et
    # al. 2024); the replica with the longest shares[r] * time paces the step, the gradient
    # sync is lockstep. The bubble stays that of each stage's slowest replica (conservative)
    pace = m
    if cfg.dp_shares is not None:
        times = replica_s or (slow.total_s,) * cfg.degrees.dp
        r = max(range(cfg.degrees.dp), key=lambda i: (cfg.dp_shares[i] * times[i], -i))
        pace = cfg.dp_shares[r]
        if replica_s:
            slow = max((stage_cost(ctx.on_stage(s, r), s, layers, cache)
                        for s, layers in enumerate(split)), key=lambda c: c.total_s)
    # Step 2: data-parallel sync of the stage whose exposed part plus optimizer is longest
    # (ZeRO-3 gathers per micro-batch: the largest share's count)
    m_sync = max(cfg.dp_shares) if cfg.dp_shares is not None else m
    syncs = [stage_sync(ctx.on_stage(s), s, layers, stages[s], m_sync)
             for s, layers in enumerate(split)]
    dp_exposed = dp_total = optimizer = 0.0
    for sync in syncs:
        if sync.exposed_s + sync.optimizer_s > dp_exposed + optimizer:
            dp_exposed, optimizer, dp_total = sync.exposed_s, sync.optimizer_s, sync.total_s
    time = TimeBreakdown(compute_s=pace * slow.compute_s, recompute_s=pace * slow.recompute_s,
                         tp_comm_s=pace * slow.tp_comm_s, cp_comm_s=pace * slow.cp_comm_s,
                         ep_comm_s=pace * slow.ep_comm_s, pp_comm_s=pace * slow.pp_comm_s,
                         bubble_s=bubble_s(cfg, stages), dp_comm_s=dp_exposed,
                         optimizer_s=optimizer)
    # Step 3: memory of every stage, on its own GPUs' memory; the one with the least headroom
    # is the configuration's
    # (activations in flight counted with micro_batches(); see planner.training.shares)
    per_stage = tuple(stage_memory(ctx, s, layers, ctx.stage_hbm_bytes[s] if ctx.stage_hbm_bytes
                                   else cluster.min_hbm_bytes)
                      for s, layers in enumerate(split))
    return Estimate(model=model.name, cluster=cluster.name, num_gpus=cluster.num_gpus,
                    workload=workload, config=cfg, time=time,
                    memory=binding_stage(per_stage), stages=stages,
                    model_flops_per_step=model_flops_per_token(model, workload.seq_len)
                    * workload.tokens,
                    peak_flops_per_gpu=mean_peak_flops(cluster, workload),
                    tiers=bottleneck_tiers(views), dp_comm_total_s=dp_total,
                    node_order=None if node_order is None else tuple(node_order),
                    stage_memory=per_stage, replica_micro_batch_s=replica_s)


def binding_stage(per_stage: Sequence[MemoryBreakdown]) -> MemoryBreakdown:
    """The stage whose memory binds: the one with the least headroom (on GPUs of one memory
    size, the one that needs most; the first on ties)."""
    if len({mb.capacity_bytes for mb in per_stage}) == 1:
        return max(per_stage, key=lambda mb: mb.peak_bytes)
    return max(per_stage, key=lambda mb: mb.peak_bytes - mb.capacity_bytes)


def replica_micro_batch_s(ctx: StepContext, split: Sequence[Sequence[int]],
                          cache: dict[tuple, tuple[float, ...]]) -> tuple[float, ...]:
    """Per DP replica: one micro-batch's time through its slowest stage, each stage at that
    replica's own GPU (empty on a cluster of one GPU type, where every replica is alike)."""
    if not ctx.replica_rates:
        return ()
    out, seen = [], {}
    for r in range(ctx.cfg.degrees.dp):
        key = tuple(ctx.replica_rates[s][r] for s in range(len(split)))
        if key not in seen:
            seen[key] = max(stage_cost(ctx.on_stage(s, r), s, layers, cache).total_s
                            for s, layers in enumerate(split))
        out.append(seen[key])
    return tuple(out)


def mean_peak_flops(cluster: Cluster, workload: Workload) -> float:
    """Peak FLOP/s per GPU averaged over the cluster's GPUs (MFU's denominator; on a cluster of
    one GPU type, that GPU's peak)."""
    groups = cluster.node_groups
    if len({g.gpu.name for g in groups}) == 1:
        return gpu_rates(groups[0].gpu, workload).peak_flops
    return sum(gpu_rates(g.gpu, workload).peak_flops * g.num_gpus
               for g in groups) / cluster.num_gpus


def compute_floor_s(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: TrainingConfig,
                    prof: Profile) -> float:
    """``m`` times the forward + backward compute of ``cfg``'s most loaded stage: a lower bound
    on :func:`estimate`'s step time for every option with ``cfg``'s degrees, micro-batch and
    layer split. The step is ``m * max(t_i)`` plus non-negative parts, and every ``t_i`` holds
    this compute; recompute, communication, ZeRO stage and the schedule flags only add to it,
    and SlimPipe slices run smaller, less efficient kernels (``seq_slices`` is ignored here).
    On a mixed cluster the compute is taken at the fastest GPU's rates."""
    ctx = make_context(model, cluster, workload, replace(cfg, seq_slices=1), prof, ())
    # on a mixed cluster, the highest peak and bandwidth of its GPUs: no replica's micro-batch
    # is quicker, and shares cannot beat m micro-batches at the fastest replica's pace
    # (sum m_r = dp * m, so some replica runs at least its speed's part of them)
    if len({g.gpu.name for g in cluster.node_groups}) > 1:
        every = [gpu_rates(g.gpu, workload) for g in cluster.node_groups]
        ctx = replace(ctx, rates=replace(every[0], peak_flops=max(r.peak_flops for r in every),
                                         hbm_bytes_per_s=max(r.hbm_bytes_per_s for r in every)))
    cache: dict[tuple, float] = {}

    def layer_s(layer: int) -> float:
        key = (model.is_moe_layer(layer), model.window(layer))
        if key not in cache:
            t = layer_forward_time(layer_work(model, layer, ctx.shard), ctx.rates, prof)
            cache[key] = t.total_s + backward_time_s(t)
        return cache[key]

    split = config_stage_layers(model.num_layers, cfg)
    per_stage = [sum(layer_s(l) for l in layers) for layers in split]
    per_stage[-1] += 3 * lm_head_forward_time(model, ctx.shard, ctx.rates, prof)
    return cfg.micro_batches(workload) * max(per_stage)


def bottleneck_tiers(views: tuple[GroupViews, ...]) -> dict[str, str]:
    """Group kind -> name of the link tier that limits its slowest group, over all stages."""
    worst = {k: worst_of([getattr(v, k) for v in views]) for k in KINDS}
    return {k: worst[k].bottleneck.name for k in ("tp", "cp", "dp", "dp_cp", "pp", "ep", "edp")
            if worst[k].size > 1}
