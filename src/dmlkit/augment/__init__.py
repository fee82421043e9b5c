"""Feature-space augmentation: the SFT paper's transforms (Eq. 2-4, Sec. 3.4), class centres (Eq. 9),
training schemes (Sec. 3.5), the generated batch of Algorithm 1 and the augmented loss
J(X, Y) + lam * J(X_gen, Y_gen) (Eq. 10)."""

from dmlkit.augment.augmented_loss import FeatureAugmentedLoss
from dmlkit.augment.centers import CENTER_INITS, CENTER_MODES, ClassCenters, class_sums
from dmlkit.augment.config import SFTConfig, build_augmented_loss
from dmlkit.augment.feature_generator import AUGMENT_TRANSFORMS, FeatureGenerator, canonical_transform_name
from dmlkit.augment.generated_score import SCORES, GeneratedBatchStats, score_generated
from dmlkit.augment.schemes import (
    NO_TARGET,
    SCHEMES,
    TARGET_POLICIES,
    balanced_targets,
    split_head_tail,
    unbalanced_targets,
)
from dmlkit.augment.sft import (
    create_transform,
    degenerate_transform,
    list_transforms,
    rotation_matrix,
    spherical_transform,
    translation_transform,
)

__all__ = [
    "AUGMENT_TRANSFORMS",
    "CENTER_INITS",
    "CENTER_MODES",
    "ClassCenters",
    "FeatureAugmentedLoss",
    "FeatureGenerator",
    "GeneratedBatchStats",
    "NO_TARGET",
    "SCHEMES",
    "SCORES",
    "SFTConfig",
    "TARGET_POLICIES",
    "balanced_targets",
    "build_augmented_loss",
    "canonical_transform_name",
    "class_sums",
    "create_transform",
    "degenerate_transform",
    "list_transforms",
    "rotation_matrix",
    "score_generated",
    "spherical_transform",
    "split_head_tail",
    "translation_transform",
    "unbalanced_targets",
]
