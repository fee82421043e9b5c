"""Geometry diagnostics of CCP (thesis Sec. 3.3.1): covering radius and average inter-class distance.

* ``k_center_radii(points)``: the covering radius of a class after each greedy k-centre
  pick, ``r_k = max_u min_{v in first k picks} ||u - v||`` for ``k = 1..n``
  (Algorithm 2's greedy, starting from row 0; ``r_n = 0``).
* ``covering_radius(embeddings, labels)``: "we compute covering radii for 1 to n sample
  case in k-Center ... we take the average of these radii" -- the mean of ``r_1..r_n``
  per class, averaged over the classes (Sec. 3.3.1, Fig. 3.3).
* ``inter_class_distance(embeddings, labels)``: the mean Euclidean distance over all
  pairs of samples of different classes.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["covering_radius", "embedding_geometry", "inter_class_distance", "k_center_radii"]


def k_center_radii(points: Tensor) -> Tensor:
    """Covering radii ``(n,)`` of ``points (n, d)`` after 1, 2, ..., n greedy k-centre picks."""
    if points.dim() != 2 or points.shape[0] == 0:
        raise ValueError(f"points must be a non-empty (n, d) tensor, got shape {tuple(points.shape)}")
    points = points.double()
    n = points.shape[0]
    dist = (points - points[0]).norm(dim=1)
    radii = torch.empty(n, dtype=torch.float64)
    radii[0] = dist.max()
    for k in range(1, n):
        q = int(dist.argmax())
        dist = torch.minimum(dist, (points - points[q]).norm(dim=1))
        radii[k] = dist.max()
    return radii


def covering_radius(embeddings: Tensor, labels: Tensor) -> float:
    """Sec. 3.3.1: mean over classes of the mean k-centre radius over ``k = 1..n_c``."""
    if embeddings.dim() != 2 or labels.shape != embeddings.shape[:1]:
        raise ValueError("embeddings must be (N, d) with one label per row")
    per_class = [k_center_radii(embeddings[labels == c]).mean() for c in torch.unique(labels)]
    if not per_class:
        raise ValueError("covering_radius needs at least one sample")
    return float(torch.stack(per_class).mean())


def inter_class_distance(embeddings: Tensor, labels: Tensor, chunk: int = 1024) -> float:
    """Mean ``||x_i - x_j||`` over all pairs ``(i, j)`` with different labels (computed in row chunks)."""
    if embeddings.dim() != 2 or labels.shape != embeddings.shape[:1]:
        raise ValueError("embeddings must be (N, d) with one label per row")
    x = embeddings.double()
    total, count = 0.0, 0
    for start in range(0, x.shape[0], chunk):
        d = torch.cdist(x[start : start + chunk], x)
        neg = labels[start : start + chunk, None] != labels[None, :]
        total += float(d[neg].sum())
        count += int(neg.sum())
    if count == 0:
        raise ValueError("inter_class_distance needs samples of at least two classes")
    return total / count


def embedding_geometry(embeddings: Tensor, labels: Tensor) -> dict[str, float]:
    """``{"covering_radius": ..., "inter_class_distance": ...}`` of Fig. 3.3."""
    return {
        "covering_radius": covering_radius(embeddings, labels),
        "inter_class_distance": inter_class_distance(embeddings, labels),
    }
