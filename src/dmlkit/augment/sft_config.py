"""SFT's settings: the ``methods.sft`` section of an experiment config (``SFTConfig``), checked once here.

Stored run records may name the section ``augment:``; ``dmlkit.config_migration`` reads it as this.
Every rule about the values (the names, ranges, and SFT-d needing ``normalize_input``) lives in
``SFTConfig.__post_init__``; :class:`~dmlkit.augment.feature_generator.FeatureGenerator` builds an
``SFTConfig`` from its arguments, so a generator made without a config is checked by the same rules.
The training method that reads the section is ``dmlkit.methods.sft``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dmlkit.augment.centers import CENTER_INITS, CENTER_MODES
from dmlkit.augment.generated_score import SCORES
from dmlkit.augment.schemes import SCHEMES, TARGET_POLICIES
from dmlkit.validation import check_int, check_real

__all__ = ["AUGMENT_TRANSFORMS", "SFTConfig", "canonical_transform_name"]

AUGMENT_TRANSFORMS = ("sft", "sft_d", "translation")
_ALIASES = {"sft": "sft", "sft_d": "sft_d", "sft-d": "sft_d", "translation": "translation"}
_KEY = "methods.sft"  # where the section lives in a config, for the messages


def canonical_transform_name(name: str) -> str:
    """``"sft"``, ``"sft_d"`` (alias ``"sft-d"``) or ``"translation"``; ``ValueError`` otherwise."""
    try:
        return _ALIASES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown transform {name!r}: choose one of {AUGMENT_TRANSFORMS}") from None


@dataclass
class SFTConfig:
    """Feature augmentation of the SFT paper (Sec. 3.3-3.5); on when ``name`` is set (``active``).

    Attributes:
        name: ``None`` (off), ``"sft"`` (Eq. 3-4), ``"sft_d"`` (Sec. 3.4, alias ``"sft-d"``)
            or ``"translation"`` (Eq. 2).
        lam: weight ``lambda`` of the loss on the generated batch (Eq. 10), ``>= 0``; paper: 0.2.
        scheme: ``"balanced"`` or ``"unbalanced"`` train (Sec. 3.5).
        target: how "randomly choose a different class" is read (:mod:`dmlkit.augment.schemes`):
            ``"batch"`` (a random other class of the mini-batch; the default, it keeps positives in
            the generated batch), ``"shared"`` (one such target per source class) or ``"all"`` (any
            class with a centre). The unbalanced scheme applies it among the tail classes.
        score: ``"separate"`` (``J(X_gen, Y_gen)`` alone, Eq. 10 as written) or ``"joint"`` (the
            generated features scored inside ``[X; X_gen]``); both mined by the run's miner
            (:mod:`dmlkit.augment.generated_score`).
        tail_threshold: unbalanced train: classes with fewer training samples are tail
            classes (paper: 15); checked against the class counts by the generator.
        centers: centre estimation, ``"update"`` (Eq. 9), ``"random"`` or ``"pick"`` (Table 6).
        alpha: step size of the Eq. 9 centre update, in ``(0, 1]``.
        init_centers: how the centres start: ``"none"`` (a class gets its centre the first time it is
            in a batch; the default) or ``"data"`` (before the first training step, every class
            centre is the mean of its training images under the initial network, in the transform's
            space: ``dmlkit.methods.sft``). ``"data"`` needs ``centers`` ``"update"`` or ``"pick"``.
        normalize_input: the loss receives the embeddings *before* L2 normalisation and
            normalises them itself (how SFT-d is meant to be used; the trainer must then feed
            the pre-normalisation embeddings).
        update_centers_first: update the centres with the batch before generating (swaps
            lines 5 and 6 of Algorithm 1).
        start_step: the first ``start_step`` steps only update the centres (no generated batch).
    """

    name: str | None = None
    lam: float = 0.2
    scheme: str = "balanced"
    target: str = "batch"
    score: str = "separate"
    tail_threshold: int = 15
    centers: str = "update"
    alpha: float = 1.0
    init_centers: str = "none"
    normalize_input: bool = False
    update_centers_first: bool = False
    start_step: int = 0

    @property
    def active(self) -> bool:
        """SFT is on (the one rule: ``dmlkit.methods.sft`` and ``config_differences`` read it)."""
        return self.name is not None

    def __post_init__(self) -> None:
        self._check_choices()
        self._check_numbers()
        for key in ("normalize_input", "update_centers_first"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{_KEY}.{key} must be true or false, got {getattr(self, key)!r}")
        if self.init_centers == "data" and self.centers == "random":
            raise ValueError(
                f"{_KEY}.init_centers: data starts the centres at the class means, but {_KEY}.centers: random keeps "
                f"fixed random centres (Table 6): set {_KEY}.centers: update (or pick), or {_KEY}.init_centers: none"
            )
        if self.active and canonical_transform_name(self.name) == "sft_d" and not self.normalize_input:
            raise ValueError(  # the SFT-d rule, checked here only
                f"{_KEY}.name: sft_d translates before the L2 normalisation and re-projects (Sec. 3.4, Proposition 2): "
                f"set {_KEY}.normalize_input: true and model.normalize: none (FeatureGenerator: normalize_input=True, "
                "fed the embeddings before their normalisation)"
            )

    def _check_choices(self) -> None:
        if self.name is not None:
            try:
                canonical_transform_name(self.name)
            except ValueError:
                raise ValueError(
                    f"{_KEY}.name must be null (no augmentation) or one of {AUGMENT_TRANSFORMS} (the transform), "
                    f"got {self.name!r}"
                ) from None
        for key, valid in (
            ("scheme", SCHEMES),
            ("target", TARGET_POLICIES),
            ("score", SCORES),
            ("centers", CENTER_MODES),
            ("init_centers", CENTER_INITS),
        ):
            value = getattr(self, key)
            if not isinstance(value, str) or value not in valid:
                raise ValueError(f"{_KEY}.{key} must be one of {valid}, got {value!r}")

    def _check_numbers(self) -> None:
        check_real(f"{_KEY}.lam", self.lam, 0, hint="the paper uses 0.2")
        check_int(f"{_KEY}.start_step", self.start_step, 0, hint="steps before the augmentation starts")
        check_int(f"{_KEY}.tail_threshold", self.tail_threshold, 1, hint="samples per class")
        check_real(f"{_KEY}.alpha", self.alpha, 0, 1, low_open=True, hint="Eq. 9 step size; 1 is Eq. 9 as written")
