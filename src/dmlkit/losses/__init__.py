"""Metric-learning losses and miners by name, with the papers' hyper-parameters as defaults.

``create_loss(name, num_classes=None, embedding_size=None, **params)`` and
``create_miner(name, **params)`` build PML-compatible modules
(``loss(embeddings, labels, indices_tuple=None, ref_emb=None, ref_labels=None)``);
``list_losses()``, ``list_miners()``, ``loss_defaults(name)`` and
``default_miner(name)`` describe them; ``LossConfig`` + ``build_objective`` build
the pair from a config.  Every module of this package is imported here, so a
new loss only has to live in ``dmlkit/losses/<file>.py`` and use
``@register_loss(name, builds=...)``.
"""

from __future__ import annotations

from dmlkit.losses.config import LossConfig, build_objective
from dmlkit.losses.cross_batch_memory_loss import CrossBatchMemoryLoss, xbm_supported_losses
from dmlkit.losses.registry import (
    ComponentEntry,
    create_loss,
    create_miner,
    default_miner,
    get_loss_entry,
    get_miner_entry,
    list_losses,
    list_miners,
    loss_defaults,
    miner_defaults,
    register_loss,
    register_miner,
)

__all__ = [
    "ComponentEntry",
    "CrossBatchMemoryLoss",
    "LossConfig",
    "build_objective",
    "create_loss",
    "create_miner",
    "default_miner",
    "get_loss_entry",
    "get_miner_entry",
    "list_losses",
    "list_miners",
    "loss_defaults",
    "miner_defaults",
    "register_loss",
    "register_miner",
    "xbm_supported_losses",
]


from dmlkit.registry import import_submodules  # noqa: E402

import_submodules(__name__, __path__)
