"""The Plan artifact: one document for every plan family, its inputs and its prediction.

A plan file is one JSON object (keys sorted, so the same inputs give the same bytes):

* ``schema_version`` (now 3), ``kind`` (``training`` | ``serving`` | ``experts``),
  ``planner_version``, ``inputs_hash`` (sha256 of the canonical JSON of ``inputs``).
* ``inputs``: ``model`` (every ModelSpec field), ``cluster`` (a cluster spec, as a cluster
  file would hold it, host names included), ``workload``, ``profile`` (calibration
  parameters), ``objective``: enough to rebuild the estimate.
* ``pools``: the meshes of the job, each a :class:`Pool`: ``name``, ``role`` (``train``;
  later ``prefill``, ``decode``, ``attention``, ``ffn``), ``gpu`` (its GPU type), ``degrees``
  (``tp cp pp dp ep etp``, :class:`cost_models.parallel.Degrees`), ``nodes`` (per torchrun node
  rank: ``node_rank``, the cluster ``node``, ``host``, ``node_group``, ``gpus`` and
  ``first_rank``, the sum of the GPUs of the node ranks before it), ``node_order`` (the same
  placement as a list) and ``ranks``, the rank table as a rule plus exceptions:

  - ``rule``: ``"nodes-in-order/tp-cp-ep-dp-pp"`` (:data:`planner.plan.ranks.RANK_RULE`, the
    only rule): node rank ``i`` runs global ranks ``first_rank .. first_rank + gpus - 1``,
    rank ``first_rank + j`` on the node's GPU ``j``; every rank's coordinate on each parallel
    axis is Megatron's rank order tp-cp-ep-dp-pp (:func:`cost_models.parallel.rank_coords`);
  - ``exceptions``: ``[rank, node_rank, local]`` for each rank that runs on another GPU of its
    node than the rule says, sorted by rank (planner-written plans have none).

  The per-rank table (:meth:`Pool.rank_rows`: rank, node rank, local GPU, coordinates) and
  every process group of each kind (:attr:`Pool.groups`, ``tp cp dp dp_cp pp ep edp``, as
  lists of global ranks, :func:`cost_models.groups.groups_of`) are computed from it; a plan
  file stores neither, so a plan for 131,072 GPUs stays a few MB.
* Family sections, each present only in plans of that family:
  ``training``: ``options`` (every training option: micro-batch, recompute, ZeRO, schedule
  flags, per-stage layer counts, and ``dp_shares``: micro-batches per data-parallel replica,
  present only when replicas on faster GPUs take more), ``schedule``, ``micro_batches`` (per
  replica; with ``dp_shares``, their mean) and ``stages`` (per pipeline stage its layer
  indices and model chunks [first layer, count]);
  ``experts``: the expert-placement document of :mod:`planner.experts.plan` for one EP group
  of the plan, plus ``ep_size`` (``planner solve --expert-loads``);
  ``serving``: mode, engine, workload, per-pool layouts, engine instances and the router
  (``docs/serving.md``).
* ``fabric`` (plans whose cluster spec names NIC devices, interfaces, GID indices or
  RDMA islands): per node rank its transport, RDMA island, exact HCA names in rail order, RoCE
  GID index, socket interfaces and per-LOCAL_RANK rails; the count of process groups that run
  on TCP sockets (:mod:`planner.plan.fabric`). Serving plans: ``{"pools": [{"role", "nodes",
  "socket_instances"}]}``, the same node entries per pool and the engine instances that span
  RDMA networks.
* ``prediction``: ``planner estimate --format json``'s object for this plan, plus
  ``stage_memory``, ``why`` (one line on why it won) and ``search`` (rank among the
  candidates, counts); ``notes``.

:func:`plan_to_json` / :func:`plan_from_json` round-trip losslessly. Files of schema 1 (one
mesh, flat keys) and schema 2 (an explicit per-rank table and group lists) are read through
:func:`planner.plan.migrate.upgrade`.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from typing import Any

import numpy as np

from cost_models.groups import groups_of
from cost_models.model_spec import MLASpec, MoESpec, ModelSpec
from cost_models.parallel import KINDS, Degrees
from cost_models.profile import MEASURED_ONLY_FIELDS, Profile
from cost_models.training.config import TrainingConfig, Workload
from topologies.catalog import GB
from topologies.cluster import Cluster
from topologies.devices import gpu_to_plain
from topologies.spec import cluster_from_dict
from planner.plan.ranks import RANK_COLUMNS, placed_slots, rank_table

SCHEMA_VERSION = 3
KINDS_OF_PLAN = ("training", "serving", "experts")
ROLES = ("train", "colocated", "prefill", "decode", "attention", "ffn")
SECTIONS = ("training", "experts", "serving", "fabric")  # sections a plan may carry


@dataclass(frozen=True)
class Pool:
    """One mesh of the job: a role, the GPUs it runs on, its degrees and its rank table.

    ``ranks`` is the rule plus exceptions (module docstring); the per-rank table, the slots
    and the process groups are computed from it on demand and cached.
    """

    name: str
    role: str
    gpu: str
    degrees: dict[str, Any]
    nodes: list[dict[str, Any]]
    node_order: list[int]
    ranks: dict[str, Any]

    @cached_property
    def num_gpus(self) -> int:
        return sum(n["gpus"] for n in self.nodes)

    def parallel_degrees(self) -> Degrees:
        return Degrees(**self.degrees)

    @cached_property
    def slots(self) -> tuple[np.ndarray, np.ndarray]:
        """(node rank, local GPU) of every global rank, as read-only int arrays."""
        node_rank, local = placed_slots([n["gpus"] for n in self.nodes],
                                        self.ranks["exceptions"])
        node_rank.flags.writeable = local.flags.writeable = False
        return node_rank, local

    @cached_property
    def rank_array(self) -> np.ndarray:
        """The rank table as a read-only int array [rank, column] (:data:`RANK_COLUMNS`)."""
        table = rank_table(self.parallel_degrees(), *self.slots)
        table.flags.writeable = False
        return table

    def rank_rows(self) -> list[dict[str, int]]:
        """Per global rank: ``rank``, ``node_rank``, ``local`` and its coordinate per axis."""
        return [dict(zip(RANK_COLUMNS, row)) for row in self.rank_array.tolist()]

    def rank_row(self, rank: int) -> dict[str, int]:
        """One row of :meth:`rank_rows`."""
        return dict(zip(RANK_COLUMNS, self.rank_array[rank].tolist()))

    @cached_property
    def groups(self) -> dict[str, list[list[int]]]:
        """Every process group of each kind (``tp cp dp dp_cp pp ep edp``) as lists of global
        ranks, from the degrees (:func:`cost_models.groups.groups_of`)."""
        d = self.parallel_degrees()
        return {kind: groups_of(d, kind) for kind in KINDS}


@dataclass(frozen=True)
class Plan:
    """One plan; a thin typed wrapper over the JSON object described in the module docstring.

    Accessors named after one mesh (``nodes``, ``ranks``, ``groups``, ``rank_rows``) read the
    plan's only pool and refuse plans with several; multi-pool readers use :meth:`pool`.
    """

    schema_version: int
    kind: str
    planner_version: str
    inputs_hash: str
    inputs: dict[str, Any]
    pools: list[Pool]
    prediction: dict[str, Any]
    training: dict[str, Any] | None = None
    experts: dict[str, Any] | None = None
    serving: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    fabric: dict[str, Any] | None = None

    def pool(self, role: str | None = None) -> Pool:
        """The pool of ``role`` (default: the plan's only pool)."""
        found = [p for p in self.pools if role is None or p.role == role]
        if len(found) != 1:
            raise ValueError(f"plan has {len(found)} pools{f' of role {role!r}' if role else ''}"
                             f", expected one")
        return found[0]

    @property
    def num_gpus(self) -> int:
        return sum(p.num_gpus for p in self.pools)

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return self.pool().nodes

    @property
    def node_order(self) -> list[int]:
        return self.pool().node_order

    @property
    def ranks(self) -> dict[str, Any]:
        return self.pool().ranks

    @property
    def groups(self) -> dict[str, list[list[int]]]:
        return self.pool().groups

    def rank_rows(self) -> list[dict[str, int]]:
        return self.pool().rank_rows()

    @property
    def config(self) -> dict[str, Any]:
        """Degrees and training options in one flat dict (the launch files' view)."""
        return {**self.pool().degrees, **self._training()["options"]}

    @property
    def schedule(self) -> str:
        return self._training()["schedule"]

    @property
    def micro_batches(self) -> int:
        return self._training()["micro_batches"]

    def replica_micro_batches(self) -> tuple[int, ...]:
        """Micro-batches per step of each data-parallel replica: the options' ``dp_shares``
        when the plan gives replicas unequal shares, else ``micro_batches`` each."""
        shares = self._training()["options"].get("dp_shares")
        if shares is not None:
            return tuple(shares)
        return (self.micro_batches,) * self.pool().degrees["dp"]

    @property
    def stages(self) -> list[dict[str, Any]]:
        return self._training()["stages"]

    def _training(self) -> dict[str, Any]:
        if self.training is None:
            raise ValueError(f"a {self.kind} plan has no training section")
        return self.training

    def parallel_config(self) -> TrainingConfig:
        return TrainingConfig.from_dict({"degrees": self.pool().degrees,
                                         **self._training()["options"]})

    def model_spec(self) -> ModelSpec:
        return model_from_plain(self.inputs["model"])

    def cluster(self) -> Cluster:
        return cluster_from_dict(self.inputs["cluster"])

    def workload(self) -> Workload:
        return Workload(**self.inputs["workload"])

    def profile(self) -> Profile:
        return Profile(**self.inputs["profile"])


def model_to_plain(model: ModelSpec) -> dict[str, Any]:
    """The model as plain data. The fields added after plan files existed (gated, linear,
    chunked and sparse attention, the GLU clamp, YaRN's attention factor, RoPE's base and
    Llama 3 scaling) are written only
    when they differ from their defaults, so a plan of a model without them keeps its bytes
    (and its hash)."""
    d = asdict(model)
    d.pop("source", None)
    defaults = {f.name: f.default for f in fields(ModelSpec)}
    for key in ("attn_gate", "linear_attn", "linear_layers", "attention_chunk", "chunk_layers",
                "sparse_attn", "indexer_layers", "glu_clamp", "rope_attention_factor",
                "rope_theta", "rope_llama3_factor"):
        if d[key] == defaults[key] or d[key] == []:
            del d[key]
    return d


def model_from_plain(d: dict[str, Any]) -> ModelSpec:
    """Inverse of :func:`model_to_plain`; plans written before the attention-kind fields
    existed load with their defaults."""
    from cost_models.model_spec import LinearAttnSpec, SparseAttnSpec

    d = dict(d)
    d["moe"] = MoESpec(**d["moe"]) if d.get("moe") else None
    d["mla"] = MLASpec(**d["mla"]) if d.get("mla") else None
    d["linear_attn"] = LinearAttnSpec(**d["linear_attn"]) if d.get("linear_attn") else None
    d["sparse_attn"] = SparseAttnSpec(**d["sparse_attn"]) if d.get("sparse_attn") else None
    for key in ("moe_layers", "sliding_layers", "linear_layers", "chunk_layers",
                "indexer_layers"):
        d[key] = tuple(d.get(key) or ())
    return ModelSpec(**d)


def cluster_to_plain(cluster: Cluster) -> dict[str, Any]:
    """The cluster as a cluster file (``topologies.spec.ClusterSpec``) would describe it.

    A catalog GPU is written by name, any other device as its inline device object
    (``topologies.devices.gpu_to_plain``), so that the file rebuilds the same ``GpuSpec``.
    """
    def nic(n) -> dict[str, Any]:
        out = {"count": n.count, "gbps": n.gbps, "transport": n.transport,
               "latency_us": n.latency_s * 1e6}
        if n.devices:
            out["devices"] = list(n.devices)
        for key in ("gid_index", "ifname"):  # only when given: older plans keep their bytes
            if getattr(n, key) is not None:
                out[key] = getattr(n, key)
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
        if g.price_per_gpu_hour is not None:  # only when given: older plans keep their bytes
            groups[-1]["price_per_gpu_hour"] = g.price_per_gpu_hour
        if g.rdma_island is not None:
            groups[-1]["rdma_island"] = g.rdma_island
        if g.nccl_topo_file is not None:
            groups[-1]["nccl_topo_file"] = g.nccl_topo_file
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


def profile_plain(prof: Profile) -> dict[str, Any]:
    """Every profile field, but the calibrated-machine ones (``collective_switch_s``,
    ``collective_tables``) only when set, so plans written before they existed keep their
    inputs hash."""
    out = asdict(prof)
    for name in MEASURED_ONLY_FIELDS:
        if not out[name]:
            del out[name]
    return out


def plan_inputs(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
                objective: str) -> dict[str, Any]:
    return {"model": model_to_plain(model), "cluster": cluster_to_plain(cluster),
            "workload": asdict(workload), "profile": profile_plain(prof),
            "objective": objective}


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """Every field; family sections only when the plan has them."""
    out = {f.name: getattr(plan, f.name) for f in fields(plan)}
    out["pools"] = [{f.name: getattr(p, f.name) for f in fields(Pool)} for p in plan.pools]
    for section in SECTIONS:
        if out[section] is None:
            del out[section]
    return out


def plan_to_json(plan: Plan) -> str:
    """The plan file's text: sorted keys, stable float formatting, newline at the end."""
    return json.dumps(plan_to_dict(plan), sort_keys=True, indent=1) + "\n"


def plan_from_dict(data: dict[str, Any]) -> Plan:
    """The Plan of a plan object; objects of schemas 1 and 2 are upgraded first."""
    if data.get("schema_version") in (1, 2):
        from planner.plan.migrate import upgrade  # schema 1 -> 2 -> 3
        data = upgrade(data)
    known = {f.name for f in fields(Plan)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown plan keys {unknown}")
    missing = sorted(f.name for f in fields(Plan)
                     if f.name not in data and f.name not in ("notes", *SECTIONS))
    if missing:
        raise ValueError(f"missing plan keys {missing}")
    pools = data["pools"]
    if not isinstance(pools, list) or not all(isinstance(p, dict) for p in pools):
        raise ValueError("pools must be a list of objects")
    return Plan(**{**data, "pools": [_pool_from_dict(p) for p in pools]})


def _pool_from_dict(data: dict[str, Any]) -> Pool:
    known = {f.name for f in fields(Pool)}
    if set(data) != known:
        raise ValueError(f"pool keys {sorted(data)}, expected {sorted(known)}")
    return Pool(**data)


def plan_from_json(text: str) -> Plan:
    return plan_from_dict(json.loads(text))
