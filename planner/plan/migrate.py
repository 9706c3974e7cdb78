"""Plan files of earlier schemas, upgraded to the current one (:func:`upgrade`).

Schema 1 (planner 0.1, before pools): one training mesh with flat keys ``config`` (degrees and
training options together), ``schedule``, ``micro_batches``, ``stages``, ``nodes``,
``node_order``, ``ranks``, ``groups`` and an optional ``expert_placement``. Schema 2 moves the
mesh into ``pools[0]`` (role ``train``), the training decisions into the ``training`` section
and the expert placement into the ``experts`` section; nothing is recomputed, so an upgraded
plan says exactly what the old file said.

Schema 2 stores each pool's rank table explicitly (``ranks``: ``columns`` and one row per
global rank: rank, node rank, local GPU, coordinate per axis) and every process group
(``groups``). Schema 3 stores the rule plus exceptions (:mod:`planner.plan.ranks`) and no
groups: the upgrade keeps each rank's slot (a GPU other than the rule's becomes an exception)
and checks that what it drops, the coordinates and the groups, is what the degrees' rank
order gives; a table that differs (a duplicate rank, swapped coordinates, a group of the
wrong ranks) raises :class:`planner.errors.InvalidPlanError` naming the first difference of
the table and each group kind that differs, so such a file is still reported as an invalid
plan.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from cost_models.groups import groups_of
from cost_models.parallel import COORD_AXES, KINDS, Degrees, rank_coords
from cost_models.training.config import DEGREE_KEYS
from planner.errors import InvalidPlanError
from planner.plan.ranks import RANK_COLUMNS, RANK_RULE, exceptions_of

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
    """The current (schema 3) form of a plan object of schema 1 or 2."""
    if data.get("schema_version") == 1:
        data = upgrade_v1(data)
    if data.get("schema_version") == 2:
        data = upgrade_v2(data)
    return data


def upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
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


def upgrade_v2(data: dict[str, Any]) -> dict[str, Any]:
    """The schema-3 form of a schema-2 plan object: each pool's rank table becomes the rule
    plus exceptions and its groups are dropped (module docstring); raises
    :class:`InvalidPlanError` if a table or a group differs from the rank order."""
    pools, problems = [], []
    for i, pool in enumerate(data["pools"]):
        upgraded, found = _pool_v3(pool)
        pools.append(upgraded)
        problems += [f"pool '{pool.get('name', i)}': {p} (schema-2 rank table)" for p in found]
    if problems:
        raise InvalidPlanError("schema-2 plan", problems)
    return {**data, "schema_version": 3, "pools": pools}


def _pool_v3(pool: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the schema-3 pool, the differences between its table and groups and the rule's)."""
    d = Degrees(**pool["degrees"])
    table = pool["ranks"]
    gpus = [n["gpus"] for n in pool["nodes"]]
    upgraded = {k: v for k, v in pool.items() if k != "groups"}
    problems = _table_problems(table, d, sum(gpus))
    problems += [p for kind in KINDS for p in _group_problem(pool["groups"], d, kind)]
    if problems:
        return upgraded, problems
    rows = np.asarray(table["rows"], dtype=np.int64)
    rows = rows[np.argsort(rows[:, 0])]
    upgraded["ranks"] = {"rule": RANK_RULE,
                         "exceptions": exceptions_of(gpus, rows[:, 1], rows[:, 2])}
    return upgraded, []


def _table_problems(table: dict[str, Any], d: Degrees, node_gpus: int) -> list[str]:
    """How an explicit rank table differs from the rule: its shape, its ranks, the
    coordinates of each rank (node rank and local GPU are checked after the upgrade)."""
    if list(table["columns"]) != list(RANK_COLUMNS):
        return [f"rank table columns {table['columns']}, expected {list(RANK_COLUMNS)}"]
    try:
        rows = np.asarray(table["rows"])
    except (ValueError, TypeError):  # ragged
        rows = np.zeros(0)
    if rows.ndim != 2 or rows.shape[1] != len(RANK_COLUMNS) or rows.dtype.kind not in "iu":
        return [f"rank table rows must be {len(RANK_COLUMNS)} whole numbers each"]
    if len(rows) != d.num_gpus or node_gpus != d.num_gpus:
        return [f"rank table has {len(rows)} rows, the degrees {d.num_gpus} GPUs and the "
                f"nodes {node_gpus}"]
    if not np.array_equal(np.sort(rows[:, 0]), np.arange(d.num_gpus)):
        return [f"ranks are not exactly 0..{d.num_gpus - 1}"]
    rows = rows[np.argsort(rows[:, 0])]
    coords = rank_coords(d)
    for col, axis in enumerate(COORD_AXES, start=3):
        bad = np.flatnonzero(rows[:, col] != coords[axis])
        if bad.size:
            return [f"rank {int(bad[0])}: coordinate {axis} is not the rank order's"]
    return []


def _group_problem(groups: dict[str, Any], d: Degrees, kind: str) -> list[str]:
    """[] if ``groups[kind]`` is the partition the rank order gives (each group's members
    and the groups in any order), else one line saying how it differs."""
    given = groups.get(kind)
    if given is None:
        return [f"groups.{kind} missing"]
    expected = np.asarray(groups_of(d, kind), dtype=np.int64)
    try:
        table = np.asarray(given)
    except (ValueError, TypeError):  # ragged
        table = np.zeros(0)
    if table.shape != expected.shape or table.dtype.kind not in "iu":
        sizes = sorted({len(g) for g in given if isinstance(g, list)})
        return [f"groups.{kind}: {len(given)} groups of sizes {sizes}, expected "
                f"{len(expected)} of {expected.shape[1]}"]
    if not np.array_equal(_canonical(table), _canonical(expected)):
        return [f"groups.{kind} are not the groups of the rank order"]
    return []


def _canonical(groups: np.ndarray) -> np.ndarray:
    """Groups [group, member] with members sorted and groups sorted: one form per partition."""
    members = np.sort(groups, axis=1)
    return members[np.lexsort(members.T[::-1])]
