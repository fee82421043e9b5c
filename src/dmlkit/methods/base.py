"""The ``Method`` interface: how a training-side method plugs into a run, through small hooks.

A method (SFT, CCP, GSP's zero-shot loss, warm-up, ...) is one object made from the experiment
config alone (cheap: it reads and checks its section), then ``setup(ctx)`` with the run's
``BuildContext`` builds its training state (centres, proxies, ...). A finished run that is only
evaluated needs no ``setup``: ``eval_model`` depends on the config alone. Each hook has a no-op
default, so a method overrides only what it changes:

* ``wrap_loss(loss, miner)``: replace the metric loss (CCP: the pair loss against proxies);
* ``terms(terms)``: the objective's named terms after this method (SFT adds ``generated``,
  CCP the ``projection`` term, the zero-shot loss mixes Eq. 5.2.5);
* ``param_groups(train_cfg)``: optimiser groups of the parameters the method owns (CCP's proxies);
* ``stopper(train_cfg)``: a stopping rule that replaces early stopping (CCP's projections);
* ``callbacks()``: hooks around the loop (CCP's alternation, the head warm-up); a callback's ``on_train_end``
  may add ``{name: number}`` to ``summary["facts"]``, which protocol tables show as a column per name
  (CCP's ``projections``);
* ``eval_model(model)``: the module evaluated (SFT-d: the L2-normalised embedding);
* ``encode(model, images)`` / ``forward_methods``: how a training batch is embedded and the
  extra per-sample tensors the method's terms read from the batch (GSP's transport plan).

The engine never sees a method, only what these hooks return (``dmlkit.engine.parts.RunParts``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dmlkit.engine.callbacks import Callback
from dmlkit.engine.config import TrainConfig
from dmlkit.engine.early_stopping import EarlyStopping
from dmlkit.engine.objective import ObjectiveTerm

if TYPE_CHECKING:  # the experiment config composes every section; methods read their own
    from dmlkit.config import ExperimentConfig

__all__ = ["BuildContext", "Method"]


@dataclass
class BuildContext:
    """What a method may know of the run it joins, when it is built."""

    cfg: "ExperimentConfig"
    model: nn.Module
    train_set: Any  # the augmented training dataset (``labels``, ``with_augment``)
    num_classes: int
    class_counts: torch.Tensor  # training samples per class

    @property
    def embedding_dim(self) -> int:
        return int(self.cfg.model.embedding_dim)

    @property
    def seed(self) -> int:
        return int(self.cfg.seed)


class Method:
    """A training-side method; every hook defaults to "change nothing"."""

    name = "method"
    forward_methods: tuple[str, ...] = ()

    def setup(self, ctx: BuildContext) -> None:
        """Build the training state from the run (called once, before ``wrap_loss`` and ``terms``)."""

    def wrap_loss(self, loss: nn.Module, miner: nn.Module | None) -> tuple[nn.Module, nn.Module | None]:
        return loss, miner

    def terms(self, terms: list[ObjectiveTerm]) -> list[ObjectiveTerm]:
        return terms

    def param_groups(self, train: TrainConfig) -> list[dict]:
        return []

    def stopper(self, train: TrainConfig) -> EarlyStopping | None:
        return None

    def callbacks(self) -> list[Callback]:
        return []

    def eval_model(self, model: nn.Module) -> nn.Module:
        return model

    def encode(self, model: nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | None:
        """``(embeddings, extras)`` of a training batch, or None to leave it to the model's forward."""
        return None
