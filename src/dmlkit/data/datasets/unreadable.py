"""Corrupted image files: find them up front and drop them (``on_corrupt: skip``), or fail on first use.

By default (``on_corrupt: error``) a dataset opens an image only when it is used and
raises a ``ValueError`` naming the unreadable file. ``on_corrupt: skip`` decodes every
listed image once when the dataset is built (a full pass over the files), drops the
unreadable ones, keeps their paths and reasons in ``dataset.skipped`` and warns with
their count; class ids are unchanged.

``check_images_open([(split, dataset), ...])`` is the quick check a run makes of all its splits
before training: it opens every image's header (not its pixels) and lists every file that is not an
image in one error (the first ``LISTED`` and the count), so a user fixes them all at once instead of
one run at a time; a truncated image whose header is intact is still found only when it is decoded.

Messages say what is wrong with a file (``unreadable_message``): "not an image" when Pillow
recognises no format in it, "truncated" when its data ends early, else "damaged image data".
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Sequence

from PIL import Image, UnidentifiedImageError

ON_CORRUPT = ("error", "skip")
LISTED = 20  # unreadable files named in one error; the rest are counted


def check_on_corrupt(value: str) -> str:
    if value not in ON_CORRUPT:
        raise ValueError(f"on_corrupt must be one of {', '.join(ON_CORRUPT)} (data.params.on_corrupt), got {value!r}")
    return value


def unreadable_message(err: BaseException) -> str:
    """What Pillow's ``err`` means for the file: not an image, truncated, or otherwise damaged."""
    if isinstance(err, UnidentifiedImageError):
        return "not an image: Pillow recognises no image format in it"
    if isinstance(err, FileNotFoundError):
        return "the file is gone"
    text = str(err)
    if "truncated" in text.lower():
        return f"truncated: the file ends before its image data does ({text})"
    return f"damaged image data ({type(err).__name__}: {text})"


def unreadable_reason(path: str | Path) -> str | None:
    """Why ``path`` cannot be decoded as an image (``unreadable_message``), or None when it can."""
    try:
        with Image.open(path) as img:
            img.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        return unreadable_message(err)
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
            f"first: {skipped[0][0]} ({skipped[0][1]}); a run lists them all in its skipped_images.json "
            "(dataset.skipped)",
            stacklevel=3,
        )
    return keep, skipped


def dataset_paths(dataset: Any) -> list[Any] | None:
    """Image paths of a file-backed dataset (or of a subset of one, through ``dataset``/``indices``), else None."""
    if hasattr(dataset, "paths"):
        return list(dataset.paths)
    parent, indices = getattr(dataset, "dataset", None), getattr(dataset, "indices", None)
    if parent is None or indices is None:
        return None
    paths = dataset_paths(parent)
    return None if paths is None else [paths[int(i)] for i in indices]


def unopenable(paths: Sequence[str | Path]) -> list[tuple[str, str]]:
    """``[(path, reason)]`` of the ``paths`` whose image header cannot be opened."""
    bad = []
    for path in paths:
        try:
            with Image.open(path):
                pass
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
            bad.append((str(path), unreadable_message(err)))
    return bad


def listed(bad: Sequence[tuple[str, str]]) -> str:
    """The first ``LISTED`` of ``[(path, reason)]``, one per line, and how many more there are."""
    lines = [f"  {path}: {reason}" for path, reason in bad[:LISTED]]
    if len(bad) > LISTED:
        lines.append(f"  ... and {len(bad) - LISTED} more")
    return "\n".join(lines)


def check_images_open(splits: Sequence[tuple[str, Any]]) -> None:
    """One ``ValueError`` listing every image of the ``(split name, dataset)`` pairs whose header cannot be opened
    (see the module docstring); an image shared by several splits is opened once."""
    seen: set[str] = set()
    bad: list[tuple[str, str]] = []
    for split, dataset in splits:
        paths = [p for p in dataset_paths(dataset) or () if str(p) not in seen]
        seen.update(map(str, paths))
        bad += [(f"{path} ({split} split)", reason) for path, reason in unopenable(paths)]
    if bad:
        raise ValueError(
            f"{len(bad)} image(s) cannot be read (found before training starts):\n{listed(bad)}\n"
            "remove or replace them, or set data.params.on_corrupt=skip to drop unreadable images "
            "(the run folder's skipped_images.json then lists them)"
        )
