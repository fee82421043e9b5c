"""Trainer callbacks: small hooks through which methods update state around the loop.

A callback sees the trainer through ``TrainerView``, the few attributes a method may read or
change (the model, the objective, the optimiser, the loop state, the run folder, the metrics
log, Fabric, the stopping rule); it never imports the trainer itself.
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import nn

from dmlkit.engine.early_stopping import EarlyStopping
from dmlkit.engine.metrics_log import MetricsLog
from dmlkit.engine.run_folder import RunFolder

__all__ = ["Callback", "LoopStateView", "TrainerView"]


class LoopStateView(Protocol):
    step: int
    epoch: int


class TrainerView(Protocol):
    """What a callback may use of the running trainer."""

    fabric: Any  # lightning.fabric.Fabric: device, world_size, is_global_zero, barrier()
    folder: RunFolder
    model: nn.Module
    objective: nn.Module
    optimizer: Any
    state: LoopStateView
    log: MetricsLog
    stopper: EarlyStopping
    plots: bool

    def restore_best(self) -> None:
        """Load ``best.pt``'s model and objective state into the running model and objective."""


class Callback:
    """Override the hooks you need; each receives the running trainer as a ``TrainerView``."""

    def on_train_start(self, trainer: TrainerView) -> None:
        pass

    def on_batch_end(self, trainer: TrainerView, batch: dict[str, Any], outputs: dict[str, Any]) -> None:
        pass

    def on_validation_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        pass

    def on_train_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        """Runs before ``summary.json`` is written: keys added to ``summary`` are saved with it."""
