"""``image_folder``: a user's own images, one sub-folder per class, one folder per split.

Layout under ``root``::

    root/train/<class name>/*.png|jpg|jpeg|bmp|webp
    root/test/<class name>/*...

Classes are the sub-folder names in sorted order, labelled ``0..C-1`` within the
split (class-disjoint splits are the DML convention, so the same name in train and
test is two unrelated labels). Images are loaded with PIL, converted to grey or
RGB, resized to ``image_size`` x ``image_size`` and normalised with ImageNet
statistics (RGB) or 0.5/0.5 (grey). Augmentation (``augment=True``) is a random
resized crop with scale (0.6, 1) and aspect ratio (3/4, 4/3) and a horizontal flip,
drawn from ``(seed, epoch, index)``.
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
from dmlkit.data.transforms.eval_preprocess import ImagePreprocess
from dmlkit.data.seeding import make_generator
from dmlkit.data.datasets.unreadable import check_on_corrupt, readable_indices

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def scan_split(folder: Path) -> tuple[list[str], list[Path], list[int]]:
    """Class names, image paths and labels of one split folder; clear errors for missing or empty data."""
    if not folder.is_dir():
        raise ValueError(
            f"dataset folder '{folder}' does not exist; image_folder expects "
            f"ROOT/<split>/<class>/<image> (set data.root to ROOT)"
        )
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not classes:
        raise ValueError(f"dataset folder '{folder}' has no class sub-folders; put each class's images in ROOT/<split>/<class>/")
    paths, labels = [], []
    for label, name in enumerate(classes):
        images = sorted(p for p in (folder / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not images:
            raise ValueError(f"class folder '{folder / name}' holds no images ({', '.join(IMAGE_SUFFIXES)})")
        paths += images
        labels += [label] * len(images)
    return classes, paths, labels


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


class ImageFolderDataset(DMLDataset):
    """Images from ``root/<split>/<class>/``; see the module docstring."""

    SPLITS = ("train", "test")
    SOURCE = "your files: data.root holding train/<class>/ and test/<class>/ image folders"

    def __init__(
        self, split: str = "train", root: str | Path | None = None, seed: int = 0, augment: bool = False,
        image_size: int = 32, channels: int = 3, on_corrupt: str = "error",
    ) -> None:
        if root is None:
            raise ValueError("dataset 'image_folder' needs data.root: the folder holding train/ and test/")
        if channels not in (1, 3):
            raise ValueError(f"channels must be 1 (grey) or 3 (RGB), got {channels}")
        self.root, self.split, self.seed, self.augment = Path(root), split, seed, augment
        self.image_size, self.in_channels = image_size, channels
        self.class_names, self.paths, labels = scan_split(self.root / split)
        self.skipped: list[tuple[str, str]] = []
        if check_on_corrupt(on_corrupt) == "skip":
            keep, self.skipped = readable_indices(self.paths, f"image_folder '{self.root / split}'")
            self.paths, labels = [self.paths[i] for i in keep], [labels[i] for i in keep]
            if not self.paths:
                raise ValueError(f"no image under '{self.root / split}' can be read")
        self.labels = torch.tensor(labels, dtype=torch.long)
        self.class_categories = no_categories(len(self.class_names))
        self.category_names = []
        mean, std = (IMAGENET_MEAN, IMAGENET_STD) if channels == 3 else ((0.5,), (0.5,))
        self._mean = torch.tensor(mean).view(-1, 1, 1)
        self._std = torch.tensor(std).view(-1, 1, 1)

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
        except (UnidentifiedImageError, OSError) as err:
            raise ValueError(
                f"image '{path}' cannot be read ({err}); remove or replace it, "
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
