"""Image files -> model inputs, exactly as a dataset feeds its (un-augmented) evaluation images.

``ImagePreprocess`` holds the facts that define a dataset's eval transform, so that a trained run can
embed, search, serve and export any image file without its dataset: channels (1 = grey ``"L"``, 3 =
``"RGB"``), the output side ``size``, per-channel mean and std, and how a picture reaches ``size x size``:

- ``resize: null`` -- PIL's bilinear resize to ``size x size`` (skipped at that size): ``image_folder``
  and the glyph datasets (whose ``uint8 / 255`` then ``(x - GLYPHS_MEAN) / GLYPHS_STD`` is the same map);
- ``resize: R`` -- the papers' eval transform of the benchmark datasets (CUB, Cars196, SOP, In-shop,
  VehicleID): the shorter side to ``R``, then the centred ``size`` crop (``image_crops.EvalTransform``),
  a large JPEG decoded at a reduced scale first when ``draft`` is set, as the dataset decodes it;
- ``interpolate: true`` -- the in-memory datasets (MNIST, CIFAR): torch's antialiased bilinear resize.

Every dataset class answers ``eval_preprocess(image_size, **params)`` itself (``data.params`` are its
constructor options), so no list of dataset names lives outside the datasets.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from dmlkit.data.datasets.unreadable import unreadable_message

__all__ = ["ImagePreprocess", "MAX_IMAGE_PIXELS", "draft_jpeg"]

MAX_IMAGE_PIXELS = 64_000_000  # refuse larger images (decompression bombs)


def draft_jpeg(img: Image.Image, shorter: int, mode: str = "RGB") -> None:
    """Let PIL decode a JPEG (as ``mode``) at 1/2, 1/4 or 1/8 scale while its shorter side stays at least ``shorter``."""
    if img.format != "JPEG":
        return
    w, h = img.size
    factor = shorter / min(w, h)
    if factor < 0.5:  # JPEG decoding can downscale by 1/2, 1/4, 1/8 only
        img.draft(mode, (math.ceil(w * factor), math.ceil(h * factor)))


@dataclass(frozen=True)
class ImagePreprocess:
    """The eval transform of a dataset: see the module docstring."""

    channels: int
    size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    resize: int | None = None
    draft: bool = False
    interpolate: bool = False

    def __post_init__(self) -> None:
        if self.channels not in (1, 3):
            raise ValueError(f"channels must be 1 (grey) or 3 (RGB), got {self.channels}")
        if len(self.mean) != self.channels or len(self.std) != self.channels:
            raise ValueError(f"mean and std need {self.channels} values each, got {self.mean} and {self.std}")
        if self.resize is not None and (self.resize < self.size or self.interpolate):
            raise ValueError(f"resize ({self.resize}) must be >= size ({self.size}), and not with interpolate")

    @property
    def mode(self) -> str:
        return "RGB" if self.channels == 3 else "L"

    def from_pil(self, image: Image.Image) -> Tensor:
        """``(channels, size, size)`` float32 tensor of a PIL image."""
        img = image.convert(self.mode)
        if self.resize is not None:
            from dmlkit.data.transforms.image_crops import EvalTransform, PaperTransformConfig

            config = PaperTransformConfig(size=self.size, resize=self.resize, mean=self.mean, std=self.std)
            return EvalTransform(config)(img)
        if img.size != (self.size, self.size) and not self.interpolate:
            img = img.resize((self.size, self.size), Image.Resampling.BILINEAR)
        array = np.asarray(img, dtype=np.float32) / 255.0
        x = torch.from_numpy(array.reshape(img.height, img.width, self.channels)).permute(2, 0, 1)
        if self.interpolate and x.shape[-2:] != (self.size, self.size):
            x = F.interpolate(
                x[None], size=(self.size, self.size), mode="bilinear", align_corners=False, antialias=True
            )[0]
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
                if self.draft and self.resize is not None:
                    draft_jpeg(img, self.resize)
                img.load()
                return img.copy()
        except Image.DecompressionBombError as err:
            raise ValueError(f"image '{label}' cannot be read ({err}); shrink it") from err
        except (UnidentifiedImageError, OSError, SyntaxError) as err:
            raise ValueError(f"image '{label}' cannot be read: {unreadable_message(err)}") from err

    def load(self, path: str | Path) -> Tensor:
        """The model input of the image file at ``path``."""
        return self.from_pil(self.open(path))
