"""Weak-metric and metric classification losses (seed 002, "How Classification Baseline Works for DML").

The supplement of seed 002 studies classification losses of the form (Lemmas 1-2)::

    L_m(x, y) = F( sum_{i=1..c} d(x_i, y_i) )          x, y in [0, 1]^c

between a classifier output ``x`` and a label vector ``y``, and shows that when
``L_m`` is a (weak) metric, a small training loss bounds the distances between
outputs of the same class from above and between outputs of different classes
from below (Lemmas 3-4).  This file provides

* the family itself, with ``d`` and ``F`` pluggable: coordinate distances
  :class:`AbsDifference`, :class:`WeakLogDistance` (CE'),
  :class:`MetricLogDistance` (CE''); outer functions :func:`identity`,
  :class:`LogOnePlus`, :class:`ConcavePower`; the combination
  :class:`CoordinateSumDistance` and the plain function :func:`lm_distance`;
* :class:`MetricCrossEntropy`, the two losses of the supplement's Example,
  ``kind="weak"`` (CE') and ``kind="metric"`` (CE''), with parameter checks;
* :class:`MetricCrossEntropyLoss`, a PML loss (``BaseMetricLossFunction``)
  holding a linear classifier head, registered as ``ce_weak`` and ``ce_metric``;
* :func:`metric_bounds`, the diagnostics of Lemmas 3-4.

Our reading of the supplement (its formulas are garbled by PDF extraction)
------------------------------------------------------------------------------
Definitions.  A *semi-metric* is non-negative, symmetric and zero exactly on
the diagonal.  A *metric* also satisfies the triangle inequality
``L(x, z) <= L(x, y) + L(y, z)`` for every ``y``.  A *weak metric with uniform
point(s) U* (here U = the label vectors, i.e. ``{0, 1}^c``, which includes the
one-hot labels) is a semi-metric satisfying the triangle inequality whenever the
middle point is in U: ``L(x, z) <= L(x, l) + L(l, z)`` for all ``x, z`` and all
``l`` in U.  That is exactly the form Lemma 3 uses (going through the label).

Lemma 1.  With ``M = d(0, 1)``, two different one-hot labels differ in two
coordinates (one ``(1, 0)``, one ``(0, 1)``) and agree (``d(0,0) = d(1,1) = 0``)
in ``c - 2``, so ``L_m(l_a, l_b) = F(d(0,1) + d(1,0) + (c-2) d(0,0)) = F(2M)``.

Lemma 2.  "F is a non-convex function" reads as: F is *concave* (``F'' <= 0``
in the proof), and the proof also uses ``F(0) = 0``, F non-decreasing (to pass
the coordinate-wise triangle inequality through F) and ``F(t) > 0`` for
``t > 0`` (identity of indiscernibles).  Under these, concavity with
``F(0) = 0`` gives subadditivity ``F(a + b) <= F(a) + F(b)``, so: d a metric on
[0, 1] => L_m a metric on [0, 1]^c, and d a weak metric with uniform points
{0, 1} => L_m a weak metric with uniform points {0, 1}^c.

Lemma 3.  With ``eps = sup_samples L_m(f(a), l(a))`` (the worst training loss),
two outputs ``a, b`` of the same label ``l``: ``L_m(a, b) <= L_m(a, l) +
L_m(l, b) <= 2 eps``; needs only the weak-metric triangle inequality.

Lemma 4.  Two outputs of different labels ``l_a != l_b``:
``F(2M) = L_m(l_a, l_b) <= L_m(l_a, a) + L_m(a, b) + L_m(b, l_b)`` so
``L_m(a, b) >= F(2M) - 2 eps``; the middle points are outputs, so this needs
the full metric.

Example.  ``CE'(x, y) = sum_i -log(1 - |x_i - y_i|)`` (d_weak, F = identity) is
a weak metric with the label as uniform point: per coordinate with ``y_i = 0``
the inequality ``-log(1-|x-z|) <= -log(1-|x|) - log(1-|z|)`` is
``|x - z| <= |x| + |z| - |x||z|``, true on [0, 1] since
``|x - z| <= max(x, z) <= x + z - xz``; ``y_i = 1`` is the same with
``1 - x, 1 - z``.  It is not a metric: ``x, y, z = 0, 1/2, 1`` gives
``d(0, 1) = inf > 2 log 2``.  Against a one-hot label, CE' is the sum of the
binary cross-entropies of the c outputs.

``CE''(x, y) = sum_i [ -log(1 + a - b |x_i - y_i|^p) + log(1 + a) ]``.  Writing
``k = b / (1 + a)`` and ``t = |x_i - y_i|``, ``d(t) = -log(1 - k t^p)``: only
``k`` and ``p`` matter.  Domain: ``a > -1`` (``log(1 + a)``), ``b > 0``
(otherwise ``d <= 0``), ``p > 0`` and ``1 + a - b > 0`` (the argument of the log
is ``>= 1 + a - b`` on [0, 1]; equivalently ``k < 1``).  The triangle
inequality per coordinate is ``|x-z|^p <= |x-y|^p + |y-z|^p - k |x-y|^p |y-z|^p``.
(i) y between x and z, ``u = |x-y|, v = |y-z|, u + v <= 1``: the worst case is
``u = v = 1/2`` (``(u^p + v^p - (u+v)^p) / (u^p v^p)`` decreases in ``u + v`` and,
at ``u + v = 1``, is smallest at ``u = v``; checked numerically in the tests),
which gives ``1 <= 2^(1-p) - k 4^(-p)``, i.e.::

    b / (1 + a)  <=  2^(p+1) - 2^(2p)

(ii) y outside: holds whenever ``k <= 1``.  So under the domain conditions
CE'' is a metric **iff** ``b / (1 + a) <= 2^(p+1) - 2^(2p)`` (the triple
0, 1/2, 1 breaks it otherwise).  The right side is positive only for
``0 < p < 1`` (it is 0 at p = 1, at most 1 as p -> 0), so a metric CE'' needs
``p < 1``, and the condition implies ``k < 1``.  Defaults ``a = 0, b = 0.8,
p = 0.5``: ``k = 0.8 <= 2^1.5 - 2 = 0.828``; ``M = -log(1 - k) = log 5``.

Numerical safety
----------------
* CE': ``d = -log(max(1 - |x - y|, eps))`` with ``eps = 1e-7`` by default, so
  ``M = -log(eps)`` (about 16.1) instead of infinity.  Clamping keeps the
  weak-metric inequality per coordinate: ``min(f_xz, C) <= min(f_xy + f_yz, C)
  <= min(f_xy, C) + min(f_yz, C)`` for non-negative f.  Clamped entries get no gradient; the training module
  therefore computes CE' from the logits in log space (see
  :class:`MetricCrossEntropyLoss`).
* CE'': ``t^p`` with ``p < 1`` has an infinite derivative at ``t = 0``; the value
  is exact, but the gradient is taken only where ``t > 1e-12`` (0 below).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Literal, Protocol

import torch
from pytorch_metric_learning.losses import BaseMetricLossFunction
from pytorch_metric_learning.losses.mixins import WeightRegularizerMixin
from pytorch_metric_learning.utils import common_functions as c_f
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from dmlkit.losses.registry import register_loss

__all__ = [
    "AbsDifference",
    "ConcavePower",
    "CoordinateDistance",
    "CoordinateSumDistance",
    "LogOnePlus",
    "MetricCrossEntropy",
    "MetricCrossEntropyLoss",
    "MetricLogDistance",
    "WeakLogDistance",
    "ce_metric",
    "check_one_hot",
    "ce_weak",
    "identity",
    "lm_distance",
    "metric_bounds",
    "metric_condition_bound",
]

_POW_GRAD_MIN = 1e-12  # below this |x - y|, t**p (p < 1) is used without gradient


# --------------------------------------------------------------------------- coordinate distances d


class CoordinateDistance(Protocol):
    """``d(u, v)`` applied elementwise to tensors of values in [0, 1]."""

    is_metric: bool  # triangle inequality for every middle point in [0, 1]
    is_weak_metric: bool  # triangle inequality when the middle point is 0 or 1

    def __call__(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...


class AbsDifference:
    """``d(u, v) = |u - v|`` (a metric; with F = identity, L_m is the L1 distance)."""

    is_metric = True
    is_weak_metric = True

    def __call__(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (u - v).abs()


class WeakLogDistance:
    """CE' coordinate distance ``d(u, v) = -log(max(1 - |u - v|, eps))`` (weak metric, uniform points {0, 1})."""

    is_metric = False
    is_weak_metric = True

    def __init__(self, eps: float = 1e-7) -> None:
        if not 0.0 < eps < 1.0:
            raise ValueError(f"eps must lie in (0, 1), got {eps}")
        self.eps = float(eps)

    def __call__(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return -torch.log(torch.clamp(1.0 - (u - v).abs(), min=self.eps))

    def __repr__(self) -> str:
        return f"WeakLogDistance(eps={self.eps})"


def _safe_pow(t: torch.Tensor, p: float) -> torch.Tensor:
    """``t ** p`` for ``t >= 0``: exact value, gradient only where ``t > 1e-12`` (finite for p < 1)."""
    big = t > _POW_GRAD_MIN
    t_safe = torch.where(big, t, torch.ones_like(t))
    return torch.where(big, t_safe**p, t.detach() ** p)


def metric_condition_bound(p: float) -> float:
    """Right side of the Example's condition: CE'' is a metric iff ``b / (1 + a) <= 2^(p+1) - 2^(2p)``."""
    return 2.0 ** (p + 1) - 2.0 ** (2 * p)


class MetricLogDistance:
    """CE'' coordinate distance ``d(u, v) = -log(1 + a - b |u - v|^p) + log(1 + a)`` (Example of seed 002).

    Computed as ``-log1p(-k |u - v|^p)`` with ``k = b / (1 + a)``.  Domain (always
    enforced): ``a > -1``, ``b > 0``, ``p > 0``, ``1 + a - b > 0``.  It is a metric
    iff ``k <= 2^(p+1) - 2^(2p)`` (see the module docstring); ``is_metric``
    records whether that holds.  It is always a weak metric with uniform points
    {0, 1} (case (ii) of the proof: the middle point is an end of [0, 1]).
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


# --------------------------------------------------------------------------- outer functions F


def identity(t: torch.Tensor) -> torch.Tensor:
    """``F(t) = t`` (the F of CE' and CE'')."""
    return t


class LogOnePlus:
    """``F(t) = log(1 + t / scale)``: concave, increasing, ``F(0) = 0`` (keeps a (weak) metric, Lemma 2)."""

    def __init__(self, scale: float = 1.0) -> None:
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        self.scale = float(scale)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return torch.log1p(t / self.scale)


class ConcavePower:
    """``F(t) = t^q`` with ``0 < q <= 1``: concave, increasing, ``F(0) = 0`` (keeps a (weak) metric, Lemma 2)."""

    def __init__(self, q: float = 0.5) -> None:
        if not 0.0 < q <= 1.0:
            raise ValueError(f"q must lie in (0, 1] for F(t) = t^q to be concave, got {q}")
        self.q = float(q)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return _safe_pow(t, self.q)


# --------------------------------------------------------------------------- the family L_m


def _check_unit(name: str, x: torch.Tensor) -> None:
    if not torch.is_floating_point(x):
        raise ValueError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.numel() and (torch.isnan(x).any() or x.min() < 0 or x.max() > 1):
        raise ValueError(f"{name} must lie in [0, 1] (apply softmax or sigmoid to logits first)")


def lm_distance(
    x: torch.Tensor, y: torch.Tensor, d: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], F=identity
) -> torch.Tensor:
    """``L_m(x, y) = F(sum_i d(x_i, y_i))`` row-wise (Lemmas 1-2 of seed 002): ``(..., c) x (..., c) -> (...)``."""
    return F(d(x, y).sum(dim=-1))


class CoordinateSumDistance:
    """The family ``L_m(x, y) = F(sum_i d(x_i, y_i))`` on ``[0, 1]^c`` with pluggable ``d`` and ``F``.

    ``F`` must satisfy Lemma 2's conditions (concave, non-decreasing, ``F(0) = 0``,
    ``F > 0`` on ``t > 0``) for ``is_metric`` / ``is_weak_metric`` to carry over
    from ``d``; :func:`identity`, :class:`LogOnePlus`, :class:`ConcavePower` do.
    """

    def __init__(self, d: CoordinateDistance, F: Callable[[torch.Tensor], torch.Tensor] = identity) -> None:
        self.d = d
        self.F = F

    @property
    def is_metric(self) -> bool:
        return bool(getattr(self.d, "is_metric", False))

    @property
    def is_weak_metric(self) -> bool:
        return bool(getattr(self.d, "is_weak_metric", False))

    @property
    def M(self) -> float:
        """``M = d(0, 1)`` (Lemma 1)."""
        return float(self.d(torch.zeros((), dtype=torch.float64), torch.ones((), dtype=torch.float64)))

    @property
    def label_distance(self) -> float:
        """``F(2M)``: the distance between two different one-hot labels (Lemma 1)."""
        return float(self.F(torch.tensor(2.0 * self.M, dtype=torch.float64)))

    def distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Row-wise ``L_m``: ``(B, c) x (B, c) -> (B,)`` (any broadcastable shapes, last dim = classes)."""
        _check_unit("x", x)
        _check_unit("y", y)
        if x.shape[-1] != y.shape[-1]:
            raise ValueError(f"x and y must have the same number of classes, got {x.shape} and {y.shape}")
        return lm_distance(x, y, self.d, self.F)


# --------------------------------------------------------------------------- CE' and CE''


def _one_hot(labels: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    if labels.dtype.is_floating_point or labels.dtype == torch.bool or labels.dtype.is_complex:
        raise ValueError(f"labels must be an integer tensor of class indices, got {labels.dtype}")
    if labels.ndim != 1:
        raise ValueError(f"labels must have shape (B,), got {tuple(labels.shape)}")
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes - 1}], got [{int(labels.min())}, {int(labels.max())}]")
    return torch.nn.functional.one_hot(labels.long(), num_classes).to(dtype)


def check_one_hot(targets: torch.Tensor) -> None:
    """``ValueError`` unless every row of ``targets`` is a one-hot vector."""
    if not ((targets == 0) | (targets == 1)).all() or not (targets.sum(dim=-1) == 1).all():
        raise ValueError("targets must be one-hot rows (entries 0/1, exactly one 1 per row)")


class MetricCrossEntropy(CoordinateSumDistance):
    """CE' (``kind="weak"``) and CE'' (``kind="metric"``) of the Example of seed 002's supplement.

    * ``weak``: ``L(x, y) = sum_i -log(max(1 - |x_i - y_i|, eps))``; a weak metric
      with the labels as uniform points (``a``, ``b``, ``p`` are ignored).
    * ``metric``: ``L(x, y) = sum_i [-log(1 + a - b|x_i - y_i|^p) + log(1 + a)]``; a
      metric iff ``b / (1 + a) <= 2^(p+1) - 2^(2p)`` (needs ``0 < p < 1``).  Other
      parameters raise ``ValueError`` unless ``allow_non_metric=True``; the domain
      ``a > -1, b > 0, p > 0, 1 + a - b > 0`` is always required.

    ``distance(x, y)`` gives ``L`` row-wise; ``loss(outputs, labels)`` the mean of
    ``L(outputs, onehot(labels))``; ``loss.one_hot_loss(outputs, targets)`` the
    per-row values against given one-hot targets.
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
        if kind == "weak":
            d: CoordinateDistance = WeakLogDistance(eps)
        elif kind == "metric":
            d = MetricLogDistance(a, b, p)
            if not d.is_metric and not allow_non_metric:
                raise ValueError(
                    f"CE'' is a metric iff b / (1 + a) <= 2^(p+1) - 2^(2p); got b/(1+a) = {d.k:.6g} > "
                    f"{metric_condition_bound(p):.6g} for a={a}, b={b}, p={p} (it needs 0 < p < 1). "
                    "Lower b, raise a, or pass allow_non_metric=True."
                )
        else:
            raise ValueError(f"kind must be 'weak' or 'metric', got {kind!r}")
        super().__init__(d, identity)
        self.kind = kind

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
        return self.distance(outputs, _one_hot(labels, outputs.shape[1], outputs.dtype)).mean()

    def __repr__(self) -> str:
        return f"MetricCrossEntropy(kind={self.kind!r}, d={self.d!r})"


# --------------------------------------------------------------------------- training objective


class MetricCrossEntropyLoss(WeightRegularizerMixin, BaseMetricLossFunction):
    """CE' / CE'' on a linear classifier head, as a PML loss: ``loss(embeddings, labels, indices_tuple)``.

    ``logits = embeddings @ W + bias`` (``W``: ``(embedding_size, num_classes)``,
    PML's weight init, by default normal; ``bias`` zero), outputs
    ``softmax(logits)`` or ``sigmoid(logits)`` in [0, 1], loss per sample
    ``L(outputs, onehot(label))`` of :class:`MetricCrossEntropy`, weighted by a
    miner's ``indices_tuple`` as PML's classification losses do
    (``convert_to_weights``), reduced by the reducer (default: mean).  ``W`` and
    ``bias`` are trainable (the trainer's ``loss_lr`` applies).  ``ref_emb`` is not
    supported (``ValueError``).

    For ``kind="weak"`` the value is computed from the logits in log space:
    ``-log x_y - sum_{i != y} log(1 - x_i)`` with ``log x = log_softmax`` /
    ``logsigmoid(z)`` and ``log(1 - x) = logsigmoid(-z)`` (sigmoid) or
    ``log1p(-exp(log_softmax))`` clamped at ``log(eps)`` (softmax).  It equals
    ``MetricCrossEntropy("weak").distance`` wherever no clamp is active, and
    keeps gradients for confidently wrong samples, where ``1 - |x - y| < eps``.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_size: int,
        kind: Literal["weak", "metric"] = "weak",
        output: Literal["softmax", "sigmoid"] = "softmax",
        a: float = 0.0,
        b: float = 0.8,
        p: float = 0.5,
        allow_non_metric: bool = False,
        eps: float = 1e-7,
        **kwargs: Any,
    ) -> None:
        if output not in ("softmax", "sigmoid"):
            raise ValueError(f"output must be 'softmax' or 'sigmoid', got {output!r}")
        for name, value in (("num_classes", num_classes), ("embedding_size", embedding_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.criterion = MetricCrossEntropy(kind, a=a, b=b, p=p, allow_non_metric=allow_non_metric, eps=eps)
        super().__init__(**kwargs)
        self.num_classes, self.embedding_size = num_classes, embedding_size
        self.kind, self.output = kind, output
        self.W = torch.nn.Parameter(torch.empty(embedding_size, num_classes))
        self.weight_init_func(self.W)
        self.bias = torch.nn.Parameter(torch.zeros(num_classes))
        self.add_to_recordable_attributes(list_of_names=["num_classes", "embedding_size"], is_stat=False)

    def logits(self, embeddings: torch.Tensor) -> torch.Tensor:
        return embeddings @ self.W.to(embeddings.dtype) + self.bias.to(embeddings.dtype)

    def outputs(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Class outputs in [0, 1], ``(B, num_classes)``."""
        z = self.logits(embeddings)
        return torch.softmax(z, dim=1) if self.output == "softmax" else torch.sigmoid(z)

    def _weak_from_logits(self, z: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        if self.output == "sigmoid":
            log_x, log_1mx = torch.nn.functional.logsigmoid(z), torch.nn.functional.logsigmoid(-z)
        else:
            log_x = torch.log_softmax(z, dim=1)
            log_1mx = torch.log1p(-torch.exp(torch.clamp(log_x, max=math.log1p(-self.criterion.d.eps))))
        return -(onehot * log_x + (1 - onehot) * log_1mx).sum(dim=1)

    def per_sample(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Unweighted ``L(outputs, onehot(labels))`` per sample."""
        onehot = _one_hot(labels, self.num_classes, embeddings.dtype)
        if self.kind == "weak":
            return self._weak_from_logits(self.logits(embeddings), onehot)
        return lm_distance(self.outputs(embeddings), onehot, self.criterion.d, self.criterion.F)

    def forward(self, embeddings, labels, indices_tuple=None, ref_emb=None, ref_labels=None):  # noqa: D102
        if ref_emb is not None or ref_labels is not None:
            raise ValueError("MetricCrossEntropyLoss is a classifier loss: ref_emb / ref_labels are not supported")
        if labels is None:
            raise ValueError("MetricCrossEntropyLoss needs labels")
        return super().forward(embeddings, labels, indices_tuple)

    def compute_loss(self, embeddings, labels, indices_tuple, ref_emb, ref_labels):
        if embeddings.ndim != 2 or embeddings.shape[1] != self.embedding_size:
            raise ValueError(f"embeddings must have shape (B, {self.embedding_size}), got {tuple(embeddings.shape)}")
        weights = lmu.convert_to_weights(indices_tuple, labels, dtype=embeddings.dtype)
        losses = self.per_sample(embeddings, labels) * weights
        loss_dict = {
            "loss": {"losses": losses, "indices": c_f.torch_arange_from_size(embeddings), "reduction_type": "element"}
        }
        self.add_weight_regularization_to_loss_dict(loss_dict, self.W.t())
        return loss_dict


def _no_kind(name: str, options: dict[str, Any]) -> None:
    if "kind" in options:
        raise ValueError(f"loss '{name}' fixes kind; use 'ce_weak' or 'ce_metric' instead of passing kind")


@register_loss("ce_weak", builds=MetricCrossEntropyLoss)
def ce_weak(
    num_classes: int, embedding_size: int, output: str = "softmax", eps: float = 1e-7, **options: Any
) -> MetricCrossEntropyLoss:
    """CE' weak-metric classification loss (seed 002, Example): ``sum_i -log(1 - |x_i - y_i|)`` on a linear head.

    Defaults: ``output = "softmax"`` (class outputs), ``eps = 1e-7`` (clamp of
    ``1 - |x - y|``, so ``M = -log eps``).  No hyper-parameter is given in the
    seed.  See :class:`MetricCrossEntropyLoss`.
    """
    _no_kind("ce_weak", options)
    return MetricCrossEntropyLoss(num_classes, embedding_size, kind="weak", output=output, eps=eps, **options)


@register_loss("ce_metric", builds=MetricCrossEntropyLoss)
def ce_metric(
    num_classes: int,
    embedding_size: int,
    output: str = "softmax",
    a: float = 0.0,
    b: float = 0.8,
    p: float = 0.5,
    allow_non_metric: bool = False,
    **options: Any,
) -> MetricCrossEntropyLoss:
    """CE'' metric classification loss (seed 002, Example): ``sum_i -log(1 + a - b|x_i - y_i|^p) + log(1 + a)``.

    Defaults ``a = 0, b = 0.8, p = 0.5`` (not given by the seed; chosen inside the
    metric condition ``b / (1 + a) = 0.8 <= 2^(p+1) - 2^(2p) = 0.828``, giving a
    label distance ``2M = 2 log 5``); ``output = "softmax"``.  Parameters outside
    the condition raise ``ValueError`` unless ``allow_non_metric=True``.
    """
    _no_kind("ce_metric", options)
    return MetricCrossEntropyLoss(
        num_classes, embedding_size, kind="metric", output=output, a=a, b=b, p=p,
        allow_non_metric=allow_non_metric, **options,
    )  # fmt: skip


# --------------------------------------------------------------------------- Lemmas 3-4 diagnostics


@torch.no_grad()
def metric_bounds(
    outputs: torch.Tensor, labels: torch.Tensor, loss: CoordinateSumDistance | MetricCrossEntropyLoss, tol: float = 1e-6
) -> dict[str, Any]:
    """Check the bounds of Lemmas 3-4 of seed 002 on given class outputs.

    ``eps = max_n L_m(outputs_n, onehot(labels_n))`` (the sup of the training loss);
    Lemma 3: same-class pairs have ``L_m(a, b) <= 2 eps`` (needs a weak metric with
    the labels as uniform points, or a metric); Lemma 4: different-class pairs have
    ``L_m(a, b) >= F(2M) - 2 eps`` with ``M = d(0, 1)`` (needs a metric).  ``loss``
    is a :class:`MetricCrossEntropy` (or any :class:`CoordinateSumDistance`) or a
    :class:`MetricCrossEntropyLoss` (its criterion is used; pass its
    ``outputs(embeddings)``).  All ``N^2`` pairs are formed (``O(N^2 c)`` memory in
    row blocks; meant for diagnostics).

    Returns a dict: ``eps``, ``same_class_bound`` (2 eps), ``different_class_bound``
    (F(2M) - 2 eps), ``label_distance`` (F(2M)), ``max_same_class`` and
    ``min_different_class`` (None without such pairs), ``same_class_holds`` /
    ``different_class_holds`` (within ``tol``; True without pairs),
    ``same_class_guaranteed`` / ``different_class_guaranteed`` (whether the lemma
    applies to this loss).
    """
    crit = loss.criterion if isinstance(loss, MetricCrossEntropyLoss) else loss
    if outputs.ndim != 2:
        raise ValueError(f"outputs must have shape (N, c), got {tuple(outputs.shape)}")
    if labels.shape != outputs.shape[:1]:
        raise ValueError(f"labels must have shape ({outputs.shape[0]},), got {tuple(labels.shape)}")
    x = outputs.to(torch.float64)
    onehot = _one_hot(labels, x.shape[1], x.dtype)
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
