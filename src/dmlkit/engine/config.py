"""Typed configs of the training loop (``TrainConfig``) and of the final evaluation (``EvalConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("none", "plateau", "step")


@dataclass
class TrainConfig:
    """How one run is optimised, validated and stopped.

    The defaults of the fair-evaluation protocol of the thesis (Sec. 3.3.2.1) are Adam,
    lr 1e-5, weight decay 1e-4, betas (0.9, 0.99), batch 32 with 4 samples per class,
    validation MAP@R, early stopping; the configs under ``configs/`` set them per experiment.
    ``sampler`` names a batch sampler of ``dmlkit.data.list_batch_samplers()`` (``m_per_class``
    uses ``m_per_class``; ``fastap_random`` / ``fastap_hard`` take ``sampler_params``).
    """

    optimizer: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 1e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    momentum: float = 0.9
    head_lr: float | None = None
    loss_lr: float | None = None
    batch_size: int = 64
    m_per_class: int = 4
    sampler: str = "m_per_class"
    sampler_params: dict = field(default_factory=dict)
    max_steps: int = 1000
    schedule: str = "none"
    plateau_patience: int = 4
    plateau_factor: float = 0.5
    step_size: int = 1000
    step_gamma: float = 0.5
    val_every: int = 100
    val_metric: str = "mean_average_precision_at_r"
    patience: int = 5
    grad_clip: float | None = None
    log_every: int = 10
    accelerator: str = "auto"
    devices: int = 1
    precision: str = "32-true"


@dataclass
class EvalConfig:
    """What the final evaluation reports.

    ``embedding``: ``features`` (the model's embedding) or ``classifier`` (the class
    outputs of a classifier loss such as ce_weak / ce_metric).
    """

    split: str = "test"
    ks: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    clustering: bool = True
    batch_size: int = 256
    embedding: str = "features"

    def __post_init__(self) -> None:
        if self.embedding not in ("features", "classifier"):
            raise ValueError(f"eval.embedding must be 'features' or 'classifier', got {self.embedding!r}")
