"""Did GSP select anything? The entropy of its pooling weights.

GSP pools with the weights ``w_j = (1/n - rho_j) / mu`` of Eq. 5.2.1 (``sum_j w_j = 1``, ``w_j >= 0``).
Their entropy ``H(w) = -sum_j w_j log w_j`` is ``log n`` for GAP (uniform weights) and
``log(mu n)`` when exactly a fraction ``mu`` of the features is kept with equal weights, its lowest value at
convergence since each weight is at most ``1/(mu n)`` (the
hard top-k limit of (P2), large ``eps``); ``exp(H)`` is the effective number of pooled
features. With the thesis' cost normalisation and eps 0.5 to 5 an untrained GSP layer is close
to ``log n``: only training that spreads the costs makes it select.
"""

from __future__ import annotations

import math

import torch

__all__ = ["gsp_pooling_weights", "weight_entropy", "weight_summary"]


def gsp_pooling_weights(rho: torch.Tensor, mu: float) -> torch.Tensor:
    """``w_j = (1/n - rho_j) / mu`` (Eq. 5.2.1) from the residuals ``rho (B, n)``: ``(B, n)``, rows sum to 1."""
    n = rho.shape[-1]
    return (1.0 / n - rho) / float(mu)


def weight_entropy(weights: torch.Tensor) -> torch.Tensor:
    """``-sum_j w_j log w_j`` per row of ``weights (B, n)`` (negative round-off clamped to 0), in nats: ``(B,)``."""
    w = weights.clamp(min=0.0)
    return -(w * torch.log(w.clamp(min=torch.finfo(w.dtype).tiny))).sum(dim=-1)


def weight_summary(entropy: torch.Tensor, n: int, mu: float) -> dict[str, float]:
    """Batch means: ``entropy``, ``effective_features = exp(H)``, and the reference values for ``n`` features:
    ``entropy_gap = log n`` and ``entropy_topk = log(mu n)``."""
    h = float(entropy.mean())
    return {
        "entropy": h,
        "effective_features": float(entropy.exp().mean()),
        "features": float(n),
        "entropy_gap": math.log(n),
        "entropy_topk": math.log(max(float(mu) * n, 1.0)),
    }
