"""Plan files of earlier schemas, upgraded to the current one.

Schema 1 (planner 0.1, before pools): one training mesh with flat keys ``config`` (degrees and
training options together), ``schedule``, ``micro_batches``, ``stages``, ``nodes``,
``node_order``, ``ranks``, ``groups`` and an optional ``expert_placement``. Schema 2 moves the
mesh into ``pools[0]`` (role ``train``), the training decisions into the ``training`` section
and the expert placement into the ``experts`` section; nothing is recomputed, so an upgraded
plan says exactly what the old file said.
"""
from __future__ import annotations

from typing import Any

from cost_models.training.config import DEGREE_KEYS

V1_KEYS = {"schema_version", "planner_version", "inputs_hash", "inputs", "config", "schedule",
           "micro_batches", "stages", "nodes", "node_order", "ranks", "groups", "prediction",
           "notes", "expert_placement"}


def _pool_gpu(inputs: dict[str, Any], nodes: list[dict[str, Any]]) -> str:
    """The GPU type name(s) of the nodes, read from the cluster in ``inputs``."""
    groups = {g["name"]: g["gpu"] for g in inputs["cluster"]["node_groups"]}
    names: list[str] = []
    for entry in nodes:
        gpu = groups[entry["node_group"]]
        name = gpu if isinstance(gpu, str) else gpu["name"]
        if name not in names:
            names.append(name)
    return "+".join(names)


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """The schema-2 form of a schema-1 plan object (raises ``ValueError`` if it is not one).

    ``etp`` equal to ``tp`` becomes ``None`` (one encoding per layout, see
    :class:`cost_models.parallel.Degrees`).
    """
    unknown = sorted(set(data) - V1_KEYS)
    if unknown:
        raise ValueError(f"unknown schema-1 plan keys {unknown}")
    config = dict(data["config"])
    degrees = {k: config.pop(k) for k in DEGREE_KEYS}
    if degrees["etp"] == degrees["tp"]:
        degrees["etp"] = None
    pool = {"name": "train", "role": "train", "gpu": _pool_gpu(data["inputs"], data["nodes"]),
            "degrees": degrees, "nodes": data["nodes"], "node_order": data["node_order"],
            "ranks": data["ranks"], "groups": data["groups"]}
    out = {"schema_version": 2, "kind": "training", "planner_version": data["planner_version"],
           "inputs_hash": data["inputs_hash"], "inputs": data["inputs"], "pools": [pool],
           "prediction": data["prediction"], "notes": data.get("notes", []),
           "training": {"options": config, "schedule": data["schedule"],
                        "micro_batches": data["micro_batches"], "stages": data["stages"]}}
    if data.get("expert_placement") is not None:
        out["experts"] = data["expert_placement"]
    return out
