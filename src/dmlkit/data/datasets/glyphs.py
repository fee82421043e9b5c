"""The embedded default dataset ``glyphs``: Unicode characters rendered in matplotlib's fonts.

No download: the images are rendered once from the 16 DejaVu / STIX faces that
matplotlib ships (see ``glyph_render`` for the fonts, the excluded variants and
the rendering) and cached as an ``.npz``.

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

Images: at most one per (class, font) where the font renders it, grey uint8, white ink
on black, ``image_size`` px square (32 by default; classes, fonts and duplicates are
always chosen at 32 px, so every size has the same images). Within a class, an image
near-identical to one of an earlier font (relative L1 difference below
``DUPLICATE_THRESHOLD = 0.05``, see ``glyph_duplicates``) is left out, so no query finds a
copy of itself for free; a class left with fewer than ``MIN_IMAGES`` images is dropped
(with 3, every query has at least 2 relevant images and a 3-per-class batch draws distinct
images). With matplotlib 3.11's fonts: 3,204 characters pass rules 1-2 with 38,791
images; 6,645 images are exact copies of another of their class and 7,484 are near-identical
(copies included); 177 characters keep fewer than 3 images, 195 collide; 2,832 classes with
28,684 images remain (train 1,416 classes / 18,152 images, test 1,416 / 10,532). Version 1
(no duplicate rule) had 3,013 classes with 36,380 images. Classes are ordered by code point; the first half of the classes (rounded
up) is split ``train``, the second half ``test`` (class-disjoint, as CUB / Cars). Each
class has a super-category (its script or symbol family, ``glyph_category``).

Items are float tensors ``(1, H, W)`` normalised with ``GLYPHS_MEAN`` /
``GLYPHS_STD`` (0.0951 and 0.2685: the mean and standard deviation of all
pixels of the un-augmented 32 px train images of version 1, in [0, 1] units), optionally augmented by
``GlyphAugment`` from ``(seed, epoch, index)``.

Cache: ``<root>/glyphs-v<GLYPHS_VERSION>-<size>px.npz``, ``root`` defaulting
to ``$DMLKIT_CACHE/glyphs`` or ``~/.cache/dmlkit/glyphs``; a file whose version,
selection rule (``GLYPHS_RULE``: the thresholds and minimum counts above), size or font
fingerprint does not match is rebuilt. Rendering is deterministic.
"""

from __future__ import annotations

import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from dmlkit.data.datasets.base import DMLDataset, _as_index_list
from dmlkit.data.cache import dataset_dir, save_npz_atomic
from dmlkit.data.datasets.glyph_duplicates import DUPLICATE_THRESHOLD, keep_distinct
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
from dmlkit.data.transforms.eval_preprocess import ImagePreprocess
from dmlkit.data.transforms.glyph_augment import GlyphAugment, GlyphAugmentConfig
from dmlkit.validation import is_int

GLYPHS_VERSION = "2"
REFERENCE_SIZE = 32
MIN_FONTS = 8
COLLISION_THRESHOLD = 0.02
MIN_IMAGES = 3
# Everything that decides which classes and images the table holds, in the order it is applied;
# stored in the cache and compared on load (change it with the rule, and stale caches are rebuilt).
GLYPHS_RULE = (
    f"min_fonts={MIN_FONTS};duplicate={DUPLICATE_THRESHOLD};min_images={MIN_IMAGES};collision={COLLISION_THRESHOLD}"
)
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
    thin: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # code points dropped for fewer than MIN_IMAGES distinct images
    duplicates: int = 0  # images left out as near-identical to another image of their class

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
            thin=reference.thin,
            duplicates=reference.duplicates,
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

    # near-identical images of a class, then classes left too thin, then collisions among the others
    distinct = keep_distinct(images, image_class)
    thick = np.bincount(image_class[distinct], minlength=len(eligible)) >= MIN_IMAGES
    usable = np.nonzero(distinct & thick[image_class])[0]
    collide_for = find_collisions(images[usable], image_class[usable], image_font[usable], len(eligible))
    kept = np.nonzero(thick & (collide_for < 0))[0]
    thin = np.nonzero(~thick)[0]
    dropped = np.nonzero(collide_for >= 0)[0]
    new_id = np.full(len(eligible), -1, dtype=np.int64)
    new_id[kept] = np.arange(kept.size)
    rows = usable[new_id[image_class[usable]] >= 0]
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
        thin=eligible_arr[thin],
        duplicates=int((~distinct).sum()),
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
            "rule": np.array(GLYPHS_RULE),
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
            "thin": table.thin,
            "duplicates": np.array(table.duplicates),
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
                or "rule" not in z.files
                or str(z["rule"]) != GLYPHS_RULE
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
                thin=z["thin"].astype(np.int64),
                duplicates=int(z["duplicates"]),
            )
    except (OSError, ValueError, KeyError, EOFError) as err:  # corrupt or foreign file: rebuild
        import warnings

        warnings.warn(f"ignoring unreadable glyph cache {path} ({err}); rendering again", stacklevel=3)
        return None


def _check_size(image_size: int) -> int:
    if not is_int(image_size) or image_size < 8:
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
    SOURCE = "embedded: rendered once from the fonts inside matplotlib and cached (dmlkit data prepare glyphs)"

    @classmethod
    def local_state(cls, name: str) -> str:
        """The image sizes whose renderings the cache holds, or ``renders on first use``."""
        sizes = sorted(int(p.stem.rsplit("-", 1)[-1].removesuffix("px"))
                       for p in dataset_dir("glyphs").glob(f"glyphs-v{GLYPHS_VERSION}-*px.npz"))
        return f"cached ({', '.join(f'{s} px' for s in sizes)})" if sizes else "renders on first use"

    @classmethod
    def eval_preprocess(cls, image_size: int = 32, normalize: bool = True, **params: Any) -> ImagePreprocess:
        """Grey ``image_size`` squares, normalised with the glyph statistics (raw [0, 1] without ``normalize``)."""
        mean, std = ((cls.mean,), (cls.std,)) if normalize else ((0.0,), (1.0,))
        return ImagePreprocess(cls.in_channels, image_size, mean, std)

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
            not is_int(max_classes) or max_classes < 1
        ):
            raise ValueError(f"max_classes must be a positive int or None, got {max_classes!r}")
        check_seed(seed)
        table = load_glyph_table(root, image_size)
        ids = self.split_classes(table.codepoints, split)
        if max_classes is not None:
            ids = ids[:max_classes]
        rows = np.nonzero(np.isin(table.image_class, ids))[0]
        new_id = np.full(table.num_classes, -1, dtype=np.int64)
        new_id[ids] = np.arange(ids.size)
        self.split = split
        self.image_size = image_size
        self.augment = bool(augment)
        self.seed = seed
        self.epoch = 0
        self.normalize = bool(normalize)
        self.augmenter = GlyphAugment(augment_config)
        self.images = torch.from_numpy(np.ascontiguousarray(table.images[rows]))
        self.labels = torch.from_numpy(new_id[table.image_class[rows]])
        self.image_fonts = torch.from_numpy(table.image_font[rows].copy())
        self.font_names = list(table.font_names)
        self.codepoints = torch.from_numpy(table.codepoints[ids].copy())
        self.class_chars = [chr(int(cp)) for cp in table.codepoints[ids]]
        self.class_names = [table.class_names[i] for i in ids]
        self.class_categories = torch.from_numpy(table.class_categories[ids].copy())
        self.category_names = list(table.category_names)

    @classmethod
    def split_classes(cls, codepoints: np.ndarray, split: str) -> np.ndarray:
        """The class ids (into the glyph table of classes ``codepoints``, ascending) of ``split``: halves by code point."""
        lo, hi = split_class_range(codepoints.size, split)
        return np.arange(lo, hi, dtype=np.int64)

    @classmethod
    def prepare(cls, root: str | Path | None = None, image_size: int = REFERENCE_SIZE, force: bool = False) -> Path:
        return prepare_glyphs(root, image_size, force)

    @classmethod
    def fingerprint(cls, root: str | Path | None = None, image_size: int = REFERENCE_SIZE) -> str:
        """What decides the items of every split without reading them: version, selection rule, fonts, size,
        normalisation and the default augmentation (a pretrained backbone's cache key includes it)."""
        return (
            f"glyphs v{GLYPHS_VERSION} {GLYPHS_RULE} fonts={fonts_fingerprint(font_paths())} size={int(image_size)} "
            f"mean={GLYPHS_MEAN} std={GLYPHS_STD} augment={GlyphAugmentConfig()!r}"
        )


__all__ = [
    "GLYPHS_MEAN",
    "GLYPHS_STD",
    "GLYPHS_RULE",
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
