"""Warm-up of the embedding layer: for the first ``methods.warmup.steps`` steps only the head and the
objective's parameters (proxies) learn; the backbone's learning rate is 0.

The proxy-based baselines of the thesis (ProxyAnchor, ProxyNCA++, SoftTriple; Sec. 3.3.2.1)
"perform 1 epoch warm-up training of the embedding layer"; set ``methods.warmup.steps`` to the
steps of one epoch (``len(train) // batch_size``) for that.  Implemented as a learning rate of 0
for the ``body`` parameter group (the backbone; the new layers on top of it -- 1x1 local projection, pooling,
head -- learn at ``train.head_lr`` in the ``head`` group), restored to ``train.lr`` when the
warm-up ends; it is a function of the step, so a resumed run warms up exactly as an
uninterrupted one.  (Batch-norm running statistics of the backbone still update in training mode.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dmlkit.engine.warmup_config import WarmupConfig
from dmlkit.engine.callbacks import Callback, TrainerView
from dmlkit.methods.base import Method
from dmlkit.methods.registry import register_method

if TYPE_CHECKING:
    from dmlkit.config import ExperimentConfig

__all__ = ["HeadWarmup", "Warmup"]


class HeadWarmup(Callback):
    """Learning rate 0 for the ``body`` group while ``step < steps``."""

    def __init__(self, steps: int, body_lr: float) -> None:
        self.steps, self.body_lr = steps, body_lr

    def _apply(self, trainer: TrainerView) -> None:
        lr = 0.0 if trainer.state.step < self.steps else self.body_lr
        for group in trainer.optimizer.param_groups:
            if group.get("name") == "body":
                group["lr"] = lr

    def on_train_start(self, trainer: TrainerView) -> None:
        self._apply(trainer)

    def on_batch_end(self, trainer: TrainerView, batch: dict[str, Any], outputs: dict[str, Any]) -> None:
        if trainer.state.step == self.steps:
            self._apply(trainer)


@register_method("warmup", settings=WarmupConfig)
class Warmup(Method):
    """``methods.warmup.steps > 0``: only the head and the objective learn for that many steps."""

    name = "warmup"

    def __init__(self, cfg: "ExperimentConfig") -> None:
        self.steps, self.body_lr = cfg.methods.warmup.steps, cfg.train.lr  # steps checked by WarmupConfig

    @classmethod
    def from_config(cls, cfg: "ExperimentConfig") -> "Warmup | None":
        return cls(cfg) if cfg.methods.warmup.active else None

    def callbacks(self) -> list[Callback]:
        return [HeadWarmup(self.steps, self.body_lr)]
