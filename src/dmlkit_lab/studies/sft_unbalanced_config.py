"""The hyper-parameters of the SFT unbalanced-training study: the glyphs miniature's defaults, the testbed preset.

The choices behind the defaults are in the docstring of ``dmlkit_lab.studies.sft_unbalanced``; the preset's in
``UnbalancedStudyConfig.testbed`` and ``docs/results/sft_unbalanced.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dmlkit_lab.studies.sft_unbalanced_split import SAMPLINGS, positive_int
from dmlkit.validation import is_real

__all__ = ["UnbalancedStudyConfig"]


@dataclass
class UnbalancedStudyConfig:
    """Hyper-parameters of the study (see the docstring of ``dmlkit_lab.studies.sft_unbalanced`` for the choices)."""

    dataset: str = "glyphs"
    split: str = "train"
    min_images: int = 16
    num_head: int = 20
    num_tail: int = 12
    head_train: int = 12
    tail_train: int = 2
    tail_threshold: int | None = None  # None: (head_train + tail_train + 1) // 2
    image_size: int = 16
    augment: bool = True
    embedding_dim: int = 64
    loss: str = "l2_softmax"
    lam: float = 0.2
    transform: str = "sft"  # sft, or translation (Eq. 2) as the control of the same scheme
    sampling: str = "uniform"  # uniform over images (natural frequencies), or class_balanced (a re-sampling control)
    alpha: float = 0.5
    steps: int = 250
    batch_size: int = 32
    lr: float = 3e-3
    backbone_lr: float | None = None  # None: lr; else the backbone's rate (new layers at lr)
    classifier_lr: float | None = None  # None: lr; else the classifier loss's weights' rate
    weight_decay: float = 0.0
    pretrained: str | None = None  # a pretrained-backbone name (``dmlkit pretrain --list``) or a weights file
    freeze_bn: bool = False

    @classmethod
    def testbed(cls, **changes: Any) -> "UnbalancedStudyConfig":
        """Table 5 on the testbed (``docs/results/testbed.md``): the pretrained backbone, closed-set on DML classes.

        ``glyphs-resnet20`` (pretrained on the ``pretrain`` half of the glyph classes, as ImageNet
        for the paper's face network ... in spirit: the study's classes were never seen) fine-tuned
        in the testbed's regime: backbone lr a tenth of the new layers' (1e-4 / 1e-3), the classifier's
        weights at 1e-2, Adam with weight decay 1e-4, BatchNorm frozen, 128-D, 32 px, 300 steps of 60,
        and the classifier loss of the testbed's L2-softmax rows (``testbed_normalized_softmax.yaml``:
        ``normalized_softmax``, classifier lr 1e-2; why that rate: ``docs/results/sft_unbalanced.md``).
        Classes: every ``dml`` class with >= 12 images, dealt 61 : 39 into head : tail as the paper's
        1,500 : 945; 10 training images per head class and 2 per tail class (the paper's 50 : 5 is 10 : 1;
        with 12-16 images per class, 10 : 2 keeps at least two test images per head class and two samples
        of every tail class). Centres by Eq. 9 as written (step ``alpha`` = 1), as the testbed SFT configs.
        """
        preset: dict[str, Any] = dict(
            dataset="glyphs_testbed",
            split="dml",
            min_images=12,
            num_head=208,
            num_tail=134,
            head_train=10,
            tail_train=2,
            image_size=32,
            embedding_dim=128,
            steps=300,
            batch_size=60,
            lr=1e-3,
            backbone_lr=1e-4,
            classifier_lr=1e-2,
            loss="normalized_softmax",
            weight_decay=1e-4,
            pretrained="glyphs-resnet20",
            freeze_bn=True,
            alpha=1.0,
        )
        preset.update(changes)
        return cls(**preset)

    def __post_init__(self) -> None:
        for name in (
            "min_images",
            "num_head",
            "num_tail",
            "head_train",
            "tail_train",
            "image_size",
            "embedding_dim",
            "steps",
            "batch_size",
        ):
            positive_int(name, getattr(self, name))
        for name in ("lr", "backbone_lr", "classifier_lr"):
            value = getattr(self, name)
            if name != "lr" and value is None:
                continue
            if not (is_real(value) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not (is_real(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a number >= 0, got {self.weight_decay!r}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {self.sampling!r}")
        thr = self.threshold
        if not self.tail_train < thr <= self.head_train:
            raise ValueError(
                f"tail_threshold={thr} must lie in (tail_train, head_train] = ({self.tail_train}, {self.head_train}] "
                "so that head classes are head and tail classes tail"
            )

    @property
    def threshold(self) -> int:
        """The unbalanced scheme's tail threshold (classes with fewer training images are tail)."""
        if self.tail_threshold is None:
            return (self.head_train + self.tail_train + 1) // 2
        return positive_int("tail_threshold", self.tail_threshold)
