"""``StoredGlyphImages``: the base of the datasets whose items are glyph images held in memory
(``GlyphsDataset``, and the lab's ``GlyphCollageDataset``): a ``uint8`` tensor ``images (N, H, W)`` with ``labels``.

Item ``i`` is the image scaled to [0, 1] as a float tensor ``(1, H, W)``, with ``augment``
perturbed by ``GlyphAugment`` drawn from ``(seed, epoch, i)``, then with ``normalize``
standardised with ``GLYPHS_MEAN`` / ``GLYPHS_STD``: fixed constants (0.0951 and 0.2685 in [0, 1]
units, within 0.001 of the mean and standard deviation of all pixels of the un-augmented 32 px
glyph train images) that are part of ``GlyphsDataset.fingerprint``, the pretrained backbones' data key.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from dmlkit.data.datasets.base import DMLDataset, _as_index_list
from dmlkit.data.datasets.glyph_cache import cached_sizes
from dmlkit.data.transforms.eval_preprocess import ImagePreprocess
from dmlkit.data.transforms.glyph_augment import GlyphAugment, GlyphAugmentConfig

__all__ = ["GLYPHS_MEAN", "GLYPHS_STD", "StoredGlyphImages"]

GLYPHS_MEAN = 0.0951
GLYPHS_STD = 0.2685


class StoredGlyphImages(DMLDataset):
    """Items of ``images (N, H, W)`` uint8 with ``labels (N,)``: seeded glyph augmentation of item ``i``
    from ``(seed, epoch, i)`` (``augmenter``), then optional normalisation with ``mean`` / ``std``.
    ``ITEM_NAME`` names the items in index errors.

    Args:
        images: ``(N, H, W)`` uint8 tensor, white ink on black.
        labels: ``(N,)`` int64 tensor of class ids.
        augment: apply ``GlyphAugment`` to each item, drawn from ``(seed, epoch, index)``.
        seed: augmentation seed (checked by the subclass).
        normalize: return ``(x - mean) / std`` (else raw [0, 1] values).
        augment_config: ranges of the augmentation (default ``GlyphAugmentConfig()``).
    """

    ITEM_NAME = "images"
    SOURCE = "embedded: rendered once from the fonts inside matplotlib and cached (dmlkit data prepare glyphs)"
    in_channels = 1
    mean = GLYPHS_MEAN
    std = GLYPHS_STD

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        augment: bool,
        seed: int,
        normalize: bool,
        augment_config: GlyphAugmentConfig | None,
    ) -> None:
        self.images = images
        self.labels = labels
        self.augment = bool(augment)
        self.seed = seed
        self.epoch = 0
        self.normalize = bool(normalize)
        self.augmenter = GlyphAugment(augment_config)

    @classmethod
    def local_state(cls, name: str) -> str:
        """The image sizes whose renderings the cache holds, or ``renders on first use``."""
        sizes = cached_sizes()
        return f"cached ({', '.join(f'{s} px' for s in sizes)})" if sizes else "renders on first use"

    @classmethod
    def eval_preprocess(cls, image_size: int = 32, normalize: bool = True, **params: Any) -> ImagePreprocess:
        """Grey ``image_size`` squares, normalised with the glyph statistics (raw [0, 1] without ``normalize``)."""
        mean, std = ((cls.mean,), (cls.std,)) if normalize else ((0.0,), (1.0,))
        return ImagePreprocess(cls.in_channels, image_size, mean, std)

    def _raw(self, idx: Tensor) -> Tensor:
        return self.images[idx].float().div_(255.0).unsqueeze(1)  # (B, 1, H, W)

    def _finish(self, x: Tensor, idx: Tensor) -> Tensor:
        if self.augment:
            params = self.augmenter.params_for_seeds((self.seed, self.epoch, int(i)) for i in idx)
            x = self.augmenter.apply(x, params)
        if self.normalize:
            x = (x - self.mean) / self.std
        return x

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        index = int(index)
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {n} {self.ITEM_NAME}")
        idx = torch.tensor([index])
        return self._finish(self._raw(idx), idx)[0], int(self.labels[index])

    def get_batch(self, indices: Sequence[int] | Tensor) -> tuple[Tensor, Tensor]:
        """Vectorised ``self[i]`` for all ``indices`` (same values, one augmentation call)."""
        idx = torch.as_tensor(_as_index_list(indices), dtype=torch.long)
        if idx.numel() == 0:
            raise ValueError("get_batch needs at least one index")
        idx = torch.where(idx < 0, idx + len(self), idx)
        if int(idx.min()) < 0 or int(idx.max()) >= len(self):
            raise IndexError(f"indices out of range for {len(self)} {self.ITEM_NAME}")
        return self._finish(self._raw(idx), idx), self.labels[idx]
