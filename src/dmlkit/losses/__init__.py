"""Metric-learning losses and miners by name, with the papers' hyper-parameters as defaults.

``create_loss(name, num_classes=None, embedding_size=None, **params)`` and
``create_miner(name, **params)`` build PML-compatible modules
(``loss(embeddings, labels, indices_tuple=None, ref_emb=None, ref_labels=None)``);
``list_losses()``, ``list_miners()``, ``loss_defaults(name)`` and
``default_miner(name)`` describe them; ``LossConfig`` + ``build_loss`` build
the pair from a config.  Every module of this package is imported here, so a
new loss only has to live in ``dmlkit/losses/<file>.py`` and use
``@register_loss(name, builds=...)``.

As ``pytorch_metric_learning.losses`` does, this package also exports every loss
class of its own (``FastAPLoss``, ``L2SoftmaxLoss``, ``MetricCrossEntropyLoss``,
``CrossBatchMemoryLoss``, ``ZeroShotPredictionLoss``, ``NPairLoss``, ``TripletMarginLoss``, ...); the losses that are
PML's with other defaults (ProxyNCA++, CosFace, ArcFace, ...) are PML's classes
and come from ``create_loss``.  Add a new class to ``__all__`` below.
"""

from __future__ import annotations

from dmlkit.losses import registry
from dmlkit.losses.config import LossConfig, build_loss
from dmlkit.losses.cross_batch_memory_loss import CrossBatchMemoryLoss, xbm_supported_losses
from dmlkit.losses.distance_weighted_miner import DistanceWeightedMiner, distance_weights
from dmlkit.losses.fast_ap_loss import FastAPLoss, fast_ap_per_query
from dmlkit.losses.l2_softmax_loss import L2SoftmaxLoss
from dmlkit.losses.metric_cross_entropy import MetricCrossEntropy, metric_bounds
from dmlkit.losses.metric_cross_entropy_loss import MetricCrossEntropyLoss
from dmlkit.losses.metric_log_distance import MetricLogDistance, metric_condition_bound
from dmlkit.losses.npair_loss import NPairLoss
from dmlkit.losses.one_hot import check_one_hot, one_hot_labels
from dmlkit.losses.registry import *  # noqa: F403  (registry.__all__ is the one list of its names)
from dmlkit.losses.soft_triple_regularizer import MergingCentersRegularizer
from dmlkit.losses.triplet_margin_loss import TripletMarginLoss, all_triplet_indices
from dmlkit.losses.weak_log_distance import WeakLogDistance
from dmlkit.losses.zero_shot_prediction_loss import ZeroShotPredictionLoss

__all__ = [
    "CrossBatchMemoryLoss",
    "DistanceWeightedMiner",
    "FastAPLoss",
    "L2SoftmaxLoss",
    "LossConfig",
    "MergingCentersRegularizer",
    "MetricCrossEntropy",
    "MetricCrossEntropyLoss",
    "MetricLogDistance",
    "NPairLoss",
    "TripletMarginLoss",
    "WeakLogDistance",
    "ZeroShotPredictionLoss",
    "build_loss",
    "check_one_hot",
    "all_triplet_indices",
    "distance_weights",
    "fast_ap_per_query",
    "metric_bounds",
    "metric_condition_bound",
    "one_hot_labels",
    "xbm_supported_losses",
]
__all__ += registry.__all__


from dmlkit.registry import import_submodules  # noqa: E402

import_submodules(__name__, __path__)
