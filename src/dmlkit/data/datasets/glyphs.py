"""The embedded default dataset ``glyphs``: Unicode characters rendered in matplotlib's fonts.

No download: the images are rendered once from the 16 DejaVu / STIX faces that matplotlib ships and
cached as an ``.npz``. The work is split by job:

- ``glyph_render``: the fonts, the excluded variants and the rendering of one font;
- ``glyph_select``: which characters become classes and which of their renderings are kept
  (one class per character drawn in enough fonts, near-identical renderings left out, characters
  that look like one of lower code point dropped);
- ``glyph_table``: ``GlyphTable``, all kept images of both splits, and ``build_glyph_table``;
- ``glyph_cache``: the ``.npz`` cache (``glyphs_cache_path``, ``load_glyph_table``, ``prepare_glyphs``);
- ``stored_images``: ``StoredGlyphImages``, the items (augmentation, normalisation) this dataset and
  ``glyph_collage`` share;
- this file: ``GlyphsDataset``, the splits.

Splits: classes are ordered by code point; the first half of the classes (rounded up) is split
``train``, the second half ``test`` (class-disjoint, as CUB / Cars; with matplotlib 3.11's fonts train
has 1,416 classes / 18,152 images, test 1,416 / 10,532). Each class has a super-category (its script or
symbol family, ``glyph_category``).

Items are float tensors ``(1, H, W)`` normalised with ``GLYPHS_MEAN`` / ``GLYPHS_STD`` (see
``stored_images``), optionally augmented by ``GlyphAugment`` from ``(seed, epoch, index)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dmlkit.data.datasets.glyph_cache import GLYPHS_VERSION, glyphs_cache_path, load_glyph_table, prepare_glyphs
from dmlkit.data.datasets.glyph_render import GLYPH_FONTS, font_paths, fonts_fingerprint
from dmlkit.data.datasets.glyph_select import (
    COLLISION_THRESHOLD,
    GLYPHS_RULE,
    MIN_FONTS,
    MIN_IMAGES,
    REFERENCE_SIZE,
    find_collisions,
)
from dmlkit.data.datasets.glyph_table import GlyphTable, build_glyph_table
from dmlkit.data.datasets.stored_images import GLYPHS_MEAN, GLYPHS_STD, StoredGlyphImages
from dmlkit.data.seeding import check_seed
from dmlkit.data.transforms.glyph_augment import GlyphAugmentConfig
from dmlkit.validation import is_int
from dmlkit.data.datasets.registry import register_dataset


def split_class_range(num_classes: int, split: str) -> tuple[int, int]:
    """``[lo, hi)`` class ids of ``split``: train = first half (rounded up), test = the rest."""
    n_train = (num_classes + 1) // 2
    if split == "train":
        return 0, n_train
    if split == "test":
        return n_train, num_classes
    raise ValueError(f"unknown glyphs split '{split}'; valid splits are: {', '.join(GlyphsDataset.SPLITS)}")


@register_dataset("glyphs")
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
        if max_classes is not None and (not is_int(max_classes) or max_classes < 1):
            raise ValueError(f"max_classes must be a positive int or None, got {max_classes!r}")
        check_seed(seed)
        table = self.load_table(root, image_size)
        ids = self.split_classes(table.codepoints, split)
        if max_classes is not None:
            ids = ids[:max_classes]
        rows = np.nonzero(np.isin(table.image_class, ids))[0]
        new_id = np.full(table.num_classes, -1, dtype=np.int64)
        new_id[ids] = np.arange(ids.size)
        images = torch.from_numpy(np.ascontiguousarray(table.images[rows]))
        labels = torch.from_numpy(new_id[table.image_class[rows]])
        super().__init__(images, labels, augment, seed, normalize, augment_config)
        self.split = split
        self.image_size = image_size
        self.image_fonts = torch.from_numpy(table.image_font[rows].copy())
        self.font_names = list(table.font_names)
        self.codepoints = torch.from_numpy(table.codepoints[ids].copy())
        self.class_chars = [chr(int(cp)) for cp in table.codepoints[ids]]
        self.class_names = [table.class_names[i] for i in ids]
        self.class_categories = torch.from_numpy(table.class_categories[ids].copy())
        self.category_names = list(table.category_names)

    def load_table(self, root: str | Path | None, image_size: int) -> GlyphTable:
        """The table whose classes the splits cut (a subclass with other images overrides it)."""
        return load_glyph_table(root, image_size)

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


# The glyph names other modules and tests import from here, wherever they are defined.
__all__ = [
    "COLLISION_THRESHOLD",
    "GLYPHS_MEAN",
    "GLYPHS_STD",
    "GLYPHS_RULE",
    "GLYPHS_VERSION",
    "GLYPH_FONTS",
    "MIN_FONTS",
    "MIN_IMAGES",
    "REFERENCE_SIZE",
    "GlyphTable",
    "GlyphsDataset",
    "StoredGlyphImages",
    "build_glyph_table",
    "find_collisions",
    "glyphs_cache_path",
    "load_glyph_table",
    "prepare_glyphs",
    "split_class_range",
]
