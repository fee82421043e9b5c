"""The builder of SFT's augmented loss from the ``methods.sft`` section (``SFTConfig``, ``dmlkit.augment.sft_config``).

The feature generator of a section is :meth:`FeatureGenerator.from_config
<dmlkit.augment.feature_generator.FeatureGenerator.from_config>`. ``build_augmented_loss`` wraps a loss in
:class:`~dmlkit.augment.augmented_loss.FeatureAugmentedLoss` (Eq. 10 of the SFT paper) when the section
is on, and returns the loss unchanged otherwise.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor, nn

from dmlkit.augment.augmented_loss import FeatureAugmentedLoss
from dmlkit.augment.feature_generator import FeatureGenerator
from dmlkit.augment.sft_config import SFTConfig

__all__ = ["SFTConfig", "build_augmented_loss"]


def build_augmented_loss(
    cfg: SFTConfig,
    loss: nn.Module,
    num_classes: int,
    dim: int,
    class_counts: Tensor | Sequence[int] | None = None,
    seed: int = 0,
    miner: nn.Module | None = None,
) -> nn.Module:
    """``loss`` wrapped as ``J(X, Y) + lam * J(X_gen, Y_gen)`` (Eq. 10), or ``loss`` itself if ``cfg.name`` is None.

    Args:
        cfg: the ``methods.sft`` section.
        loss: the metric loss ``J`` (PML signature).
        num_classes: number of training classes.
        dim: embedding dimension.
        class_counts: training samples per class; required for ``scheme="unbalanced"``.
        seed: seed of the augmenter's private generator.
        miner: the miner of ``J``; it mines the generated term too.
    """
    if not isinstance(cfg, SFTConfig):
        raise ValueError(f"cfg must be an SFTConfig (the methods.sft section), got {type(cfg).__name__}")
    if not cfg.active:
        return loss
    generator = FeatureGenerator.from_config(cfg, num_classes, dim, class_counts, seed)
    return FeatureAugmentedLoss(loss, generator, lam=cfg.lam, miner=miner, score=cfg.score)
