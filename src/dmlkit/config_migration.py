"""Old keys of the training methods' settings, read as their ``methods:`` keys.

Before the ``methods:`` section a method's settings lived in four places; ``OLD_KEYS`` maps each old key
(a whole section for ``augment`` and ``ccp``) to its new one. Every source of config values is read through
here: each YAML file of a ``base:`` chain (``migrate_values``, before it is merged), each ``--set`` override
(``migrate_overrides``) and a run folder's saved ``config.yaml`` (through the same file reader, or
``migrate_values`` where a tool reads the YAML itself). An old key gives a ``FutureWarning`` naming the new
key and loads as the new key would; one source (a file, or the ``--set`` list) that gives an old key and its
new key is a ``ValueError``. Across sources the usual order holds: a file overrides its ``base:``, ``--set``
overrides the file.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["OLD_KEYS", "migrate_overrides", "migrate_values", "new_key"]

#: old key path -> new key path; everything under an old section moves with it
OLD_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("augment",): ("methods", "sft"),
    ("ccp",): ("methods", "ccp"),
    ("loss", "zero_shot_weight"): ("methods", "zero_shot", "weight"),
    ("loss", "zero_shot_params"): ("methods", "zero_shot", "params"),
    ("train", "warmup_steps"): ("methods", "warmup", "steps"),
}


def _dotted(keys: tuple[str, ...] | list[str]) -> str:
    return ".".join(keys)


def _warn(old: tuple[str, ...], new: tuple[str, ...], source: str) -> None:
    warnings.warn(
        f"config key '{_dotted(old)}' ({source}) is now '{_dotted(new)}': rename it; the old key will "
        "stop working in a later release",
        FutureWarning,
        stacklevel=4,
    )


def new_key(keys: list[str]) -> tuple[list[str], tuple[str, ...] | None]:
    """``(new path, old key matched)`` of the key path ``keys``; ``(keys, None)`` when it is not an old key."""
    for old, new in OLD_KEYS.items():
        if tuple(keys[: len(old)]) == old:
            return [*new, *keys[len(old) :]], old
    return list(keys), None


def _both_given(old: tuple[str, ...], new: tuple[str, ...], source: str) -> ValueError:
    return ValueError(
        f"{source} gives '{_dotted(old)}' (the old key) and '{_dotted(new)}' (its new key); keep only '{_dotted(new)}'"
    )


def migrate_values(values: dict[str, Any], source: str, warn: bool = True) -> dict[str, Any]:
    """``values`` (one source's config mapping) with every old key moved to its new key (a copy when any moved).
    ``warn=False`` for a record dmlkit wrote itself and reads back (a pretrained backbone's stored config): the
    user has no file to rename."""
    moves = [(old, new) for old, new in OLD_KEYS.items() if _lookup(values, old) is not _MISSING]
    if not moves:
        return values
    result = _copy(values)
    for old, new in moves:
        if _lookup(result, new) is not _MISSING:
            raise _both_given(old, new, source)
        *parents, leaf = old
        _node(result, parents, source).pop(leaf)
        *parents, leaf = new
        _node(result, parents, source)[leaf] = _lookup(values, old)
        if warn:
            _warn(old, new, source)
    return result


def migrate_overrides(key_paths: list[list[str]], overrides: list[str]) -> list[list[str]]:
    """The key path of each override (``key_paths[i]`` of the text ``overrides[i]``), an old key renamed.

    An override list that uses an old key and also its new key (or a key under it, or a section above it) is a
    ``ValueError``, as a file that does.
    """
    renamed = [new_key(keys) for keys in key_paths]
    for (keys, old), text in zip(renamed, overrides):
        if old is None:
            continue
        _warn(old, OLD_KEYS[old], f"--set {text}")
        section = list(OLD_KEYS[old])  # as for a file: the old key and any key of its new section is "both"
        for other, other_old in renamed:
            if other_old is None and other[: len(section)] == section[: len(other)]:
                raise _both_given(old, OLD_KEYS[old], "the --set overrides")
    return [keys for keys, _ in renamed]


_MISSING = object()


def _lookup(values: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(values, dict) or key not in values:
            return _MISSING
        values = values[key]
    return values


def _node(values: dict[str, Any], keys: list[str], source: str) -> dict[str, Any]:
    """The mapping at ``keys`` (created when missing)."""
    for key in keys:
        child = values.setdefault(key, {})
        if child is None:
            child = values[key] = {}
        if not isinstance(child, dict):
            raise ValueError(f"config section '{key}' ({source}) must be a mapping, got {child!r}")
        values = child
    return values


def _copy(values: Any) -> Any:
    return {k: _copy(v) for k, v in values.items()} if isinstance(values, dict) else values
