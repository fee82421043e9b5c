"""Shared base of the small in-memory datasets (MNIST, Fashion-MNIST, CIFAR-10/100).

The whole split is held as a ``uint8`` array ``(N, H, W, C)``. Items are float
tensors ``(C, image_size, image_size)``: scaled to [0, 1], resized
(bilinear, antialiased) when ``image_size`` differs from the stored size,
optionally augmented, and normalised with the dataset's channel mean / std.

Augmentation (``augment=True``), the usual one for these datasets: a random
translation by up to ``image_size / 8`` pixels in each axis (a random crop of
the zero-padded image) and, where ``FLIP`` (CIFAR), a horizontal flip with
probability 1/2. Item ``i`` of epoch ``e`` is augmented from
``make_generator(seed, e, i)`` (three uniforms), so ``get_batch`` (vectorised)
equals stacking the items.

Splits are the official ``train`` / ``test`` with all classes in both (the
thesis uses MNIST and CIFAR this way); ``max_classes`` keeps the first classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from dmlkit.data.datasets.base import DMLDataset, _as_index_list
from dmlkit.data.seeding import check_seed, make_generator
from dmlkit.data.transforms.eval_preprocess import ImagePreprocess
from dmlkit.validation import is_int

__all__ = ["ArrayImageDataset", "ImageArrays"]


@dataclass
class ImageArrays:
    """One split in memory: ``images (N, H, W, C) uint8``, ``labels (N,)`` and class descriptions."""

    images: np.ndarray
    labels: np.ndarray
    class_names: list[str]
    class_categories: list[int] = field(default_factory=list)
    category_names: list[str] = field(default_factory=list)


class ArrayImageDataset(DMLDataset):
    """An in-memory image dataset; subclasses implement ``_load(split, root, download) -> ImageArrays``."""

    NAME: ClassVar[str] = ""
    SPLITS = ("train", "test")
    MEAN: ClassVar[tuple[float, ...]] = (0.5,)
    STD: ClassVar[tuple[float, ...]] = (0.5,)
    FLIP: ClassVar[bool] = False
    SOURCE = "downloaded once, MD5-checked: dmlkit data prepare NAME (or data.root holding the official files)"

    @classmethod
    def local_state(cls, name: str) -> str:
        """``downloaded`` when the cache holds the dataset's folder with files in it, else ``not downloaded``."""
        from dmlkit.data.cache import dataset_dir

        folder = dataset_dir(name)
        return f"downloaded ({folder})" if folder.is_dir() and any(folder.iterdir()) else "not downloaded"

    def __init__(
        self,
        split: str = "train",
        root: str | Path | None = None,
        seed: int = 0,
        augment: bool = False,
        image_size: int = 32,
        max_classes: int | None = None,
        download: bool = False,
    ) -> None:
        if split not in self.SPLITS:
            raise ValueError(
                f"unknown split '{split}' of dataset '{self.NAME}'; valid splits are: {', '.join(self.SPLITS)}"
            )
        if not is_int(image_size) or image_size < 8:
            raise ValueError(f"image_size must be an int >= 8, got {image_size!r}")
        check_seed(seed)
        self.split, self.seed, self.augment, self.image_size = split, seed, bool(augment), image_size
        data = self._load(split, root, download)
        if data.images.ndim != 4 or data.images.dtype != np.uint8 or len(data.images) != len(data.labels):
            raise ValueError(
                f"{self.NAME}: the {split} files hold images of shape {data.images.shape} for {len(data.labels)} labels"
            )
        labels = np.asarray(data.labels, dtype=np.int64)
        names, cats = list(data.class_names), list(data.class_categories)
        if max_classes is not None:
            if not is_int(max_classes) or max_classes < 1:
                raise ValueError(f"max_classes must be a positive int or None, got {max_classes!r}")
            keep = labels < max_classes
            data.images, labels = data.images[keep], labels[keep]
            names, cats = names[:max_classes], cats[:max_classes]
        self.images = torch.from_numpy(np.require(data.images, requirements=["C", "W"]))
        self.labels = torch.from_numpy(labels)
        self.class_names = names
        self.class_categories = torch.tensor(cats or [-1] * len(names), dtype=torch.long)
        self.category_names = list(data.category_names)
        self.in_channels = int(self.images.shape[-1])
        self._mean = torch.tensor(self.MEAN, dtype=torch.float32).view(1, -1, 1, 1)
        self._std = torch.tensor(self.STD, dtype=torch.float32).view(1, -1, 1, 1)

    @classmethod
    def eval_preprocess(cls, image_size: int = 32, **params: Any) -> ImagePreprocess:
        """The stored pixels, resized by torch's antialiased bilinear interpolation, with the class's statistics."""
        return ImagePreprocess(len(cls.MEAN), image_size, cls.MEAN, cls.STD, interpolate=True)

    def _load(self, split: str, root: str | Path | None, download: bool) -> ImageArrays:  # pragma: no cover
        raise NotImplementedError

    def augment_params(self, indices: Sequence[int]) -> Tensor:
        """``(B, 3)`` uniforms per image (x shift, y shift, flip coin), from ``(seed, epoch, index)``."""
        rows = [torch.rand(1, 3, generator=make_generator(self.seed, self.epoch, i)) for i in indices]
        return torch.cat(rows) if rows else torch.empty(0, 3)

    def get_batch(self, indices: Sequence[int] | Tensor) -> tuple[Tensor, Tensor]:
        idx = _as_index_list(indices)
        if not idx:
            raise ValueError("get_batch needs at least one index")
        n = len(self)
        idx = [i + n if i < 0 else i for i in idx]
        if any(not 0 <= i < n for i in idx):
            raise IndexError(f"indices out of range for {n} images")
        x = self.images[idx].permute(0, 3, 1, 2).float().div_(255.0)
        s = self.image_size
        if x.shape[-2:] != (s, s):
            x = F.interpolate(x, size=(s, s), mode="bilinear", align_corners=False, antialias=True)
        if self.augment:
            x = self._augment(x, self.augment_params(idx))
        return (x - self._mean) / self._std, self.labels[idx]

    def _augment(self, x: Tensor, u: Tensor) -> Tensor:
        pad = max(1, self.image_size // 8)
        s = self.image_size
        padded = F.pad(x, [pad] * 4)
        shifts = (u[:, :2] * (2 * pad + 1)).long().clamp_(max=2 * pad)  # offsets 0..2*pad
        out = torch.stack(
            [padded[b, :, int(dy) : int(dy) + s, int(dx) : int(dx) + s] for b, (dx, dy) in enumerate(shifts.tolist())]
        )
        if self.FLIP:
            flip = u[:, 2] < 0.5
            out[flip] = out[flip].flip(-1)
        return out

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        images, labels = self.get_batch([int(index)])
        return images[0], int(labels[0])
