"""GSP + GMP: generalized sum pooling plus global max pooling (thesis Sec. 5.3.4.1).

The thesis evaluates "our method with GMP (GAP+GMP) in CUB dataset to show that per channel
selection is orthogonal to our approach": as GAP+GMP adds the channel-wise maximum to the
average, GSP+GMP adds it to the GSP-pooled vector,

    ``g = sum_j w_j f_j + max_j f_j``   (``w`` the GSP weights of Eq. 5.2.1, max per channel).

Both terms pool the same local features ``f_j`` (after the 1x1 local embedding when the model has
one). The author's code (TF ``GeneralizedSumPooling`` with ``augment_max_pool``) takes the maximum
of the backbone map *before* its bias-free 1x1 convolution and projects it,
``W max_j x_j + sum_j w_j W x_j``; a 1x1 convolution does not commute with the maximum, so the two
differ whenever a local projection is used (they agree without one).
"""

from __future__ import annotations

import torch

from dmlkit.pooling.gsp import GSP, generalized_sum_pool
from dmlkit.pooling.registry import register_pooling

__all__ = ["GSPGMP", "gsp_gmp"]


def gsp_gmp(
    features: torch.Tensor, prototypes: torch.Tensor, mu: float = 0.3, eps: float = 5.0, iters: int = 100
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, n, d), (m, d) -> (GSP(f) + max_j f_j (B, d), plan (B, m, n))``."""
    pooled, plan = generalized_sum_pool(features, prototypes, mu, eps, iters)
    return pooled + features.amax(dim=1), plan


@register_pooling("gsp_gmp")
class GSPGMP(GSP):
    """GSP + GMP on feature maps ``(B, dim, h, w) -> (B, dim)``; the parameters are ``GSP``'s.

    During a k-centre warm-up (``init="kcenter"``) the GSP part is GAP, so the layer is GAP + GMP.
    """

    def forward_with_plan(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pooled, plan = super().forward_with_plan(x)
        return pooled + x.amax(dim=(-2, -1)), plan  # x was checked to be (B, dim, h, w) by GSP
