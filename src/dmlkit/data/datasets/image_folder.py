"""``image_folder``: a user's own images, one sub-folder per class, in either of two layouts.

Layouts under ``root`` (``dmlkit.data.datasets.folder_layout`` tells them apart)::

    root/<class name>/*.png|jpg|jpeg|bmp|webp          flat: the classes are split here
    root/train/<class name>/*...  root/test/<class name>/*...    split: the classes are split already

A flat folder's classes are split into ``train`` and ``test`` by ``class_split`` (``sorted``: the first
``train_share`` of the names in sorted order, the benchmarks' convention; ``random``: drawn from
``split_seed``), or taken from a run's split record ``classes_file``
(``dmlkit.data.datasets.class_split``); every flat class needs at least two images. The validation
classes are held out of ``train`` by ``data.val_fraction`` as for every dataset.

Classes are the class-folder names in sorted order, labelled ``0..C-1`` within the split
(class-disjoint splits are the DML convention, so the same name in train and test of a split folder is
two unrelated labels). Images are loaded with PIL, converted to grey or RGB, resized to ``image_size``
x ``image_size`` and normalised with ImageNet statistics (RGB) or 0.5/0.5 (grey). Augmentation
(``augment=True``) is a random resized crop with scale (0.6, 1) and aspect ratio (3/4, 4/3) and a
horizontal flip, drawn from ``(seed, epoch, index)``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from dmlkit.data.datasets.base import DMLDataset, no_categories
from dmlkit.data.datasets.class_split import read_split_record, split_classes, split_record
from dmlkit.data.datasets.folder_layout import IMAGE_SUFFIXES, class_folders, folder_layout, images_in, scan_classes
from dmlkit.data.transforms.eval_preprocess import ImagePreprocess
from dmlkit.data.seeding import make_generator
from dmlkit.data.datasets.unreadable import check_on_corrupt, readable_indices, unreadable_message
from dmlkit.data.datasets.registry import register_dataset

__all__ = ["IMAGE_SUFFIXES", "ImageFolderDataset", "scan_split"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def scan_split(folder: Path) -> tuple[list[str], list[Path], list[int]]:
    """Class names, image paths and labels of one split folder ``ROOT/<split>/``."""
    if not folder.is_dir():
        raise ValueError(
            f"split folder '{folder}' does not exist; image_folder's split layout needs ROOT/<split>/<class>/<image>"
        )
    classes = class_folders(folder)
    paths, labels = scan_classes(folder, classes)
    return classes, paths, labels


def _one_image_classes(root: Path, classes: list[str]) -> None:
    """A flat class needs a second image: with one, it has no positive pair to train on or to retrieve."""
    single = [name for name in classes if len(images_in(root / name)) == 1]
    if single:
        raise ValueError(
            f"{len(single)} class folder(s) of '{root}' hold a single image ({', '.join(single[:5])}"
            f"{' ...' if len(single) > 5 else ''}); metric learning needs at least 2 images of each class: add "
            "images to them or remove those folders"
        )


def _mild_random_crop_corners(width: int, height: int, generator: torch.Generator) -> tuple[int, int, int, int]:
    """A crop box ``(left, top, right, bottom)`` with area scale in (0.6, 1) and aspect ratio in (3/4, 4/3)."""
    u = torch.rand(4, generator=generator).tolist()
    area = width * height * (0.6 + 0.4 * u[0])
    ratio = math.exp(math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * u[1])
    w = min(width, max(1, round(math.sqrt(area * ratio))))
    h = min(height, max(1, round(math.sqrt(area / ratio))))
    left = int(u[2] * (width - w + 1)) if width > w else 0
    top = int(u[3] * (height - h + 1)) if height > h else 0
    return left, top, left + w, top + h


@register_dataset("image_folder")
class ImageFolderDataset(DMLDataset):
    """Images from ``root/<class>/`` (split here) or ``root/<split>/<class>/``; see the module docstring.

    ``split_record`` is the flat folder's class split as ``classes.json`` holds it (None for a split folder);
    ``skipped`` lists ``(path, reason)`` of the images ``on_corrupt: skip`` dropped.
    """

    SPLITS = ("train", "test")
    SOURCE = "your files: data.root holding <class>/ image folders (or train/<class>/ and test/<class>/)"

    def __init__(
        self,
        split: str = "train",
        root: str | Path | None = None,
        seed: int = 0,
        augment: bool = False,
        image_size: int = 32,
        channels: int = 3,
        on_corrupt: str = "error",
        class_split: str | None = None,
        train_share: float | None = None,
        split_seed: int | None = None,
        classes_file: str | Path | None = None,
    ) -> None:
        if root is None:
            raise ValueError(
                "dataset 'image_folder' needs data.root: the folder holding <class>/ (or train/ and test/)"
            )
        if channels not in (1, 3):
            raise ValueError(f"channels must be 1 (grey) or 3 (RGB), got {channels}")
        self.root, self.split, self.seed, self.augment = Path(root), split, seed, augment
        self.image_size, self.in_channels = image_size, channels
        self.split_record: dict[str, Any] | None = None
        flat_options = dict(
            class_split=class_split, train_share=train_share, split_seed=split_seed, classes_file=classes_file
        )
        if folder_layout(self.root) == "split":
            given = [name for name, value in flat_options.items() if value is not None]
            if given:
                raise ValueError(
                    f"'{self.root}' holds train/ and test/ folders, so its classes are split already; "
                    f"data.params.{given[0]} splits a flat folder ROOT/<class>/<image>: remove it"
                )
            self.class_names, self.paths, labels = scan_split(self.root / split)
            where = self.root / split
        else:
            self.class_names, self.paths, labels = self._flat_split(split, **flat_options)
            where = self.root
        self.skipped: list[tuple[str, str]] = []
        if check_on_corrupt(on_corrupt) == "skip":
            keep, self.skipped = readable_indices(self.paths, f"image_folder '{where}' ({split})")
            self.paths, labels = [self.paths[i] for i in keep], [labels[i] for i in keep]
            if not self.paths:
                raise ValueError(f"no image of the {split} split under '{where}' can be read")
        self.labels = torch.tensor(labels, dtype=torch.long)
        self.class_categories = no_categories(len(self.class_names))
        self.category_names = []
        mean, std = (IMAGENET_MEAN, IMAGENET_STD) if channels == 3 else ((0.5,), (0.5,))
        self._mean = torch.tensor(mean).view(-1, 1, 1)
        self._std = torch.tensor(std).view(-1, 1, 1)

    def _flat_split(
        self,
        split: str,
        class_split: str | None,
        train_share: float | None,
        split_seed: int | None,
        classes_file: str | Path | None,
    ) -> tuple[list[str], list[Path], list[int]]:
        """The classes of ``split`` of a flat folder, their images and labels; sets ``split_record``."""
        names = class_folders(self.root)
        class_split = "sorted" if class_split is None else class_split
        train_share = 0.5 if train_share is None else train_share
        split_seed = 0 if split_seed is None else split_seed
        if classes_file is not None:
            record = read_split_record(classes_file, names)
        else:
            record = split_record(
                self.root,
                split_classes(names, class_split, train_share, split_seed),
                class_split,
                train_share,
                split_seed,
            )
        _one_image_classes(self.root, record["train"] + record["test"])
        self.split_record = record
        paths, labels = scan_classes(self.root, record[split])
        return list(record[split]), paths, labels

    @classmethod
    def eval_preprocess(cls, image_size: int = 32, channels: int = 3, **params: Any) -> ImagePreprocess:
        """Bilinear resize to ``image_size x image_size``; ImageNet statistics (RGB) or 0.5 / 0.5 (grey)."""
        mean, std = (IMAGENET_MEAN, IMAGENET_STD) if channels == 3 else ((0.5,), (0.5,))
        return ImagePreprocess(channels, image_size, mean, std)

    def _load(self, index: int) -> Image.Image:
        path = self.paths[index]
        try:
            with Image.open(path) as img:
                return img.convert("RGB" if self.in_channels == 3 else "L")
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
            raise ValueError(
                f"image '{path}' cannot be read ({unreadable_message(err)}); remove or replace it, "
                "or set data.params.on_corrupt=skip to drop unreadable images"
            ) from err

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        img = self._load(index)
        if self.augment:
            gen = make_generator(self.seed, self.epoch, index)
            img = img.crop(_mild_random_crop_corners(img.width, img.height, gen))
            if torch.rand(1, generator=gen).item() < 0.5:
                img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        img = img.resize((self.image_size, self.image_size), Image.Resampling.BILINEAR)
        array = np.asarray(img, dtype=np.float32) / 255.0
        x = torch.from_numpy(array.reshape(self.image_size, self.image_size, self.in_channels)).permute(2, 0, 1)
        return (x - self._mean) / self._std, int(self.labels[index])
