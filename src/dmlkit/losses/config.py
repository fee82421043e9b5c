"""Typed config of the metric-learning objective and the builder of its (loss, miner) pair.

``LossConfig`` is the ``loss:`` section of an experiment YAML.  ``build_loss``
turns it into a PML-style loss module and an optional miner (the objective's metric term,
``dmlkit.engine.objective.MetricLossTerm``, calls
``loss(embeddings, labels, miner(embeddings, labels) if miner else None)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from dmlkit.losses.pml_options import PML_OPTIONS, build_pml_option
from dmlkit.losses.registry import create_loss, create_miner, default_miner, get_loss_entry, list_miners

__all__ = ["DEFAULT_MINER", "LossConfig", "build_loss"]

DEFAULT_MINER = "default"


@dataclass
class LossConfig:
    """Which loss (and miner) trains the embedding.

    Attributes:
        name: a name of ``list_losses()``.
        params: hyper-parameters overriding the loss' documented defaults; ``distance`` may be a
            mapping ``{name: lp, normalize_embeddings: false}``,
            ``embedding_regularizer`` / ``weight_regularizer`` one like ``{name: lp, power: 2}``
            (``dmlkit.losses.pml_options``).
        miner: ``"default"`` = the loss' default miner (``multi_similarity`` for
            ``multi_similarity``, none for most), a name of ``list_miners()``, or
            None for no miner.
        miner_params: hyper-parameters of the miner.

    GSP's zero-shot prediction loss is a training method: ``methods.zero_shot`` (``dmlkit.config_migration``
    reads ``loss.zero_shot_weight`` / ``loss.zero_shot_params`` of stored run records as it).
    """

    name: str = "multi_similarity"
    params: dict[str, Any] = field(default_factory=dict)
    miner: str | None = DEFAULT_MINER
    miner_params: dict[str, Any] = field(default_factory=dict)


def _resolve_miner(cfg: LossConfig, default: str | None) -> str | None:
    name = default if cfg.miner == DEFAULT_MINER else cfg.miner
    if name is None and cfg.miner_params:
        raise ValueError(
            f"loss.miner_params is set but loss '{cfg.name}' gets no miner; "
            f"set loss.miner to one of: {', '.join(list_miners())}"
        )
    return name


def build_loss(
    cfg: LossConfig, num_classes: int | None, embedding_size: int | None
) -> tuple[nn.Module, nn.Module | None]:
    """Build ``(loss, miner)`` from ``cfg``; ``miner`` is None when no mining is asked for.

    ``num_classes`` (number of training classes) and ``embedding_size`` reach
    only the losses that take them.  A loss registered with ``takes_miner=True``
    (``xbm``: the miner runs inside the memory, batch against memory) gets the
    miner as its ``miner`` / ``miner_params`` parameters, and the returned miner
    is None.
    """
    entry = get_loss_entry(cfg.name)
    params = dict(cfg.params)
    for option in PML_OPTIONS:  # a distance or regularizer named by a mapping
        if isinstance(params.get(option), dict):
            params[option] = build_pml_option(option, params[option])
    if entry.takes_miner:
        if cfg.miner != DEFAULT_MINER or cfg.miner_params:
            if "miner" in params or "miner_params" in params:
                raise ValueError(f"give the {cfg.name} miner either as loss.miner or as loss.params.miner, not both")
            params["miner"] = cfg.miner
            params["miner_params"] = dict(cfg.miner_params)
        return create_loss(cfg.name, num_classes=num_classes, embedding_size=embedding_size, **params), None
    loss = create_loss(cfg.name, num_classes=num_classes, embedding_size=embedding_size, **params)
    miner_name = _resolve_miner(cfg, default_miner(entry.name))
    miner = create_miner(miner_name, **dict(cfg.miner_params)) if miner_name is not None else None
    return loss, miner
