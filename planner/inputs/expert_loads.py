"""Per-layer expert loads from files, and synthetic loads for tests and demos.

Accepted files (``load_expert_loads``):

* SGLang's expert-distribution JSON ``{"logical_count": [layers][experts]}`` (what
  ``--init-expert-location`` reads), or ``[steps][layers][experts]`` (a time series);
* a JSON list of the same shapes;
* CSV: one row per layer, one column per expert (a non-numeric first row is a header);
* NPY: ``[layers, experts]`` or ``[steps, layers, experts]``.

Sizes are capped (:mod:`planner.inputs.limits`): layers, experts, trace steps and values in all,
and text files (JSON, CSV) at 64 MiB; an NPY file's shape is checked from its header, before
its data is read.

Loads are token counts (token, top-k slot assignments) or any non-negative weights. Layers whose
counts are all zero (dense layers, as in SGLang's DeepSeek-V3 files) are kept in the array and
reported as dense by :attr:`ExpertLoads.moe_layers`.
"""
from __future__ import annotations

import csv
import json
import warnings
from tokenize import TokenError
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.errors import SpecError
from planner.inputs.documents import parse_json
from planner.inputs.limits import (EXPERTS, LOAD_VALUES, MODEL_LAYERS, TRACE_STEPS, check,
                                   check_file_size)


@dataclass(frozen=True)
class ExpertLoads:
    """``series`` is ``[steps, layers, experts]`` (one step for an aggregate file)."""

    series: np.ndarray
    source: str

    @property
    def total(self) -> np.ndarray:
        """Aggregate loads ``[layers, experts]`` (sum over steps)."""
        return self.series.sum(0)

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """Indices of layers with any load (the others are dense)."""
        return tuple(int(i) for i in np.flatnonzero(self.total.sum(1) > 0))

    @property
    def num_experts(self) -> int:
        return int(self.series.shape[2])


def load_expert_loads(path: Path) -> ExpertLoads:
    """Read a loads file (see the module docstring); bad input raises :class:`SpecError`."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(str(path), "", "an existing expert-loads file (.json, .csv or .npy)")
    suffix = path.suffix.lower()
    if suffix in (".csv", ".json"):
        check_file_size(path)
    if suffix == ".npy":
        array, field = _read_npy(path), "array"
    elif suffix == ".csv":
        array, field = _read_csv(path), "rows"
    elif suffix == ".json":
        array, field = _read_json(path)
    else:
        raise SpecError(str(path), "", f"a .json, .csv or .npy file, not '{suffix or path.name}'")
    return ExpertLoads(_checked(array, str(path), field), str(path))


def _read_npy(path: Path) -> np.ndarray:
    try:
        with path.open("rb") as handle:
            magic = handle.read(6)
    except OSError as err:
        raise SpecError(str(path), "", f"a readable file ({err.strerror})") from None
    if magic != b"\x93NUMPY":  # else numpy takes any other file for a pickle
        raise SpecError(str(path), "", "a NumPy .npy file (it starts with \\x93NUMPY; this "
                        "one does not)")
    try:  # memory-mapped: the header's shape is checked before any data is read
        with warnings.catch_warnings():  # e.g. "created on Python 2": the header still parses
            warnings.simplefilter("ignore")
            array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError, MemoryError, OverflowError, SyntaxError,
            TokenError) as err:  # numpy parses the header with Python's tokenizer
        raise SpecError(str(path), "", f"a numeric NPY array ({type(err).__name__}: "
                        f"{' '.join(str(err).split())[:200]})") from None
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise SpecError(str(path), "array", "integer or float loads", f"dtype {array.dtype}")
    _check_shape(array.shape, str(path), "array")
    return np.array(array, dtype=np.float64)


def _read_csv(path: Path) -> np.ndarray:
    """One row per layer, one column per expert; rows are converted as they are read, and
    reading stops at the first row beyond :data:`MODEL_LAYERS`."""
    rows: list[np.ndarray] = []
    try:
        for i, row in enumerate(r for r in csv.reader(_read_text(path).splitlines()) if r):
            if i == 0 and not _numeric(row[0]):
                continue  # a header
            if rows and len(row) != rows[0].size:
                raise SpecError(str(path), f"row {len(rows) + 1}", f"{rows[0].size} columns like "
                                "row 1 (one column per expert)", len(row))
            check(len(row), EXPERTS, str(path), f"row {len(rows) + 1}: columns")
            check(len(rows) + 1, MODEL_LAYERS, str(path), "rows")
            rows.append(_numbers(row, str(path), len(rows) + 1))
    except csv.Error as err:  # e.g. a field over csv's 128 KiB limit
        raise SpecError(str(path), "", f"a CSV file of numbers ({err})") from None
    return np.array(rows, dtype=np.float64) if rows else np.zeros((0, 0))


def _numbers(row: list[str], source: str, number: int) -> np.ndarray:
    try:
        return np.array([float(x) for x in row], dtype=np.float64)
    except ValueError:
        raise SpecError(source, f"row {number}", "numbers only (one row per layer, one "
                        "column per expert)") from None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(str(path), "", f"a readable file ({err.strerror})") from None
    except UnicodeDecodeError:
        raise SpecError(str(path), "", "a UTF-8 text file") from None


def _numeric(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _read_json(path: Path) -> tuple[np.ndarray, str]:
    text = _read_text(path)
    try:
        data = parse_json(text, str(path))
    except json.JSONDecodeError as err:
        raise SpecError(str(path), "", f"valid JSON ({err})") from None
    field = "logical_count"
    if isinstance(data, dict):
        if "logical_count" not in data:
            raise SpecError(str(path), "logical_count", "SGLang's {\"logical_count\": "
                            "[layers][experts]} or a list of lists", sorted(data)[:5])
        data = data["logical_count"]
    else:
        field = "(top level)"
    if ("true" in text or "false" in text) and _has_flag(data):
        raise SpecError(str(path), field, "numbers, not true or false (a flag read as a "
                        "number would be a load of 1 or 0)")
    try:
        return np.array(data, dtype=np.float64), field
    except (ValueError, TypeError, OverflowError, RecursionError):
        raise SpecError(str(path), field, "a rectangular [layers][experts] or "
                        "[steps][layers][experts] array of numbers") from None


def _has_flag(data) -> bool:
    """Whether nested lists ``data`` hold a JSON true/false anywhere (only looked for when
    the text has one: the walk is over every value)."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            return True
        if isinstance(item, list):
            stack.extend(item)
    return False


def _check_shape(shape: tuple[int, ...], source: str, field: str) -> None:
    """A ``[layers, experts]`` or ``[steps, layers, experts]`` shape within the limits."""
    if len(shape) not in (2, 3) or min(shape) < 1:
        raise SpecError(source, field, "a [layers][experts] or [steps][layers][experts] array",
                        f"shape {list(shape)}")
    steps, layers, experts = (1, *shape) if len(shape) == 2 else shape
    check(steps, TRACE_STEPS, source, f"{field}: steps")
    check(layers, MODEL_LAYERS, source, f"{field}: layers")
    check(experts, EXPERTS, source, f"{field}: experts")
    check(steps * layers * experts, LOAD_VALUES, source, f"{field}: steps x layers x experts")


def _checked(array: np.ndarray, source: str, field: str) -> np.ndarray:
    _check_shape(array.shape, source, field)
    if array.ndim == 2:
        array = array[None]
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise SpecError(source, field, "finite, non-negative loads")
    with np.errstate(over="ignore"):
        total = array.sum()
    if not np.isfinite(total):  # then every partial sum planning takes is finite too
        raise SpecError(source, field, "loads whose sum is a finite number (below about "
                        "1.8e308)")
    if array.shape[2] < 2:
        raise SpecError(source, field, "at least 2 experts per layer", array.shape[2])
    if not np.any(array.sum((0, 2)) > 0):
        raise SpecError(source, field, "at least one layer with non-zero loads")
    return array


def synthetic_loads(
    layers: int = 4,
    experts: int = 64,
    steps: int = 32,
    tokens_per_step: int = 16384,
    top_k: int = 8,
    zipf_s: float = 1.0,
    drift_every: int = 8,
    drift_fraction: float = 0.25,
    seed: int = 0,
) -> np.ndarray:
    """Zipf-skewed routing counts ``[steps, layers, experts]`` with a drifting hot set.

    Each layer ranks its experts by a random permutation; expert of rank ``r`` gets
    probability proportional to ``1 / r**zipf_s``. Every ``drift_every`` steps a
    ``drift_fraction`` of the ranks are reshuffled (the hot set drifts). Each step draws
    ``tokens_per_step * top_k`` assignments from a multinomial. Deterministic per seed.
    """
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, experts + 1) ** zipf_s
    perms = [rng.permutation(experts) for _ in range(layers)]
    out = np.zeros((steps, layers, experts))
    for step in range(steps):
        if step and step % drift_every == 0:
            for p in perms:
                idx = rng.choice(experts, size=max(2, int(drift_fraction * experts)), replace=False)
                p[idx] = p[rng.permutation(idx)]
        for layer, p in enumerate(perms):
            prob = np.empty(experts)
            prob[p] = weights / weights.sum()
            out[step, layer] = rng.multinomial(tokens_per_step * top_k, prob)
    return out
