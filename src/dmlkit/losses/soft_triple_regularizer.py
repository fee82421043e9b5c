"""SoftTriple's centre regulariser with a bounded gradient where two centres of a class meet.

SoftTriple (Qian et al., ICCV 2019, Eq. 13) merges redundant centres of a class with

    R = sum_j sum_{t < s} sqrt(2 - 2 <w_j^t, w_j^s>) / (C K (K - 1)),

on unit centres (C classes, K centres each). The square root's derivative is
unbounded as two centres meet -- exactly where the regulariser drives them --
so PML's ``SparseCentersRegularizer`` turns the loss NaN once centres merge
(seen after about 250 steps on glyphs, 4 centres per class). Here each term is
``sqrt(2 - 2 s + eps) - sqrt(eps)``: equal to Eq. 13 up to O(sqrt(eps)), zero for
merged centres, with the derivative in ``s`` bounded by ``1 / sqrt(eps)``.
A PML regulariser: pass it as SoftTriple's ``weight_regularizer``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from pytorch_metric_learning.distances import CosineSimilarity
from pytorch_metric_learning.reducers import DivisorReducer
from pytorch_metric_learning.regularizers import BaseRegularizer

__all__ = ["MergingCentersRegularizer"]


class MergingCentersRegularizer(BaseRegularizer):
    """Eq. 13 of SoftTriple over the columns of the ``(dim, C * K)`` centre matrix (``eps`` smooths the merge point)."""

    def __init__(self, num_classes: int, centers_per_class: int, eps: float = 1e-4, **kwargs):
        if centers_per_class < 2:
            raise ValueError(f"the centre regulariser needs centers_per_class >= 2, got {centers_per_class}")
        if eps <= 0:
            raise ValueError(f"eps must be > 0 (it bounds the gradient by 1/sqrt(eps)), got {eps}")
        super().__init__(**kwargs)
        self.num_classes, self.centers_per_class, self.eps = num_classes, centers_per_class, float(eps)

    def compute_loss(self, weights: torch.Tensor) -> dict:
        """``weights``: the centres as rows ``(C * K, dim)``, class-major (SoftTriple passes ``fc.t()``).

        Cosine similarities within each class only: O(C K^2 d) time and memory, not (C K)^2.
        """
        k = self.centers_per_class
        centres = F.normalize(weights.reshape(self.num_classes, k, -1), dim=-1)
        rows, cols = torch.triu_indices(k, k, offset=1, device=weights.device)
        similarities = (centres @ centres.transpose(1, 2))[:, rows, cols].reshape(-1).clamp(max=1.0)
        terms = torch.sqrt(2.0 - 2.0 * similarities + self.eps) - math.sqrt(self.eps)
        return {
            "loss": {
                "losses": terms,
                "indices": torch.arange(terms.numel(), device=terms.device),
                "reduction_type": "element",
                "divisor": 2 * terms.numel(),
            }
        }

    def get_default_distance(self) -> CosineSimilarity:
        return CosineSimilarity()  # (the similarities are computed per class above)

    def get_default_reducer(self) -> DivisorReducer:
        return DivisorReducer()
