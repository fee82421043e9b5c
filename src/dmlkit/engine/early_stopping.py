"""Early stopping on a validation score that should increase (P@1, MAP@R, ...)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class EarlyStopping:
    """Counts validations without improvement; ``should_stop`` once ``patience`` of them pass.

    ``patience`` counts validations, not steps: with validation every N steps a
    patience of P stops after N * P steps without a new best score.
    """

    patience: int
    best_score: float = -math.inf
    best_step: int = -1
    bad_validations: int = 0

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError(f"patience must be at least 1 validation, got {self.patience}")

    def update(self, score: float, step: int) -> bool:
        """Record a validation score; return True when it is a new best."""
        if not math.isfinite(score):
            raise ValueError(f"validation score at step {step} is {score}; the embeddings diverged")
        if score > self.best_score:
            self.best_score, self.best_step, self.bad_validations = score, step, 0
            return True
        self.bad_validations += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.bad_validations >= self.patience

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)
