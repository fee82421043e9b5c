"""The token data of the synthetic GSP study (thesis Sec. 5.3.1): samples as bags of class and background tokens.

There are ``num_classes`` classes, each with ``class_tokens`` tokens of its own,
and ``background_tokens`` tokens shared by all classes. A sample of class ``c``
is a bag of ``tokens_per_sample`` token ids: a class fraction
``mu~ ~ N(class_fraction_mean, class_fraction_std)`` (clipped to [0, 1]) is drawn,
``round(mu~ * n)`` tokens are drawn with replacement from the class' tokens and
the rest from the background tokens (the thesis' example: ``mu~ = 0.4`` gives 20
class and 30 background tokens out of 50).

Token ids index one table: class ``c`` owns ids ``c*K .. c*K + K-1`` (``K =
class_tokens``) and the background tokens follow, ids ``C*K ..``. The token
vectors themselves are trainable parameters of the study's model, so this
module only draws ids; every draw comes from a ``torch.Generator``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from dmlkit.validation import is_int

__all__ = ["TokenSpec", "balanced_labels", "sample_token_bags"]


@dataclass(frozen=True)
class TokenSpec:
    """Sizes of the synthetic token problem (defaults: Sec. 5.3.1 of the thesis)."""

    num_classes: int = 16
    class_tokens: int = 4
    background_tokens: int = 4
    tokens_per_sample: int = 50
    class_fraction_mean: float = 0.5
    class_fraction_std: float = 0.1

    def __post_init__(self) -> None:
        for name in ("num_classes", "class_tokens", "background_tokens", "tokens_per_sample"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ValueError(f"TokenSpec.{name} must be a positive int, got {value!r}")
        if not 0.0 <= self.class_fraction_mean <= 1.0 or self.class_fraction_std < 0:
            raise ValueError("TokenSpec.class_fraction_mean must lie in [0, 1] and class_fraction_std be >= 0")

    @property
    def num_tokens(self) -> int:
        """Rows of the token table: all class tokens, then the background tokens."""
        return self.num_classes * self.class_tokens + self.background_tokens

    def is_background(self, token_ids: torch.Tensor) -> torch.Tensor:
        """True where a token id is a shared background token."""
        return token_ids >= self.num_classes * self.class_tokens


def balanced_labels(num_classes: int, per_class: int) -> torch.Tensor:
    """``per_class`` labels of each class, class by class: ``(num_classes * per_class,)``."""
    return torch.arange(num_classes).repeat_interleave(per_class)


def sample_token_bags(
    spec: TokenSpec, labels: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``(N, tokens_per_sample)`` for samples of ``labels (N,)`` and their class fractions ``(N,)``.

    Sample ``i`` holds ``round(mu~_i * n)`` tokens of class ``labels[i]`` (drawn
    with replacement) followed by background tokens.
    """
    if labels.ndim != 1 or labels.dtype != torch.long:
        raise ValueError("labels must be a 1-d LongTensor of class ids")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= spec.num_classes):
        raise ValueError(f"labels must lie in [0, {spec.num_classes})")
    n, k = spec.tokens_per_sample, spec.class_tokens
    frac = spec.class_fraction_mean + spec.class_fraction_std * torch.randn(labels.numel(), generator=generator)
    frac = frac.clamp(0.0, 1.0)
    n_class = torch.round(frac * n).long()  # (N,)
    own = labels[:, None] * k + torch.randint(0, k, (labels.numel(), n), generator=generator)
    background = spec.num_classes * k + torch.randint(
        0, spec.background_tokens, (labels.numel(), n), generator=generator
    )
    position = torch.arange(n)[None, :]
    return torch.where(position < n_class[:, None], own, background), frac
