"""GAP as a prototype convex combination (PCC), thesis Chapter 4: histogram operator and Proposition 4.2.1.

Given local features ``X = [x_j]`` (``n`` per image) and prototypes ``V = [v_i]``:

* histogram operator (Definition 4.2.1, Eq. 4.2.5): the optimal transport of
  the uniform mass ``1/n`` of the features onto the prototypes with free
  prototype marginal ``p``; by Claim 4.2.1 (Eq. 4.2.6) its solution puts each
  feature's mass on its nearest prototype: ``p*_i = #{j : i = argmin_k ||v_k - x_j||} / n``;
* PCC embedding: ``sum_i p*_i v_i``, the convex combination of the prototypes
  (Sec. 4.3, Fig. 4.4); GAP is ``(1/n) sum_j x_j``;
* ``prototype_cover_delta``: ``delta = max_j min_i ||x_j - v_i||``, the covering radius
  of the features by the prototypes (the smallest ``delta`` for which ``V`` is a delta-cover);
  not ``dmlkit.proxies.covering_radius``, the per-class k-centre radius of Sec. 3.3.1.

Proposition 4.2.1 bounds the error ``||PCC - GAP||_2^2 <= delta`` for features
in the unit ball. The direct argument gives the stronger chain used as the
reported diagnostic:
``||PCC - GAP|| = ||(1/n) sum_j (v(x_j) - x_j)|| <= (1/n) sum_j ||v(x_j) - x_j|| <= delta``
(``v(x)`` the nearest prototype), hence also ``||PCC - GAP||^2 <= delta^2 <= delta``
when ``delta <= 1``. ``pcc_diagnostics`` reports all three quantities.
"""

from __future__ import annotations

import torch

__all__ = ["nearest_prototype", "pcc_diagnostics", "pcc_embedding", "prototype_cover_delta", "prototype_histogram"]


def _check(features: torch.Tensor, prototypes: torch.Tensor) -> None:
    if features.ndim != 3:
        raise ValueError(f"features must be (B, n, d) local features, got shape {tuple(features.shape)}")
    if prototypes.ndim != 2 or prototypes.shape[1] != features.shape[2] or prototypes.shape[0] < 1:
        raise ValueError(f"prototypes must be (m >= 1, d={features.shape[2]}), got shape {tuple(prototypes.shape)}")


def nearest_prototype(features: torch.Tensor, prototypes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Index ``(B, n)`` of each feature's nearest prototype and the distance ``(B, n)`` to it (ties: lowest index)."""
    _check(features, prototypes)
    d = torch.cdist(features, prototypes.unsqueeze(0).expand(features.shape[0], -1, -1))  # (B, n, m)
    dist, idx = d.min(dim=-1)
    return idx, dist


def prototype_histogram(features: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    """``p*`` of Eq. 4.2.5 by Claim 4.2.1: ``(B, n, d), (m, d) -> (B, m)``, mass ``1/n`` per nearest-prototype assignment."""
    idx, _ = nearest_prototype(features, prototypes)
    n = features.shape[1]
    hist = torch.zeros(features.shape[0], prototypes.shape[0], dtype=features.dtype, device=features.device)
    return hist.scatter_add_(1, idx, torch.full(idx.shape, 1.0 / n, dtype=features.dtype, device=features.device))


def pcc_embedding(features: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    """Prototype convex combination ``sum_i p*_i v_i`` (Sec. 4.3): ``(B, n, d) -> (B, d)``."""
    return prototype_histogram(features, prototypes) @ prototypes


def prototype_cover_delta(points: torch.Tensor, prototypes: torch.Tensor) -> float:
    """``max_x min_v ||x - v||`` over the rows of ``points (N, d)``: the delta of the delta-cover."""
    if points.ndim != 2:
        raise ValueError(f"points must be (N, d), got shape {tuple(points.shape)}")
    _, dist = nearest_prototype(points.unsqueeze(0), prototypes)
    return float(dist.max())


def pcc_diagnostics(features: torch.Tensor, prototypes: torch.Tensor) -> dict[str, float]:
    """Proposition 4.2.1 as numbers for a batch of images ``(B, n, d)``.

    Keys: ``delta`` (covering radius over all the features), ``mean_error`` /
    ``max_error`` of ``||PCC - GAP||_2`` over images, ``max_mean_nn_distance``
    (the per-image mean distance to the nearest prototype, the middle of the
    bound chain), ``max_error_over_delta``, ``max_squared_error`` and
    ``bound_holds`` (1.0 when ``max ||PCC - GAP||^2 <= delta``, as stated).
    """
    _, dist = nearest_prototype(features, prototypes)
    err = (pcc_embedding(features, prototypes) - features.mean(dim=1)).norm(dim=-1)
    delta = float(dist.max())
    max_err = float(err.max())
    return {
        "delta": delta,
        "mean_error": float(err.mean()),
        "max_error": max_err,
        "max_mean_nn_distance": float(dist.mean(dim=1).max()),
        "max_error_over_delta": max_err / delta if delta > 0 else 0.0,
        "max_squared_error": max_err**2,
        "bound_holds": float(max_err**2 <= delta + 1e-12),
    }
