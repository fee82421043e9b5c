"""``glyphs_testbed``: the glyph classes cut as the papers' data are, a pretraining set and a DML set.

The papers fine-tune an ImageNet-pretrained backbone on CUB: pretraining classes and DML
classes are disjoint, and CUB's train and test classes share one domain (all birds).
``GlyphsTestbedDataset`` cuts the classes of the ``glyphs`` table (same images, same
cache) the same way:

- ``pretrain``: the first half of the classes by code point (rounded up): Latin, Greek,
  Cyrillic, Armenian, ... up to the Latin Extended Additional block; it plays ImageNet's
  role (1,416 classes, 18,152 images with matplotlib 3.11's fonts);
- the second half (Vietnamese and polytonic Greek letters, punctuation, arrows, mathematical
  operators, box drawing, Braille, ...) is the DML set. Each of its classes is dealt by a hash
  of its code point, ``sha256("glyphs_testbed:<code point>") mod 10``: 0-3 ``train``, 4 ``val``,
  5-9 ``test``. Dealt at random, the three splits share every block (one domain) and no class,
  as CUB's train and test birds; dealt by a hash, a class's split never depends on the other
  classes or on a library's random stream. Dealt by position instead (every other code point),
  the capitals of a block would train and its small letters test (U+1EB4 / U+1EB5, ...).
  With matplotlib 3.11's fonts: train 548 classes / 4,094 images, val 150 / 1,162, test 718 / 5,276.

``dml`` is the whole DML set (``train`` + ``val`` + ``test``, 1,416 classes): for closed-set studies
on the pretrained backbone, which split every class's images themselves (the SFT unbalanced study,
``dmlkit study sft-unbalanced --testbed``).

``val`` is the validation split of the testbed configs (``data.val_split: val``); the
pretraining recipe holds out its own classes from ``pretrain``. Everything else (items,
augmentation, normalisation) is ``GlyphsDataset``'s.
"""

from __future__ import annotations

import hashlib

import numpy as np

from dmlkit.data.datasets.glyphs import GlyphsDataset

__all__ = ["DML_SPLITS", "GlyphsTestbedDataset", "dealt_to", "testbed_classes"]

_DML_SPLITS = {"train": (0, 1, 2, 3), "val": (4,), "test": (5, 6, 7, 8, 9), "dml": tuple(range(10))}


def _deal(codepoint: int) -> int:
    return int(hashlib.sha256(f"glyphs_testbed:{codepoint}".encode()).hexdigest()[:8], 16) % 10


def dealt_to(codepoints: np.ndarray, split: str) -> np.ndarray:
    """A bool mask: which DML-side ``codepoints`` the hash deals to DML split ``split`` (``train``, ``val``,
    ``test`` or ``dml``); the rule of ``testbed_classes`` for its second half, and of ``font_glyphs``."""
    if split not in _DML_SPLITS:
        raise ValueError(f"unknown DML split '{split}'; valid splits are: {', '.join(_DML_SPLITS)}")
    dealt = np.array([_deal(int(cp)) for cp in codepoints], dtype=np.int64)
    return np.isin(dealt, _DML_SPLITS[split])


DML_SPLITS = tuple(_DML_SPLITS)


def testbed_classes(codepoints: np.ndarray, split: str) -> np.ndarray:
    """The class ids (ascending) of testbed split ``split`` among classes ``codepoints`` (ascending)."""
    n_pretrain = (codepoints.size + 1) // 2
    if split == "pretrain":
        return np.arange(n_pretrain, dtype=np.int64)
    if split not in _DML_SPLITS:
        raise ValueError(
            f"unknown glyphs_testbed split '{split}'; valid splits are: {', '.join(GlyphsTestbedDataset.SPLITS)}"
        )
    dml = np.arange(n_pretrain, codepoints.size, dtype=np.int64)
    return dml[dealt_to(codepoints[dml], split)]


class GlyphsTestbedDataset(GlyphsDataset):
    """Split ``split`` (``pretrain``, ``train``, ``val``, ``test`` or ``dml``) of the glyph testbed (module docstring).

    Arguments as ``GlyphsDataset``; ``max_classes`` keeps the first classes of the split by code point.
    """

    SPLITS = ("pretrain", "train", "val", "test", "dml")

    @classmethod
    def split_classes(cls, codepoints: np.ndarray, split: str) -> np.ndarray:
        return testbed_classes(codepoints, split)
