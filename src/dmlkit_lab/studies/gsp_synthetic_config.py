"""The hyper-parameters of GSP's synthetic study (thesis Sec. 5.3.1): the thesis' values and ours.

Where each value comes from (the thesis, the author's code, or our choice) is in the docstring of
``dmlkit_lab.studies.gsp_synthetic``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dmlkit.data.datasets.synthetic import TokenSpec
from dmlkit.pooling.gsp_costs import check_normalization
from dmlkit.pooling.gsp_prototypes import PROTOTYPE_INITS
from dmlkit.validation import is_int, is_real

__all__ = ["SyntheticStudyConfig"]


@dataclass
class SyntheticStudyConfig:
    """Hyper-parameters of the synthetic study (their sources: the docstring of ``dmlkit_lab.studies.gsp_synthetic``)."""

    spec: TokenSpec = field(default_factory=TokenSpec)
    token_dim: int = 2
    token_range: float = 0.3
    lr: float = 1e-4
    samples_per_class: int = 4
    steps_per_epoch: int = 25
    max_epochs: int = 1000
    patience: int = 30
    eval_per_class: int = 50
    loss: str = "contrastive"
    loss_params: dict[str, Any] = field(default_factory=lambda: {"pos_margin": 0.0, "neg_margin": 0.2})
    num_prototypes: int = 16
    mu: float = 0.3
    eps: float = 20.0
    iters: int = 50
    zero_shot_weight: float = 0.1
    prototype_init: str = "kcenter"
    warmup_steps: int = 4096
    memory_size: int = 1024
    normalization: str = "unit_ball"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in (
            "token_dim",
            "samples_per_class",
            "steps_per_epoch",
            "max_epochs",
            "patience",
            "eval_per_class",
            "memory_size",
        ):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not is_int(self.warmup_steps) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an int >= 0, got {self.warmup_steps!r}")
        check_normalization(self.normalization)
        if self.prototype_init not in PROTOTYPE_INITS:
            raise ValueError(f"prototype_init must be one of {', '.join(PROTOTYPE_INITS)}, got {self.prototype_init!r}")
        for name in ("token_range", "lr"):
            value = getattr(self, name)
            if not (is_real(value) and value > 0):
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if not 0.0 <= self.zero_shot_weight < 1.0:
            raise ValueError(f"zero_shot_weight must lie in [0, 1), got {self.zero_shot_weight}")
