"""CE' / CE'' (classification-baseline paper) on a linear classifier head as a PML loss: ``ce_weak``, ``ce_metric``.

``MetricCrossEntropyLoss(num_classes, embedding_size, criterion)`` holds the
classifier (``W``, ``bias``) and applies a
:class:`~dmlkit.losses.metric_cross_entropy.MetricCrossEntropy` criterion, which
carries the loss's hyper-parameters (``kind``, ``a``, ``b``, ``p``,
``allow_non_metric``, ``eps``), to its class outputs.  The registered factories
build the criterion from the documented defaults::

    create_loss("ce_metric", num_classes=100, embedding_size=128, b=0.5)
    MetricCrossEntropyLoss(100, 128, MetricCrossEntropy("metric", b=0.5))    # the same loss
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pytorch_metric_learning.losses import BaseMetricLossFunction
from pytorch_metric_learning.losses.mixins import WeightRegularizerMixin
from pytorch_metric_learning.utils import common_functions as c_f
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from dmlkit.losses.metric_cross_entropy import MetricCrossEntropy
from dmlkit.losses.one_hot import one_hot_labels
from dmlkit.losses.registry import register_loss
from dmlkit.validation import is_int

__all__ = ["MetricCrossEntropyLoss", "ce_metric", "ce_weak"]


class MetricCrossEntropyLoss(WeightRegularizerMixin, BaseMetricLossFunction):
    """CE' / CE'' on a linear classifier head, as a PML loss: ``loss(embeddings, labels, indices_tuple)``.

    ``logits = embeddings @ W + bias`` (``W``: ``(embedding_size, num_classes)``,
    PML's weight init, by default normal; ``bias`` zero), outputs
    ``softmax(logits)`` or ``sigmoid(logits)`` in [0, 1], loss per sample
    ``criterion.distance(outputs, onehot(label))`` (default criterion:
    ``MetricCrossEntropy()``, i.e. CE' with ``eps = 1e-7``), weighted by a miner's
    ``indices_tuple`` as PML's classification losses do (``convert_to_weights``),
    reduced by the reducer (default: mean).  ``W`` and ``bias`` are trainable (the
    trainer's ``loss_lr`` applies).  ``ref_emb`` is not supported (``ValueError``).

    For CE' the value is computed from the logits in log space:
    ``-log x_y - sum_{i != y} log(1 - x_i)`` with ``log x = log_softmax`` /
    ``logsigmoid(z)`` and ``log(1 - x) = logsigmoid(-z)`` (sigmoid) or
    ``log1p(-exp(log_softmax))`` clamped at ``log(eps)`` (softmax).  It equals
    ``criterion.distance`` wherever no clamp is active, and keeps gradients for
    confidently wrong samples, where ``1 - |x - y| < eps``.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_size: int,
        criterion: MetricCrossEntropy | None = None,
        output: Literal["softmax", "sigmoid"] = "softmax",
        **kwargs: Any,
    ) -> None:
        if output not in ("softmax", "sigmoid"):
            raise ValueError(f"output must be 'softmax' or 'sigmoid', got {output!r}")
        for name, value in (("num_classes", num_classes), ("embedding_size", embedding_size)):
            if not is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if criterion is None:
            criterion = MetricCrossEntropy()
        if not isinstance(criterion, MetricCrossEntropy):
            raise ValueError(
                f"criterion must be a MetricCrossEntropy, e.g. MetricCrossEntropy('metric', b=0.5); got {criterion!r}"
            )
        super().__init__(**kwargs)
        self.criterion = criterion
        self.num_classes, self.embedding_size = num_classes, embedding_size
        self.output = output
        self.W = torch.nn.Parameter(torch.empty(embedding_size, num_classes))
        self.weight_init_func(self.W)
        self.bias = torch.nn.Parameter(torch.zeros(num_classes))
        self.add_to_recordable_attributes(list_of_names=["num_classes", "embedding_size"], is_stat=False)

    @property
    def kind(self) -> str:
        """``"weak"`` (CE') or ``"metric"`` (CE''), the criterion's kind."""
        return self.criterion.kind

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
        onehot = one_hot_labels(labels, self.num_classes, embeddings.dtype)
        if self.kind == "weak":
            return self._weak_from_logits(self.logits(embeddings), onehot)
        return self.criterion.d(self.outputs(embeddings), onehot).sum(dim=1)

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


def _no_criterion(name: str, options: dict[str, Any]) -> None:
    if "criterion" in options:
        raise ValueError(
            f"loss '{name}' builds its criterion from its own parameters; pass those, "
            "or build MetricCrossEntropyLoss(num_classes, embedding_size, criterion) directly"
        )


@register_loss("ce_weak", builds=MetricCrossEntropyLoss)
def ce_weak(
    num_classes: int, embedding_size: int, output: str = "softmax", eps: float = 1e-7, **options: Any
) -> MetricCrossEntropyLoss:
    """CE' weak-metric classification loss (the paper's Example): ``sum_i -log(1 - |x_i - y_i|)`` on a linear head.

    Defaults: ``output = "softmax"`` (class outputs), ``eps = 1e-7`` (clamp of
    ``1 - |x - y|``, so ``M = -log eps``).  No hyper-parameter is given in the
    seed.  See :class:`MetricCrossEntropyLoss`.
    """
    _no_criterion("ce_weak", options)
    return MetricCrossEntropyLoss(num_classes, embedding_size, MetricCrossEntropy("weak", eps=eps), output, **options)


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
    """CE'' metric classification loss (the paper's Example): ``sum_i -log(1 + a - b|x_i - y_i|^p) + log(1 + a)``.

    Defaults ``a = 0, b = 0.8, p = 0.5`` (not given by the seed; chosen inside the
    metric condition ``b / (1 + a) = 0.8 <= 2^(p+1) - 2^(2p) = 0.828``, giving a
    label distance ``2M = 2 log 5``); ``output = "softmax"``.  Parameters outside
    the condition raise ``ValueError`` unless ``allow_non_metric=True``.
    """
    _no_criterion("ce_metric", options)
    criterion = MetricCrossEntropy("metric", a=a, b=b, p=p, allow_non_metric=allow_non_metric)
    return MetricCrossEntropyLoss(num_classes, embedding_size, criterion, output, **options)
