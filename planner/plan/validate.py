"""The one solver-agnostic validator every Plan passes before it is written, printed or emitted.

It checks properties, not how a solver got there: the degrees multiply to the GPUs and divide
what they split, every rank and every (node, GPU) slot is used exactly once, every process
group partitions the ranks with the right size and varies only its own axis, every layer sits
on exactly one stage, every expert has a home, each stage's predicted memory fits, and the
inputs hash matches the inputs.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from cost_models.parallel import ConfigError, check_config
from planner.errors import PlannerError
from planner.plan.document import SCHEMA_VERSION, Plan, inputs_hash

AXIS_OF_KIND = {"tp": ("tp",), "cp": ("cp",), "dp": ("dp",), "dp_cp": ("dp", "cp"),
                "pp": ("pp",), "ep": ("ep",), "edp": ("edp",)}


class InvalidPlanError(PlannerError):
    """A plan that breaks an invariant; lists every broken one."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more"
                                           if len(problems) > 5 else "")
        super().__init__(f"{source}: invalid plan: {shown}")


def plan_problems(plan: Plan) -> list[str]:
    """Every broken invariant of ``plan`` (empty when it is valid)."""
    problems: list[str] = []
    if plan.schema_version != SCHEMA_VERSION:
        return [f"schema_version {plan.schema_version}, this planner reads {SCHEMA_VERSION}"]
    try:
        model, cluster, workload = plan.model_spec(), plan.cluster(), plan.workload()
        cfg = plan.parallel_config()
    except (TypeError, ValueError, KeyError) as err:
        return [f"inputs or config unreadable ({err})"]
    if inputs_hash(plan.inputs) != plan.inputs_hash:
        problems.append("inputs_hash does not match the inputs")
    try:
        check_config(model, workload, cfg, cluster.num_gpus)
    except ConfigError as err:
        problems.append(f"config {err}")
    problems += _rank_problems(plan, cluster, cfg)
    problems += _group_problems(plan, cfg)
    problems += _stage_problems(plan, model.num_layers, cfg.pp)
    problems += _prediction_problems(plan.prediction)
    problems += _memory_problems(plan.prediction)
    if model.is_moe and (cfg.ep < 1 or model.moe.num_experts % cfg.ep):
        problems.append(f"ep={cfg.ep} leaves some of the {model.moe.num_experts} experts "
                        "without a replica")
    if plan.micro_batches * cfg.micro_batch * cfg.dp != workload.global_batch:
        problems.append(f"micro_batches {plan.micro_batches} x micro_batch {cfg.micro_batch} x "
                        f"dp {cfg.dp} != global batch {workload.global_batch}")
    if plan.schedule != cfg.schedule:
        problems.append(f"schedule '{plan.schedule}' but the config runs '{cfg.schedule}'")
    if plan.expert_placement is not None:
        problems += _plan_expert_problems(plan.expert_placement, model, cfg)
    return problems


def _plan_expert_problems(doc: dict[str, Any], model, cfg) -> list[str]:
    if model.moe is None:
        return ["expert_placement given for a dense model"]
    problems = expert_placement_problems(doc)
    if doc.get("num_experts") != model.moe.num_experts:
        problems.append(f"expert_placement has {doc.get('num_experts')} experts, the model "
                        f"{model.moe.num_experts}")
    if doc.get("num_gpus") != cfg.ep or doc.get("ep_size") != cfg.ep:
        problems.append(f"expert_placement spans {doc.get('num_gpus')} GPUs, the EP group {cfg.ep}")
    if len(doc.get("moe_layers", [])) != sum(model.moe_layers):
        problems.append(f"expert_placement covers {len(doc.get('moe_layers', []))} MoE layers, "
                        f"the model has {sum(model.moe_layers)}")
    return problems


def _rank_problems(plan: Plan, cluster, cfg) -> list[str]:
    problems = []
    rows = plan.rank_rows()
    if sorted(r["rank"] for r in rows) != list(range(cfg.num_gpus)):
        problems.append(f"ranks are not exactly 0..{cfg.num_gpus - 1}")
    if sorted(plan.node_order) != list(range(cluster.num_nodes)):
        problems.append(f"node_order is not a permutation of the cluster's {cluster.num_nodes} "
                        "nodes")
        return problems
    slots = Counter((r["node_rank"], r["local"]) for r in rows)
    if any(n > 1 for n in slots.values()):
        problems.append("two ranks share one GPU")
    for entry in plan.nodes:
        node = entry["node"]
        group = cluster.node_groups[cluster.group_of_node(node)]
        if entry["gpus"] != group.gpus_per_node or entry["host"] != cluster.host_of_node(node):
            problems.append(f"node rank {entry['node_rank']}: host/GPU count differ from the "
                            f"cluster's node {node}")
        if plan.node_order[entry["node_rank"]] != node:
            problems.append(f"node rank {entry['node_rank']} is node {node} in 'nodes' but "
                            f"{plan.node_order[entry['node_rank']]} in node_order")
    gpus_of = {e["node_rank"]: e["gpus"] for e in plan.nodes}
    if any(r["local"] >= gpus_of.get(r["node_rank"], 0) for r in rows):
        problems.append("a rank uses a GPU index its node does not have")
    for r in rows:
        logical = r["tp"] + cfg.tp * (r["cp"] + cfg.cp * (r["dp"] + cfg.dp * r["pp"]))
        if logical != r["rank"]:
            problems.append(f"rank {r['rank']}: coordinates give rank {logical}")
            break
    return problems


def _group_problems(plan: Plan, cfg) -> list[str]:
    problems = []
    size = {"tp": cfg.tp, "cp": cfg.cp, "dp": cfg.dp, "dp_cp": cfg.dp * cfg.cp, "pp": cfg.pp,
            "ep": cfg.ep, "edp": cfg.expert_dp}
    table = np.asarray(plan.ranks["rows"], dtype=np.int64).reshape(-1, len(plan.ranks["columns"]))
    column = dict(zip(plan.ranks["columns"], table.T))
    order = np.argsort(column["rank"], kind="stable")  # row of each rank, if ranks are valid
    for kind, axes in AXIS_OF_KIND.items():
        groups = plan.groups.get(kind)
        if groups is None:
            problems.append(f"groups.{kind} missing")
            continue
        members = sorted(r for g in groups for r in g)
        if members != list(range(cfg.num_gpus)):
            problems.append(f"groups.{kind} do not cover every rank exactly once")
        if {len(g) for g in groups} != {size[kind]}:
            problems.append(f"groups.{kind} sizes {sorted({len(g) for g in groups})}, expected "
                            f"{size[kind]}")
            continue
        if members != list(range(cfg.num_gpus)) or len(table) != cfg.num_gpus:
            continue  # coordinates are only comparable over a valid partition
        fixed = _fixed_axes(kind)
        rows_of = order[np.asarray(groups, dtype=np.int64)]  # (groups, size) row indices
        for a in fixed:
            values = column[a][rows_of]
            bad = np.flatnonzero((values != values[:, :1]).any(axis=1))
            if bad.size:
                g = groups[int(bad[0])]
                problems.append(f"groups.{kind} group {g[:4]}... mixes ranks of different "
                                f"{'/'.join(fixed)} coordinates")
                break
    return problems


def _fixed_axes(kind: str) -> tuple[str, ...]:
    """Coordinates all members of a group of ``kind`` share."""
    if kind in ("ep", "edp"):
        return ("pp", "etp", "edp") if kind == "ep" else ("pp", "etp", "ep")
    return tuple(a for a in ("tp", "cp", "dp", "pp") if a not in AXIS_OF_KIND[kind])


def _stage_problems(plan: Plan, num_layers: int, pp: int) -> list[str]:
    if len(plan.stages) != pp:
        return [f"{len(plan.stages)} stages for pp={pp}"]
    layers = sorted(layer for s in plan.stages for layer in s["layers"])
    if layers != list(range(num_layers)):
        return [f"stages do not hold each of the {num_layers} layers exactly once"]
    for s in plan.stages:
        chunk_layers = [l for first, n in s["chunks"] for l in range(first, first + n)]
        if chunk_layers != s["layers"]:
            return [f"stage {s['stage']}: chunks do not match its layers"]
    return []


PREDICTION_KEYS = ("config", "memory", "mfu", "stage_memory", "stages", "step_time_s", "tiers",
                   "time", "tokens_per_s_per_gpu")
TIME_KEYS = ("bubble_s", "compute_s", "cp_comm_s", "dp_comm_s", "ep_comm_s", "optimizer_s",
             "pp_comm_s", "recompute_s", "step_s", "tp_comm_s")


def _prediction_problems(prediction: Any) -> list[str]:
    """The prediction holds what the reports read (``planner estimate``'s JSON keys)."""
    if not isinstance(prediction, dict):
        return ["prediction is not an object"]
    missing = [k for k in PREDICTION_KEYS if k not in prediction]
    if missing:
        return [f"prediction lacks {missing}"]
    time = prediction["time"]
    if not isinstance(time, dict) or any(not isinstance(time.get(k), (int, float))
                                         for k in TIME_KEYS):
        return [f"prediction.time needs numbers for {list(TIME_KEYS)}"]
    return []


def _memory_problems(prediction: dict[str, Any]) -> list[str]:
    if not isinstance(prediction, dict):
        return []
    return [f"stage {m['stage']} needs {m['peak_bytes'] / 2**30:.1f} GiB per GPU, it has "
            f"{m['capacity_bytes'] / 2**30:.1f} GiB" for m in prediction.get("stage_memory", [])
            if m["peak_bytes"] > m["capacity_bytes"]]


def validate_plan(plan: Plan, source: str = "plan") -> Plan:
    """Return ``plan`` if it is valid, else raise :class:`InvalidPlanError` listing why."""
    problems = plan_problems(plan)
    if problems:
        raise InvalidPlanError(source, problems)
    return plan


def expert_placement_problems(doc: dict[str, Any]) -> list[str]:
    """Every broken invariant of an expert-placement document (``planner.experts.plan``).

    Each MoE layer fills every slot of every GPU with a valid expert, every expert has at
    least one replica, split fractions are non-negative and sum to 1 per expert, and the
    derived maps (``logical_to_physical``, ``replica_counts``) agree with
    ``physical_to_logical``.
    """
    try:
        E, G, S = int(doc["num_experts"]), int(doc["num_gpus"]), int(doc["slots_per_gpu"])
        phy = np.array(doc["physical_to_logical"], dtype=np.int64)
        split = np.array(doc["split"], dtype=np.float64)
        layers = list(doc["moe_layers"])
    except (KeyError, TypeError, ValueError) as err:
        return [f"expert placement unreadable ({err})"]
    if phy.ndim != 2 or phy.shape != (len(layers), G * S) or split.shape != phy.shape:
        return [f"expert placement: expected {len(layers)} layers x {G}*{S} slots, got "
                f"physical_to_logical {list(phy.shape)} and split {list(split.shape)}"]
    problems: list[str] = []
    if np.any((phy < 0) | (phy >= E)):
        problems.append(f"expert placement: expert ids outside 0..{E - 1}")
        return problems
    for i, layer in enumerate(layers):
        counts = np.bincount(phy[i], minlength=E)
        if np.any(counts == 0):
            problems.append(f"layer {layer}: experts {np.flatnonzero(counts == 0)[:5].tolist()} "
                            "have no replica")
        sums = np.bincount(phy[i], weights=split[i], minlength=E)
        if np.any(split[i] < -1e-9) or np.any(np.abs(sums[counts > 0] - 1) > 1e-6):
            problems.append(f"layer {layer}: split fractions must be >= 0 and sum to 1 per expert")
        if doc.get("replica_counts") is not None and list(doc["replica_counts"][i]) != counts.tolist():
            problems.append(f"layer {layer}: replica_counts disagree with physical_to_logical")
        l2p = doc.get("logical_to_physical")
        if l2p is not None and any(sorted(l2p[i][e]) != np.flatnonzero(phy[i] == e).tolist()
                                   for e in range(E)):
            problems.append(f"layer {layer}: logical_to_physical disagrees with physical_to_logical")
    return problems


def validate_expert_placement(doc: dict[str, Any], source: str = "expert placement") -> dict[str, Any]:
    """Return ``doc`` if valid, else raise :class:`InvalidPlanError` listing why."""
    problems = expert_placement_problems(doc)
    if problems:
        raise InvalidPlanError(source, problems)
    return doc
