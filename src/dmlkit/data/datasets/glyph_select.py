"""Which characters become glyph classes, and which of their renderings are kept (the selection rule).

Classes. One class per character that

1. is not whitespace, control, format, private-use or combining (``is_candidate``),
2. renders non-blank in at least ``MIN_FONTS = 8`` of the fonts (coverage read
   from each font's cmap with fontTools),
3. keeps at least ``MIN_IMAGES = 3`` images once near-identical renderings of the
   character are left out (see Images below), and
4. does not *collide* with a character of lower code point that passed 1-3. Two characters
   collide when their (kept) renderings are near-identical in a strict majority of
   the fonts that render both; near-identical means a relative L1 difference
   ``sum|x - y| / (sum x + sum y)`` below ``COLLISION_THRESHOLD = 0.02``
   (0 = same image, 1 = no overlapping ink) at 32 px. Going up in code point
   order, a character that collides with a kept one is dropped, so 'A' (U+0041)
   stays and Greek Alpha (U+0391) and Cyrillic A (U+0410) go; no two kept
   classes collide.

   Candidate pairs are found per font without comparing all image pairs at
   full size, by lower bounds of the distance: the difference of the ink
   totals ``|sum x - sum y|``, then the L1 distance between 4x4 block sums,
   then between 8x8 block sums (pooling into block sums keeps the ink totals
   and never increases the L1 difference). Images are sorted by ink, so each
   is compared at 4x4 only with the narrow band of images of similar ink, and
   only pairs under the threshold at one level are looked at the next. The
   result is exact (unlike hashing, which can split near neighbours across
   buckets) and takes about a second for ~40k images.

Images. At most one per (class, font) where the font renders it. Within a class, an image
near-identical to one of an earlier font (relative L1 difference below
``DUPLICATE_THRESHOLD = 0.05``, see ``glyph_duplicates``) is left out, so no query finds a
copy of itself for free; a class left with fewer than ``MIN_IMAGES`` images is dropped
(with 3, every query has at least 2 relevant images and a 3-per-class batch draws distinct
images). Classes, fonts and duplicates are always chosen at ``REFERENCE_SIZE = 32`` px, so
every image size has the same images.

With matplotlib 3.11's fonts: 3,204 characters pass rules 1-2 with 38,791 images; 6,645
images are exact copies of another of their class and 7,484 are near-identical (copies
included); 177 characters keep fewer than 3 images, 195 collide; 2,832 classes with 28,684
images remain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from dmlkit.data.datasets.glyph_duplicates import DUPLICATE_THRESHOLD, keep_distinct
from dmlkit.data.datasets.glyph_render import is_candidate

__all__ = [
    "COLLISION_THRESHOLD",
    "GLYPHS_RULE",
    "MIN_FONTS",
    "MIN_IMAGES",
    "REFERENCE_SIZE",
    "ClassSelection",
    "candidate_codepoints",
    "eligible_codepoints",
    "find_collisions",
    "select_classes",
]

REFERENCE_SIZE = 32
MIN_FONTS = 8
COLLISION_THRESHOLD = 0.02
MIN_IMAGES = 3
# Everything that decides which classes and images the table holds, in the order it is applied;
# stored in the cache and compared on load (change it with the rule, and stale caches are rebuilt).
GLYPHS_RULE = (
    f"min_fonts={MIN_FONTS};duplicate={DUPLICATE_THRESHOLD};min_images={MIN_IMAGES};collision={COLLISION_THRESHOLD}"
)


def candidate_codepoints(coverage: Sequence[Collection[int]]) -> list[int]:
    """Code points (ascending) that pass rule 1 and lie in the cmaps of at least ``MIN_FONTS`` fonts.

    ``coverage`` holds, per font, the code points its cmap maps.
    """
    counts: dict[int, int] = {}
    for cov in coverage:
        for cp in cov:
            counts[cp] = counts.get(cp, 0) + 1
    return sorted(cp for cp, n in counts.items() if n >= MIN_FONTS and is_candidate(cp))


def eligible_codepoints(candidates: Sequence[int], fonts_of: Mapping[int, Sequence[int]]) -> list[int]:
    """The ``candidates`` (in their order) rendered non-blank in at least ``MIN_FONTS`` fonts (rule 2).

    ``fonts_of`` maps a code point to the fonts that rendered it non-blank.
    """
    return [cp for cp in candidates if len(fonts_of.get(cp, ())) >= MIN_FONTS]


@dataclass(frozen=True)
class ClassSelection:
    """The outcome of rules 3-4 and the duplicate rule on the images of the eligible classes."""

    rows: np.ndarray  # image rows kept, ascending
    new_id: np.ndarray  # (eligible classes,) the kept class id of each eligible class, -1 if dropped
    kept: np.ndarray  # eligible class ids kept, ascending
    thin: np.ndarray  # eligible class ids dropped for fewer than MIN_IMAGES distinct images
    dropped: np.ndarray  # eligible class ids dropped as collisions
    dropped_for: np.ndarray  # the kept eligible class each of ``dropped`` collided with
    duplicates: int  # images left out as near-identical to another image of their class


def select_classes(
    images: np.ndarray, image_class: np.ndarray, image_font: np.ndarray, num_classes: int
) -> ClassSelection:
    """Apply the duplicate rule, rule 3 and rule 4 (in that order) to 32 px ``images`` of ``num_classes``
    eligible classes (``image_class``, ``image_font``: their class and font ids)."""
    distinct = keep_distinct(images, image_class)
    thick = np.bincount(image_class[distinct], minlength=num_classes) >= MIN_IMAGES
    usable = np.nonzero(distinct & thick[image_class])[0]
    collide_for = find_collisions(images[usable], image_class[usable], image_font[usable], num_classes)
    kept = np.nonzero(thick & (collide_for < 0))[0]
    dropped = np.nonzero(collide_for >= 0)[0]
    new_id = np.full(num_classes, -1, dtype=np.int64)
    new_id[kept] = np.arange(kept.size)
    return ClassSelection(
        rows=usable[new_id[image_class[usable]] >= 0],
        new_id=new_id,
        kept=kept,
        thin=np.nonzero(~thick)[0],
        dropped=dropped,
        dropped_for=collide_for[dropped],
        duplicates=int((~distinct).sum()),
    )


def find_collisions(
    images: np.ndarray,
    image_class: np.ndarray,
    image_font: np.ndarray,
    num_classes: int,
    threshold: float = COLLISION_THRESHOLD,
) -> np.ndarray:
    """For each class, ``-1`` if it is kept, else the (lower, kept) class it collides with.

    ``images`` are 32x32 uint8 renderings (any order), ``image_class`` and
    ``image_font`` their class and font ids; see the module docstring for the
    collision rule and the lower-bound search.
    """
    if images.shape[1:] != (REFERENCE_SIZE, REFERENCE_SIZE):
        raise ValueError(f"collisions are defined on {REFERENCE_SIZE} px images, got {images.shape[1:]}")
    # Hundreds of small ops: on a busy machine intra-op threads mostly wait for each other
    # (measured 9 s with 2 threads vs 0.4 s with 1 on 2 loaded cores), so run them on one.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pair_keys, near = _near_pairs(images, image_class, image_font, num_classes, threshold)
        return _resolve_collisions(pair_keys, near, image_class, image_font, num_classes)
    finally:
        torch.set_num_threads(threads)


def _near_pairs(
    images: np.ndarray, image_class: np.ndarray, image_font: np.ndarray, num_classes: int, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Class pairs ``lo * num_classes + hi`` (unique, ascending) with a near-identical image pair in some font,
    and in how many (font, image pair)s each is."""
    x = torch.from_numpy(images).float().div_(255.0)
    ink = x.sum((1, 2))
    p4 = F.avg_pool2d(x[:, None], 8).flatten(1) * 64.0  # 4x4 block sums
    p8 = F.avg_pool2d(x[:, None], 4).flatten(1) * 16.0  # 8x8 block sums
    flat = x.flatten(1)
    keys: list[np.ndarray] = []
    grow = (1.0 + threshold) / (1.0 - threshold)
    for f in np.unique(image_font):
        # Sorted by ink, a row can only be near the columns whose ink lies within a factor
        # ``grow`` of its own (|sx - sy| <= sum|x - y|): a band, not the whole matrix.
        idx = torch.from_numpy(np.nonzero(image_font == f)[0])
        idx = idx[torch.argsort(ink[idx], stable=True)]
        a4, s = p4[idx], ink[idx]
        for start in range(0, idx.numel(), 256):
            stop = min(start + 256, idx.numel())
            end = int(torch.searchsorted(s, s[stop - 1] * grow, right=True))
            d = torch.cdist(a4[start:stop], a4[start:end], p=1) / (s[start:stop, None] + s[None, start:end])
            i, j = torch.nonzero(d < threshold, as_tuple=True)
            i, j = i + start, j + start
            keep = i < j
            i, j = idx[i[keep]], idx[j[keep]]
            for lo in range(0, i.numel(), 65536):  # refine at 8x8, then at full size
                a, b = i[lo : lo + 65536], j[lo : lo + 65536]
                denom = ink[a] + ink[b]
                m = (p8[a] - p8[b]).abs().sum(1) / denom < threshold
                a, b, denom = a[m], b[m], denom[m]
                m = (flat[a] - flat[b]).abs().sum(1) / denom < threshold
                ca, cb = image_class[a[m].numpy()], image_class[b[m].numpy()]
                keys.append(np.minimum(ca, cb) * num_classes + np.maximum(ca, cb))
    if not keys:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate(keys), return_counts=True)


def _resolve_collisions(
    pair_keys: np.ndarray, near: np.ndarray, image_class: np.ndarray, image_font: np.ndarray, num_classes: int
) -> np.ndarray:
    """Rule 4 on the near pairs: going up in class order, drop a class that collides with a kept lower one."""
    collide_for = np.full(num_classes, -1, dtype=np.int64)
    if pair_keys.size == 0:
        return collide_for
    ca, cb = pair_keys // num_classes, pair_keys % num_classes
    # fonts that render both classes
    masks = np.zeros(num_classes, dtype=np.int64)
    np.bitwise_or.at(masks, image_class, np.left_shift(1, image_font.astype(np.int64)))
    common = _popcount(masks[ca] & masks[cb])
    hit = 2 * near > common
    ca, cb = ca[hit], cb[hit]
    order = np.lexsort((ca, cb))  # by higher class, then lower
    ca, cb = ca[order], cb[order]
    kept = np.ones(num_classes, dtype=bool)
    for lo_c, hi_c in zip(ca.tolist(), cb.tolist()):
        if kept[lo_c] and kept[hi_c] and lo_c != hi_c:
            kept[hi_c] = False
            collide_for[hi_c] = lo_c
    return collide_for


def _popcount(values: np.ndarray) -> np.ndarray:
    out = np.zeros_like(values)
    v = values.copy()
    while bool(v.any()):
        out += v & 1
        v >>= 1
    return out
