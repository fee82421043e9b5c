"""Metric-learning losses and miners by name, with the papers' hyper-parameters as defaults.

``create_loss(name, num_classes=None, embedding_size=None, **params)`` and
``create_miner(name, **params)`` build PML-compatible modules
(``loss(embeddings, labels, indices_tuple=None, ref_emb=None, ref_labels=None)``);
``list_losses()``, ``list_miners()``, ``loss_defaults(name)`` and
``default_miner(name)`` describe them; ``LossConfig`` + ``build_loss`` build
the pair from a config.  Every module of this package is imported on the first
lookup by name (``list_losses``, ``create_loss``, ...), so a new loss only has to
live in ``dmlkit/losses/<file>.py`` and use ``@register_loss(name, builds=...)``.
``import dmlkit.losses`` itself loads only the registry and the config, so reading a
config loads no loss.

As ``pytorch_metric_learning.losses`` does, this package also exports every loss
class of its own (``FastAPLoss``, ``L2SoftmaxLoss``, ``MetricCrossEntropyLoss``,
``CrossBatchMemoryLoss``, ``ZeroShotPredictionLoss``, ``NPairLoss``, ``TripletMarginLoss``, ...); the losses that are
PML's with other defaults (ProxyNCA++, CosFace, ArcFace, ...) are PML's classes
and come from ``create_loss``.  Add a new class to ``_EXPORTS`` below; it is imported on first use
(``dmlkit.losses.FastAPLoss``, ``from dmlkit.losses import FastAPLoss``).
"""

from __future__ import annotations

import importlib
from typing import Any

from dmlkit.losses import registry
from dmlkit.losses.config import LossConfig, build_loss  # noqa: F401  (the package's public names)
from dmlkit.losses.registry import *  # noqa: F403  (registry.__all__ is the one list of its names)

#: exported name -> the module of this package that defines it, imported on first use
_EXPORTS = {
    "CrossBatchMemoryLoss": "cross_batch_memory_loss",
    "xbm_supported_losses": "cross_batch_memory_loss",
    "DistanceWeightedMiner": "distance_weighted_miner",
    "distance_weights": "distance_weighted_miner",
    "FastAPLoss": "fast_ap_loss",
    "fast_ap_per_query": "fast_ap_loss",
    "L2SoftmaxLoss": "l2_softmax_loss",
    "MetricCrossEntropy": "metric_cross_entropy",
    "metric_bounds": "metric_cross_entropy",
    "MetricCrossEntropyLoss": "metric_cross_entropy_loss",
    "MetricLogDistance": "metric_log_distance",
    "metric_condition_bound": "metric_log_distance",
    "NPairLoss": "npair_loss",
    "check_one_hot": "one_hot",
    "one_hot_labels": "one_hot",
    "MergingCentersRegularizer": "soft_triple_regularizer",
    "TripletMarginLoss": "triplet_margin_loss",
    "all_triplet_indices": "triplet_margin_loss",
    "WeakLogDistance": "weak_log_distance",
    "ZeroShotPredictionLoss": "zero_shot_prediction_loss",
    "ZeroShotConfig": "zero_shot_config",
}

__all__ = sorted(["LossConfig", "build_loss", *_EXPORTS]) + registry.__all__


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
