"""Load a cluster from a preset name, a YAML/JSON file or command-line options.

Every failure becomes one :class:`~planner.errors.SpecError` line that names the file (with the
line when it can be found) or the option, the field path (``node_groups.0.gpu``) and what was
expected: unknown preset, missing file, malformed YAML/JSON, missing or extra field,
non-positive number, unknown GPU, inconsistent fabric or network, a count beyond its limit
(:mod:`topologies.limits`: nodes, GPUs per node, GPUs in all).
"""
from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from planner.errors import SpecError
from planner.inputs.documents import YAML_LOADER, parse_json, parse_yaml
from planner.inputs.limits import (CLUSTER_GPUS, CLUSTER_NODES, GPUS_PER_NODE, check,
                                   check_file_size)
from topologies.catalog import UnknownGpuError, get_gpu
from topologies.cluster import Cluster
from topologies.presets import cluster_presets, preset_text
from topologies.spec import cluster_from_dict, fields_at
from topologies.standard import homogeneous_cluster, node_type_for

CLUSTER_OPTION = "--cluster"
OPTIONS_SOURCE = "command line"
FILE_SUFFIXES = (".yaml", ".yml", ".json")


def load_cluster(ref: str) -> Cluster:
    """The cluster named by ``ref``: a preset name, or a path to a YAML or JSON file."""
    path = Path(ref)
    if path.is_file():
        return _load_file(path)
    if path.exists():
        kind = "a directory" if path.is_dir() else "a special file (device, pipe or socket)"
        raise SpecError(ref, "", f"a cluster YAML or JSON file, not {kind}")
    if path.suffix.lower() in FILE_SUFFIXES or "/" in ref or "\\" in ref:
        raise SpecError(ref, "", "an existing cluster YAML or JSON file (no such file)")
    return _load_preset(ref)


def cluster_from_options(gpu: str, nodes: int, gpus_per_node: int | None = None) -> Cluster:
    """A standard cluster of ``nodes`` nodes of ``gpu`` (see ``homogeneous_cluster``)."""
    if nodes < 1:
        raise SpecError(OPTIONS_SOURCE, "--nodes", "a whole number of nodes >= 1", got=nodes)
    if gpus_per_node is not None and gpus_per_node < 1:
        raise SpecError(OPTIONS_SOURCE, "--gpus-per-node", "a whole number >= 1",
                        got=gpus_per_node)
    check(nodes, CLUSTER_NODES, OPTIONS_SOURCE, "--nodes")
    check(gpus_per_node, GPUS_PER_NODE, OPTIONS_SOURCE, "--gpus-per-node")
    try:
        per_node = gpus_per_node or node_type_for(get_gpu(gpu)).gpus_per_node
        check(nodes * per_node, CLUSTER_GPUS, OPTIONS_SOURCE, "--nodes x GPUs per node")
        return homogeneous_cluster(gpu, nodes, gpus_per_node)
    except UnknownGpuError as err:
        raise SpecError(OPTIONS_SOURCE, "--gpu", f"a GPU from the catalog ({err})") from None
    except ValidationError as err:
        raise SpecError(OPTIONS_SOURCE, "--gpu", _expected(err.errors()[0])) from None


def _load_preset(name: str) -> Cluster:
    presets = cluster_presets()
    if name not in presets:
        close = difflib.get_close_matches(name, list(presets), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise SpecError(CLUSTER_OPTION, "", f"a cluster preset ({', '.join(presets)}) or a "
                        f"YAML/JSON file path{hint}", got=name)
    source, text = f"preset {name}", preset_text(name)
    return _build({"name": name, **_parse(text, source, as_json=False)}, source, text)


def _load_file(path: Path) -> Cluster:
    check_file_size(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(str(path), "", f"a readable text file ({err})") from None
    data = _parse(text, str(path), as_json=path.suffix.lower() == ".json")
    return _build({"name": path.stem, **data}, str(path), text)


def _parse(text: str, source: str, as_json: bool) -> dict[str, Any]:
    """The top-level mapping of a cluster file; syntax errors name their line."""
    try:
        data = parse_json(text, source) if as_json else parse_yaml(text, source)
    except json.JSONDecodeError as err:
        raise SpecError(f"{source}:{err.lineno}", "", f"valid JSON ({err.msg})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = getattr(err, "problem", None) or str(err)
        raise SpecError(where, "", f"valid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise SpecError(source, "", "a mapping with name, description, node_groups and network",
                        got=type(data).__name__ if data is not None else "an empty file")
    return data


def _build(data: dict[str, Any], source: str, text: str) -> Cluster:
    try:
        return cluster_from_dict(data)
    except ValidationError as err:
        raise _spec_error(err, source, text) from None
    except ValueError as err:
        raise SpecError(source, "", f"a consistent cluster ({err})") from None


def _spec_error(err: ValidationError, source: str, text: str) -> SpecError:
    """The first problem pydantic found, as a SpecError at its field (and line)."""
    errors = err.errors()
    first, loc = errors[0], tuple(errors[0]["loc"])
    expected = _expected(first)
    if len(errors) > 1:
        others = ", ".join(".".join(str(p) for p in e["loc"]) or "(top level)" for e in errors[1:])
        expected += f" (also check: {others})"
    line = _yaml_line(text, loc)
    value = first.get("input")
    got = None if first["type"] == "missing" or isinstance(value, (dict, list)) else value
    where = f"{source}:{line}" if line else source
    return SpecError(where, ".".join(str(part) for part in loc), expected, got)


def _expected(error: dict[str, Any]) -> str:
    """What the field should hold, phrased to follow the word 'expected'."""
    loc, kind, msg = tuple(error["loc"]), error["type"], error["msg"]
    if kind == "missing":
        return "a value (required field)"
    if kind == "extra_forbidden":
        allowed = ", ".join(fields_at(loc[:-1])) or "none"
        return f"no field '{loc[-1]}' here (allowed: {allowed})"
    for prefix in ("Value error, ", "Input should be "):
        if msg.startswith(prefix):
            return msg[len(prefix):]
    return msg


def _yaml_line(text: str, loc: tuple) -> int | None:
    """1-based line of the deepest node of ``loc`` that the file has (None if unparsable)."""
    try:
        node = yaml.compose(text, Loader=YAML_LOADER)
    except yaml.YAMLError:
        return None
    if node is None:
        return None
    line = node.start_mark.line
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if k.value == str(part)), None)
            if pair is None:
                break
            line, node = pair[0].start_mark.line, pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) \
                and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line
        else:
            break
    return line + 1
