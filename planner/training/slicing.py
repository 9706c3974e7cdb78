"""Pipeline slicing: give each stage the layers that balance it, by dynamic programming.

The even split (``cost_models.training.layers.stage_layers``) ignores that the first stage also holds the
embedding, the last the LM head and loss (heavy for large vocabularies), that MoE and dense
layers cost differently, and that stages on slower links run slower. This module turns the
cost model's per-layer figures (``cost_models.training.partition.partition_inputs``) into a
``solvers.pipeline.dp.PartitionProblem``, solves it, and keeps the partition only when the full
estimate agrees that it is faster and fits.
"""
from __future__ import annotations

from dataclasses import replace

from cost_models.groups import GroupViews, stage_views
from cost_models.model_spec import ModelSpec
from cost_models.training.config import Workload
from cost_models.profile import Profile
from cost_models.training.layers import stage_layers
from cost_models.training.partition import partition_inputs
from cost_models.training.step import Estimate, estimate
from solvers.pipeline.dp import InfeasiblePartition, PartitionProblem, partition_layers
from topologies.cluster import Cluster


def partition_problem(model: ModelSpec, cluster: Cluster, workload: Workload, est: Estimate,
                      prof: Profile, views: tuple[GroupViews, ...]) -> PartitionProblem:
    """The DP's problem for ``est``'s configuration (1F1B-type schedules, vpp = 1)."""
    cfg = est.config
    inputs = partition_inputs(model, cluster, workload, replace(cfg, stage_layer_counts=None),
                              prof, views, est.node_order)
    return PartitionProblem(
        layer_time_s=inputs.layer_time_s, num_stages=cfg.degrees.pp,
        first_extra_s=inputs.embedding_time_s,
        last_extra_s=inputs.head_time_s, stage_slowdown=inputs.stage_slowdown,
        layer_state_bytes=inputs.layer_state_bytes,
        layer_activation_bytes=inputs.layer_activation_bytes, in_flight=inputs.in_flight,
        first_extra_bytes=inputs.embedding_bytes, last_extra_bytes=inputs.head_bytes,
        stage_memory_limit_bytes=inputs.stage_limit_bytes, stage_link_s=inputs.stage_link_s)


def refine_partition(model: ModelSpec, cluster: Cluster, workload: Workload, est: Estimate,
                     prof: Profile) -> Estimate:
    """``est`` with its layers re-partitioned by the DP, if that is predicted faster (or fits
    where ``est`` does not)."""
    cfg = est.config
    if cfg.degrees.pp == 1 or cfg.vpp > 1:
        return est
    views = stage_views(cluster, cfg.degrees, est.node_order)
    try:
        part = partition_layers(partition_problem(model, cluster, workload, est, prof, views))
    except InfeasiblePartition:
        return est
    even = tuple(len(s) for s in stage_layers(model.num_layers, cfg.degrees.pp, 1))
    counts = tuple(part.layers_per_stage)
    if counts == even or counts == cfg.stage_layer_counts:
        return est
    candidate = estimate(model, cluster, workload, replace(cfg, stage_layer_counts=counts), prof,
                         est.node_order, views)
    # faster, or fitting where ``est`` does not (on mixed GPU memory sizes the DP's per-stage
    # limits can move layers onto the larger GPUs)
    if candidate.memory.fits and (not est.memory.fits
                                  or candidate.step_time_s < est.step_time_s * (1 - 1e-9)):
        return candidate
    return est
