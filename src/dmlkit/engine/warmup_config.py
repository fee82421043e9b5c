"""The settings of the head-only warm-up: the ``methods.warmup`` section of an experiment config.

Old configs name the one setting ``train.warmup_steps`` (``dmlkit.config_migration`` maps the old key).
The method that reads the section is ``dmlkit.methods.warmup``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dmlkit.validation import is_int

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
        if not is_int(self.steps) or self.steps < 0:
            raise ValueError(f"methods.warmup.steps must be an int >= 0 (steps training only the head), got {self.steps!r}")
