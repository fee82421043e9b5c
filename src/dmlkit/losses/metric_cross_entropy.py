"""CE' and CE'': the weak-metric and metric cross-entropies of the classification-baseline paper.

The paper: *How Classification Baseline Works for Deep Metric Learning: A Perspective of Metric Space*
(ACML 2024), its supplement.

The supplement writes a classification loss between class outputs ``x`` and a
label vector ``y`` in ``[0, 1]^c`` as ``L_m(x, y) = F(sum_i d(x_i, y_i))``
(Lemmas 1-2) and shows that when ``L_m`` is a (weak) metric, a small training
loss bounds same-class outputs together and (for a metric) different-class
outputs apart (Lemmas 3-4, checked on given outputs by :func:`metric_bounds`).
Its Example, implemented here, takes ``F = identity`` and

* ``kind="weak"``, CE': ``d`` = :class:`~dmlkit.losses.weak_log_distance.WeakLogDistance`,
  a weak metric with the labels as uniform points;
* ``kind="metric"``, CE'': ``d`` = :class:`~dmlkit.losses.metric_log_distance.MetricLogDistance`,
  a metric iff ``b / (1 + a) <= 2^(p+1) - 2^(2p)``.

This is the criterion on class outputs; :class:`~dmlkit.losses.metric_cross_entropy_loss.MetricCrossEntropyLoss`
puts it on a linear classifier head as a PML loss.  The proofs (our reading of
the supplement, whose formulas are garbled by PDF extraction) are in
docs/methods/weak_metric_ce.md.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch

from dmlkit.losses.metric_log_distance import MetricLogDistance, metric_condition_bound
from dmlkit.losses.one_hot import check_one_hot, one_hot_labels
from dmlkit.losses.weak_log_distance import WeakLogDistance

__all__ = ["MetricCrossEntropy", "metric_bounds"]


def _check_unit(name: str, x: torch.Tensor) -> None:
    if not torch.is_floating_point(x):
        raise ValueError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.numel() and (torch.isnan(x).any() or x.min() < 0 or x.max() > 1):
        raise ValueError(f"{name} must lie in [0, 1] (apply softmax or sigmoid to logits first)")


class MetricCrossEntropy:
    """CE' (``kind="weak"``) and CE'' (``kind="metric"``) of the Example of the classification-baseline supplement.

    * ``weak``: ``L(x, y) = sum_i -log(max(1 - |x_i - y_i|, eps))``; a weak metric
      with the labels as uniform points (``a``, ``b``, ``p`` are ignored).
    * ``metric``: ``L(x, y) = sum_i [-log(1 + a - b|x_i - y_i|^p) + log(1 + a)]``; a
      metric iff ``b / (1 + a) <= 2^(p+1) - 2^(2p)`` (needs ``0 < p < 1``).  Other
      parameters raise ``ValueError`` unless ``allow_non_metric=True``; the domain
      ``a > -1, b > 0, p > 0, 1 + a - b > 0`` is always required (``eps`` is ignored).

    ``distance(x, y)`` gives ``L`` row-wise; ``loss(outputs, labels)`` the mean of
    ``L(outputs, onehot(labels))``; ``loss.one_hot_loss(outputs, targets)`` the
    per-row values against given one-hot targets.  ``d`` is the coordinate
    distance, ``M = d(0, 1)`` and ``label_distance = 2M`` the distance between two
    different one-hot labels (Lemma 1 with ``F = identity``).
    """

    def __init__(
        self,
        kind: Literal["weak", "metric"] = "weak",
        a: float = 0.0,
        b: float = 0.8,
        p: float = 0.5,
        allow_non_metric: bool = False,
        eps: float = 1e-7,
    ) -> None:
        self.d: WeakLogDistance | MetricLogDistance
        if kind == "weak":
            self.d = WeakLogDistance(eps)
        elif kind == "metric":
            self.d = MetricLogDistance(a, b, p)
            if not self.d.is_metric and not allow_non_metric:
                raise ValueError(
                    f"CE'' is a metric iff b / (1 + a) <= 2^(p+1) - 2^(2p); got b/(1+a) = {self.d.k:.6g} > "
                    f"{metric_condition_bound(p):.6g} for a={a}, b={b}, p={p} (it needs 0 < p < 1). "
                    "Lower b, raise a, or pass allow_non_metric=True."
                )
        else:
            raise ValueError(f"kind must be 'weak' or 'metric', got {kind!r}")
        self.kind = kind

    @property
    def is_metric(self) -> bool:
        """Whether ``L`` satisfies the triangle inequality for every middle point (Lemma 4 applies)."""
        return bool(self.d.is_metric)

    @property
    def is_weak_metric(self) -> bool:
        """Whether it does for the label vectors as middle points (Lemma 3 applies)."""
        return bool(self.d.is_weak_metric)

    @property
    def M(self) -> float:
        """``M = d(0, 1)`` (Lemma 1)."""
        return float(self.d(torch.zeros((), dtype=torch.float64), torch.ones((), dtype=torch.float64)))

    @property
    def label_distance(self) -> float:
        """``L(l_a, l_b) = 2M`` for two different one-hot labels (Lemma 1, ``F = identity``)."""
        return 2.0 * self.M

    def distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Row-wise ``L = sum_i d(x_i, y_i)``: ``(B, c) x (B, c) -> (B,)`` (broadcastable, last dim = classes)."""
        _check_unit("x", x)
        _check_unit("y", y)
        if x.shape[-1] != y.shape[-1]:
            raise ValueError(f"x and y must have the same number of classes, got {x.shape} and {y.shape}")
        return self.d(x, y).sum(dim=-1)

    def one_hot_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``L(outputs, targets)`` per row, with one-hot ``targets`` (``ValueError`` otherwise)."""
        check_one_hot(targets)
        return self.distance(outputs, targets.to(outputs.dtype))

    def __call__(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean of ``L(outputs, onehot(labels))`` over the batch; outputs ``(B, c)`` in [0, 1]."""
        if outputs.ndim != 2:
            raise ValueError(f"outputs must have shape (B, c), got {tuple(outputs.shape)}")
        if labels.shape[:1] != outputs.shape[:1]:
            raise ValueError(f"labels {tuple(labels.shape)} must have one entry per row of outputs")
        return self.distance(outputs, one_hot_labels(labels, outputs.shape[1], outputs.dtype)).mean()

    def __repr__(self) -> str:
        return f"MetricCrossEntropy(kind={self.kind!r}, d={self.d!r})"


@torch.no_grad()
def metric_bounds(
    outputs: torch.Tensor, labels: torch.Tensor, loss: MetricCrossEntropy | torch.nn.Module, tol: float = 1e-6
) -> dict[str, Any]:
    """Check the bounds of Lemmas 3-4 of the classification-baseline paper on class outputs.

    ``eps = max_n L(outputs_n, onehot(labels_n))`` (the sup of the training loss);
    Lemma 3: same-class pairs have ``L(a, b) <= 2 eps`` (needs a weak metric with
    the labels as uniform points, or a metric); Lemma 4: different-class pairs have
    ``L(a, b) >= 2M - 2 eps`` with ``M = d(0, 1)`` (needs a metric).  ``loss`` is a
    :class:`MetricCrossEntropy` or a module holding one as ``loss.criterion`` (a
    ``MetricCrossEntropyLoss``: pass its ``outputs(embeddings)``).  All ``N^2``
    pairs are formed (``O(N^2 c)`` memory in row blocks; meant for diagnostics).

    Returns a dict: ``eps``, ``same_class_bound`` (2 eps), ``different_class_bound``
    (2M - 2 eps), ``label_distance`` (2M), ``max_same_class`` and
    ``min_different_class`` (None without such pairs), ``same_class_holds`` /
    ``different_class_holds`` (within ``tol``; True without pairs),
    ``same_class_guaranteed`` / ``different_class_guaranteed`` (whether the lemma
    applies to this loss).
    """
    crit = getattr(loss, "criterion", loss)
    if not isinstance(crit, MetricCrossEntropy):
        raise ValueError(f"loss must be a MetricCrossEntropy or a MetricCrossEntropyLoss, got {type(loss).__name__}")
    if outputs.ndim != 2:
        raise ValueError(f"outputs must have shape (N, c), got {tuple(outputs.shape)}")
    if labels.shape != outputs.shape[:1]:
        raise ValueError(f"labels must have shape ({outputs.shape[0]},), got {tuple(labels.shape)}")
    x = outputs.to(torch.float64)
    onehot = one_hot_labels(labels, x.shape[1], x.dtype)
    eps = float(crit.distance(x, onehot).max()) if len(x) else 0.0
    max_same, min_diff = -math.inf, math.inf
    labels = labels.reshape(-1)
    idx = torch.arange(len(x))
    block = max(1, min(256, 25_000_000 // max(1, len(x) * x.shape[1])))  # ~200 MB of float64 per block
    for start in range(0, len(x), block):
        rows = slice(start, start + block)
        dist = crit.distance(x[rows, None, :], x[None, :, :])  # (r, N)
        same = labels[rows, None] == labels[None, :]
        not_self = idx[rows, None] != idx[None, :]
        if (same & not_self).any():
            max_same = max(max_same, float(dist[same & not_self].max()))
        if (~same).any():
            min_diff = min(min_diff, float(dist[~same].min()))
    label_distance = crit.label_distance
    same_bound, diff_bound = 2 * eps, label_distance - 2 * eps
    return {
        "eps": eps,
        "same_class_bound": same_bound,
        "different_class_bound": diff_bound,
        "label_distance": label_distance,
        "max_same_class": None if max_same == -math.inf else max_same,
        "min_different_class": None if min_diff == math.inf else min_diff,
        "same_class_holds": max_same <= same_bound + tol * max(1.0, abs(same_bound)),
        "different_class_holds": min_diff >= diff_bound - tol * max(1.0, abs(diff_bound)),
        "same_class_guaranteed": crit.is_weak_metric or crit.is_metric,
        "different_class_guaranteed": crit.is_metric,
    }
