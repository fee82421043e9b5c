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

__all__ = ["Callback", "LoopStateView", "TrainerView", "callback_states", "load_callback_states"]


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

    def state_dict(self) -> dict[str, Any]:
        """What ``last.pt`` keeps of this callback, so that a resumed run continues it (tensors and plain
        Python values; ``{}``: nothing to keep)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned; a resume calls it before ``on_train_start``."""


def callback_states(callbacks: list[Callback]) -> dict[str, dict[str, Any]]:
    """``{key: state}`` of the callbacks that keep state, keyed by class name (``Name#2`` for a second one of a
    class), so that a resume with other stateless callbacks (a crash simulator, a pruner) finds them."""
    return {key: state for key, cb in _keyed(callbacks) if (state := cb.state_dict())}


def load_callback_states(callbacks: list[Callback], states: dict[str, dict[str, Any]]) -> None:
    """Give each callback its state from ``callback_states``; a callback without one (a checkpoint written before
    it kept state) starts afresh."""
    for key, cb in _keyed(callbacks):
        if key in states:
            cb.load_state_dict(states[key])


def _keyed(callbacks: list[Callback]) -> list[tuple[str, Callback]]:
    seen: dict[str, int] = {}
    keyed = []
    for cb in callbacks:
        name = type(cb).__qualname__
        seen[name] = seen.get(name, 0) + 1
        keyed.append((name if seen[name] == 1 else f"{name}#{seen[name]}", cb))
    return keyed
