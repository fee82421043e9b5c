"""Typed configs of the training loop (``TrainConfig``) and of the final evaluation (``EvalConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from dmlkit.validation import check_int, check_real, is_int, is_real

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("none", "plateau", "step")


@dataclass
class TrainConfig:
    """How one run is optimised, validated and stopped.

    The defaults of the fair-evaluation protocol of the thesis (Sec. 3.3.2.1) are Adam,
    lr 1e-5, weight decay 1e-4, betas (0.9, 0.99), batch 32 with 4 samples per class,
    validation MAP@R, early stopping; the configs under ``configs/`` set them per experiment.
    ``sampler`` names a batch sampler of ``dmlkit.data.list_batch_samplers()`` (``m_per_class``
    uses ``m_per_class``; ``fastap_random`` / ``fastap_hard`` take ``sampler_params``). The head-only
    warm-up is a training method: ``methods.warmup.steps`` (``dmlkit.config_migration`` reads
    ``train.warmup_steps`` of stored run records as it).
    ``tensorboard: true`` also writes the training loss (and its named terms), the learning rate, every
    validation metric and the final test metrics as TensorBoard scalars into ``RUN/tensorboard/`` while the
    run trains (``engine/tensorboard.py``; the ``tensorboard`` extra).
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
    threads: int | None = None  # intra-op CPU threads of the run (engine/threads.py); null: the shell's
    channels_last: bool = False  # the model and its input batches in NHWC memory layout (engine/execution.py)
    compile: bool = False  # torch.compile the model before training (engine/execution.py)
    tensorboard: bool = False  # TensorBoard scalars in RUN/tensorboard/ as the run trains (engine/tensorboard.py)

    def __post_init__(self) -> None:
        check_train_values(self)


_POSITIVE_INTS = ("batch_size", "m_per_class", "max_steps", "val_every", "log_every", "step_size", "devices")
_NON_NEGATIVE_INTS = ("patience", "plateau_patience")


def check_train_values(t: TrainConfig) -> None:
    """Reject values no run can use (zero or negative sizes, rates that are not finite and positive)
    with a ValueError naming ``train.<key>``; the type of each value is checked when the config is read."""
    for key in _POSITIVE_INTS + _NON_NEGATIVE_INTS:
        check_int(f"train.{key}", getattr(t, key), 1 if key in _POSITIVE_INTS else 0, 2**40)
    check_int(
        "train.threads",
        t.threads,
        1,
        4096,
        hint="the run's intra-op CPU threads; null: the shell's OMP_NUM_THREADS, else one per core",
        none=True,
    )
    for key in ("lr", "head_lr", "loss_lr", "grad_clip"):
        check_real(f"train.{key}", getattr(t, key), 0, low_open=True, none=key != "lr")
    check_real("train.weight_decay", t.weight_decay, 0)
    check_real("train.momentum", t.momentum, 0, 1, high_open=True)
    check_real("train.plateau_factor", t.plateau_factor, 0, 1, low_open=True, high_open=True)
    check_real("train.step_gamma", t.step_gamma, 0, 1, low_open=True)
    if len(t.betas) != 2 or not all(is_real(b) and 0 <= b < 1 for b in t.betas):
        raise ValueError(f"train.betas must be two numbers in [0, 1), e.g. [0.9, 0.99]; got {t.betas!r}")
    for key, valid in (("optimizer", OPTIMIZERS), ("schedule", SCHEDULES)):
        if getattr(t, key) not in valid:
            raise ValueError(f"unknown train.{key} {getattr(t, key)!r}; valid values are: {', '.join(valid)}")
    if t.batch_size % t.devices:
        raise ValueError(
            f"train.batch_size must be divisible by train.devices={t.devices} (it is the global batch); "
            f"got {t.batch_size!r}"
        )


@dataclass
class EvalConfig:
    """What the final evaluation reports.

    ``embedding``: ``features`` (the model's embedding) or ``classifier`` (the class
    outputs of a classifier loss such as ce_weak / ce_metric).
    ``reference_split``: when set, the images of ``split`` are queries searched among the
    images of this split (In-shop: ``split: query``, ``reference_split: gallery``); the two
    splits must share class ids. ``null``: ``split`` retrieves within itself (leave-one-out).
    ``val_max_per_class``: validate on at most this many images of each validation class (a fixed
    sample drawn from the seed); MAP@R ranks R = (images of the class - 1) neighbours of every
    image, so large classes make every validation slow. ``null``: every validation image.
    """

    split: str = "test"
    ks: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    clustering: bool = True
    batch_size: int = 256
    embedding: str = "features"
    reference_split: str | None = None
    val_max_per_class: int | None = None
    test: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.test, bool):
            raise ValueError(f"eval.test must be true or false, got {self.test!r}")
        if self.embedding not in ("features", "classifier"):
            raise ValueError(f"eval.embedding must be 'features' or 'classifier', got {self.embedding!r}")
        if not self.ks or any(not is_int(k) or k < 1 for k in self.ks):
            raise ValueError(
                f"eval.ks must be a non-empty list of positive integers (the K of each R@K), e.g. [1, 2, 4, 8]; got {self.ks!r}"
            )
        check_int("eval.batch_size", self.batch_size, 1)
        check_int("eval.val_max_per_class", self.val_max_per_class, 2, hint="images per validation class", none=True)


def check_val_metric(train: TrainConfig, evaluation: EvalConfig, names: list[str]) -> None:
    """``train.val_metric`` must be one of ``names``, the metrics a validation reports with ``eval.ks``."""
    if train.val_metric not in names:
        raise ValueError(
            f"train.val_metric {train.val_metric!r} is not a metric the validation reports; valid with "
            f"eval.ks={list(evaluation.ks)}: {', '.join(names)}"
        )
