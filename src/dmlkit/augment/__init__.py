"""Feature-space augmentation: the SFT paper's transforms (Eq. 2-4, Sec. 3.4), class centres (Eq. 9),
training schemes (Sec. 3.5) and the augmented loss J(X, Y) + lam * J(X_gen, Y_gen) (Eq. 10)."""

from dmlkit.augment.augmented_loss import FeatureAugmentedLoss

from dmlkit.augment.centers import CENTER_MODES, ClassCenters
from dmlkit.augment.config import AugmentConfig, build_augmented_loss
from dmlkit.augment.sft import (
    create_transform,
    degenerate_transform,
    list_transforms,
    rotation_matrix,
    spherical_transform,
    translation_transform,
)

__all__ = [
    "AugmentConfig",
    "FeatureAugmentedLoss",
    "build_augmented_loss",
    "CENTER_MODES",
    "ClassCenters",
    "create_transform",
    "degenerate_transform",
    "list_transforms",
    "rotation_matrix",
    "spherical_transform",
    "translation_transform",
]
