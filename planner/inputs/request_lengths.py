"""Request length distributions for serving: input and output tokens per request.

Accepted files (``load_request_lengths``):

* CSV with a header naming ``input_tokens`` and ``output_tokens`` (also ``isl``/``osl``,
  ``prompt_tokens``/``completion_tokens``), one request per row;
* JSON: a list of ``[input, output]`` pairs, a list of objects with those keys, or an object of
  two equal-length lists ``{"input_tokens": [...], "output_tokens": [...]}``.

The serving closed form needs the means and the squared coefficients of variation (SCV,
variance / mean^2) of both; the simulator draws from the sample itself.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.errors import SpecError
from planner.inputs.documents import parse_json
from planner.inputs.limits import SEQUENCE_TOKENS, check_file_size

INPUT_KEYS = ("input_tokens", "isl", "prompt_tokens", "input_len")
OUTPUT_KEYS = ("output_tokens", "osl", "completion_tokens", "output_len")


@dataclass(frozen=True)
class RequestLengths:
    """Per request (input tokens, output tokens), as read."""

    input_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    source: str

    @staticmethod
    def _moments(values: tuple[int, ...]) -> tuple[float, float]:
        a = np.asarray(values, dtype=float)
        mean = float(a.mean())
        return mean, float(a.var() / mean ** 2) if mean > 0 else 0.0

    @property
    def input_mean_scv(self) -> tuple[float, float]:
        return self._moments(self.input_tokens)

    @property
    def output_mean_scv(self) -> tuple[float, float]:
        return self._moments(self.output_tokens)


def _key(row: dict, keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if k in row), None)


def _checked(pairs: list, source: str) -> RequestLengths:
    if not pairs:
        raise SpecError(source, "", "at least one request (input and output tokens)")
    ins, outs = [], []
    for i, (a, b) in enumerate(pairs):
        for name, v in (("input_tokens", a), ("output_tokens", b)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 1 or (
                    isinstance(v, float) and not v.is_integer()):  # NaN, inf: not whole
                raise SpecError(source, f"request {i}: {name}", "a whole number >= 1", v)
            if SEQUENCE_TOKENS.exceeded_by(v):
                raise SpecError(source, f"request {i}: {name}", SEQUENCE_TOKENS.expected(), v)
        ins.append(int(a))
        outs.append(int(b))
    return RequestLengths(tuple(ins), tuple(outs), source)


def _from_json(data, source: str) -> RequestLengths:
    if isinstance(data, dict):
        ki, ko = _key(data, INPUT_KEYS), _key(data, OUTPUT_KEYS)
        if ki is None or ko is None or not isinstance(data[ki], list) or not isinstance(
                data[ko], list) or len(data[ki]) != len(data[ko]):
            raise SpecError(source, "", "two equal-length lists input_tokens and "
                            "output_tokens")
        return _checked(list(zip(data[ki], data[ko])), source)
    if isinstance(data, list):
        pairs = []
        for i, row in enumerate(data):
            if isinstance(row, dict) and _key(row, INPUT_KEYS) and _key(row, OUTPUT_KEYS):
                pairs.append((row[_key(row, INPUT_KEYS)], row[_key(row, OUTPUT_KEYS)]))
            elif isinstance(row, (list, tuple)) and len(row) == 2:
                pairs.append(tuple(row))
            else:
                raise SpecError(source, f"request {i}", "[input, output] or an object with "
                                "input_tokens and output_tokens", row)
        return _checked(pairs, source)
    raise SpecError(source, "", "a list of requests or an object of two lists")


def _from_csv(text: str, source: str) -> RequestLengths:
    try:
        rows = list(csv.DictReader(text.splitlines()))
    except csv.Error as err:  # e.g. a field over csv's 128 KiB limit
        raise SpecError(source, "", f"a CSV file of request lengths ({err})") from None
    if not rows:
        raise SpecError(source, "", "a header row and one row per request")
    ki, ko = _key(rows[0], INPUT_KEYS), _key(rows[0], OUTPUT_KEYS)
    if ki is None or ko is None:
        raise SpecError(source, "header", f"columns {INPUT_KEYS[0]} and {OUTPUT_KEYS[0]}",
                        list(rows[0]))
    pairs = []
    for i, row in enumerate(rows):
        try:
            pairs.append((float(row[ki]), float(row[ko])))
        except (TypeError, ValueError):
            raise SpecError(source, f"line {i + 2}", "two numbers", [row[ki], row[ko]]) from None
    return _checked(pairs, source)


def load_request_lengths(path: Path) -> RequestLengths:
    """Read a lengths file (module docstring); bad input raises :class:`SpecError`."""
    source = str(path)
    if not path.is_file():
        raise SpecError(source, "", "an existing CSV or JSON file of request lengths")
    check_file_size(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(source, "", f"a readable text file ({err})") from None
    if path.suffix.lower() == ".json":
        try:
            data = parse_json(text, source)
        except json.JSONDecodeError as err:
            raise SpecError(f"{source}:{err.lineno}", "", f"valid JSON ({err.msg})") from None
        return _from_json(data, source)
    return _from_csv(text, source)
