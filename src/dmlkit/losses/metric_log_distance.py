"""The coordinate distance of CE'' (classification-baseline supplement, Example) and its metric condition.

``d(u, v) = -log(1 + a - b |u - v|^p) + log(1 + a)`` on [0, 1]; summed over the
``c`` class outputs it is CE'' (:class:`~dmlkit.losses.metric_cross_entropy.MetricCrossEntropy`,
``kind="metric"``).  It is a metric iff ``b / (1 + a) <= 2^(p+1) - 2^(2p)``
(:func:`metric_condition_bound`), which needs ``0 < p < 1``; the derivation is
in docs/methods/weak_metric_ce.md.  ``t^p`` with ``p < 1`` has an infinite
derivative at ``t = 0``: the value is exact, the gradient is taken only where
``t > 1e-12``.
"""

from __future__ import annotations

import torch

__all__ = ["MetricLogDistance", "metric_condition_bound"]

_POW_GRAD_MIN = 1e-12  # below this |u - v|, t**p (p < 1) is used without gradient


def _safe_pow(t: torch.Tensor, p: float) -> torch.Tensor:
    """``t ** p`` for ``t >= 0``: exact value, gradient only where ``t > 1e-12`` (finite for p < 1)."""
    big = t > _POW_GRAD_MIN
    t_safe = torch.where(big, t, torch.ones_like(t))
    return torch.where(big, t_safe**p, t.detach() ** p)


def metric_condition_bound(p: float) -> float:
    """Right side of the Example's condition: CE'' is a metric iff ``b / (1 + a) <= 2^(p+1) - 2^(2p)``."""
    return 2.0 ** (p + 1) - 2.0 ** (2 * p)


class MetricLogDistance:
    """CE'' coordinate distance ``d(u, v) = -log(1 + a - b |u - v|^p) + log(1 + a)`` (classification-baseline
    supplement, Example).

    Computed as ``-log1p(-k |u - v|^p)`` with ``k = b / (1 + a)``.  Domain (always
    enforced): ``a > -1``, ``b > 0``, ``p > 0``, ``1 + a - b > 0``.  It is a metric
    iff ``k <= 2^(p+1) - 2^(2p)``; ``is_metric`` records whether that holds.  It is
    always a weak metric with uniform points {0, 1} (the middle point is an end of
    [0, 1]).
    """

    is_weak_metric = True

    def __init__(self, a: float = 0.0, b: float = 0.8, p: float = 0.5) -> None:
        if not a > -1.0:
            raise ValueError(f"CE'' needs a > -1 (log(1 + a) must exist), got a={a}")
        if not b > 0.0:
            raise ValueError(f"CE'' needs b > 0 (otherwise d <= 0 is not a distance), got b={b}")
        if not p > 0.0:
            raise ValueError(f"CE'' needs p > 0, got p={p}")
        if not 1.0 + a - b > 0.0:
            raise ValueError(
                f"CE'' needs 1 + a - b > 0 so that log(1 + a - b|x - y|^p) exists on [0, 1], got a={a}, b={b}"
            )
        self.a, self.b, self.p = float(a), float(b), float(p)
        self.k = self.b / (1.0 + self.a)
        self.is_metric = self.k <= metric_condition_bound(self.p) + 1e-12

    def __call__(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return -torch.log1p(-self.k * _safe_pow((u - v).abs(), self.p))

    def __repr__(self) -> str:
        return f"MetricLogDistance(a={self.a}, b={self.b}, p={self.p})"
