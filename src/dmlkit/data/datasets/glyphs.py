"""The embedded default dataset ``glyphs``: Unicode characters rendered in matplotlib's fonts.

No download: the images are rendered once from the 16 DejaVu / STIX faces that
matplotlib ships (see ``glyph_render`` for the fonts, the excluded variants and
the rendering) and cached as an ``.npz``.

Classes. One class per character that

1. is not whitespace, control, format, private-use or combining (``is_candidate``),
2. renders non-blank in at least ``MIN_FONTS = 8`` of the fonts (coverage read
   from each font's cmap with fontTools), and
3. does not *collide* with a character of lower code point. Two characters
   collide when their renderings are near-identical in a strict majority of
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

Images: one per (class, font) where the font renders it, grey uint8, white ink
on black, ``image_size`` px square (32 by default; classes and fonts are
always chosen at 32 px, so every size has the same images). Classes are
ordered by code point; the first half of the classes (rounded up) is split
``train``, the second half ``test`` (class-disjoint, as CUB / Cars). Each
class has a super-category (its script or symbol family, ``glyph_category``).

Items are float tensors ``(1, H, W)`` normalised with ``GLYPHS_MEAN`` /
``GLYPHS_STD`` (0.0951 and 0.2685: the mean and standard deviation of all
pixels of the un-augmented 32 px train images, in [0, 1] units), optionally augmented by
``GlyphAugment`` from ``(seed, epoch, index)``.

Cache: ``<root>/glyphs-v<GLYPHS_VERSION>-<size>px.npz``, ``root`` defaulting
to ``$DMLKIT_CACHE/glyphs`` or ``~/.cache/dmlkit/glyphs``; a file whose version,
size or font fingerprint does not match is rebuilt. Rendering is deterministic.
"""

from __future__ import annotations

import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from dmlkit.data.datasets.base import DMLDataset, _as_index_list
from dmlkit.data.cache import dataset_dir, save_npz_atomic
from dmlkit.data.datasets.glyph_render import (
    GLYPH_FONTS,
    font_coverage,
    font_paths,
    fonts_fingerprint,
    glyph_category,
    is_candidate,
    render_font_table,
)
from dmlkit.data.seeding import check_seed
from dmlkit.data.transforms.glyph_augment import GlyphAugment, GlyphAugmentConfig

GLYPHS_VERSION = "1"
REFERENCE_SIZE = 32
MIN_FONTS = 8
COLLISION_THRESHOLD = 0.02
GLYPHS_MEAN = 0.0951
GLYPHS_STD = 0.2685


# ------------------------------------------------------------------ table
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

    @property
    def num_classes(self) -> int:
        return int(self.codepoints.size)


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
        return _find_collisions(images, image_class, image_font, num_classes, threshold)
    finally:
        torch.set_num_threads(threads)


def _find_collisions(
    images: np.ndarray, image_class: np.ndarray, image_font: np.ndarray, num_classes: int, threshold: float
) -> np.ndarray:
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
    collide_for = np.full(num_classes, -1, dtype=np.int64)
    if not keys:
        return collide_for
    pair_keys, near = np.unique(np.concatenate(keys), return_counts=True)
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


def build_glyph_table(image_size: int = REFERENCE_SIZE, reference: GlyphTable | None = None) -> GlyphTable:
    """Render the dataset (no cache involved).

    At 32 px this chooses the classes; at any other size it re-renders the
    (class, font) pairs of ``reference`` (the 32 px table, required then).
    """
    t0 = time.perf_counter()
    paths = font_paths()
    names = [p.name for p in paths]
    if image_size != REFERENCE_SIZE:
        if reference is None or reference.image_size != REFERENCE_SIZE:
            raise ValueError(f"rendering at {image_size} px needs the {REFERENCE_SIZE} px table as reference")
        out = np.zeros((reference.images.shape[0], image_size, image_size), np.uint8)
        for f, path in enumerate(paths):
            rows = np.nonzero(reference.image_font == f)[0]
            cps = reference.codepoints[reference.image_class[rows]].tolist()
            _, imgs = render_font_table(path, cps, image_size, keep_blank=True)
            if imgs:
                out[rows] = np.stack(imgs)
        return GlyphTable(
            images=out,
            image_class=reference.image_class,
            image_font=reference.image_font,
            codepoints=reference.codepoints,
            class_names=reference.class_names,
            class_categories=reference.class_categories,
            category_names=reference.category_names,
            font_names=reference.font_names,
            dropped=reference.dropped,
            dropped_for=reference.dropped_for,
            image_size=image_size,
            render_seconds=time.perf_counter() - t0,
        )

    coverage = font_coverage(paths)
    counts: dict[int, int] = {}
    for cov in coverage:
        for cp in cov:
            counts[cp] = counts.get(cp, 0) + 1
    candidates = sorted(cp for cp, n in counts.items() if n >= MIN_FONTS and is_candidate(cp))
    rendered: dict[tuple[int, int], np.ndarray] = {}
    for f, (path, cov) in enumerate(zip(paths, coverage)):
        done, imgs = render_font_table(path, [cp for cp in candidates if cp in cov], REFERENCE_SIZE)
        rendered.update(((cp, f), img) for cp, img in zip(done, imgs))
    per_class: dict[int, list[int]] = {}
    for cp, f in rendered:
        per_class.setdefault(cp, []).append(f)
    eligible = [cp for cp in candidates if len(per_class.get(cp, ())) >= MIN_FONTS]
    cls_of = {cp: c for c, cp in enumerate(eligible)}
    pairs = sorted((cls_of[cp], f) for cp, fonts in per_class.items() if cp in cls_of for f in fonts)
    images = np.stack([rendered[(eligible[c], f)] for c, f in pairs])
    image_class = np.array([c for c, _ in pairs], dtype=np.int64)
    image_font = np.array([f for _, f in pairs], dtype=np.int64)

    collide_for = find_collisions(images, image_class, image_font, len(eligible))
    kept = np.nonzero(collide_for < 0)[0]
    dropped = np.nonzero(collide_for >= 0)[0]
    new_id = np.full(len(eligible), -1, dtype=np.int64)
    new_id[kept] = np.arange(kept.size)
    rows = np.nonzero(new_id[image_class] >= 0)[0]
    codepoints = np.array(eligible, dtype=np.int64)[kept]
    cats = [glyph_category(chr(int(cp))) for cp in codepoints]
    category_names = sorted(set(cats))
    cat_id = {c: i for i, c in enumerate(category_names)}
    eligible_arr = np.array(eligible, dtype=np.int64)
    return GlyphTable(
        images=images[rows],
        image_class=new_id[image_class[rows]],
        image_font=image_font[rows],
        codepoints=codepoints,
        class_names=[unicodedata.name(chr(int(cp))) for cp in codepoints],
        class_categories=np.array([cat_id[c] for c in cats], dtype=np.int64),
        category_names=category_names,
        font_names=names,
        dropped=eligible_arr[dropped],
        dropped_for=eligible_arr[collide_for[dropped]],
        image_size=REFERENCE_SIZE,
        render_seconds=time.perf_counter() - t0,
    )


# ------------------------------------------------------------------ cache
def glyphs_cache_path(image_size: int = REFERENCE_SIZE, root: str | Path | None = None) -> Path:
    """Where the table of ``image_size`` px lies: ``<root>/glyphs-v<version>-<size>px.npz``."""
    return dataset_dir("glyphs", root) / f"glyphs-v{GLYPHS_VERSION}-{int(image_size)}px.npz"


def _save(table: GlyphTable, path: Path, fingerprint: str) -> None:
    save_npz_atomic(
        path,
        {
            "version": np.array(GLYPHS_VERSION),
            "fingerprint": np.array(fingerprint),
            "image_size": np.array(table.image_size),
            "render_seconds": np.array(table.render_seconds),
            "images": table.images,
            "image_class": table.image_class,
            "image_font": table.image_font,
            "codepoints": table.codepoints,
            "class_names": np.array(table.class_names),
            "class_categories": table.class_categories,
            "category_names": np.array(table.category_names),
            "font_names": np.array(table.font_names),
            "dropped": table.dropped,
            "dropped_for": table.dropped_for,
        },
    )


def _load(path: Path, image_size: int, fingerprint: str) -> GlyphTable | None:
    """The cached table, or ``None`` if the file is missing, unreadable or stale."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if (
                str(z["version"]) != GLYPHS_VERSION
                or str(z["fingerprint"]) != fingerprint
                or int(z["image_size"]) != image_size
            ):
                return None
            return GlyphTable(
                images=z["images"],
                image_class=z["image_class"].astype(np.int64),
                image_font=z["image_font"].astype(np.int64),
                codepoints=z["codepoints"].astype(np.int64),
                class_names=[str(s) for s in z["class_names"]],
                class_categories=z["class_categories"].astype(np.int64),
                category_names=[str(s) for s in z["category_names"]],
                font_names=[str(s) for s in z["font_names"]],
                dropped=z["dropped"].astype(np.int64),
                dropped_for=z["dropped_for"].astype(np.int64),
                image_size=int(z["image_size"]),
                render_seconds=float(z["render_seconds"]),
            )
    except (OSError, ValueError, KeyError, EOFError) as err:  # corrupt or foreign file: rebuild
        import warnings

        warnings.warn(f"ignoring unreadable glyph cache {path} ({err}); rendering again", stacklevel=3)
        return None


def _check_size(image_size: int) -> int:
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 8:
        raise ValueError(f"image_size must be an int >= 8, got {image_size!r}")
    return image_size


def load_glyph_table(root: str | Path | None = None, image_size: int = REFERENCE_SIZE, force: bool = False) -> GlyphTable:
    """The glyph table of ``image_size`` px, from the cache or rendered (and cached) now."""
    image_size = _check_size(image_size)
    fingerprint = fonts_fingerprint(font_paths())
    path = glyphs_cache_path(image_size, root)
    table = None if force else _load(path, image_size, fingerprint)
    if table is not None:
        return table
    reference = None
    if image_size != REFERENCE_SIZE:
        reference = load_glyph_table(root, REFERENCE_SIZE, force=force)
    table = build_glyph_table(image_size, reference)
    _save(table, path, fingerprint)
    return table


def prepare_glyphs(root: str | Path | None = None, image_size: int = REFERENCE_SIZE, force: bool = False) -> Path:
    """Render and cache the glyphs at ``image_size`` px (if not cached yet); return the cache file."""
    load_glyph_table(root, image_size, force=force)
    return glyphs_cache_path(image_size, root)


def split_class_range(num_classes: int, split: str) -> tuple[int, int]:
    """``[lo, hi)`` class ids of ``split``: train = first half (rounded up), test = the rest."""
    n_train = (num_classes + 1) // 2
    if split == "train":
        return 0, n_train
    if split == "test":
        return n_train, num_classes
    raise ValueError(f"unknown glyphs split '{split}'; valid splits are: {', '.join(GlyphsDataset.SPLITS)}")


# ---------------------------------------------------------------- dataset
class StoredGlyphImages(DMLDataset):
    """Items of a dataset held as a ``uint8`` tensor ``images (N, H, W)`` with ``labels``: seeded glyph
    augmentation of item ``i`` from ``(seed, epoch, i)`` (``augmenter``), then optional normalisation
    with ``mean`` / ``std``. Shared by ``GlyphsDataset`` and ``GlyphCollageDataset``; ``ITEM_NAME`` names
    the items in index errors.
    """

    ITEM_NAME = "images"

    def _raw(self, idx: Tensor) -> Tensor:
        return self.images[idx].float().div_(255.0).unsqueeze(1)  # (B, 1, H, W)

    def _finish(self, x: Tensor, idx: Tensor) -> Tensor:
        if self.augment:
            params = self.augmenter.params_for_seeds((self.seed, self.epoch, int(i)) for i in idx)
            x = self.augmenter.apply(x, params)
        if self.normalize:
            x = (x - self.mean) / self.std
        return x

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        index = int(index)
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {n} {self.ITEM_NAME}")
        idx = torch.tensor([index])
        return self._finish(self._raw(idx), idx)[0], int(self.labels[index])

    def get_batch(self, indices: Sequence[int] | Tensor) -> tuple[Tensor, Tensor]:
        """Vectorised ``self[i]`` for all ``indices`` (same values, one augmentation call)."""
        idx = torch.as_tensor(_as_index_list(indices), dtype=torch.long)
        if idx.numel() == 0:
            raise ValueError("get_batch needs at least one index")
        idx = torch.where(idx < 0, idx + len(self), idx)
        if int(idx.min()) < 0 or int(idx.max()) >= len(self):
            raise IndexError(f"indices out of range for {len(self)} {self.ITEM_NAME}")
        return self._finish(self._raw(idx), idx), self.labels[idx]



class GlyphsDataset(StoredGlyphImages):
    """Split ``split`` of the glyphs dataset (see the module docstring).

    Args:
        split: ``"train"`` (first half of the classes by code point) or ``"test"``.
        root: cache folder (default ``$DMLKIT_CACHE/glyphs`` or ``~/.cache/dmlkit/glyphs``).
        image_size: side in pixels (>= 8).
        augment: apply ``GlyphAugment`` to each item, drawn from ``(seed, epoch, index)``.
        seed: augmentation seed.
        max_classes: keep only the first ``max_classes`` classes of the split (quick runs).
        augment_config: ranges of the augmentation.
        normalize: return ``(x - GLYPHS_MEAN) / GLYPHS_STD`` (else raw [0, 1] values).

    Extra attributes: ``codepoints (C,)``, ``class_chars``, ``image_fonts (N,)``
    indexing ``font_names``, ``images (N, H, W)`` uint8.
    """

    ITEM_NAME = "glyph images"

    SPLITS = ("train", "test")
    in_channels = 1
    mean = GLYPHS_MEAN
    std = GLYPHS_STD

    def __init__(
        self,
        split: str = "train",
        root: str | Path | None = None,
        image_size: int = REFERENCE_SIZE,
        augment: bool = False,
        seed: int = 0,
        max_classes: int | None = None,
        augment_config: GlyphAugmentConfig | None = None,
        normalize: bool = True,
    ) -> None:
        if split not in self.SPLITS:
            raise ValueError(f"unknown glyphs split '{split}'; valid splits are: {', '.join(self.SPLITS)}")
        if max_classes is not None and (
            isinstance(max_classes, bool) or not isinstance(max_classes, int) or max_classes < 1
        ):
            raise ValueError(f"max_classes must be a positive int or None, got {max_classes!r}")
        check_seed(seed)
        table = load_glyph_table(root, image_size)
        lo, hi = split_class_range(table.num_classes, split)
        if max_classes is not None:
            hi = min(hi, lo + max_classes)
        a, b = np.searchsorted(table.image_class, [lo, hi])
        self.split = split
        self.image_size = image_size
        self.augment = bool(augment)
        self.seed = seed
        self.epoch = 0
        self.normalize = bool(normalize)
        self.augmenter = GlyphAugment(augment_config)
        self.images = torch.from_numpy(np.ascontiguousarray(table.images[a:b]))
        self.labels = torch.from_numpy(table.image_class[a:b] - lo)
        self.image_fonts = torch.from_numpy(table.image_font[a:b].copy())
        self.font_names = list(table.font_names)
        self.codepoints = torch.from_numpy(table.codepoints[lo:hi].copy())
        self.class_chars = [chr(int(cp)) for cp in table.codepoints[lo:hi]]
        self.class_names = list(table.class_names[lo:hi])
        self.class_categories = torch.from_numpy(table.class_categories[lo:hi].copy())
        self.category_names = list(table.category_names)

    @classmethod
    def prepare(cls, root: str | Path | None = None, image_size: int = REFERENCE_SIZE, force: bool = False) -> Path:
        return prepare_glyphs(root, image_size, force)


__all__ = [
    "GLYPHS_MEAN",
    "GLYPHS_STD",
    "GLYPHS_VERSION",
    "GLYPH_FONTS",
    "GlyphTable",
    "GlyphsDataset",
    "build_glyph_table",
    "find_collisions",
    "glyphs_cache_path",
    "load_glyph_table",
    "prepare_glyphs",
]
