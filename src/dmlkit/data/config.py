"""The data section of an experiment config (``data:`` in YAML)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from dmlkit.data.long_tail import check_long_tail
from dmlkit.validation import check_int, check_real, is_int


@dataclass
class DataConfig:
    """Which dataset, at which size, and how it is split and loaded.

    Attributes:
        name: a registered dataset (``dmlkit.data.list_datasets()``).
        root: the dataset's folder; ``None`` = ``$DMLKIT_CACHE/<name>`` or ``~/.cache/dmlkit/<name>``.
        image_size: image side in pixels.
        val_fraction: fraction of the *train classes* held out, class-disjoint, for
            validation (early stopping, model selection); 0 disables it.
        max_classes: keep only the first ``max_classes`` classes of each split (quick runs);
            ``None`` keeps all. The validation hold-out is taken from the capped train classes.
        augment: random augmentation of the training images.
        num_workers: ``DataLoader`` worker processes (0 = load in the main process).
        folds: with ``folds >= 2`` the validation classes are fold ``fold`` of a class-disjoint
            ``folds``-fold split of the train classes (the fair protocol) instead of ``val_fraction``.
        fold: which fold validates (``0 <= fold < folds``).
        train_split: the split that trains (``pretrain`` for a pretraining recipe of ``glyphs_testbed``).
        val_split: a split of the dataset that validates (e.g. ``val`` of ``glyphs_testbed``) instead of a
            hold-out of the train classes; needs ``val_fraction: 0`` and ``folds: 0``.
        tail_fraction: share of the *training* classes cut to ``tail_images`` images each, a long-tailed
            training split (``dmlkit.data.long_tail``: which classes and images is a fixed hash of the class
            names, the same for every run seed); applied after the validation hold-out, never to val or test.
            0 cuts none.
        tail_images: images each cut class keeps (>= 2, so it keeps a positive pair).
        params: further keyword arguments of the dataset's constructor (e.g. ``channels`` of ``image_folder``).
    """

    name: str = "glyphs"
    root: str | None = None
    image_size: int = 32
    val_fraction: float = 0.2
    max_classes: int | None = None
    augment: bool = True
    num_workers: int = 0
    folds: int = 0
    fold: int = 0
    train_split: str = "train"
    val_split: str | None = None
    tail_fraction: float = 0.0
    tail_images: int = 3
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"data.name must be a dataset name, got {self.name!r}")
        check_int("data.image_size", self.image_size, 8)
        check_real("data.val_fraction", self.val_fraction, 0, 1, high_open=True, hint="0 disables validation")
        check_int("data.max_classes", self.max_classes, 1, none=True)
        if not is_int(self.folds) or self.folds < 0 or self.folds == 1:
            raise ValueError(f"data.folds must be 0 (no folds) or an int >= 2, got {self.folds!r}")
        check_int("data.fold", self.fold, 0, max(self.folds - 1, 0), hint=f"data.folds={self.folds}")
        check_long_tail(self.tail_fraction, self.tail_images)
        check_int("data.num_workers", self.num_workers, 0)
        if not isinstance(self.train_split, str) or not self.train_split:
            raise ValueError(f"data.train_split must be a split name such as 'train', got {self.train_split!r}")
        if self.val_split is not None:
            if not isinstance(self.val_split, str) or not self.val_split:
                raise ValueError(f"data.val_split must be a split name such as 'val', or null; got {self.val_split!r}")
            if self.val_fraction or self.folds:
                raise ValueError(
                    f"data.val_split '{self.val_split}' validates, so set data.val_fraction: 0 and data.folds: 0 "
                    f"(got {self.val_fraction} and {self.folds}), or set data.val_split: null to hold out train classes"
                )
