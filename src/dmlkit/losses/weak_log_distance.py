"""The coordinate distance of CE' (classification-baseline supplement, Example): a weak metric on [0, 1].

``d(u, v) = -log(max(1 - |u - v|, eps))``: summed over the ``c`` class outputs it
is CE' (:class:`~dmlkit.losses.metric_cross_entropy.MetricCrossEntropy`,
``kind="weak"``).  The triangle inequality holds whenever the middle point is 0
or 1 (a weak metric with uniform points {0, 1}), not in general; the clamp at
``eps`` keeps ``M = d(0, 1) = -log eps`` finite and keeps that inequality.  Why,
in docs/methods/weak_metric_ce.md.
"""

from __future__ import annotations

import torch

__all__ = ["WeakLogDistance"]


class WeakLogDistance:
    """CE' coordinate distance ``d(u, v) = -log(max(1 - |u - v|, eps))`` (weak metric, uniform points {0, 1})."""

    is_metric = False  # the triangle inequality fails through a middle point inside (0, 1)
    is_weak_metric = True  # it holds when the middle point is 0 or 1

    def __init__(self, eps: float = 1e-7) -> None:
        if not 0.0 < eps < 1.0:
            raise ValueError(f"eps must lie in (0, 1), got {eps}")
        self.eps = float(eps)

    def __call__(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return -torch.log(torch.clamp(1.0 - (u - v).abs(), min=self.eps))

    def __repr__(self) -> str:
        return f"WeakLogDistance(eps={self.eps})"
