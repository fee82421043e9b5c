"""Old keys of the training methods' settings in stored run records, read as their ``methods:`` keys.

Removed in dmlkit 0.3. A record dmlkit wrote before the ``methods:`` section existed names a method's
settings in one of four other places; ``OLD_KEYS`` maps each old key (a whole section for ``augment`` and
``ccp``) to its new one. Only stored records are migrated: a run folder's saved ``config.yaml`` (read with
``load_config(..., stored=True)`` when a run is resumed, evaluated, searched, reported or re-run with
``dmlkit train RUN/config.yaml``) and a cached pretrained backbone's stored config. There an old key loads as
its new key would, with a ``FutureWarning`` naming both (none for a backbone's config: the user has no file to
rename), and a record that gives an old key and its new key is a ``ValueError``. A user's own YAML or ``--set``
is not migrated: an old key there is an unknown key, and the error names its new key (``old_key_hint``).
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["OLD_KEYS", "REMOVED_IN", "migrate_values", "new_key", "old_key_hint"]

#: the release that stops reading old keys in stored records
REMOVED_IN = "0.3"

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
        f"config key '{_dotted(old)}' ({source}) is now '{_dotted(new)}': rename it; stored records with the "
        f"old key stop loading in dmlkit {REMOVED_IN}",
        FutureWarning,
        stacklevel=4,
    )


def new_key(keys: list[str]) -> tuple[list[str], tuple[str, ...] | None]:
    """``(new path, old key matched)`` of the key path ``keys``; ``(keys, None)`` when it is not an old key."""
    for old, new in OLD_KEYS.items():
        if tuple(keys[: len(old)]) == old:
            return [*new, *keys[len(old) :]], old
    return list(keys), None


def old_key_hint(keys: list[str]) -> str:
    """``" ('augment' is now 'methods.sft')"`` when the key path ``keys`` is an old key, else ``""``: the hint an
    unknown-key error gives for a user's own YAML or ``--set``, which are not migrated."""
    _, old = new_key(keys)
    return "" if old is None else f" ('{_dotted(old)}' is now '{_dotted(OLD_KEYS[old])}')"


def _both_given(old: tuple[str, ...], new: tuple[str, ...], source: str) -> ValueError:
    return ValueError(
        f"{source} gives '{_dotted(old)}' (the old key) and '{_dotted(new)}' (its new key); keep only '{_dotted(new)}'"
    )


def migrate_values(values: dict[str, Any], source: str, warn: bool = True) -> dict[str, Any]:
    """``values`` (one stored record's config mapping) with every old key moved to its new key (a copy when any
    moved). ``warn=False`` for a record dmlkit wrote itself and reads back (a pretrained backbone's stored
    config): the user has no file to rename."""
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
