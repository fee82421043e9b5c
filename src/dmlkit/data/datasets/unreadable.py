"""Corrupted image files: find them up front and drop them (``on_corrupt: skip``), or fail on first use.

By default (``on_corrupt: error``) a dataset opens an image only when it is used and
raises a ``ValueError`` naming the unreadable file. ``on_corrupt: skip`` decodes every
listed image once when the dataset is built (a full pass over the files), drops the
unreadable ones, keeps their paths and reasons in ``dataset.skipped`` and warns with
their count; class ids are unchanged.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence

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
