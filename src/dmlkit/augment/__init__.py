"""Feature-space augmentation: the SFT paper's transforms (Eq. 2-4, Sec. 3.4) and class centres (Eq. 9)."""

from dmlkit.augment.centers import CENTER_MODES, ClassCenters
from dmlkit.augment.sft import (
    create_transform,
    degenerate_transform,
    list_transforms,
    rotation_matrix,
    spherical_transform,
    translation_transform,
)

__all__ = [
    "CENTER_MODES",
    "ClassCenters",
    "create_transform",
    "degenerate_transform",
    "list_transforms",
    "rotation_matrix",
    "spherical_transform",
    "translation_transform",
]
