"""Trainer callbacks: small hooks through which methods update state around the loop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dmlkit.engine.trainer import Trainer


class Callback:
    """Override the hooks you need; each receives the trainer, whose attributes expose the run's state."""

    def on_train_start(self, trainer: "Trainer") -> None:
        pass

    def on_batch_end(self, trainer: "Trainer", batch: dict[str, Any], outputs: dict[str, Any]) -> None:
        pass

    def on_validation_end(self, trainer: "Trainer", metrics: dict[str, float]) -> None:
        pass

    def on_train_end(self, trainer: "Trainer", summary: dict[str, Any]) -> None:
        pass
