"""Rendering the ``font_glyphs`` table: candidate characters in many font faces, one image per distinct drawing.

``build_font_table(faces, candidates)`` returns a ``GlyphTable`` (the glyphs dataset's table: images ordered by
(class, face), ``font_names`` the faces) and the counts of what it skipped (``FontTableCounts``). The rule:

1. a face counts for a character only where its cmap maps it (read with fontTools, ``font_coverage``): PIL
   draws the face's .notdef box for an unmapped character, which a blank test takes for a glyph;
2. a mapped character that renders blank is skipped and counted (``blank``); a face that cannot be read
   or rendered is skipped and counted (``unreadable_faces``), never fatal;
3. within a class, a rendering whose relative L1 difference to one kept from an earlier face is below
   ``DUPLICATE_THRESHOLD = 0.05`` is left out (``keep_distinct``, the glyphs dataset's rule: many faces are
   metric clones of one another, e.g. Liberation / Arimo, URW / TeX Gyre);
4. a class keeps at least ``MIN_FACE_IMAGES`` distinct images, else it is dropped (``thin``).

Classes, faces and duplicates are chosen at ``REFERENCE_SIZE = 32`` px; another size re-renders the
(class, face) pairs of the 32 px table (``glyph_table``'s re-rendering), so every size has the same images.
"""

from __future__ import annotations

import dataclasses
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from dmlkit_lab.datasets.font_faces import face_name
from dmlkit.data.datasets.glyph_duplicates import DUPLICATE_THRESHOLD, keep_distinct
from dmlkit.data.datasets.glyph_render import font_coverage, glyph_category, render_font_table
from dmlkit.data.datasets.glyph_select import REFERENCE_SIZE
from dmlkit.data.datasets.glyph_table import GlyphTable, _rerender

__all__ = ["MIN_FACE_IMAGES", "FontTableCounts", "build_font_table", "font_glyphs_rule", "rerender_font_table"]

MIN_FACE_IMAGES = 10


def font_glyphs_rule(min_images: int | None = None) -> str:
    """Everything that decides which classes and images the table holds (part of the cache key);
    ``min_images`` defaults to ``MIN_FACE_IMAGES``."""
    return f"cmap;duplicate={DUPLICATE_THRESHOLD};min_images={MIN_FACE_IMAGES if min_images is None else min_images}"


@dataclass(frozen=True)
class FontTableCounts:
    """What the rendering skipped: blank renderings of mapped characters, faces that failed to load or render."""

    blank: int = 0
    unreadable_faces: tuple[str, ...] = ()
    rendered: int = 0  # (character, face) renderings made


def build_font_table(
    faces: Sequence[Path], candidates: Sequence[int], min_images: int | None = None
) -> tuple[GlyphTable, FontTableCounts]:
    """The 32 px table of the ``candidates`` (code points) rendered in ``faces`` (see the module docstring);
    ``min_images`` defaults to ``MIN_FACE_IMAGES``."""
    t0 = time.perf_counter()
    min_images = MIN_FACE_IMAGES if min_images is None else min_images
    wanted = sorted(set(int(cp) for cp in candidates))
    rendered: dict[tuple[int, int], np.ndarray] = {}
    blank, bad = 0, []
    for f, path in enumerate(faces):
        try:
            mapped = font_coverage([Path(path)])[0]
            cps = [cp for cp in wanted if cp in mapped]
            done, images = render_font_table(Path(path), cps, REFERENCE_SIZE)
        except Exception:  # a broken face: skipped and counted (fontTools and PIL raise many types)
            bad.append(face_name(Path(path)))
            continue
        blank += len(cps) - len(done)
        rendered.update(((cp, f), img) for cp, img in zip(done, images))
    counts = FontTableCounts(blank=blank, unreadable_faces=tuple(bad), rendered=len(rendered))
    table = _select(rendered, [face_name(Path(p)) for p in faces], min_images, t0)
    return table, counts


def _select(
    rendered: dict[tuple[int, int], np.ndarray], font_names: list[str], min_images: int, t0: float
) -> GlyphTable:
    """Rules 3-4 on the renderings ``(code point, face) -> image``: the kept images ordered by (class, face)."""
    pairs = sorted(rendered)
    if not pairs:
        raise ValueError("no face maps any of the candidate characters; check the font packages or the faces given")
    images = np.stack([rendered[p] for p in pairs])
    cps = np.array([cp for cp, _ in pairs], dtype=np.int64)
    face = np.array([f for _, f in pairs], dtype=np.int64)
    distinct = keep_distinct(images, cps)
    kept_cps, per_class = np.unique(cps[distinct], return_counts=True)
    codepoints = kept_cps[per_class >= min_images]
    rows = np.nonzero(distinct & np.isin(cps, codepoints))[0]
    cats = [glyph_category(chr(int(cp))) for cp in codepoints]
    category_names = sorted(set(cats))
    return GlyphTable(
        images=images[rows],
        image_class=np.searchsorted(codepoints, cps[rows]).astype(np.int64),
        image_font=face[rows],
        codepoints=codepoints,
        class_names=[unicodedata.name(chr(int(cp)), f"U+{int(cp):04X}") for cp in codepoints],
        class_categories=np.array([category_names.index(c) for c in cats], dtype=np.int64),
        category_names=category_names,
        font_names=font_names,
        dropped=np.zeros(0, dtype=np.int64),
        dropped_for=np.zeros(0, dtype=np.int64),
        image_size=REFERENCE_SIZE,
        render_seconds=time.perf_counter() - t0,
        thin=kept_cps[per_class < min_images],
        duplicates=int((~distinct).sum()),
    )


def rerender_font_table(reference: GlyphTable, faces: Sequence[Path], image_size: int) -> GlyphTable:
    """The (class, face) pairs of the 32 px ``reference`` rendered at ``image_size`` px."""
    if reference.image_size != REFERENCE_SIZE:
        raise ValueError(f"rendering at {image_size} px needs the {REFERENCE_SIZE} px table as reference")
    t0 = time.perf_counter()
    images = _rerender(reference, [Path(p) for p in faces], image_size)
    return dataclasses.replace(reference, images=images, image_size=image_size, render_seconds=time.perf_counter() - t0)
