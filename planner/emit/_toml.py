"""A tiny TOML writer for the torchtitan config: tables of keys with strings, integers,
booleans, finite floats and (nested) arrays of those (TOML v1.0.0, https://toml.io/en/v1.0.0).

Strings are written as basic strings with every character TOML forbids raw escaped:
``"``, ``\\``, and the control characters U+0000-U+001F and U+007F. Lone surrogates cannot be
written at all and raise ValueError.
"""
from __future__ import annotations

import math
import re

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
          "\r": "\\r"}


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string."""
    out = []
    for ch in value:
        code = ord(ch)
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"a lone surrogate cannot be written to TOML: {value!r}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: object) -> str:
    """One TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {value!r}")
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise ValueError(f"no TOML form for {type(value).__name__}")


Table = tuple[str, tuple[tuple[str, object], ...]]


def toml_document(tables: tuple[Table, ...], head: tuple[str, ...] = ()) -> str:
    """``head`` as ``#`` comment lines (no newlines inside), then each ``[table]``."""
    lines = [f"# {line}".rstrip() for line in head]
    for name, items in tables:
        lines += ["", f"[{toml_key(name)}]"]
        lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in items]
    return "\n".join(lines) + "\n"
