"""The feature-augmentation section of an experiment config (``augment:`` in YAML) and its builders.

``build_feature_generator`` is the one place that turns the section into a
:class:`~dmlkit.augment.feature_generator.FeatureGenerator` (used by the training tool's SFT method
and by ``build_augmented_loss``). ``build_augmented_loss`` wraps a loss in
:class:`~dmlkit.augment.augmented_loss.FeatureAugmentedLoss` (Eq. 10 of the SFT paper) when ``name``
is set, and returns the loss unchanged otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from torch import Tensor, nn

from dmlkit.augment.augmented_loss import FeatureAugmentedLoss
from dmlkit.augment.centers import CENTER_INITS, CENTER_MODES
from dmlkit.augment.feature_generator import AUGMENT_TRANSFORMS, FeatureGenerator, canonical_transform_name
from dmlkit.augment.generated_score import SCORES
from dmlkit.augment.schemes import SCHEMES, TARGET_POLICIES
from dmlkit.validation import is_int, is_real

__all__ = ["AugmentConfig", "build_augmented_loss", "build_feature_generator"]


@dataclass
class AugmentConfig:
    """Feature augmentation of the SFT paper (Sec. 3.3-3.5).

    Attributes:
        name: ``None`` (off), ``"sft"`` (Eq. 3-4), ``"sft_d"`` (Sec. 3.4, alias ``"sft-d"``)
            or ``"translation"`` (Eq. 2).
        lam: weight ``lambda`` of the loss on the generated batch (Eq. 10), ``>= 0``; paper: 0.2.
        scheme: ``"balanced"`` or ``"unbalanced"`` train (Sec. 3.5).
        target: how "randomly choose a different class" is read (:mod:`dmlkit.augment.schemes`):
            ``"batch"`` (a random other class of the mini-batch; the default, it keeps positives in
            the generated batch), ``"shared"`` (one such target per source class) or ``"all"`` (any
            class with a centre). The unbalanced scheme applies it among the tail classes.
        score: ``"separate"`` (``J(X_gen, Y_gen)`` alone, Eq. 10 as written) or ``"joint"`` (the
            generated features scored inside ``[X; X_gen]``); both mined by the run's miner
            (:mod:`dmlkit.augment.generated_score`).
        tail_threshold: unbalanced train: classes with fewer training samples are tail
            classes (paper: 15); checked against the class counts by the builder.
        centers: centre estimation, ``"update"`` (Eq. 9), ``"random"`` or ``"pick"`` (Table 6).
        alpha: step size of the Eq. 9 centre update, in ``(0, 1]``.
        init_centers: how the centres start: ``"none"`` (a class gets its centre the first time it is
            in a batch; the default) or ``"data"`` (before the first training step, every class
            centre is the mean of its training images under the initial network, in the transform's
            space: ``dmlkit.methods.sft``). ``"data"`` needs ``centers`` ``"update"`` or ``"pick"``.
        normalize_input: the loss receives the embeddings *before* L2 normalisation and
            normalises them itself (how SFT-d is meant to be used; the trainer must then feed
            the pre-normalisation embeddings).
        update_centers_first: update the centres with the batch before generating (swaps
            lines 5 and 6 of Algorithm 1).
    """

    name: str | None = None
    lam: float = 0.2
    scheme: str = "balanced"
    target: str = "batch"
    score: str = "separate"
    tail_threshold: int = 15
    centers: str = "update"
    alpha: float = 1.0
    init_centers: str = "none"
    normalize_input: bool = False
    update_centers_first: bool = False
    start_step: int = 0

    def __post_init__(self) -> None:
        if self.name is not None:
            if not isinstance(self.name, str):
                raise ValueError(f"augment.name must be null or one of {AUGMENT_TRANSFORMS}, got {self.name!r}")
            try:
                canonical_transform_name(self.name)
            except ValueError:
                raise ValueError(
                    f"augment.name must be null (no augmentation) or one of {AUGMENT_TRANSFORMS}, got {self.name!r}"
                ) from None
        if not is_real(self.lam) or not math.isfinite(self.lam) or self.lam < 0:
            raise ValueError(f"augment.lam must be a finite number >= 0 (the paper uses 0.2), got {self.lam!r}")
        if self.scheme not in SCHEMES:
            raise ValueError(f"augment.scheme must be one of {SCHEMES}, got {self.scheme!r}")
        if self.target not in TARGET_POLICIES:
            raise ValueError(f"augment.target must be one of {TARGET_POLICIES}, got {self.target!r}")
        if self.score not in SCORES:
            raise ValueError(f"augment.score must be one of {SCORES}, got {self.score!r}")
        if not is_int(self.start_step) or self.start_step < 0:
            raise ValueError(f"augment.start_step must be an int >= 0 (steps before the augmentation starts), got {self.start_step!r}")
        if not is_int(self.tail_threshold) or self.tail_threshold < 1:
            raise ValueError(f"augment.tail_threshold must be a positive int (samples per class), got {self.tail_threshold!r}")
        if self.centers not in CENTER_MODES:
            raise ValueError(f"augment.centers must be one of {CENTER_MODES}, got {self.centers!r}")
        if not isinstance(self.init_centers, str) or self.init_centers not in CENTER_INITS:
            raise ValueError(
                f"augment.init_centers must be one of {CENTER_INITS} (none: each class at its first batch; data: "
                f"the class means of the training split under the initial network), got {self.init_centers!r}"
            )
        if self.init_centers == "data" and self.centers == "random":
            raise ValueError(
                "augment.init_centers: data starts the centres at the class means, but augment.centers: random keeps "
                "fixed random centres (Table 6): set augment.centers: update (or pick), or augment.init_centers: none"
            )
        if (
            isinstance(self.alpha, bool)
            or not isinstance(self.alpha, (int, float))
            or not 0.0 < float(self.alpha) <= 1.0
        ):
            raise ValueError(f"augment.alpha must lie in (0, 1] (Eq. 9 step size; 1 is Eq. 9 as written), got {self.alpha!r}")
        for key in ("normalize_input", "update_centers_first"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"augment.{key} must be true or false, got {getattr(self, key)!r}")
        if self.name is not None and canonical_transform_name(self.name) == "sft_d" and not self.normalize_input:
            raise ValueError(
                "augment.name: sft_d translates before the L2 normalisation (Sec. 3.4, Proposition 2): "
                "set augment.normalize_input: true and model.normalize: none"
            )


def build_feature_generator(
    cfg: AugmentConfig,
    num_classes: int,
    dim: int,
    class_counts: Tensor | Sequence[int] | None = None,
    seed: int = 0,
) -> FeatureGenerator:
    """The :class:`~dmlkit.augment.feature_generator.FeatureGenerator` of the ``augment:`` section (``cfg.name`` set).

    Args:
        cfg: the augmentation config.
        num_classes: number of training classes.
        dim: embedding dimension.
        class_counts: training samples per class; required for ``scheme="unbalanced"``.
        seed: seed of the generator's private ``torch.Generator``.
    """
    if not isinstance(cfg, AugmentConfig):
        raise ValueError(f"cfg must be an AugmentConfig, got {type(cfg).__name__}")
    if cfg.name is None:
        raise ValueError("augment.name is null (no augmentation): set it to sft, sft_d or translation")
    return FeatureGenerator(
        num_classes,
        dim,
        transform=cfg.name,
        scheme=cfg.scheme,
        target=cfg.target,
        centers=cfg.centers,
        alpha=cfg.alpha,
        tail_threshold=cfg.tail_threshold,
        class_counts=class_counts,
        seed=seed,
        normalize_input=cfg.normalize_input,
        update_centers_first=cfg.update_centers_first,
        start_step=cfg.start_step,
    )


def build_augmented_loss(
    cfg: AugmentConfig,
    loss: nn.Module,
    num_classes: int,
    dim: int,
    class_counts: Tensor | Sequence[int] | None = None,
    seed: int = 0,
    miner: nn.Module | None = None,
) -> nn.Module:
    """``loss`` wrapped as ``J(X, Y) + lam * J(X_gen, Y_gen)`` (Eq. 10), or ``loss`` itself if ``cfg.name`` is None.

    Args:
        cfg: the augmentation config.
        loss: the metric loss ``J`` (PML signature).
        num_classes: number of training classes.
        dim: embedding dimension.
        class_counts: training samples per class; required for ``scheme="unbalanced"``.
        seed: seed of the augmenter's private generator.
        miner: the miner of ``J``; it mines the generated term too.
    """
    if not isinstance(cfg, AugmentConfig):
        raise ValueError(f"cfg must be an AugmentConfig, got {type(cfg).__name__}")
    if cfg.name is None:
        return loss
    generator = build_feature_generator(cfg, num_classes, dim, class_counts, seed)
    return FeatureAugmentedLoss(loss, generator, lam=cfg.lam, miner=miner, score=cfg.score)
