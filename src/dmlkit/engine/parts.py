"""What the trainer receives: the assembled parts of one run (built by ``dmlkit.assemble``).

The trainer knows no method and builds no component: the datasets, the model, the objective,
the batch sampler, the optimiser's parameter groups, the stopping rule, the methods' callbacks,
how a training batch is embedded and which module is evaluated all arrive here, made from the
experiment config by the assembly layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from dmlkit.engine.callbacks import Callback
from dmlkit.engine.early_stopping import EarlyStopping

__all__ = ["Encode", "RunParts", "Splits", "plain_encode"]

#: ``encode(model, images) -> (embeddings, extras)``: how a training batch is embedded; ``extras``
#: are per-sample tensors (batch dimension first) the objective's terms read from ``batch``.
Encode = Callable[[nn.Module, torch.Tensor], "tuple[torch.Tensor, dict[str, torch.Tensor]]"]


def plain_encode(model: nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The model's forward pass, no extra tensors."""
    return model(images), {}


@dataclass
class Splits:
    """The datasets of one run: train (augmented), validation and test (plain)."""

    train: Any
    val: Any
    test: Any
    val_is_test: bool = False
    reference: Any = None  # references of the test queries (eval.reference_split), or None


@dataclass
class RunParts:
    """Everything one run trains and evaluates, ready for ``Trainer``.

    ``eval_model(model)`` wraps a (bare or Fabric-wrapped) model into the module whose outputs are
    evaluated; ``forward_methods`` are model methods besides ``forward`` that ``encode`` calls
    (Fabric must be told about them); ``config_text`` is written to the run folder's config.yaml;
    ``pretrained`` (``assemble.pretrained.resolve_pretrained_weights``) to its environment.json;
    ``records`` (``{file name: JSON content}``, e.g. a dataset's class split) beside them at a fresh start.
    """

    name: str
    seed: int
    config_text: str
    splits: Splits
    model: nn.Module
    objective: nn.Module
    batch_sampler: Any
    param_groups: list[dict]
    stopper: EarlyStopping
    eval_model: Callable[[nn.Module], nn.Module]
    callbacks: list[Callback] = field(default_factory=list)
    encode: Encode = plain_encode
    forward_methods: tuple[str, ...] = ()
    plots: bool = True
    num_workers: int = 0
    pretrained: dict[str, str] | None = None
    records: dict[str, Any] = field(default_factory=dict)
