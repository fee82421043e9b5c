"""``font_glyphs``: the DML-side characters of ``glyphs_testbed`` drawn in hundreds of Debian font faces.

A CUB-shaped set: fine-grained classes (letters that differ by a diacritic) with tens to
hundreds of images each, in faces the pretrained glyph backbones never saw. Built from

- ``font_faces``: the Debian font packages (``FONT_PACKAGES``, installed by
  ``bash scripts/install_system_packages.sh``) and their faces; a package missing is a ``ValueError``
  naming that command. The quickstart and ``glyphs`` need none of them;
- ``font_glyph_table``: one image per (character, face) where the face's cmap maps the character and
  draws it distinctly from the faces before it; classes with fewer than ``MIN_FACE_IMAGES`` images dropped;
- ``font_glyph_cache``: rendered once and cached under ``$DMLKIT_CACHE/font_glyphs``, keyed by the faces'
  fingerprint (another font set is rendered again, with a warning, never mixed);
- ``glyph_testbed``: the classes. Candidates are the DML-side classes of ``glyphs_testbed`` (the second half
  of the glyph table by code point), so no class is one the pretrained backbones (``glyphs-resnet20``,
  trained on the first half) saw; each is dealt to ``train`` / ``val`` / ``test`` by the same hash as in
  ``glyphs_testbed`` (``dealt_to``): a character lies in the same split in both datasets.
  ``dml`` is all three.

Items, augmentation and normalisation are ``GlyphsDataset``'s (``StoredGlyphImages``); ``image_fonts``
index ``font_names``, the faces (``folder/file``). Parameters beyond the glyph datasets' (``data.params``):
``faces`` (font files to draw instead of the packages' faces) and ``min_images`` (the least images a class
keeps, ``MIN_FACE_IMAGES`` by default; part of the cache key).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from dmlkit_lab.datasets.font_faces import package_faces
from dmlkit_lab.datasets.font_glyph_cache import (
    cached_font_sizes,
    font_glyphs_cache_path,
    font_table_key,
    load_font_table,
)
from dmlkit.data.datasets.glyph_cache import load_glyph_table
from dmlkit.data.datasets.glyph_select import REFERENCE_SIZE
from dmlkit.data.datasets.glyph_table import GlyphTable
from dmlkit_lab.datasets.glyph_testbed import dealt_to
from dmlkit.data.datasets.glyphs import GlyphsDataset
from dmlkit.data.datasets.stored_images import GLYPHS_MEAN, GLYPHS_STD
from dmlkit.data.transforms.glyph_augment import GlyphAugmentConfig

__all__ = ["FontGlyphsDataset", "dml_candidates"]


def dml_candidates() -> np.ndarray:
    """The code points of ``glyphs_testbed``'s DML classes (the second half of the glyph table): the candidates."""
    codepoints = load_glyph_table().codepoints
    return codepoints[(codepoints.size + 1) // 2 :]


class FontGlyphsDataset(GlyphsDataset):
    """Split ``split`` (``train``, ``val``, ``test`` or ``dml``) of ``font_glyphs`` (module docstring).

    Arguments as ``GlyphsDataset`` (``root``: the cache folder, default ``$DMLKIT_CACHE/font_glyphs``), and
    ``faces``: font files to render instead of the installed ``FONT_PACKAGES``' faces (tests, own fonts).
    """

    ITEM_NAME = "font glyph images"
    SOURCE = "rendered once from Debian font packages (bash scripts/install_system_packages.sh) and cached"
    SPLITS = ("train", "val", "test", "dml")

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
        faces: Sequence[str | Path] | None = None,
        min_images: int | None = None,
    ) -> None:
        if split not in self.SPLITS:
            raise ValueError(f"unknown font_glyphs split '{split}'; valid splits are: {', '.join(self.SPLITS)}")
        if faces is not None and (isinstance(faces, (str, Path)) or not faces):
            raise ValueError(
                f"faces must be a non-empty list of font files (or None for the installed packages), got {faces!r}"
            )
        self.faces = [Path(f) for f in faces] if faces is not None else None
        self.min_images = min_images
        super().__init__(split, root, image_size, augment, seed, max_classes, augment_config, normalize)

    def load_table(self, root: str | Path | None, image_size: int) -> GlyphTable:
        faces = self.faces if self.faces is not None else package_faces()
        missing = [str(f) for f in faces if not f.is_file()]
        if missing:
            raise ValueError(f"font files not found: {missing[:5]}; pass existing .ttf / .otf files as faces")
        return load_font_table(faces, dml_candidates(), root, image_size, min_images=self.min_images)

    @classmethod
    def split_classes(cls, codepoints: np.ndarray, split: str) -> np.ndarray:
        return np.nonzero(dealt_to(codepoints, split))[0].astype(np.int64)

    @classmethod
    def prepare(cls, root: str | Path | None = None, image_size: int = REFERENCE_SIZE, force: bool = False) -> Path:
        load_font_table(package_faces(), dml_candidates(), root, image_size, force)
        return font_glyphs_cache_path(image_size, root)

    @classmethod
    def fingerprint(cls, root: str | Path | None = None, image_size: int = REFERENCE_SIZE) -> str:
        """What decides the items without reading them: the table's key, normalisation and default augmentation."""
        key = font_table_key(package_faces(), dml_candidates(), image_size)
        return f"{key} mean={GLYPHS_MEAN} std={GLYPHS_STD} augment={GlyphAugmentConfig()!r}"

    @classmethod
    def local_state(cls, name: str) -> str:
        sizes = cached_font_sizes()
        return (
            f"cached ({', '.join(f'{s} px' for s in sizes)})" if sizes else "renders on first use (needs font packages)"
        )
