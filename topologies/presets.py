"""Cluster presets: YAML files shipped in ``topologies/data/clusters/`` and a registry by name.

A preset's name is its file name without ``.yaml``; its first line is ``description:``, what the
preset is for. Files are read with ``yaml.safe_load`` only.
"""
from __future__ import annotations

import difflib
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

import yaml

from topologies.cluster import Cluster
from topologies.spec import cluster_from_dict

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


class UnknownPresetError(KeyError):
    """A preset name that is not shipped; the message lists close matches."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want plain text
        return str(self.args[0])


def _preset_files() -> dict[str, Traversable]:
    """Preset name -> its YAML file in the package."""
    folder = resources.files("topologies").joinpath("data/clusters")
    files = (f for f in folder.iterdir() if f.name.endswith(".yaml"))
    return {f.name.removesuffix(".yaml"): f for f in sorted(files, key=lambda f: f.name)}


def preset_text(name: str) -> str:
    """The YAML text of preset ``name``; raises :class:`UnknownPresetError`."""
    files = _preset_files()
    if name not in files:
        close = difflib.get_close_matches(name, list(files), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownPresetError(f"unknown cluster preset '{name}'{hint} "
                                 f"(known: {', '.join(files)})")
    return files[name].read_text()


@lru_cache(maxsize=None)
def _preset_data(name: str) -> dict:
    return yaml.safe_load(preset_text(name))


def cluster_presets() -> dict[str, str]:
    """Every preset name with its one-line description, sorted by name."""
    return {name: _preset_data(name).get("description", "") for name in _preset_files()}


def load_cluster_preset(name: str) -> Cluster:
    """The cluster of preset ``name`` (its ``name`` field defaults to the preset name)."""
    return cluster_from_dict({"name": name, **_preset_data(name)})
