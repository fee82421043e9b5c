"""Corrupted image files: find them up front and drop them (``on_corrupt: skip``), or fail on first use.

By default (``on_corrupt: error``) a dataset opens an image only when it is used and
raises a ``ValueError`` naming the unreadable file. ``on_corrupt: skip`` decodes every
listed image once when the dataset is built (a full pass over the files), drops the
unreadable ones, keeps their paths and reasons in ``dataset.skipped`` and warns with
their count; class ids are unchanged.

``check_images_open(dataset, split)`` is the quick check a run makes of its evaluation splits
before training: it opens every image's header (not its pixels), so a file that is not an image
at all stops the run at once instead of after the whole training; a truncated image whose
header is intact is still found only when it is decoded.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Sequence

from PIL import Image, UnidentifiedImageError

ON_CORRUPT = ("error", "skip")


def check_on_corrupt(value: str) -> str:
    if value not in ON_CORRUPT:
        raise ValueError(f"on_corrupt must be one of {', '.join(ON_CORRUPT)} (data.params.on_corrupt), got {value!r}")
    return value


def unreadable_reason(path: str | Path) -> str | None:
    """Why ``path`` cannot be decoded as an image, or None when it can."""
    try:
        with Image.open(path) as img:
            img.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def readable_indices(paths: Sequence[str | Path], dataset: str) -> tuple[list[int], list[tuple[str, str]]]:
    """``(indices of the readable paths, [(path, reason) of the others])``; warns when some are skipped."""
    keep, skipped = [], []
    for i, path in enumerate(paths):
        reason = unreadable_reason(path)
        if reason is None:
            keep.append(i)
        else:
            skipped.append((str(path), reason))
    if skipped:
        warnings.warn(
            f"{dataset}: skipped {len(skipped)} unreadable image(s) of {len(paths)} (on_corrupt: skip), "
            f"first: {skipped[0][0]} ({skipped[0][1]}); the list is in dataset.skipped",
            stacklevel=3,
        )
    return keep, skipped


def _dataset_paths(dataset: Any) -> list[Any] | None:
    """Image paths of a file-backed dataset (or of a subset of one, through ``dataset``/``indices``), else None."""
    if hasattr(dataset, "paths"):
        return list(dataset.paths)
    parent, indices = getattr(dataset, "dataset", None), getattr(dataset, "indices", None)
    if parent is None or indices is None:
        return None
    paths = _dataset_paths(parent)
    return None if paths is None else [paths[int(i)] for i in indices]


def check_images_open(dataset: Any, split: str) -> None:
    """``ValueError`` naming the first image of ``dataset`` whose header cannot be opened (see the module docstring)."""
    for path in _dataset_paths(dataset) or ():
        try:
            with Image.open(path):
                pass
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
            raise ValueError(
                f"image '{path}' of the {split} split cannot be read ({type(err).__name__}: {err}); remove or replace it, "
                "or set data.params.on_corrupt=skip to drop unreadable images (found before training starts)"
            ) from err
