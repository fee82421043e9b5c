"""Seeded image augmentation with torch ops, per image or for a whole batch at once.

``GlyphAugment`` perturbs grey images of white-on-black glyphs (``(B, 1, H, W)``,
values in [0, 1], background 0) in three steps:

1. stroke width: ``x + a * (dilate(x) - x)`` for ``a > 0`` and
   ``x + |a| * (erode(x) - x)`` for ``a < 0``, ``a ~ U(*stroke)``;
   dilation is a ``k x k`` max filter (``max_pool2d``), erosion its dual, so
   ``a`` interpolates continuously between thinner and bolder strokes;
2. a small affine map about the image centre: rotation, anisotropic-free
   scale, horizontal shear and translation, applied with ``affine_grid`` /
   ``grid_sample`` (bilinear, zero padding);
3. with probability ``blur_prob``, a separable Gaussian blur of random sigma.

All parameters are drawn by ``sample_params(n, generator)`` from a
``torch.Generator``; ``apply(x, params)`` is deterministic and vectorised.
``params_for_seeds`` draws each image's parameters from its own seed, so a
batch augmented at once equals its images augmented one by one - the property
that lets a dataset augment item ``i`` from ``(seed, epoch, i)`` yet serve
vectorised batches. Sizes in pixels (kernel, sigma, translation) are given for
a 32-pixel image and scale with the image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor

from dmlkit.data.seeding import make_generator


@dataclass(frozen=True)
class GlyphAugmentConfig:
    """Ranges of the random perturbations (the defaults keep glyphs legible)."""

    rotation_deg: float = 10.0  # rotation ~ U(-r, r) degrees
    scale: tuple[float, float] = (0.85, 1.10)  # isotropic zoom ~ U(lo, hi)
    shear_deg: float = 10.0  # horizontal shear angle ~ U(-s, s) degrees
    translate: float = 0.08  # shift ~ U(-t, t) x image size, each axis
    stroke: tuple[float, float] = (-0.4, 0.6)  # stroke change a ~ U(lo, hi), < 0 thins, > 0 thickens
    stroke_kernel: int = 3  # max-filter size at 32 px (odd)
    blur_prob: float = 0.3
    blur_sigma: tuple[float, float] = (0.4, 1.0)  # Gaussian sigma at 32 px

    def __post_init__(self) -> None:
        if self.rotation_deg < 0 or self.shear_deg < 0 or self.translate < 0:
            raise ValueError("rotation_deg, shear_deg and translate must be >= 0")
        if not 0 < self.scale[0] <= self.scale[1]:
            raise ValueError(f"scale must be (lo, hi) with 0 < lo <= hi, got {self.scale}")
        if not -1 <= self.stroke[0] <= self.stroke[1] <= 1:
            raise ValueError(
                f"stroke must be (lo, hi) with -1 <= lo <= hi <= 1 (1 = a full dilation step), got {self.stroke}"
            )
        if self.stroke_kernel < 1 or self.stroke_kernel % 2 == 0:
            raise ValueError(f"stroke_kernel must be a positive odd int, got {self.stroke_kernel}")
        if not 0 <= self.blur_prob <= 1:
            raise ValueError(f"blur_prob must lie in [0, 1], got {self.blur_prob}")
        if not 0 <= self.blur_sigma[0] <= self.blur_sigma[1]:
            raise ValueError(f"blur_sigma must be (lo, hi) with 0 <= lo <= hi, got {self.blur_sigma}")


AugmentParams = dict[str, Tensor]  # each entry has shape (B,)


# ------------------------------------------------------------------ ops
def affine_theta(rotation: Tensor, scale: Tensor, shear: Tensor, tx: Tensor, ty: Tensor) -> Tensor:
    """The ``(B, 2, 3)`` ``affine_grid`` matrices of the forward map ``p -> A p + t``.

    ``A = R(rotation) @ Shear(shear) * scale`` (angles in radians), ``t = (tx, ty)``
    in normalised coordinates ([-1, 1] spans the image). ``affine_grid`` wants
    the map from output to input pixels, so this returns ``[A^-1 | -A^-1 t]``.
    """
    cos, sin, sh = torch.cos(rotation), torch.sin(rotation), torch.tan(shear)
    # A = scale * [[cos, cos*sh - sin], [sin, sin*sh + cos]]   (R @ [[1, sh], [0, 1]])
    a = torch.stack([torch.stack([cos, cos * sh - sin], -1), torch.stack([sin, sin * sh + cos], -1)], -2)
    a = a * scale[:, None, None]
    a_inv = torch.linalg.inv(a)
    t = torch.stack([tx, ty], -1)[..., None]
    return torch.cat([a_inv, -a_inv @ t], -1)


def apply_affine(images: Tensor, theta: Tensor) -> Tensor:
    """Warp ``images (B, C, H, W)`` by ``theta (B, 2, 3)`` (bilinear, zeros outside)."""
    grid = F.affine_grid(theta.to(images.dtype), list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def dilate(images: Tensor, kernel: int = 3) -> Tensor:
    """Grey dilation: a ``kernel x kernel`` max filter."""
    return F.max_pool2d(images, kernel, stride=1, padding=kernel // 2)


def erode(images: Tensor, kernel: int = 3) -> Tensor:
    """Grey erosion: a ``kernel x kernel`` min filter (outside the image counts as background)."""
    padded = F.pad(images, [kernel // 2] * 4, value=0.0)
    return -F.max_pool2d(-padded, kernel, stride=1)


def change_stroke(images: Tensor, amount: Tensor, kernel: int = 3) -> Tensor:
    """Thicken (``amount > 0``) or thin (``amount < 0``) strokes, per image; ``|amount| <= 1``."""
    a = amount.to(images.dtype).view(-1, 1, 1, 1)
    out = images
    if bool((a > 0).any()):
        out = out + a.clamp(min=0) * (dilate(images, kernel) - images)
    if bool((a < 0).any()):
        out = out + (-a).clamp(min=0) * (erode(images, kernel) - images)
    return out


def gaussian_blur(images: Tensor, sigma: Tensor, radius: int | None = None) -> Tensor:
    """Separable Gaussian blur with a per-image ``sigma (B,)`` in pixels; ``sigma == 0`` leaves it unchanged.

    The kernel spans ``2 * radius + 1`` taps (default ``ceil(3 * max(sigma))``), renormalised
    to sum 1; borders are replicated. Give ``radius`` to make results independent of the batch.
    """
    b, c, h, w = images.shape
    s = sigma.to(images.dtype).clamp(min=0)
    if radius is None:
        radius = int(math.ceil(3.0 * float(s.max()))) if b else 1
    radius = max(1, min(int(radius), max(1, min(h, w) - 1)))
    x = torch.arange(-radius, radius + 1, dtype=images.dtype, device=images.device)
    safe = s.clamp(min=1e-6)[:, None]
    k = torch.exp(-0.5 * (x[None] / safe) ** 2)
    delta = (x == 0).to(images.dtype)[None].expand(b, -1)
    k = torch.where((s > 0)[:, None], k, delta)
    k = k / k.sum(1, keepdim=True)  # (B, 2r+1)
    k = k.repeat_interleave(c, 0)  # one kernel per (image, channel)
    flat = images.reshape(1, b * c, h, w)
    flat = F.conv2d(F.pad(flat, [radius, radius, 0, 0], mode="replicate"), k[:, None, None, :], groups=b * c)
    flat = F.conv2d(F.pad(flat, [0, 0, radius, radius], mode="replicate"), k[:, None, :, None], groups=b * c)
    return flat.reshape(b, c, h, w)


def normalize(images: Tensor, mean: float, std: float) -> Tensor:
    return (images - mean) / std


# ------------------------------------------------------------- augmenter
class GlyphAugment:
    """Random stroke / affine / blur perturbation of glyph images; see the module docstring."""

    PARAM_NAMES = ("stroke", "rotation", "scale", "shear", "tx", "ty", "blur_sigma")

    def __init__(self, config: GlyphAugmentConfig | None = None) -> None:
        self.config = cfg = config or GlyphAugmentConfig()
        rot, shear = math.radians(cfg.rotation_deg), math.radians(cfg.shear_deg)
        self._lo = torch.tensor(
            [cfg.stroke[0], -rot, cfg.scale[0], -shear, -cfg.translate, -cfg.translate, cfg.blur_sigma[0]]
        )
        self._hi = torch.tensor(
            [cfg.stroke[1], rot, cfg.scale[1], shear, cfg.translate, cfg.translate, cfg.blur_sigma[1]]
        )

    def params_from_uniforms(self, u: Tensor) -> AugmentParams:
        """Map ``u ~ U[0, 1)^(n, 8)`` to parameters: 7 ranges of the config, then the blur coin."""
        v = self._lo + (self._hi - self._lo) * u[:, :7]
        v[:, 6] *= (u[:, 7] < self.config.blur_prob).float()  # blur with probability blur_prob
        return dict(zip(self.PARAM_NAMES, v.unbind(1)))

    def sample_params(self, n: int, generator: torch.Generator) -> AugmentParams:
        """Draw the parameters of ``n`` images from ``generator`` (8 uniforms per image)."""
        return self.params_from_uniforms(torch.rand(n, 8, generator=generator))

    def params_for_seeds(self, seeds: Iterable[tuple[int, ...]]) -> AugmentParams:
        """Per-image parameters, image ``j`` drawn from ``make_generator(*seeds[j])``
        (so equal to ``sample_params(1, make_generator(*seeds[j]))``)."""
        rows = [torch.rand(1, 8, generator=make_generator(*s)) for s in seeds]
        return self.params_from_uniforms(torch.cat(rows) if rows else torch.empty(0, 8))

    def apply(self, images: Tensor, params: AugmentParams) -> Tensor:
        """Augment ``images (B, C, H, W)`` in [0, 1] with ``params``; returns values clamped to [0, 1]."""
        if images.dim() != 4:
            raise ValueError(f"images must be (B, C, H, W), got shape {tuple(images.shape)}")
        b, _, h, w = images.shape
        if any(params[k].shape != (b,) for k in self.PARAM_NAMES):
            raise ValueError(f"params must hold one value per image ({b}) for each of {self.PARAM_NAMES}")
        if b == 0:
            return images
        cfg = self.config
        px = min(h, w) / 32.0  # pixel sizes below are given for 32 px images
        kernel = max(1, 2 * int(round(px * (cfg.stroke_kernel // 2))) + 1)
        x = images.float()
        x = change_stroke(x, params["stroke"], kernel)
        theta = affine_theta(params["rotation"], params["scale"], params["shear"], 2 * params["tx"], 2 * params["ty"])
        x = apply_affine(x, theta)
        sigma = params["blur_sigma"] * px
        if bool((sigma > 0).any()):
            x = gaussian_blur(x, sigma, radius=int(math.ceil(3.0 * cfg.blur_sigma[1] * px)))
        return x.clamp_(0.0, 1.0)

    def __call__(self, images: Tensor, generator: torch.Generator) -> Tensor:
        """Augment a batch with parameters drawn from ``generator``."""
        return self.apply(images, self.sample_params(images.shape[0], generator))
