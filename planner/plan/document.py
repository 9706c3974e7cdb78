"""The Plan artifact: every decision of one training plan, its inputs and its prediction.

A plan file is one JSON object (keys sorted, so the same inputs give the same bytes):

* ``schema_version`` (now 1), ``planner_version``, ``inputs_hash`` (sha256 of the canonical
  JSON of ``inputs``).
* ``inputs``: ``model`` (every ModelSpec field), ``cluster`` (a cluster spec, as a cluster
  file would hold it, host names included), ``workload``, ``profile`` (calibration
  parameters), ``objective``: enough to rebuild the estimate.
* ``config``: every ParallelConfig field (degrees, micro-batch, recompute, ZeRO, schedule
  flags, per-stage layer counts); ``schedule``, ``micro_batches``.
* ``stages``: per pipeline stage its layer indices and model chunks [first layer, count].
* ``nodes``: per torchrun node rank, the cluster node, host, node group and GPU count;
  ``node_order`` is the same placement as a list.
* ``ranks``: a table (``columns``, ``rows``): global rank, node rank, local GPU and the rank's
  coordinate on each parallel axis.
* ``groups``: every process group of each kind (``tp``, ``cp``, ``dp``, ``dp_cp``, ``pp``,
  ``ep``, ``edp``) as lists of global ranks.
* ``expert_placement`` (only with ``planner solve --expert-loads``): the expert-placement
  document of :mod:`planner.experts.plan` for one EP group of the plan, plus ``ep_size``.
* ``prediction``: ``planner estimate --format json``'s object for this plan, plus
  ``stage_memory`` and ``why`` (one line on why it won) and ``search`` (rank among the
  candidates, counts).

:func:`plan_to_json` / :func:`plan_from_json` round-trip losslessly.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from cost_models.groups import KINDS, groups_of, rank_map
from cost_models.model_spec import MLASpec, MoESpec, ModelSpec
from cost_models.parallel import ParallelConfig, Workload
from cost_models.profile import Profile
from cost_models.training.step import Estimate, config_stage_layers, stage_layers
from planner import __version__
from topologies.catalog import GB
from topologies.cluster import Cluster
from topologies.spec import cluster_from_dict, gpu_to_plain

SCHEMA_VERSION = 1
RANK_COLUMNS = ("rank", "node_rank", "local", "tp", "cp", "dp", "pp", "ep", "etp", "edp")


@dataclass(frozen=True)
class Plan:
    """One plan; a thin typed wrapper over the JSON object described in the module docstring."""

    schema_version: int
    planner_version: str
    inputs_hash: str
    inputs: dict[str, Any]
    config: dict[str, Any]
    schedule: str
    micro_batches: int
    stages: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    node_order: list[int]
    ranks: dict[str, Any]
    groups: dict[str, list[list[int]]]
    prediction: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    expert_placement: dict[str, Any] | None = None

    @property
    def num_gpus(self) -> int:
        return len(self.ranks["rows"])

    def parallel_config(self) -> ParallelConfig:
        c = dict(self.config)
        if c.get("stage_layer_counts") is not None:
            c["stage_layer_counts"] = tuple(c["stage_layer_counts"])
        return ParallelConfig(**c)

    def model_spec(self) -> ModelSpec:
        return model_from_plain(self.inputs["model"])

    def cluster(self) -> Cluster:
        return cluster_from_dict(self.inputs["cluster"])

    def workload(self) -> Workload:
        return Workload(**self.inputs["workload"])

    def profile(self) -> Profile:
        return Profile(**self.inputs["profile"])

    def rank_rows(self) -> list[dict[str, int]]:
        cols = self.ranks["columns"]
        return [dict(zip(cols, row)) for row in self.ranks["rows"]]


def model_to_plain(model: ModelSpec) -> dict[str, Any]:
    d = asdict(model)
    d.pop("source", None)
    return d


def model_from_plain(d: dict[str, Any]) -> ModelSpec:
    d = dict(d)
    d["moe"] = MoESpec(**d["moe"]) if d.get("moe") else None
    d["mla"] = MLASpec(**d["mla"]) if d.get("mla") else None
    for key in ("moe_layers", "sliding_layers"):
        d[key] = tuple(d.get(key) or ())
    return ModelSpec(**d)


def cluster_to_plain(cluster: Cluster) -> dict[str, Any]:
    """The cluster as a cluster file (``topologies.spec.ClusterSpec``) would describe it.

    A catalog GPU is written by name, any other device as its inline device object
    (``topologies.spec.gpu_to_plain``), so that the file rebuilds the same ``GpuSpec``.
    """
    def nic(n) -> dict[str, Any]:
        out = {"count": n.count, "gbps": n.gbps, "transport": n.transport,
               "latency_us": n.latency_s * 1e6}
        if n.devices:
            out["devices"] = list(n.devices)
        return out

    groups = []
    for gi, g in enumerate(cluster.node_groups):
        first = sum(x.count for x in cluster.node_groups[:gi])
        groups.append({
            "name": g.name, "count": g.count, "gpu": gpu_to_plain(g.gpu),
            "gpus_per_node": g.gpus_per_node, "fabric": g.fabric,
            "intra_bw_GBps": g.intra_bw_bytes_per_s / GB,
            "intra_latency_us": g.intra_latency_s * 1e6, "nics": [nic(n) for n in g.nics],
            "nvlink_domain_nodes": g.nvlink_domain_nodes,
            "hosts": [cluster.host_of_node(first + i) for i in range(g.count)]})
    tiers = [{"name": t.name, "nodes_per_switch": t.nodes_per_switch,
              "oversubscription": t.oversubscription, "latency_us": t.latency_s * 1e6}
             for t in cluster.tiers]
    return {"name": cluster.name, "description": cluster.description, "node_groups": groups,
            "network": {"rail_optimized": cluster.rail_optimized, "tiers": tiers}}


def canonical_json(data: Any) -> str:
    """Sorted keys, no spaces: the form that is hashed."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def inputs_hash(inputs: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(inputs).encode()).hexdigest()


def plan_inputs(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
                objective: str) -> dict[str, Any]:
    return {"model": model_to_plain(model), "cluster": cluster_to_plain(cluster),
            "workload": asdict(workload), "profile": asdict(prof), "objective": objective}


def _stage_table(model: ModelSpec, cfg: ParallelConfig) -> list[dict[str, Any]]:
    """Per stage: its layers and its model chunks as [first layer, count]."""
    split = config_stage_layers(model.num_layers, cfg)
    out = []
    for s, layers in enumerate(split):
        first = sum(len(x) for x in split[:s])
        runs = _chunk_runs(model.num_layers, cfg, s) if cfg.vpp > 1 else [[first, len(layers)]]
        out.append({"stage": s, "layers": list(layers), "chunks": runs,
                    "embedding": s == 0, "head": s == cfg.pp - 1})
    return out


def _chunk_runs(num_layers: int, cfg: ParallelConfig, stage: int) -> list[list[int]]:
    """[first layer, count] of each of ``stage``'s vpp chunks (Megatron interleaving)."""
    chunks = cfg.pp * cfg.vpp
    per_chunk = [len(c) for c in stage_layers(num_layers, chunks, 1)]
    starts = [sum(per_chunk[:j]) for j in range(chunks)]
    return [[starts[j], per_chunk[j]] for j in range(stage, chunks, cfg.pp)]


def _rank_table(cluster: Cluster, cfg: ParallelConfig,
                node_order: list[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    physical = rank_map(cluster, node_order)
    located = [cluster.locate(int(p)) for p in physical]
    node_rank_of = {node: i for i, node in enumerate(node_order)}
    first_rank: dict[int, int] = {}
    for r, (_, n, _) in enumerate(located):
        first_rank.setdefault(n, r)
    nodes = []
    for i, node in enumerate(node_order):
        group = cluster.node_groups[cluster.group_of_node(node)]
        first = first_rank[node]
        nodes.append({"node_rank": i, "node": node, "host": cluster.host_of_node(node),
                      "node_group": group.name, "gpus": group.gpus_per_node,
                      "first_rank": first})
    rows = []
    block = cfg.tp * cfg.cp * cfg.dp
    for r, (_, node, local) in enumerate(located):
        tp_r, rest = r % cfg.tp, r // cfg.tp
        cp_r, rest = rest % cfg.cp, rest // cfg.cp
        dp_r, pp_r = rest % cfg.dp, rest // cfg.dp
        in_stage = r % block
        etp_r = in_stage % cfg.expert_tp
        ep_r = (in_stage // cfg.expert_tp) % cfg.ep
        edp_r = in_stage // (cfg.expert_tp * cfg.ep)
        rows.append([r, node_rank_of[node], local, tp_r, cp_r, dp_r, pp_r, ep_r, etp_r, edp_r])
    return nodes, {"columns": list(RANK_COLUMNS), "rows": rows}


def build_plan(model: ModelSpec, cluster: Cluster, est: Estimate, prof: Profile,
               objective: str = "throughput", why: str = "", search: dict | None = None,
               notes: list[str] | None = None) -> Plan:
    """Assemble the Plan of an estimate (the caller validates it before writing)."""
    from planner.training.estimate_json import estimate_to_dict  # formats only

    cfg, workload = est.config, est.workload
    node_order = list(est.node_order) if est.node_order is not None else list(
        range(cluster.num_nodes))
    inputs = plan_inputs(model, cluster, workload, prof, objective)
    nodes, ranks = _rank_table(cluster, cfg, node_order)
    groups = {kind: groups_of(cfg, kind) for kind in KINDS}
    prediction = estimate_to_dict(est)
    prediction["stage_memory"] = [
        {"stage": m.stage, "peak_bytes": m.peak_bytes, "capacity_bytes": m.capacity_bytes}
        for m in est.stage_memory]
    prediction["why"] = why
    prediction["search"] = search or {}
    config = asdict(cfg)
    if config["stage_layer_counts"] is not None:
        config["stage_layer_counts"] = list(config["stage_layer_counts"])
    return Plan(SCHEMA_VERSION, __version__, inputs_hash(inputs), inputs, config, cfg.schedule,
                cfg.micro_batches(workload), _stage_table(model, cfg), nodes, node_order, ranks,
                groups, prediction, list(notes or []))


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """Every field; ``expert_placement`` only when the plan has one (older files stay as they were)."""
    out = {f.name: getattr(plan, f.name) for f in fields(plan)}
    if out["expert_placement"] is None:
        del out["expert_placement"]
    return out


def plan_to_json(plan: Plan) -> str:
    """The plan file's text: sorted keys, stable float formatting, newline at the end."""
    return json.dumps(plan_to_dict(plan), sort_keys=True, indent=1) + "\n"


def plan_from_dict(data: dict[str, Any]) -> Plan:
    known = {f.name for f in fields(Plan)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown plan keys {unknown}")
    missing = sorted(f.name for f in fields(Plan)
                     if f.name not in data and f.name not in ("notes", "expert_placement"))
    if missing:
        raise ValueError(f"missing plan keys {missing}")
    return Plan(**data)


def plan_from_json(text: str) -> Plan:
    return plan_from_dict(json.loads(text))
