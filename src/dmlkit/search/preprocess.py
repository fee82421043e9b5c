"""Image files -> model inputs, exactly as a run's dataset feeds its (un-augmented) evaluation images.

``ImagePreprocess`` holds the four facts that define the eval transform of dmlkit's datasets:
channels (1 = grey ``"L"``, 3 = ``"RGB"``), square size, per-channel mean and std. An image is
converted to the mode, resized to ``size x size`` with PIL's bilinear filter (skipped when it already
has that size), scaled to [0, 1] and normalised ``(x - mean) / std`` -- the steps of
``ImageFolderDataset.__getitem__`` and, for 8-bit grey glyph images, of ``GlyphsDataset`` (whose
``uint8 / 255`` then ``(x - GLYPHS_MEAN) / GLYPHS_STD`` is the same map).

``preprocess_for_config(cfg)`` reads it from a run's config: ``glyphs`` -> grey with the glyphs
statistics, ``image_folder`` -> ``data.params.channels`` (default 3) with ImageNet statistics (RGB)
or 0.5 / 0.5 (grey).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from dmlkit.config import ExperimentConfig
from dmlkit.data.datasets.glyphs import GLYPHS_MEAN, GLYPHS_STD
from dmlkit.data.datasets.image_folder import IMAGE_SUFFIXES, IMAGENET_MEAN, IMAGENET_STD

__all__ = ["IMAGE_SUFFIXES", "ImagePreprocess", "MAX_IMAGE_PIXELS", "preprocess_for_config"]

MAX_IMAGE_PIXELS = 64_000_000  # refuse larger images (decompression bombs)


@dataclass(frozen=True)
class ImagePreprocess:
    """The eval transform of a dataset: see the module docstring."""

    channels: int
    size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.channels not in (1, 3):
            raise ValueError(f"channels must be 1 (grey) or 3 (RGB), got {self.channels}")
        if len(self.mean) != self.channels or len(self.std) != self.channels:
            raise ValueError(f"mean and std need {self.channels} values each, got {self.mean} and {self.std}")

    @property
    def mode(self) -> str:
        return "RGB" if self.channels == 3 else "L"

    def from_pil(self, image: Image.Image) -> Tensor:
        """``(channels, size, size)`` float32 tensor of a PIL image."""
        img = image.convert(self.mode)
        if img.size != (self.size, self.size):
            img = img.resize((self.size, self.size), Image.Resampling.BILINEAR)
        array = np.asarray(img, dtype=np.float32) / 255.0
        x = torch.from_numpy(array.reshape(self.size, self.size, self.channels)).permute(2, 0, 1)
        mean = torch.tensor(self.mean, dtype=torch.float32).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(-1, 1, 1)
        return (x - mean) / std

    def open(self, source: str | Path | io.BytesIO, name: str | None = None) -> Image.Image:
        """Decode an image file (path or bytes buffer) fully; ``ValueError`` naming it if it cannot be read."""
        label = name or str(source)
        try:
            with Image.open(source) as img:
                if img.width * img.height > MAX_IMAGE_PIXELS:
                    raise ValueError(
                        f"image '{label}' has {img.width}x{img.height} pixels, more than {MAX_IMAGE_PIXELS}; shrink it"
                    )
                img.load()
                return img.copy()
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError, SyntaxError) as err:
            raise ValueError(f"image '{label}' cannot be read as an image ({err}); pass a PNG, JPEG, BMP or WebP file") from err

    def load(self, path: str | Path) -> Tensor:
        """The model input of the image file at ``path``."""
        return self.from_pil(self.open(path))

    def load_bytes(self, data: bytes, name: str = "upload") -> Tensor:
        """The model input of an encoded image held in memory."""
        return self.from_pil(self.open(io.BytesIO(data), name=name))


def preprocess_for_config(cfg: ExperimentConfig) -> ImagePreprocess:
    """The eval transform of the dataset of a run's config (``glyphs``, ``glyphs_testbed`` or ``image_folder``)."""
    d = cfg.data
    if d.name in ("glyphs", "glyphs_testbed"):  # the testbed cuts the same glyph table, same normalisation
        return ImagePreprocess(1, d.image_size, (GLYPHS_MEAN,), (GLYPHS_STD,))
    if d.name == "image_folder":
        channels = int(d.params.get("channels", 3))
        if channels == 3:
            return ImagePreprocess(3, d.image_size, IMAGENET_MEAN, IMAGENET_STD)
        return ImagePreprocess(channels, d.image_size, (0.5,), (0.5,))
    raise ValueError(
        f"no image-file transform is known for dataset '{d.name}'; add it to "
        "dmlkit.search.preprocess.preprocess_for_config (channels, size, mean, std of its eval images)"
    )
