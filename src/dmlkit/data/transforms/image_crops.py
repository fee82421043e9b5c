"""The image transforms of the papers' experiments, with PIL and torch (no torchvision).

Thesis Sec. 3.3.2.1 (following Musgrave et al., *A metric learning reality check*):

- **train**: "resize each image so that its shorter side has length 256, then make a
  random crop between 40 and 256, and aspect ratio between 3/4 and 4/3. We resize
  the resultant image to 227x227 and apply random horizontal flip with 50% probability";
- **eval**: "images are resized to 256 and then center cropped to 227x227".

Reading of "a random crop between 40 and 256": the random-resized crop of the
reality-check code base, whose *area* fraction of the resized image is drawn
from ``scale = (0.16, 1)`` (a side of 0.4 to 1 times the image's; 0.4 x 256 is
about 100, the text's "40" read as 40 percent) with the aspect ratio log-uniform in
``(3/4, 4/3)``. The crop box is drawn as torchvision's ``RandomResizedCrop``
does: up to 10 attempts of (area, log-ratio) uniform draws, the first box that
fits wins; after 10 misses, the largest centred box with the ratio clamped to
the range.

Both steps are computed in the coordinates of the *virtually* resized image
(shorter side ``resize``), and the chosen box is mapped back to the original
image and resampled once with ``PIL.Image.resize(..., box=...)`` (bilinear,
antialiased). This equals "resize, then crop, then resize" up to resampling
rounding, at one resampling's cost instead of two.

Randomness comes only from the ``torch.Generator`` passed in (datasets derive
it from ``(seed, epoch, index)``): 4 uniforms per attempt, then one for the flip.
Outputs are float tensors ``(3, size, size)`` normalised with the ImageNet
mean and standard deviation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from dmlkit.validation import is_int

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "PaperTransformConfig",
    "EvalTransform",
    "TrainTransform",
    "center_crop_box",
    "random_resized_crop_box",
    "resized_shape",
    "to_normalized_tensor",
]

Box = tuple[float, float, float, float]  # left, top, right, bottom


@dataclass(frozen=True)
class PaperTransformConfig:
    """Sizes and ranges of the transforms (defaults: thesis Sec. 3.3.2.1)."""

    size: int = 227  # output side (224 for backbones that need it)
    resize: int = 256  # shorter side after the first resize
    scale: tuple[float, float] = (0.16, 1.0)  # crop area / image area
    ratio: tuple[float, float] = (3 / 4, 4 / 3)  # crop width / height
    flip_prob: float = 0.5
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD

    def __post_init__(self) -> None:
        if not is_int(self.size) or self.size < 1:
            raise ValueError(f"size must be a positive int, got {self.size!r}")
        if not is_int(self.resize) or self.resize < self.size:
            raise ValueError(
                f"resize ({self.resize!r}) must be an int >= size ({self.size}): the crop is taken from the resized image"
            )
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise ValueError(f"scale must be (lo, hi) with 0 < lo <= hi <= 1, got {self.scale}")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"ratio must be (lo, hi) with 0 < lo <= hi, got {self.ratio}")
        if not 0 <= self.flip_prob <= 1:
            raise ValueError(f"flip_prob must lie in [0, 1], got {self.flip_prob}")
        if len(self.mean) != len(self.std) or any(s <= 0 for s in self.std):
            raise ValueError("mean and std must have one entry per channel, std > 0")


def resized_shape(width: int, height: int, shorter: int) -> tuple[int, int]:
    """``(width, height)`` after resizing so that the shorter side is ``shorter`` (aspect kept, rounded)."""
    if width <= height:
        return shorter, max(1, round(height * shorter / width))
    return max(1, round(width * shorter / height)), shorter


def random_resized_crop_box(
    width: int,
    height: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    generator: torch.Generator,
    attempts: int = 10,
) -> tuple[int, int, int, int]:
    """A crop ``(left, top, w, h)`` in a ``width x height`` image, drawn as ``RandomResizedCrop`` does.

    Each attempt draws ``area ~ U(scale) * width * height`` and ``log(w/h) ~
    U(log ratio)``; the first box that fits is placed uniformly. After
    ``attempts`` misses: the whole image if its ratio is in range, else the
    largest centred box of the nearest allowed ratio.
    """
    area = width * height
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(attempts):
        u = torch.rand(4, generator=generator).tolist()
        target = area * (scale[0] + (scale[1] - scale[0]) * u[0])
        aspect = math.exp(lo + (hi - lo) * u[1])
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left = min(int(u[2] * (width - w + 1)), width - w)
            top = min(int(u[3] * (height - h + 1)), height - h)
            return left, top, w, h
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        w, h = round(height * ratio[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def center_crop_box(width: int, height: int, size: int) -> tuple[int, int, int, int]:
    """The centred ``size x size`` crop ``(left, top, w, h)`` (torchvision's rounding)."""
    return int(round((width - size) / 2.0)), int(round((height - size) / 2.0)), size, size


def _to_original(box: tuple[int, int, int, int], width: int, height: int, rw: int, rh: int) -> Box:
    """Map a box of the virtually resized ``rw x rh`` image to the original ``width x height`` one."""
    sx, sy = width / rw, height / rh
    left, top, w, h = box
    return left * sx, top * sy, (left + w) * sx, (top + h) * sy


def to_normalized_tensor(img: Image.Image, mean: Tensor, std: Tensor) -> Tensor:
    """``(C, H, W)`` float tensor of a PIL image, scaled to [0, 1] then ``(x - mean) / std``.

    The uint8 pixels are first laid out as ``(C, H, W)``, then one multiply and
    one subtract with per-channel ``1 / (255 std)`` and ``mean / std`` (measured
    3-4x faster than the same ops on an ``(H, W, C)`` layout, whose innermost
    dimension is 3).
    """
    array = np.array(img, dtype=np.uint8)  # a writable copy
    if array.ndim == 2:
        array = array[:, :, None]
    std, mean = std.reshape(-1, 1, 1), mean.reshape(-1, 1, 1)
    x = torch.from_numpy(array).permute(2, 0, 1).contiguous().float()
    return x.mul_(1.0 / (255.0 * std)).sub_(mean / std)


class _Base:
    def __init__(self, config: PaperTransformConfig | None = None) -> None:
        self.config = config or PaperTransformConfig()
        self._mean = torch.tensor(self.config.mean, dtype=torch.float32).view(-1, 1, 1)
        self._std = torch.tensor(self.config.std, dtype=torch.float32).view(-1, 1, 1)


class TrainTransform(_Base):
    """Resize (shorter side 256), random resized crop to 227, horizontal flip, ImageNet normalisation."""

    def box(self, width: int, height: int, generator: torch.Generator) -> Box:
        """The crop, in original-image coordinates, for an image of ``width x height``."""
        cfg = self.config
        rw, rh = resized_shape(width, height, cfg.resize)
        crop = random_resized_crop_box(rw, rh, cfg.scale, cfg.ratio, generator)
        return _to_original(crop, width, height, rw, rh)

    def __call__(self, img: Image.Image, generator: torch.Generator) -> Tensor:
        size = self.config.size
        out = img.resize((size, size), Image.Resampling.BILINEAR, box=self.box(img.width, img.height, generator))
        if torch.rand(1, generator=generator).item() < self.config.flip_prob:
            out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return to_normalized_tensor(out, self._mean, self._std)


class EvalTransform(_Base):
    """Resize (shorter side 256), centre crop 227, ImageNet normalisation."""

    def box(self, width: int, height: int) -> Box:
        cfg = self.config
        rw, rh = resized_shape(width, height, cfg.resize)
        return _to_original(center_crop_box(rw, rh, cfg.size), width, height, rw, rh)

    def __call__(self, img: Image.Image, generator: torch.Generator | None = None) -> Tensor:
        size = self.config.size
        out = img.resize((size, size), Image.Resampling.BILINEAR, box=self.box(img.width, img.height))
        return to_normalized_tensor(out, self._mean, self._std)
