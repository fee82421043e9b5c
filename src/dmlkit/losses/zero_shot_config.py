"""The settings of GSP's zero-shot prediction loss: the ``methods.zero_shot`` section of an experiment config.

They live beside the loss they configure (``params`` are the keyword arguments of
``ZeroShotPredictionLoss``, ``losses/zero_shot_prediction_loss.py``) and import no loss or method code, so
``dmlkit.config`` composes them without loading either. Stored run records may name them ``loss.zero_shot_weight``
and ``loss.zero_shot_params``; ``dmlkit.config_migration`` reads them as these. The method that reads the section is
``dmlkit.methods.zero_shot``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dmlkit.validation import check_real

__all__ = ["ZERO_SHOT_PARAMS", "ZeroShotConfig"]

#: the keys ``params`` may set, the keyword arguments of ``ZeroShotPredictionLoss``
ZERO_SHOT_PARAMS = ("ridge", "embedding_dim", "scale")


@dataclass
class ZeroShotConfig:
    """``(1 - weight) L_DML + weight L_ZS`` (Eq. 5.2.5 of the thesis); on when ``weight > 0`` (``active``).

    Attributes:
        weight: ``lam`` of Eq. 5.2.5, in ``[0, 1)``; 0.1 in the thesis (Sec. 5.2.4); 0 leaves the method off.
            Needs ``model.pooling: gsp``.
        params: ``ridge`` (eps of P3, default 0.05), ``scale`` (of the logits, default 9.5 as the author's
            code; 1 is the text as written) and ``embedding_dim`` (of the class embeddings, default the
            model's embedding size) of ``ZeroShotPredictionLoss``.
    """

    weight: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        """The zero-shot loss is on (the one rule: ``dmlkit.methods.zero_shot`` and ``config_differences`` read it)."""
        return self.weight != 0

    def __post_init__(self) -> None:
        check_real(
            "methods.zero_shot.weight",
            self.weight,
            0,
            1,
            high_open=True,
            hint="lam of Eq. 5.2.5; 0 leaves the method off",
        )
        if not isinstance(self.params, dict):
            raise ValueError(f"methods.zero_shot.params must be a mapping, e.g. {{ridge: 0.05}}, got {self.params!r}")
        unknown = sorted(set(self.params) - set(ZERO_SHOT_PARAMS))
        if unknown:
            raise ValueError(
                f"unknown methods.zero_shot.params {unknown}; valid keys are: {', '.join(ZERO_SHOT_PARAMS)}"
            )
