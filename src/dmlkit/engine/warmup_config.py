"""The settings of the head-only warm-up: the ``methods.warmup`` section of an experiment config.

The warm-up sets the learning rate of the ``body`` parameter group (``engine/optim.py``) to 0 for the first
steps, so its settings live beside the optimiser's; this module imports only ``dmlkit.validation``, so ``dmlkit.config``
composes it without loading method code. The callback that applies it is ``dmlkit.methods.warmup`` (the
loop itself never reads it). Stored run records may name it ``train.warmup_steps``; ``dmlkit.config_migration``
reads it as ``methods.warmup.steps``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dmlkit.validation import check_int

__all__ = ["WarmupConfig"]


@dataclass
class WarmupConfig:
    """For the first ``steps`` steps only the head and the objective's parameters learn; on when ``steps > 0``.

    Attributes:
        steps: training steps with the backbone's learning rate at 0 (the thesis' proxy baselines: one
            epoch, ``len(train) // batch_size``); 0 leaves the method off.
    """

    steps: int = 0

    @property
    def active(self) -> bool:
        """The warm-up is on (the one rule: ``dmlkit.methods.warmup`` and ``config_differences`` read it)."""
        return self.steps > 0

    def __post_init__(self) -> None:
        check_int("methods.warmup.steps", self.steps, 0, hint="steps training only the head")
