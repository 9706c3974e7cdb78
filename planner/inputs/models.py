"""Resolve what a user types after ``--model`` to a :class:`ModelSpec`.

Owns the preset registry (``data/models/index.yaml``: name -> file, one-line description) and
the choice between our model schema (``planner.inputs.model_file``) and a Hugging Face
``config.json`` (``planner.inputs.hf_import``, detected by its ``model_type`` key). Every failure is a
one-line :class:`SpecError` naming the file, line or field.
"""
from __future__ import annotations

import dataclasses
import difflib
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from cost_models.model_spec import ModelSpec
from planner.errors import SpecError
from planner.inputs.documents import parse_yaml
from planner.inputs.hf_import import model_from_hf_config, read_json
from planner.inputs.limits import (ATTENTION_HEADS, EXPERTS, HIDDEN_SIZE, LAYER_WIDTH,
                                   MODEL_LAYERS, SEQUENCE_TOKENS, VOCABULARY, Limit, check,
                                   check_file_size)
from planner.inputs.model_file import model_from_yaml_dict

_PRESET_DIR = resources.files("planner").joinpath("data", "models")
_FILE_SUFFIXES = (".yaml", ".yml", ".json")

# The limit on each count of our model schema (planner.inputs.model_file), by field path;
# any other field of a block is a width (LAYER_WIDTH).
_SCHEMA_LIMITS: dict[str, Limit] = {
    "num_layers": MODEL_LAYERS, "mtp_layers": MODEL_LAYERS, "hidden_size": HIDDEN_SIZE,
    "num_heads": ATTENTION_HEADS, "num_kv_heads": ATTENTION_HEADS, "vocab_size": VOCABULARY,
    "head_dim": LAYER_WIDTH, "ffn_hidden_size": LAYER_WIDTH,
    "position_embeddings": SEQUENCE_TOKENS, "sliding_window": SEQUENCE_TOKENS,
    "attention_chunk": SEQUENCE_TOKENS, "moe.num_experts": EXPERTS, "moe.top_k": EXPERTS,
    "moe.num_shared_experts": EXPERTS, "linear_attn.num_key_heads": ATTENTION_HEADS,
    "linear_attn.num_value_heads": ATTENTION_HEADS, "sparse_attn.index_topk": SEQUENCE_TOKENS,
    "sparse_attn.index_n_heads": ATTENTION_HEADS,
}
_SCHEMA_BLOCKS = ("moe", "mla", "linear_attn", "sparse_attn")


@lru_cache(maxsize=1)
def _registry() -> dict[str, dict[str, str]]:
    """Preset name (lower case) -> {"file": ..., "description": ...}."""
    index = yaml.safe_load(_PRESET_DIR.joinpath("index.yaml").read_text(encoding="utf-8"))
    return {name.lower(): entry for name, entry in index.items()}


def model_presets() -> dict[str, str]:
    """Preset name -> one-line description, in registry order."""
    return {name: entry["description"] for name, entry in _registry().items()}


def read_mapping(path: Path) -> Any:
    """Parse a ``.json`` file with ``json``, anything else with ``yaml.safe_load``; a parse
    error names the file and the line."""
    check_file_size(path)
    if path.suffix.lower() == ".json":
        return read_json(path)
    try:
        return parse_yaml(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(str(path), "", "a readable UTF-8 text file", str(err)) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(str(path), where, "valid YAML", problem) from None


def model_from_data(data: Any, source: str) -> ModelSpec:
    """A parsed file: HF ``config.json`` when it has ``model_type``, else our schema."""
    if isinstance(data, dict) and "model_type" in data:
        return model_from_hf_config(data, source)
    if isinstance(data, dict) and "num_layers" not in data and (
            {"architectures", "num_hidden_layers"} & set(data)):
        raise SpecError(source, "model_type", "a Hugging Face config.json's model_type (e.g. "
                        "'llama', which names the architecture to import), or a model file in "
                        "planner's schema (num_layers, hidden_size, ...)")
    check_schema_limits(data, source)
    return model_from_yaml_dict(data, source)


def check_schema_limits(data: Any, source: str) -> None:
    """Refuse a count of our model schema beyond its limit (:data:`_SCHEMA_LIMITS`) before
    the model is built: ``num_layers: 1000000000`` would build a billion-entry table per
    layer kind. Types are left to the schema's validator."""
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        if key in _SCHEMA_BLOCKS and isinstance(value, dict):
            for inner, number in value.items():
                path = f"{key}.{inner}"
                check(number, _SCHEMA_LIMITS.get(path, LAYER_WIDTH), source, path)
        elif key in _SCHEMA_LIMITS:
            check(value, _SCHEMA_LIMITS[key], source, key)


def load_model_file(path: str | Path) -> ModelSpec:
    """Read a model YAML/JSON in our schema or an HF ``config.json``."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(str(path), "", "an existing model file (YAML, JSON or HF config.json)")
    return model_from_data(read_mapping(path), str(path))


def _load_preset(name: str) -> ModelSpec:
    path = _PRESET_DIR.joinpath(_registry()[name]["file"])
    with resources.as_file(path) as real_path:
        spec = load_model_file(real_path)
    return dataclasses.replace(spec, name=name)


def _unknown_preset(ref: str) -> SpecError:
    """The error for a name that is neither a preset nor a file, with close matches."""
    close = difflib.get_close_matches(ref.lower(), list(_registry()), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}?" if close else ", ".join(_registry())
    return SpecError("--model", "", f"a preset name ({hint}) or a path to a YAML or config.json",
                     ref)


def load_model(ref: str) -> ModelSpec:
    """A preset name (any case), a model YAML/JSON in our schema, an HF config.json, or a
    folder holding a config.json (an HF checkpoint's folder)."""
    key = ref.strip().lower()
    if key in _registry():
        return _load_preset(key)
    path = _model_path(ref)
    if path.is_dir() and (path / "config.json").is_file():
        return load_model_file(path / "config.json")
    if path.is_file() or path.suffix.lower() in _FILE_SUFFIXES or len(path.parts) > 1:
        return load_model_file(path)
    raise _unknown_preset(ref)


def _model_path(ref: str) -> Path:
    try:
        return Path(ref).expanduser()
    except RuntimeError:  # ``~nouser/x.yaml``: no such user, or no home directory
        raise SpecError("--model", "", "a path whose ~user has a home directory", ref) from None


def engine_model_path(ref: str, spec: ModelSpec) -> tuple[str, bool]:
    """What a serving engine loads for ``--model ref`` (``serve --model-path``'s default), and
    whether that is known to be loadable: a preset's Hugging Face id (``hf_id`` in the
    registry), the folder of an HF ``config.json`` (or the folder given) as an absolute path,
    else the model's name (a model file in our schema says nothing of its weights: False)."""
    entry = _registry().get(ref.strip().lower())
    if entry is not None:
        return (entry["hf_id"], True) if entry.get("hf_id") else (spec.name, False)
    path = _model_path(ref)
    if path.is_dir():  # absolute: engines start in other folders (and on other hosts)
        return str(path.resolve()), True
    if path.name == "config.json":
        return str(path.resolve().parent), True
    return spec.name, False
