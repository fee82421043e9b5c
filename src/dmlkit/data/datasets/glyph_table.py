"""The glyph table (``GlyphTable``): every kept glyph image of both splits with its class and font, and
its rendering from the fonts (``build_glyph_table``; no cache involved, see ``glyph_cache``).

Images are grey uint8, white ink on black, ``image_size`` px square, ordered by (class, font).
At ``REFERENCE_SIZE = 32`` px the table is rendered from scratch and the classes and images are
chosen by the rule of ``glyph_select``; any other size re-renders the (class, font) pairs of the
32 px table, so every size has the same images, classes and order. Rendering is deterministic.
"""

from __future__ import annotations

import dataclasses
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from dmlkit.data.datasets.glyph_render import font_coverage, font_paths, glyph_category, render_font_table
from dmlkit.data.datasets.glyph_select import (
    REFERENCE_SIZE,
    ClassSelection,
    candidate_codepoints,
    eligible_codepoints,
    select_classes,
)

__all__ = ["GlyphTable", "build_glyph_table"]


@dataclass(frozen=True)
class GlyphTable:
    """All rendered glyphs (both splits), images ordered by (class, font)."""

    images: np.ndarray  # (N, H, W) uint8
    image_class: np.ndarray  # (N,) int64, index into codepoints
    image_font: np.ndarray  # (N,) int64, index into font_names
    codepoints: np.ndarray  # (C,) int64, ascending
    class_names: list[str]  # Unicode names
    class_categories: np.ndarray  # (C,) int64, index into category_names
    category_names: list[str]  # sorted
    font_names: list[str]
    dropped: np.ndarray  # (D,) code points dropped as collisions
    dropped_for: np.ndarray  # (D,) the kept code point each collided with
    image_size: int
    render_seconds: float
    thin: np.ndarray = field(
        default_factory=lambda: np.zeros(0, dtype=np.int64)
    )  # code points dropped for fewer than MIN_IMAGES distinct images
    duplicates: int = 0  # images left out as near-identical to another image of their class

    @property
    def num_classes(self) -> int:
        return int(self.codepoints.size)


def build_glyph_table(image_size: int = REFERENCE_SIZE, reference: GlyphTable | None = None) -> GlyphTable:
    """Render the dataset (no cache involved).

    At 32 px this chooses the classes; at any other size it re-renders the
    (class, font) pairs of ``reference`` (the 32 px table, required then).
    """
    t0 = time.perf_counter()
    paths = font_paths()
    if image_size != REFERENCE_SIZE:
        if reference is None or reference.image_size != REFERENCE_SIZE:
            raise ValueError(f"rendering at {image_size} px needs the {REFERENCE_SIZE} px table as reference")
        images = _rerender(reference, paths, image_size)
        return dataclasses.replace(
            reference, images=images, image_size=image_size, render_seconds=time.perf_counter() - t0
        )
    images, image_class, image_font, eligible = _render_eligible(paths)
    selection = select_classes(images, image_class, image_font, len(eligible))
    return _chosen_table(images, image_class, image_font, eligible, selection, [p.name for p in paths], t0)


def _rerender(reference: GlyphTable, paths: Sequence[Path], image_size: int) -> np.ndarray:
    """The images of ``reference``'s (class, font) rows rendered at ``image_size`` px, in its row order."""
    out = np.zeros((reference.images.shape[0], image_size, image_size), np.uint8)
    for f, path in enumerate(paths):
        rows = np.nonzero(reference.image_font == f)[0]
        cps = reference.codepoints[reference.image_class[rows]].tolist()
        _, imgs = render_font_table(path, cps, image_size, keep_blank=True)
        if imgs:
            out[rows] = np.stack(imgs)
    return out


def _render_eligible(paths: Sequence[Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """32 px images of the characters that pass rules 1-2, ordered by (class, font), with their class ids
    (into the returned eligible code points) and font ids (into ``paths``)."""
    coverage = font_coverage(paths)
    candidates = candidate_codepoints(coverage)
    rendered: dict[tuple[int, int], np.ndarray] = {}
    for f, (path, cov) in enumerate(zip(paths, coverage)):
        done, imgs = render_font_table(path, [cp for cp in candidates if cp in cov], REFERENCE_SIZE)
        rendered.update(((cp, f), img) for cp, img in zip(done, imgs))
    fonts_of: dict[int, list[int]] = {}
    for cp, f in rendered:
        fonts_of.setdefault(cp, []).append(f)
    eligible = eligible_codepoints(candidates, fonts_of)
    cls_of = {cp: c for c, cp in enumerate(eligible)}
    pairs = sorted((cls_of[cp], f) for cp, fonts in fonts_of.items() if cp in cls_of for f in fonts)
    images = np.stack([rendered[(eligible[c], f)] for c, f in pairs])
    image_class = np.array([c for c, _ in pairs], dtype=np.int64)
    image_font = np.array([f for _, f in pairs], dtype=np.int64)
    return images, image_class, image_font, eligible


def _chosen_table(
    images: np.ndarray,
    image_class: np.ndarray,
    image_font: np.ndarray,
    eligible: list[int],
    selection: ClassSelection,
    font_names: list[str],
    t0: float,
) -> GlyphTable:
    """The 32 px table of the ``selection`` among the ``eligible`` classes' images, classes renumbered."""
    eligible_arr = np.array(eligible, dtype=np.int64)
    codepoints = eligible_arr[selection.kept]
    cats = [glyph_category(chr(int(cp))) for cp in codepoints]
    category_names = sorted(set(cats))
    cat_id = {c: i for i, c in enumerate(category_names)}
    rows = selection.rows
    return GlyphTable(
        images=images[rows],
        image_class=selection.new_id[image_class[rows]],
        image_font=image_font[rows],
        codepoints=codepoints,
        class_names=[unicodedata.name(chr(int(cp))) for cp in codepoints],
        class_categories=np.array([cat_id[c] for c in cats], dtype=np.int64),
        category_names=category_names,
        font_names=font_names,
        dropped=eligible_arr[selection.dropped],
        dropped_for=eligible_arr[selection.dropped_for],
        image_size=REFERENCE_SIZE,
        render_seconds=time.perf_counter() - t0,
        thin=eligible_arr[selection.thin],
        duplicates=selection.duplicates,
    )
