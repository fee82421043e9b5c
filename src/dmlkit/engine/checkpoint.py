"""Atomic checkpoint files: written to a temporary file and renamed, read with ``weights_only=True``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dmlkit.io import atomic_write

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or belongs to another model."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (e.g. the disk is full); the previous file of that name is kept whole."""


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically: a crash leaves either the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as fh:
        torch.save({"format_version": FORMAT_VERSION, **state}, fh)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint`` (tensors and plain Python values only)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint '{path}' does not exist; pass a run folder or a .pt file written by dmlkit train"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for corrupt files
        raise CheckpointError(
            f"checkpoint '{path}' could not be read ({err}); it is corrupt or not a dmlkit checkpoint"
        ) from err
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"'{path}' is not a dmlkit checkpoint of format {FORMAT_VERSION}")
    return state


def non_finite_entries(state_dict: dict[str, Any]) -> list[str]:
    """Names of the floating-point tensors of ``state_dict`` that hold a NaN or an Inf."""
    return [
        name
        for name, value in state_dict.items()
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all())
    ]


def load_model_state(model: torch.nn.Module, state_dict: dict[str, torch.Tensor], source: str) -> None:
    """Load weights, reporting a checkpoint of another architecture as a ``CheckpointError``."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    mismatched = [k for k in own.keys() & state_dict.keys() if own[k].shape != state_dict[k].shape]
    if missing or unexpected or mismatched:
        details = []
        if missing:
            details.append(f"missing {missing[:5]}")
        if unexpected:
            details.append(f"unexpected {unexpected[:5]}")
        if mismatched:
            details.append(f"shape mismatch in {sorted(mismatched)[:5]}")
        raise CheckpointError(
            f"checkpoint '{source}' belongs to another model ({'; '.join(details)}); "
            "use the config the checkpoint was trained with (the run folder's config.yaml)"
        )
    model.load_state_dict(state_dict)
