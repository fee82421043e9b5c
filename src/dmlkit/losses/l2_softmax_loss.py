"""L2-constrained softmax loss (Ranjan, Castillo, Chellappa 2017, "L2-Face"), used by the SFT paper's face experiments.

The feature is L2-normalised and scaled to a fixed radius ``alpha`` before an
ordinary softmax classifier::

    loss = CE( W^T (alpha * x / ||x||) + b, y )

PML has no such loss; normalized softmax also normalises the class weights and
CosFace/ArcFace add margins, which this loss does not. Ranjan et al. give the
lower bound ``alpha_low = log(p (C - 2) / (1 - p))`` for a target class
probability ``p``; ``alpha = 16`` (their choice for face data) is the default,
and ``learn_alpha=True`` makes it a trainable scalar, as in their second
variant. For SFT, the augmentation acts on the features before this classifier
(``FeatureAugmentedLoss`` wraps the loss).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import BaseMetricLossFunction
from pytorch_metric_learning.losses.mixins import WeightRegularizerMixin
from pytorch_metric_learning.utils import common_functions as c_f
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from dmlkit.losses.registry import register_loss
from dmlkit.validation import is_int


class L2SoftmaxLoss(WeightRegularizerMixin, BaseMetricLossFunction):
    """Softmax cross-entropy on ``alpha``-scaled L2-normalised features; PML signature, per-sample reduction."""

    def __init__(
        self, num_classes: int, embedding_size: int, alpha: float = 16.0, learn_alpha: bool = False, **kwargs: Any
    ) -> None:
        for name, value in (("num_classes", num_classes), ("embedding_size", embedding_size)):
            if not is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not alpha > 0:
            raise ValueError(f"alpha (the feature radius) must be > 0, got {alpha!r}")
        super().__init__(**kwargs)
        self.num_classes, self.embedding_size = num_classes, embedding_size
        self.W = torch.nn.Parameter(torch.empty(embedding_size, num_classes))
        self.weight_init_func(self.W)
        self.bias = torch.nn.Parameter(torch.zeros(num_classes))
        alpha_t = torch.tensor(float(alpha))
        if learn_alpha:
            self.alpha = torch.nn.Parameter(alpha_t)
        else:
            self.register_buffer("alpha", alpha_t)

    def logits(self, embeddings: torch.Tensor) -> torch.Tensor:
        x = F.normalize(embeddings, dim=1) * self.alpha.to(embeddings.dtype)
        return x @ self.W.to(embeddings.dtype) + self.bias.to(embeddings.dtype)

    def outputs(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Class probabilities ``(B, num_classes)``."""
        return torch.softmax(self.logits(embeddings), dim=1)

    def forward(self, embeddings, labels, indices_tuple=None, ref_emb=None, ref_labels=None):  # noqa: D102
        if ref_emb is not None or ref_labels is not None:
            raise ValueError("L2SoftmaxLoss is a classifier loss: ref_emb / ref_labels are not supported")
        return super().forward(embeddings, labels, indices_tuple)

    def compute_loss(self, embeddings, labels, indices_tuple, ref_emb, ref_labels):
        if embeddings.ndim != 2 or embeddings.shape[1] != self.embedding_size:
            raise ValueError(f"embeddings must have shape (B, {self.embedding_size}), got {tuple(embeddings.shape)}")
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= self.num_classes):
            raise ValueError(f"labels must lie in 0..{self.num_classes - 1} (num_classes={self.num_classes})")
        weights = lmu.convert_to_weights(indices_tuple, labels, dtype=embeddings.dtype)
        losses = F.cross_entropy(self.logits(embeddings), labels, reduction="none") * weights
        loss_dict = {
            "loss": {"losses": losses, "indices": c_f.torch_arange_from_size(embeddings), "reduction_type": "element"}
        }
        self.add_weight_regularization_to_loss_dict(loss_dict, self.W.t())
        return loss_dict


@register_loss("l2_softmax", builds=L2SoftmaxLoss)
def l2_softmax(
    num_classes: int, embedding_size: int, alpha: float = 16.0, learn_alpha: bool = False, **options: Any
) -> L2SoftmaxLoss:
    """L2-constrained softmax (L2-Face): features scaled to radius ``alpha`` (default 16, Ranjan et al.)."""
    return L2SoftmaxLoss(num_classes, embedding_size, alpha=alpha, learn_alpha=learn_alpha, **options)
