"""Typed configs of the training loop (``TrainConfig``) and of the final evaluation (``EvalConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from dmlkit.validation import is_int, is_real

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
    import math

    def bad(key: str, value: object, want: str) -> ValueError:
        return ValueError(f"train.{key} must be {want}; got {value!r}")

    for key in _POSITIVE_INTS + _NON_NEGATIVE_INTS:
        value, low = getattr(t, key), (1 if key in _POSITIVE_INTS else 0)
        if not is_int(value) or value < low or value > 2**40:
            raise bad(key, value, f"an integer between {low} and 2**40")
    if t.threads is not None and (not is_int(t.threads) or not 1 <= t.threads <= 4096):
        raise bad(
            "threads",
            t.threads,
            "an integer between 1 and 4096 (the run's intra-op CPU threads), or null for the "
            "shell's (OMP_NUM_THREADS, else one per core)",
        )
    for key in ("lr", "head_lr", "loss_lr", "grad_clip"):
        value = getattr(t, key)
        if value is None and key != "lr":
            continue
        if not is_real(value) or not math.isfinite(value) or value <= 0:
            raise bad(key, value, "a finite number > 0" + ("" if key == "lr" else " (or null)"))
    if not isinstance(t.weight_decay, (int, float)) or not math.isfinite(t.weight_decay) or t.weight_decay < 0:
        raise bad("weight_decay", t.weight_decay, "a finite number >= 0")
    for key in ("momentum", "plateau_factor", "step_gamma"):
        value = getattr(t, key)
        low_ok = key == "momentum"
        if (
            not isinstance(value, (int, float))
            or not (0 <= value < 1 if low_ok else 0 < value <= 1)
            or (key == "plateau_factor" and value == 1)
        ):
            raise bad(key, value, "in [0, 1)" if low_ok else ("in (0, 1)" if key == "plateau_factor" else "in (0, 1]"))
    if len(t.betas) != 2 or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in t.betas):
        raise bad("betas", t.betas, "two numbers in [0, 1), e.g. [0.9, 0.99]")
    for key, valid in (("optimizer", OPTIMIZERS), ("schedule", SCHEDULES)):
        if getattr(t, key) not in valid:
            raise ValueError(f"unknown train.{key} {getattr(t, key)!r}; valid values are: {', '.join(valid)}")
    if t.batch_size % t.devices:
        raise bad("batch_size", t.batch_size, f"divisible by train.devices={t.devices} (it is the global batch)")


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
        if not is_int(self.batch_size) or self.batch_size < 1:
            raise ValueError(f"eval.batch_size must be a positive integer, got {self.batch_size!r}")
        cap = self.val_max_per_class
        if cap is not None and (not is_int(cap) or cap < 2):
            raise ValueError(
                f"eval.val_max_per_class must be an integer >= 2 (images per validation class) or null, got {cap!r}"
            )


def check_val_metric(train: TrainConfig, evaluation: EvalConfig, names: list[str]) -> None:
    """``train.val_metric`` must be one of ``names``, the metrics a validation reports with ``eval.ks``."""
    if train.val_metric not in names:
        raise ValueError(
            f"train.val_metric {train.val_metric!r} is not a metric the validation reports; valid with "
            f"eval.ks={list(evaluation.ks)}: {', '.join(names)}"
        )
