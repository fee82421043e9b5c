"""The search spaces shipped beside the components they tune, and the ones a plug-in registers.

Each component package keeps a ``search_spaces.yaml`` (``losses/``: one space per loss name; ``methods/``: a
method's own knobs; ``pooling/``: a pooling's parameters). ``space_for(name_or_file)`` gives a registered
space by name or reads a user's YAML file; ``default_space(cfg)`` is the space of the config's loss, what the
thesis' protocol tunes for a baseline.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dmlkit.tune.space import SearchSpace, read_space_file

__all__ = ["default_space", "list_spaces", "register_space", "space_for", "space_sources"]

#: Packages whose ``search_spaces.yaml`` holds spaces, with the kind of component they tune.
_SHIPPED = {"losses": "loss", "methods": "method", "pooling": "pooling"}
_REGISTERED: dict[str, tuple[str, SearchSpace]] = {}


def _shipped() -> dict[str, tuple[str, SearchSpace]]:
    spaces: dict[str, tuple[str, SearchSpace]] = {}
    for folder, kind in _SHIPPED.items():  # read as files: importing dmlkit.methods would load every method
        text = resources.files("dmlkit").joinpath(folder, "search_spaces.yaml").read_text()
        for name, values in (yaml.safe_load(text) or {}).items():
            spaces[name] = (kind, SearchSpace.from_mapping(values, name=name))
    return spaces


def register_space(name: str, values: dict[str, Any], kind: str = "plug-in") -> SearchSpace:
    """Register a space under ``name`` (a plug-in's loss or method); a name taken by a shipped space is an error."""
    if name in _shipped() or name in _REGISTERED:
        raise ValueError(f"search space '{name}' is already registered; choose another name")
    space = SearchSpace.from_mapping(values, name=name)
    _REGISTERED[name] = (kind, space)
    return space


def space_sources() -> dict[str, tuple[str, SearchSpace]]:
    """``{name: (kind, space)}`` of every registered space."""
    return {**_shipped(), **_REGISTERED}


def list_spaces() -> list[str]:
    return sorted(space_sources())


def space_for(name_or_file: str | Path) -> SearchSpace:
    """A registered space by name, or a user's space file (``*.yaml`` / ``*.yml``)."""
    text = str(name_or_file)
    if text.endswith((".yaml", ".yml")) or Path(text).is_file():
        return read_space_file(text)
    spaces = space_sources()
    if text not in spaces:
        raise ValueError(f"unknown search space '{text}'; give a YAML file or one of: {', '.join(sorted(spaces))}")
    return spaces[text][1]


def default_space(loss_name: str) -> SearchSpace:
    """The space of loss ``loss_name``; a loss without one is an error naming how to give a space."""
    spaces = space_sources()
    if loss_name not in spaces:
        raise ValueError(
            f"loss '{loss_name}' has no shipped search space; pass --space with a YAML file mapping config keys to "
            f"ranges (docs/tuning.md), or one of: {', '.join(sorted(spaces))}"
        )
    return spaces[loss_name][1]
