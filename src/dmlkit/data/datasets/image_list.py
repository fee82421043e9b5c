"""Shared base of the benchmark loaders that read image files listed by an official annotation file.

``ImageListDataset`` holds, per split, the image paths, their labels
``0..C-1``, the class names and the class super-categories; it loads an image
with PIL (RGB) and applies the paper transforms (``dmlkit.data.transforms.image_crops``): the
random train transform when ``augment`` (drawn from ``(seed, epoch, index)``),
else the resize + centre-crop evaluation transform.

A subclass implements ``_read(folder, split) -> AnnotatedSplit`` and names, in
class attributes, the file that marks its dataset folder (``MARKER``), the
sub-folder the official archive extracts to (``SUBFOLDERS``), and how to get
the data (``HOW_TO_GET``). ``data.root`` may be the extracted folder itself or
its parent. A missing or partial dataset raises ``ValueError`` naming the
missing file, where it was expected, and how to get it.

Decoding: with ``draft=True`` (default) a JPEG at least twice as large as
needed is decoded directly at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling,
``PIL.Image.draft``), never below a shorter side of ``resize``: the papers'
pipeline resizes to that size first anyway, so only the resampling filter of
that first reduction differs, and decoding is several times faster.

Sizes: ``image_size`` is the crop side (227 in the papers, 224 for some
backbones); ``resize`` the shorter side before cropping, by default 256 for
crops of 224 to 256 pixels (the papers) and ``round(image_size * 256 / 227)``
otherwise (small crops for quick runs keep the papers' proportions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from dmlkit.data.datasets.base import DMLDataset
from dmlkit.data.cache import dataset_dir
from dmlkit.data.transforms.eval_preprocess import ImagePreprocess, draft_jpeg
from dmlkit.data.transforms.image_crops import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    EvalTransform,
    PaperTransformConfig,
    TrainTransform,
)
from dmlkit.data.seeding import check_seed, make_generator
from dmlkit.data.datasets.unreadable import check_on_corrupt, readable_indices, unreadable_message
from dmlkit.validation import is_int

__all__ = ["AnnotatedSplit", "ImageListDataset", "default_resize", "first_half_split", "read_rows"]


@dataclass
class AnnotatedSplit:
    """One split as read from the annotation files: images, their class indices, class descriptions.

    ``classes[i]`` indexes ``class_names``; ``class_categories[c]`` indexes
    ``category_names`` (``-1``: the class has no category).
    """

    paths: list[Path]
    classes: list[int]
    class_names: list[str]
    class_categories: list[int] = field(default_factory=list)
    category_names: list[str] = field(default_factory=list)


def default_resize(image_size: int) -> int:
    """Shorter side before cropping: 256 for 224..256 px crops, else the papers' ratio 256 / 227."""
    return 256 if 224 <= image_size <= 256 else max(image_size, round(image_size * 256 / 227))


def read_rows(path: Path, columns: int, dataset: str, skip: int = 0) -> list[list[str]]:
    """Whitespace-separated rows of a text file with at least ``columns`` fields (after ``skip`` header lines).

    The last field takes the rest of the line when a row has more (names with spaces).
    """
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if number <= skip or not line.strip():
                continue
            parts = line.split(maxsplit=columns - 1)
            if len(parts) < columns:
                raise ValueError(
                    f"{dataset}: line {number} of '{path}' has {len(parts)} fields, expected {columns}: "
                    f"{line.strip()!r}; the file is truncated or not the official one"
                )
            rows.append([p.strip() for p in parts])
    return rows


def parse_int(text: str, path: Path, dataset: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"{dataset}: '{path}' holds {text!r} where an integer id belongs; is it the official file?"
        ) from None


def first_half_split(classes: Sequence[int], num_classes: int, split: str) -> tuple[list[int], list[int]]:
    """Images (indices) and classes of ``split``: ``train`` = first half of the classes, ``test`` = the rest.

    With the official 200 CUB / 196 Cars classes this is the papers' 100 / 100 and 98 / 98.
    """
    half = (num_classes + 1) // 2
    keep = range(half) if split == "train" else range(half, num_classes)
    wanted = set(keep)
    return [i for i, c in enumerate(classes) if c in wanted], list(keep)


class ImageListDataset(DMLDataset):
    """Images listed by an official annotation file; see the module docstring."""

    NAME: ClassVar[str] = ""
    MARKER: ClassVar[str] = ""
    ALT_MARKERS: ClassVar[tuple[str, ...]] = ()  # other layouts' marker files
    SUBFOLDERS: ClassVar[tuple[str, ...]] = ()
    HOW_TO_GET: ClassVar[str] = ""
    SOURCE = "the official archive, extracted by you: data.root (it cannot be downloaded automatically)"
    in_channels = 3

    def __init__(
        self,
        split: str = "train",
        root: str | Path | None = None,
        seed: int = 0,
        augment: bool = False,
        image_size: int = 227,
        resize: int | None = None,
        max_classes: int | None = None,
        draft: bool = True,
        on_corrupt: str = "error",
    ) -> None:
        if split not in self.SPLITS:
            raise ValueError(
                f"unknown split '{split}' of dataset '{self.NAME}'; valid splits are: {', '.join(self.SPLITS)}"
            )
        check_seed(seed)
        self.split, self.seed, self.augment = split, seed, bool(augment)
        self.image_size, self.draft = image_size, bool(draft)
        config = PaperTransformConfig(size=image_size, resize=default_resize(image_size) if resize is None else resize)
        self._resize = config.resize
        self._train_transform, self._eval_transform = TrainTransform(config), EvalTransform(config)
        self.folder = self.locate(root)
        data = self._read(self.folder, split)
        if max_classes is not None:
            data = _first_classes(data, max_classes)
        if not data.paths:
            raise ValueError(
                f"{self.NAME}: split '{split}' under '{self.folder}' lists no images; the annotation files are incomplete"
            )
        self.paths, classes = data.paths, data.classes
        self.skipped: list[tuple[str, str]] = []
        if check_on_corrupt(on_corrupt) == "skip":
            keep, self.skipped = readable_indices(self.paths, self.NAME)
            self.paths, classes = [self.paths[i] for i in keep], [classes[i] for i in keep]
            if not self.paths:
                raise ValueError(f"{self.NAME}: no image of split '{split}' under '{self.folder}' can be read")
        self.labels = torch.tensor(classes, dtype=torch.long)
        self.class_names = data.class_names
        cats = data.class_categories or [-1] * len(data.class_names)
        self.class_categories = torch.tensor(cats, dtype=torch.long)
        self.category_names = data.category_names
        for path in {self.paths[0], self.paths[-1]}:  # cheap check for a partial extraction
            self._require_image(path)

    # ------------------------------------------------------------ files
    @classmethod
    def prepare(cls, root: str | Path | None = None) -> Path:
        """Check the data (these datasets cannot be downloaded): read every split's annotations; return the folder."""
        for split in cls.SPLITS:
            cls(split=split, root=root, image_size=8)
        return cls.locate(root)

    @classmethod
    def locate(cls, root: str | Path | None) -> Path:
        """The dataset folder: ``root`` or ``root/<SUBFOLDER>``, whichever holds ``MARKER`` (or an ``ALT_MARKERS`` file)."""
        base = dataset_dir(cls.NAME, root)
        candidates = [base] + [base / s for s in cls.SUBFOLDERS]
        for folder in candidates:
            if any((folder / m).is_file() for m in (cls.MARKER, *cls.ALT_MARKERS)):
                return folder
        where = " or ".join(f"'{c / cls.MARKER}'" for c in candidates)
        raise ValueError(f"{cls.NAME}: file '{cls.MARKER}' not found; expected it at {where}. {cls.HOW_TO_GET}")

    @classmethod
    def require(cls, folder: Path, relative: str) -> Path:
        """``folder / relative``, or a ``ValueError`` naming the missing file and how to get it."""
        path = folder / relative
        if not path.is_file():
            raise ValueError(f"{cls.NAME}: file '{relative}' is missing; expected it at '{path}'. {cls.HOW_TO_GET}")
        return path

    def _require_image(self, path: Path) -> None:
        if not path.is_file():
            raise ValueError(
                f"{self.NAME}: image '{path}' listed in the annotations is missing (a partial download or "
                f"extraction?). {self.HOW_TO_GET}"
            )

    def _read(self, folder: Path, split: str) -> AnnotatedSplit:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------ items
    @classmethod
    def eval_preprocess(
        cls, image_size: int = 227, resize: int | None = None, draft: bool = True, **params: Any
    ) -> ImagePreprocess:
        """The papers' eval transform: shorter side to ``resize``, centred ``image_size`` crop, ImageNet statistics."""
        shorter = default_resize(image_size) if resize is None else resize
        return ImagePreprocess(3, image_size, IMAGENET_MEAN, IMAGENET_STD, resize=shorter, draft=bool(draft))

    def load_image(self, index: int) -> Image.Image:
        """The RGB image ``index``; a large JPEG is decoded at a reduced scale (``draft``) that keeps
        its shorter side at least ``resize``, the size the transforms resize it to anyway."""
        path = self.paths[index]
        try:
            with Image.open(path) as img:
                if self.draft:
                    draft_jpeg(img, self._resize)
                return img.convert("RGB")
        except FileNotFoundError:
            self._require_image(path)
            raise
        except (UnidentifiedImageError, OSError) as err:
            raise ValueError(
                f"{self.NAME}: image '{path}' cannot be read ({unreadable_message(err)}); replace it from the official archive, "
                "or set data.params.on_corrupt=skip to drop unreadable images"
            ) from err

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} images")
        img = self.load_image(index)
        if self.augment:
            x = self._train_transform(img, make_generator(self.seed, self.epoch, index))
        else:
            x = self._eval_transform(img)
        return x, int(self.labels[index])


def _first_classes(data: AnnotatedSplit, max_classes: int) -> AnnotatedSplit:
    if not is_int(max_classes) or max_classes < 1:
        raise ValueError(f"max_classes must be a positive int or None, got {max_classes!r}")
    keep = [i for i, c in enumerate(data.classes) if c < max_classes]
    return AnnotatedSplit(
        paths=[data.paths[i] for i in keep],
        classes=[data.classes[i] for i in keep],
        class_names=data.class_names[:max_classes],
        class_categories=data.class_categories[:max_classes],
        category_names=data.category_names,
    )


def relabel(keys: Sequence[object], order: Sequence[object] | None = None) -> tuple[list[int], list[object]]:
    """Contiguous ids of ``keys`` in the sorted order of the distinct keys (or ``order``); ``(ids, distinct)``."""
    distinct = list(order) if order is not None else sorted(set(keys))
    index = {k: i for i, k in enumerate(distinct)}
    return [index[k] for k in keys], distinct
