"""Reading the plain data reports are handed: a plan's or an estimate's ``config``.

A config holds its parallel degrees either beside the other options (plan files of schema 1)
or under ``degrees`` (schema 2); :func:`flat_config` gives both the same flat shape, so the
reports read ``config["tp"]`` in one way.
"""
from __future__ import annotations

from typing import Any, Mapping

__all__ = ["flat_config"]


def flat_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with its ``degrees`` (if nested) lifted beside the other options."""
    flat = {k: v for k, v in config.items() if k != "degrees"}
    flat.update(config.get("degrees") or {})
    return flat
