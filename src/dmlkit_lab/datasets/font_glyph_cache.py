"""The ``font_glyphs`` table's ``.npz`` cache: its key, reading it, and rendering on a miss or a stale key.

File: ``<root>/font_glyphs-v<FONT_GLYPHS_VERSION>-<size>px.npz``, ``root`` defaulting to
``$DMLKIT_CACHE/font_glyphs`` or ``~/.cache/dmlkit/font_glyphs``. Besides the ``GlyphTable`` fields it
stores the key (``font_table_key``: version, selection rule, the faces in order with the fingerprint of
their files, the candidate characters, the size) and the counts of skipped renderings. A file of another
key (another font set installed, another rule) is never used or mixed with new renderings: a warning
says what changed and the table is rendered again and replaced atomically.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from dmlkit.data.cache import save_npz_atomic
from dmlkit_lab.datasets.font_faces import face_name, faces_fingerprint
from dmlkit_lab.datasets.font_glyph_table import (
    FontTableCounts,
    build_font_table,
    font_glyphs_rule,
    rerender_font_table,
)
from dmlkit.data.datasets.glyph_cache import cached_table_sizes, read_table, table_arrays, table_cache_path
from dmlkit.data.datasets.glyph_select import REFERENCE_SIZE
from dmlkit.data.datasets.glyph_table import GlyphTable
from dmlkit.validation import is_int

__all__ = ["FONT_GLYPHS_VERSION", "cached_font_sizes", "font_glyphs_cache_path", "font_table_key", "load_font_table"]

FONT_GLYPHS_VERSION = "1"


def font_glyphs_cache_path(image_size: int = REFERENCE_SIZE, root: str | Path | None = None) -> Path:
    """Where the table of ``image_size`` px lies: ``<root>/font_glyphs-v<version>-<size>px.npz``."""
    return table_cache_path("font_glyphs", FONT_GLYPHS_VERSION, image_size, root)


def cached_font_sizes(root: str | Path | None = None) -> list[int]:
    """The image sizes (ascending) whose tables of this version lie in the cache folder."""
    return cached_table_sizes("font_glyphs", FONT_GLYPHS_VERSION, root)


def font_table_key(
    faces: Sequence[Path], candidates: Sequence[int], image_size: int, min_images: int | None = None
) -> str:
    """What a cached table must match to be used (see the module docstring)."""
    cands = hashlib.sha256(",".join(str(int(c)) for c in sorted(candidates)).encode()).hexdigest()[:16]
    return (
        f"font_glyphs v{FONT_GLYPHS_VERSION} {font_glyphs_rule(min_images)} faces={len(faces)}:{faces_fingerprint(faces)} "
        f"candidates={len(candidates)}:{cands} size={int(image_size)}"
    )


def load_font_table(
    faces: Sequence[Path],
    candidates: Sequence[int],
    root: str | Path | None = None,
    image_size: int = REFERENCE_SIZE,
    force: bool = False,
    min_images: int | None = None,
) -> GlyphTable:
    """The table of ``candidates`` in ``faces`` at ``image_size`` px, from the cache or rendered (and cached) now;
    a class keeps at least ``min_images`` distinct images (default ``MIN_FACE_IMAGES``)."""
    if not is_int(image_size) or image_size < 8:
        raise ValueError(f"image_size must be an int >= 8, got {image_size!r}")
    if min_images is not None and (not is_int(min_images) or min_images < 2):
        raise ValueError(f"min_images must be an int >= 2 (a class needs a positive pair), got {min_images!r}")
    faces = [Path(f) for f in faces]
    key = font_table_key(faces, candidates, image_size, min_images)
    path = font_glyphs_cache_path(image_size, root)
    table = None if force else _load(path, key, faces)
    if table is not None:
        return table
    if image_size == REFERENCE_SIZE:
        table, counts = build_font_table(faces, candidates, min_images)
    else:
        reference = load_font_table(faces, candidates, root, REFERENCE_SIZE, force, min_images)
        table = rerender_font_table(reference, faces, image_size)
        counts = FontTableCounts()
    header = {
        "key": np.array(key),
        "blank": np.array(counts.blank),
        "rendered": np.array(counts.rendered),
        "unreadable_faces": np.array(list(counts.unreadable_faces), dtype=str),
    }
    save_npz_atomic(path, table_arrays(table, header))
    return table


def _load(path: Path, key: str, faces: list[Path]) -> GlyphTable | None:
    """The cached table, or ``None`` (with a warning that says why) if the file is missing, unreadable or stale."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            stored = str(z["key"])
            if stored == key:
                return read_table(z)
            old_faces = [str(n) for n in z["font_names"]]
    except (OSError, ValueError, KeyError, EOFError) as err:  # corrupt or foreign file: rebuild
        warnings.warn(f"ignoring unreadable font_glyphs cache {path} ({err}); rendering again", stacklevel=3)
        return None
    new_faces = [face_name(f) for f in faces]
    gone = sorted(set(old_faces) - set(new_faces))
    added = sorted(set(new_faces) - set(old_faces))
    warnings.warn(
        f"the font_glyphs cache {path} was rendered from other faces or another rule ({stored}); this machine has "
        f"{key} ({len(added)} faces added, e.g. {added[:3]}; {len(gone)} gone, e.g. {gone[:3]}): rendering it "
        "again from this machine's faces only",
        stacklevel=3,
    )
    return None
