"""A training Plan from an estimate: the train pool, the training section and the prediction."""
from __future__ import annotations

from typing import Any

from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile
from cost_models.training.config import TrainingConfig
from cost_models.training.layers import config_stage_layers, stage_layers
from cost_models.training.step import Estimate
from planner import __version__
from planner.plan.document import SCHEMA_VERSION, Plan, inputs_hash, plan_inputs
from planner.plan.fabric import fabric_section, socket_groups
from planner.plan.ranks import make_pool
from planner.training.estimate_json import estimate_to_dict
from topologies.cluster import Cluster


def _stage_table(model: ModelSpec, cfg: TrainingConfig) -> list[dict[str, Any]]:
    """Per stage: its layers and its model chunks as [first layer, count]."""
    split = config_stage_layers(model.num_layers, cfg)
    out = []
    for s, layers in enumerate(split):
        first = sum(len(x) for x in split[:s])
        runs = _chunk_runs(model.num_layers, cfg, s) if cfg.vpp > 1 else [[first, len(layers)]]
        out.append({"stage": s, "layers": list(layers), "chunks": runs,
                    "embedding": s == 0, "head": s == cfg.degrees.pp - 1})
    return out


def _chunk_runs(num_layers: int, cfg: TrainingConfig, stage: int) -> list[list[int]]:
    """[first layer, count] of each of ``stage``'s vpp chunks (Megatron interleaving)."""
    chunks = cfg.degrees.pp * cfg.vpp
    per_chunk = [len(c) for c in stage_layers(num_layers, chunks, 1)]
    starts = [sum(per_chunk[:j]) for j in range(chunks)]
    return [[starts[j], per_chunk[j]] for j in range(stage, chunks, cfg.degrees.pp)]


def listing_order(model: ModelSpec, cluster: Cluster, est: Estimate, prof: Profile,
                  pool) -> dict[str, Any]:
    """The NIC-oblivious baseline of a placed plan: the same degrees in the cluster's listing
    order (Megatron's), its predicted step (best layer split) and, for both, the process groups
    that span RDMA networks and so run on TCP sockets, by kind."""
    from dataclasses import replace

    from cost_models.training.step import estimate
    from planner.training.slicing import refine_partition

    base = estimate(model, cluster, est.workload, replace(est.config, stage_layer_counts=None),
                    prof)
    listed = refine_partition(model, cluster, est.workload, base, prof)
    listed_pool = make_pool("train", "train", cluster, est.config.degrees,
                            list(range(cluster.num_nodes)))
    return {"step_time_s": listed.step_time_s,
            "speedup": listed.step_time_s / est.step_time_s,
            "socket_groups": socket_groups(cluster, listed_pool),
            "socket_groups_placed": socket_groups(cluster, pool)}


def build_plan(model: ModelSpec, cluster: Cluster, est: Estimate, prof: Profile,
               objective: str = "throughput", why: str = "", search: dict | None = None,
               notes: list[str] | None = None) -> Plan:
    """Assemble the training Plan of an estimate (the caller validates it before writing)."""
    cfg, workload = est.config, est.workload
    node_order = list(est.node_order) if est.node_order is not None else list(
        range(cluster.num_nodes))
    inputs = plan_inputs(model, cluster, workload, prof, objective)
    prediction = estimate_to_dict(est)
    prediction["stage_memory"] = [
        {"stage": m.stage, "peak_bytes": m.peak_bytes, "capacity_bytes": m.capacity_bytes}
        for m in est.stage_memory]
    prediction["why"] = why
    prediction["search"] = search or {}
    training = {"options": cfg.options_dict(), "schedule": cfg.schedule,
                "micro_batches": cfg.micro_batches(workload),
                "stages": _stage_table(model, cfg)}
    pool = make_pool("train", "train", cluster, cfg.degrees, node_order)
    notes = list(notes or [])
    if cfg.moe_dispatcher == "flex" and cfg.degrees.ep > 1 and model.moe is not None:
        notes.append("dispatcher: flex (DeepEP): a token crosses once to each GPU, and across "
                     "nodes once to each node, holding its experts; launch with Megatron "
                     "--moe-token-dispatcher-type flex")
    if est.node_order is not None:  # a placement other than the listing order
        prediction["listing_order"] = listing_order(model, cluster, est, prof, pool)
    return Plan(schema_version=SCHEMA_VERSION, kind="training", planner_version=__version__,
                inputs_hash=inputs_hash(inputs), inputs=inputs, pools=[pool],
                prediction=prediction, training=training, notes=notes,
                fabric=fabric_section(cluster, pool))
