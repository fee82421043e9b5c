"""``glyph_collage``: the Cifar-collage study of the thesis (Sec. 5.3.2) rebuilt from the embedded glyphs.

Each image is a 2 x 2 grid: one cell holds a glyph of the image's *foreground*
class (its label), the three others glyphs drawn from a small group of
*background* classes shared by all the images of that group (the thesis
stitches one Cifar image of the class with three of 4 shared super-classes).
Cells are glyphs downsampled to ``image_size // 2`` pixels; the foreground cell
and every glyph (font) are drawn at random.

Class groups, all distinct characters (disjoint across train, validation, test
in both foreground and background, as in Sec. 5.3.2):

* split ``train`` draws from the glyph *train* characters: ``train_classes``
  foreground classes with background group B_train, then ``val_classes``
  foreground classes with their own background group B_val. These last classes
  are the validation hold-out: with ``data.val_fraction = val_classes /
  (train_classes + val_classes)`` (0.2 for the defaults 16 + 4) the engine's
  class-disjoint hold-out (the *last* classes) is exactly them, so validation
  shares neither foreground nor background classes with training;
* split ``test`` draws ``test_classes`` foreground classes and a background
  group B_test from the glyph *test* characters.

``class_pool`` says which characters the roles are drawn from. ``glyphs`` (the
default): split ``train`` from the glyph *train* characters (the first half by code
point), ``test`` from the glyph *test* characters. That first half is exactly
``glyphs_testbed``'s ``pretrain`` split, the classes the testbed backbone
(``model.pretrained: glyphs-resnet20``) was pretrained to classify: on that backbone the
training collages' foreground *and* background characters are pretraining classes.
``testbed`` draws only from the DML side of the testbed: ``train`` from the testbed's
``train`` and ``val`` classes, ``test`` from its ``test`` classes, so no role is played
by a pretraining class (a different set of characters than ``glyphs``: the two layouts'
numbers do not compare).

Which characters play which role is drawn once from ``layout_seed`` among the
characters of the pool rendered in at least ``min_fonts`` fonts (independent of the run's
seed, so every run sees the same collages); the collages themselves are drawn
from ``(layout_seed, split)``. ``foreground_mask`` gives, per image, the cell
(0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right) of the foreground
glyph, for checking where a pooling puts its weight. Items are normalised with
the glyph statistics (area downsampling keeps the mean ink) and, with
``augment``, perturbed by ``GlyphAugment`` from ``(seed, epoch, index)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from dmlkit.data.datasets.glyph_cache import load_glyph_table, prepare_glyphs
from dmlkit.data.datasets.glyph_select import REFERENCE_SIZE
from dmlkit.data.datasets.glyph_table import GlyphTable
from dmlkit_lab.datasets.glyph_testbed import testbed_classes
from dmlkit.data.datasets.glyphs import split_class_range
from dmlkit.data.datasets.stored_images import StoredGlyphImages
from dmlkit.data.seeding import check_seed, make_generator
from dmlkit.data.transforms.glyph_augment import GlyphAugmentConfig
from dmlkit.validation import is_int

__all__ = ["CLASS_POOLS", "Collages", "GlyphCollageDataset", "collage_candidates", "collage_layout", "compose_collages"]

_SPLIT_CODE = {"train": 1, "test": 2}
CLASS_POOLS = ("glyphs", "testbed")


def _check_count(name: str, value: object, minimum: int = 1) -> int:
    if not is_int(value) or value < minimum:
        raise ValueError(f"glyph_collage {name} must be an int >= {minimum}, got {value!r}")
    return value


def collage_candidates(codepoints: np.ndarray, split: str, class_pool: str = "glyphs") -> np.ndarray:
    """Glyph class ids (ascending) that may play a role in collage split ``split`` (module docstring).

    ``glyphs``: the glyph split's half of the classes; ``testbed``: the testbed's DML classes only
    (``train`` + ``val`` for ``train``, ``test`` for ``test``), none of ``glyphs-resnet20``'s pretraining classes.
    """
    if class_pool == "glyphs":
        lo, hi = split_class_range(len(codepoints), split)
        return np.arange(lo, hi, dtype=np.int64)
    if class_pool == "testbed":
        parts = ("train", "val") if split == "train" else ("test",)
        return np.sort(np.concatenate([testbed_classes(codepoints, part) for part in parts]))
    raise ValueError(f"glyph_collage class_pool must be one of {', '.join(CLASS_POOLS)}, got {class_pool!r}")


def collage_layout(
    image_class: np.ndarray,
    num_classes: int,
    split: str,
    train_classes: int,
    val_classes: int,
    test_classes: int,
    background_classes: int,
    min_fonts: int,
    layout_seed: int,
    candidates: np.ndarray | None = None,
) -> tuple[list[int], list[list[int]], list[int]]:
    """Glyph class ids of ``split``: ``(foreground, background groups, group of each foreground class)``.

    ``train``: ``train_classes`` foregrounds with group 0 and ``val_classes`` with group 1;
    ``test``: ``test_classes`` foregrounds with group 0. All ids are distinct and drawn from
    ``candidates`` (ascending class ids; default the glyph split's half, ``collage_candidates``).
    """
    if candidates is None:
        lo, hi = split_class_range(num_classes, split)
        candidates = np.arange(lo, hi, dtype=np.int64)
    counts = np.bincount(image_class, minlength=num_classes)[candidates]
    pool = candidates[counts >= min_fonts]
    order = torch.randperm(pool.size, generator=make_generator(layout_seed, _SPLIT_CODE[split], 0xC0)).numpy()
    pool = pool[order]
    if split == "train":
        sizes = [(train_classes, background_classes), (val_classes, background_classes)]
    else:
        sizes = [(test_classes, background_classes)]
    need = sum(f + b for f, b in sizes)
    if need > pool.size:
        raise ValueError(
            f"glyph_collage needs {need} distinct characters for split '{split}' but only {pool.size} are rendered "
            f"in >= {min_fonts} fonts; lower the class counts or min_fonts"
        )
    foreground, groups, group_of = [], [], []
    at = 0
    for g, (n_fg, n_bg) in enumerate(sizes):
        foreground += pool[at : at + n_fg].tolist()
        group_of += [g] * n_fg
        at += n_fg
        groups.append(pool[at : at + n_bg].tolist())
        at += n_bg
    return foreground, groups, group_of


class Collages(NamedTuple):
    """The collages of one split (``compose_collages``)."""

    images: Tensor  # (n, image_size, image_size) uint8
    labels: Tensor  # (n,) foreground class of each collage, index into the foreground list
    foreground_cell: Tensor  # (n,) cell of the foreground glyph: 0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right
    cell_glyph_rows: Tensor  # (n, 4) glyph table row drawn in each cell


def compose_collages(
    table: GlyphTable,
    foreground: list[int],
    groups: list[list[int]],
    group_of: list[int],
    per_class: int,
    image_size: int,
    generator: torch.Generator,
) -> Collages:
    """``per_class`` collages of each ``foreground`` class (glyph class ids) with background group
    ``groups[group_of[c]]``, ``image_size`` px square, glyphs and cells drawn from ``generator``."""
    labels, position, cells = _draw_cells(table.image_class, foreground, groups, group_of, per_class, generator)
    images = _tile(table.images, cells, image_size // 2)
    return Collages(images, labels, position, cells)


def _draw_cells(
    image_class: np.ndarray,
    foreground: list[int],
    groups: list[list[int]],
    group_of: list[int],
    per_class: int,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor, Tensor]:
    """Labels, foreground cell and the glyph table row of each cell, ``per_class`` collages per class."""
    classes = set(foreground) | {c for group in groups for c in group}
    rows_of = {c: np.nonzero(image_class == c)[0] for c in classes}
    n = len(foreground) * per_class
    labels = torch.arange(len(foreground)).repeat_interleave(per_class)
    position = torch.randint(0, 4, (n,), generator=generator)
    cells = torch.empty(n, 4, dtype=torch.long)
    for i in range(n):
        c = int(labels[i])
        group = groups[group_of[c]]
        picks = torch.randint(0, 1 << 30, (4, 2), generator=generator).tolist()
        for cell in range(4):
            cls = foreground[c] if cell == int(position[i]) else group[picks[cell][0] % len(group)]
            rows = rows_of[cls]
            cells[i, cell] = int(rows[picks[cell][1] % rows.size])
    return labels, position, cells


def _tile(glyph_images: np.ndarray, cells: Tensor, half: int) -> Tensor:
    """``(n, 2 * half, 2 * half)`` uint8: the glyphs of ``cells`` area-downsampled to ``half`` px, 2 x 2."""
    glyphs = torch.from_numpy(glyph_images).float().div_(255.0).unsqueeze(1)
    used = torch.unique(cells)
    small = F.interpolate(glyphs[used], size=(half, half), mode="area").squeeze(1)  # (U, half, half)
    lookup = torch.full((glyphs.shape[0],), -1, dtype=torch.long)
    lookup[used] = torch.arange(used.numel())
    tiles = small[lookup[cells]]  # (n, 4, half, half)
    top = torch.cat([tiles[:, 0], tiles[:, 1]], dim=2)
    bottom = torch.cat([tiles[:, 2], tiles[:, 3]], dim=2)
    return (torch.cat([top, bottom], dim=1) * 255.0).round().to(torch.uint8)


class GlyphCollageDataset(StoredGlyphImages):
    """Split ``split`` of the glyph collages (see the module docstring).

    Args:
        split: ``"train"`` (train + validation foreground classes) or ``"test"``.
        root: glyph cache folder (as for ``glyphs``).
        image_size: side of the collage in pixels (even, >= 16); each cell is half of it.
        augment: apply ``GlyphAugment`` to the whole collage, from ``(seed, epoch, index)``.
        seed: augmentation seed.
        max_classes: keep only the first ``max_classes`` foreground classes.
        per_class: collages per foreground class.
        train_classes, val_classes, test_classes: foreground classes of each role (16 / 4 / 16).
        background_classes: classes in each background group (4, as the 4 shared super-classes of Sec. 5.3.2).
        min_fonts: only characters rendered in at least this many fonts are used.
        layout_seed: draws the class roles and the collages.
        class_pool: ``glyphs`` (the glyph split's half) or ``testbed`` (the testbed's DML classes only,
            none of the pretrained backbone's classes); module docstring.
        normalize: return ``(x - GLYPHS_MEAN) / GLYPHS_STD``.
    """

    SPLITS = ("train", "test")
    ITEM_NAME = "collages"

    def __init__(
        self,
        split: str = "train",
        root: str | Path | None = None,
        image_size: int = 32,
        augment: bool = False,
        seed: int = 0,
        max_classes: int | None = None,
        per_class: int = 40,
        train_classes: int = 16,
        val_classes: int = 4,
        test_classes: int = 16,
        background_classes: int = 4,
        min_fonts: int = 12,
        layout_seed: int = 0,
        augment_config: GlyphAugmentConfig | None = None,
        normalize: bool = True,
        class_pool: str = "glyphs",
    ) -> None:
        self._check_args(
            split,
            image_size,
            per_class,
            train_classes,
            val_classes,
            test_classes,
            background_classes,
            min_fonts,
            max_classes,
        )
        check_seed(seed)
        check_seed(layout_seed, "layout_seed")
        table = load_glyph_table(root, REFERENCE_SIZE)
        candidates = collage_candidates(np.asarray(table.codepoints), split, class_pool)
        fg, groups, group_of = collage_layout(
            table.image_class,
            table.num_classes,
            split,
            train_classes,
            val_classes,
            test_classes,
            background_classes,
            min_fonts,
            layout_seed,
            candidates,
        )
        if max_classes is not None:
            fg, group_of = fg[:max_classes], group_of[:max_classes]
        generator = make_generator(layout_seed, _SPLIT_CODE[split], 0xC1)
        collages = compose_collages(table, fg, groups, group_of, per_class, image_size, generator)
        super().__init__(collages.images, collages.labels, augment, seed, normalize, augment_config)
        self.foreground_cell = collages.foreground_cell
        self.cell_glyph_rows = collages.cell_glyph_rows
        self.split = split
        self.class_pool = class_pool
        self.image_size = image_size
        self.foreground_codepoints = [int(table.codepoints[c]) for c in fg]
        self.background_codepoints = [[int(table.codepoints[c]) for c in group] for group in groups]
        self.background_group = torch.tensor(group_of, dtype=torch.long)
        self.class_chars = [chr(cp) for cp in self.foreground_codepoints]
        self.class_names = [table.class_names[c] for c in fg]
        self.category_names = list(table.category_names)
        self.class_categories = torch.from_numpy(table.class_categories[fg].copy())

    @classmethod
    def _check_args(
        cls,
        split: str,
        image_size: object,
        per_class: object,
        train_classes: object,
        val_classes: object,
        test_classes: object,
        background_classes: object,
        min_fonts: object,
        max_classes: object,
    ) -> None:
        if split not in cls.SPLITS:
            raise ValueError(f"unknown glyph_collage split '{split}'; valid splits are: {', '.join(cls.SPLITS)}")
        if not is_int(image_size) or image_size < 16 or image_size % 2:
            raise ValueError(f"glyph_collage image_size must be an even int >= 16 (2 x 2 cells), got {image_size!r}")
        for name, value, minimum in (
            ("per_class", per_class, 1),
            ("train_classes", train_classes, 1),
            ("val_classes", val_classes, 0),
            ("test_classes", test_classes, 1),
            ("background_classes", background_classes, 1),
            ("min_fonts", min_fonts, 1),
        ):
            _check_count(name, value, minimum)
        if max_classes is not None:
            _check_count("max_classes", max_classes)

    @classmethod
    def prepare(cls, root: str | Path | None = None, **kwargs: object) -> Path:
        return prepare_glyphs(root)

    def foreground_mask(self, h: int, w: int) -> Tensor:
        """``(N, h, w)`` bool: True on the ``h x w`` grid cells that lie in each image's foreground quarter."""
        if h % 2 or w % 2:
            raise ValueError(f"the grid must split into quarters (even h and w), got {h} x {w}")
        quarter = torch.zeros(4, h, w, dtype=torch.bool)
        quarter[0, : h // 2, : w // 2] = True
        quarter[1, : h // 2, w // 2 :] = True
        quarter[2, h // 2 :, : w // 2] = True
        quarter[3, h // 2 :, w // 2 :] = True
        return quarter[self.foreground_cell]
