"""Parsing JSON and YAML input documents without the failures their parsers let through.

``json.loads`` and ``yaml.safe_load`` raise more than their own error types on hostile input:
``RecursionError`` for deeply nested arrays, ``ValueError`` for integers of more than 4,300
digits, and they happily return integers no C long or float can hold (which then overflow
deep inside numpy or a cost model) and, for YAML, self-referencing structures (``&a [*a]``);
libyaml crashes the process on block nesting some thousands deep, and PyYAML spends seconds on
deep flow nesting.
:func:`parse_json` and :func:`parse_yaml` turn every such case into one
:class:`~planner.errors.SpecError` naming the file, and :func:`check_document` rejects what
parsed but cannot be used: nesting deeper than :data:`MAX_NESTING`, cycles, and integers
beyond a signed 64-bit value. Text longer than :data:`MAX_TEXT_CHARS` is refused before any
parser sees it (the readers refuse such files before reading them; this is the backstop).
The maximums and their reasons are in :mod:`planner.inputs.limits`.
"""
from __future__ import annotations

import json
import re
import sys
from typing import Any

import yaml

from planner.errors import SpecError
from planner.inputs.limits import ALIASED_VALUES, INPUT_FILE_BYTES, NESTING_DEPTH, WHOLE_NUMBER

# libyaml's loader when PyYAML was built with it (ten times faster), else the pure-Python one;
# both safe (no Python object tags).
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# No planner input nests deeper than about 8 levels (a plan's pools.0.groups.cp.0.0 is 6).
MAX_NESTING = NESTING_DEPTH.maximum
# Integers a C long (and so numpy's int64) holds; a larger count is no real quantity.
MAX_INT = WHOLE_NUMBER.maximum
# Values a document may reach again through YAML aliases (``*name``) beyond its own: a file of
# nested aliases (a 'billion laughs') is small but expands to more than anything can walk.
MAX_ALIASED_NODES = ALIASED_VALUES.maximum
# Characters of one document (a character is at least a byte: the file-size limit).
MAX_TEXT_CHARS = INPUT_FILE_BYTES.maximum


def parse_json(text: str, source: str) -> Any:
    """``json.loads(text)``, checked by :func:`check_document`. A syntax error is left to the
    caller (``json.JSONDecodeError``, which each reader words its own way); every other
    failure is a SpecError naming ``source``."""
    check_text_size(text, source)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise _too_deep(source) from None
    except ValueError as err:  # an integer literal longer than Python converts (4,300 digits)
        raise bad_value_error(err, source) from None
    if not _plain_json_ok(data):  # JSON has no aliases or cycles: the quick walk finds the rest
        check_document(data, source)
    return data


def _plain_json_ok(data: Any) -> bool:
    """Whether parsed JSON nests at most :data:`MAX_NESTING` deep and holds no integer beyond
    :data:`MAX_INT` (a quick walk; :func:`check_document` says where the problem is)."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if kind is int:
            if not -MAX_INT <= value <= MAX_INT:
                return False
            continue
        if kind is not list and kind is not dict:
            continue
        if depth >= MAX_NESTING:
            return False
        for item in value.values() if kind is dict else value:
            kind = type(item)
            if kind is list or kind is dict:
                stack.append((item, depth + 1))
            elif kind is int and not -MAX_INT <= item <= MAX_INT:
                return False
    return True


def parse_yaml(text: str, source: str) -> Any:
    """``yaml.safe_load(text)`` (with :func:`yaml_loader_for`), checked by
    :func:`check_document`. A syntax error is left to the caller (``yaml.YAMLError``); every
    other failure is a SpecError naming ``source``."""
    check_text_size(text, source)
    check_yaml_text(text, source)
    try:
        data = yaml.load(text, Loader=yaml_loader_for(text))
    except RecursionError:
        raise _too_deep(source) from None
    except ValueError as err:  # a 5,000-digit integer, a timestamp of February 30th
        raise bad_value_error(err, source) from None
    check_document(data, source)
    return data


def check_text_size(text: str, source: str) -> None:
    """Refuse a document longer than :data:`MAX_TEXT_CHARS`: parsed, it would take ten to
    thirty times that in memory."""
    if len(text) > MAX_TEXT_CHARS:
        raise SpecError(source, "", f"{INPUT_FILE_BYTES.expected()}; this text has "
                        f"{len(text) / 2**20:,.1f} MiB")


def _max_digits() -> int:
    return getattr(sys, "get_int_max_str_digits", lambda: 4300)()  # Python >= 3.10.7


def bad_value_error(err: ValueError, source: str) -> SpecError:
    """A value the parser could not convert, as a SpecError naming ``source``."""
    if "integer string conversion" in str(err):
        return SpecError(source, "", f"numbers of at most {_max_digits():,} digits")
    return SpecError(source, "", f"values the parser can convert ({' '.join(str(err).split())[:200]})")


# Flow brackets of YAML text, skipping quoted scalars and comments.
_FLOW_TOKENS = re.compile(r"""'(?:[^'\n]|'')*'|"(?:[^"\\\n]|\\.)*"|(?:^|(?<=\s))#[^\n]*|[\[\]{}]""")


def _flow_depth(text: str) -> int:
    """How deep the flow collections (``[...]``, ``{...}``) of YAML ``text`` nest, at most
    :data:`MAX_NESTING` + 1 (an estimate: brackets in plain scalars count too)."""
    depth = deepest = 0
    for match in _FLOW_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_NESTING:
                break
        elif token in "]}":
            depth = max(0, depth - 1)
    return deepest


def check_yaml_text(text: str, source: str) -> None:
    """Refuse YAML whose flow collections nest deeper than :data:`MAX_NESTING` before any
    parser sees it: PyYAML spends seconds on such text and libyaml crashes the process."""
    if _flow_depth(text) > MAX_NESTING:
        raise _too_deep(source)


# The start of a line: its indentation and any compact block indicators (``- - - x``).
_BLOCK_PREFIX = re.compile(r"^[ \t]*(?:[-?:][ \t]+)*", re.MULTILINE)


def yaml_loader_for(text: str) -> type:
    """:data:`YAML_LOADER`, unless ``text`` may nest deeper than :data:`MAX_NESTING` in
    block style (deep indentation, ``- - - x``): libyaml's composer recurses in C and
    crashes the process past some thousands of levels, so such text goes to the pure-Python
    loader, whose recursion ends in a RecursionError."""
    deepest = max(map(len, _BLOCK_PREFIX.findall(text)), default=0)
    return yaml.SafeLoader if deepest > MAX_NESTING else YAML_LOADER


def _too_deep(source: str) -> SpecError:
    return SpecError(source, "", f"a document nested at most {MAX_NESTING} levels deep")


def check_document(data: Any, source: str) -> None:
    """Reject what a parser returned but nothing downstream can use: nesting deeper than
    :data:`MAX_NESTING`, a structure that contains itself or expands to more than
    :data:`MAX_ALIASED_NODES` nodes through YAML aliases, and integers (values or keys) beyond
    :data:`MAX_INT`. Walks each container once, without recursion."""
    if not isinstance(data, (dict, list, tuple)):
        _check_int(data, (), source)
        return
    on_path: set[int] = set()  # containers on the path from the root to the current one
    size_of: dict[int, int] = {}  # expanded node count of each container walked
    aliased = 0  # nodes reached again through shared (aliased) containers
    stack: list[tuple[Any, tuple, bool]] = [(data, (), False)]
    while stack:
        value, path, leaving = stack.pop()
        if leaving:
            on_path.discard(id(value))
            size_of[id(value)] = 1 + sum(size_of.get(id(v), 1) for v in _children(value))
            continue
        if id(value) in on_path:
            raise SpecError(source, _dotted(path), "a document without a structure that "
                            "contains itself (a YAML alias of its own anchor)")
        if len(path) >= MAX_NESTING:
            raise SpecError(source, _dotted(path[:8]) + "...",
                            f"a document nested at most {MAX_NESTING} levels deep")
        if id(value) in size_of:  # a YAML alias of a container already walked
            aliased += size_of[id(value)]
            if aliased > MAX_ALIASED_NODES:
                raise SpecError(source, _dotted(path), f"YAML aliases that expand to at most "
                                f"{MAX_ALIASED_NODES:,} values")
            continue
        on_path.add(id(value))
        stack.append((value, path, True))
        is_dict = isinstance(value, dict)
        for key, item in value.items() if is_dict else enumerate(value):
            if is_dict:
                _check_int(key, path, source)
            if isinstance(item, (dict, list, tuple)):
                stack.append((item, path + (key,), False))
            elif type(item) is int and not -MAX_INT <= item <= MAX_INT:
                _check_int(item, path + (key,), source)


def _children(value: Any) -> Any:
    if isinstance(value, dict):
        return value.values()
    return value if isinstance(value, (list, tuple)) else ()


def _check_int(value: Any, path: tuple, source: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        digits = round(value.bit_length() * 0.30103)
        raise SpecError(source, _dotted(path), f"a whole number of at most 2**63 - 1 (this one "
                        f"has about {digits} digits)")


def _dotted(path: tuple) -> str:
    text = ".".join(str(part) for part in path) or "(top level)"
    return text if len(text) <= 200 else text[:197] + "..."
