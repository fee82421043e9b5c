"""Greedy k-centre selection (Algorithm 2 of the thesis, "Greedy K-Center Proxy").

``greedy_k_center(points, k, initial)`` picks ``k`` rows of ``points`` one at a time,
each the row farthest (Euclidean) from the centres chosen so far and from the
``initial`` centres:

    q <- argmax_{u in p \\ r} min_{v in rho ∪ r} ||u - v||_2          (Algorithm 2, inner loop)

``rho`` is ``initial`` (the converged proxies of the class in CCP) and ``r`` the
picks so far.  Conventions:

* first pick: with no ``initial`` (or an empty one) every distance is +inf, so the
  first pick is row ``first`` (default 0).  CCP draws its pools at random, so row 0
  of a pool is a random sample (Algorithm 1 initialises the proxies "with random samples").
* ties: the smallest index wins (``torch.argmax`` returns the first maximum);
  distances are computed as ``(u - v).norm()`` so equal points give exactly equal distances.
* ``batched_greedy_k_center`` runs the same greedy loop for many classes at once
  (``(C, b, d)`` pools, an optional validity mask for classes with fewer than ``b``
  samples); ``greedy_k_center`` is its one-class case.

``select_per_class`` and ``sample_class_pool`` build the per-class pools of CCP:
``b`` samples per class, ``k`` picks per class; ``b == k`` picks the whole pool,
i.e. reduces to random selection.
"""

from __future__ import annotations

import torch
from torch import Tensor
from dmlkit.validation import is_int

__all__ = ["batched_greedy_k_center", "greedy_k_center", "sample_class_pool", "select_per_class"]


def batched_greedy_k_center(
    points: Tensor, k: int, initial: Tensor | None = None, mask: Tensor | None = None, first: int = 0
) -> Tensor:
    """Algorithm 2 for ``C`` pools at once: ``points (C, b, d)`` -> indices ``(C, k)`` into dim 1.

    Args:
        points: ``C`` pools of ``b`` candidate points each.
        k: picks per pool, ``0 <= k <= b`` (and ``<=`` the valid points of every pool).
        initial: ``(C, m, d)`` centres already chosen per pool (distances count from them too).
        mask: ``(C, b)`` bool, False for padding rows that must never be picked.
        first: the row picked first in a pool without ``initial`` centres (must be valid).
    """
    if points.dim() != 3:
        raise ValueError(f"points must have shape (C, b, d), got {tuple(points.shape)}")
    c, b, _ = points.shape
    if not is_int(k) or k < 0:
        raise ValueError(f"k must be a non-negative int, got {k!r}")
    valid = torch.ones(c, b, dtype=torch.bool, device=points.device) if mask is None else mask.to(torch.bool)
    if valid.shape != (c, b):
        raise ValueError(f"mask must have shape {(c, b)}, got {tuple(valid.shape)}")
    counts = valid.sum(1)
    if c and k > int(counts.min()):
        worst = int(counts.argmin())
        raise ValueError(
            f"cannot pick {k} centres from pool {worst}, which has only {int(counts[worst])} points; lower k "
            "(proxies per class) or give more points per pool"
        )
    inf = torch.tensor(float("inf"), dtype=points.dtype, device=points.device)
    dist = torch.full((c, b), float("inf"), dtype=points.dtype, device=points.device)
    if initial is not None and (initial.dim() != 3 or initial.shape[0] != c or initial.shape[2] != points.shape[2]):
        raise ValueError(f"initial must have shape ({c}, m, {points.shape[2]}), got {tuple(initial.shape)}")
    has_initial = initial is not None and initial.shape[1] > 0
    if has_initial:
        dist = (points.unsqueeze(2) - initial.unsqueeze(1)).norm(dim=-1).min(dim=2).values
    elif k > 0 and not (0 <= first < b and bool(valid[:, first].all())):
        raise ValueError(f"first={first} must index a valid row of every pool (0 <= first < {b})")
    dist = torch.where(valid, dist, -inf)
    picks = torch.empty(c, k, dtype=torch.long, device=points.device)
    rows = torch.arange(c, device=points.device)
    for j in range(k):
        if j == 0 and not has_initial:
            q = torch.full((c,), first, dtype=torch.long, device=points.device)
        else:
            q = dist.argmax(dim=1)
        picks[:, j] = q
        centre = points[rows, q].unsqueeze(1)
        dist = torch.minimum(dist, (points - centre).norm(dim=-1))
        dist[rows, q] = -inf
    return picks


def greedy_k_center(points: Tensor, k: int, initial: Tensor | None = None, first: int = 0) -> Tensor:
    """Indices of ``k`` rows of ``points (n, d)`` chosen greedily (Algorithm 2), as a ``LongTensor (k,)``.

    Each pick is the row farthest from the picks so far and from the rows of ``initial (m, d)``;
    without ``initial`` the first pick is row ``first``; ties go to the smallest index.
    """
    if points.dim() != 2:
        raise ValueError(f"points must have shape (n, d), got {tuple(points.shape)}")
    if k > points.shape[0]:
        raise ValueError(f"cannot pick {k} centres from {points.shape[0]} points; lower k")
    if initial is not None and (initial.dim() != 2 or initial.shape[1] != points.shape[1]):
        raise ValueError(f"initial must have shape (m, {points.shape[1]}), got {tuple(initial.shape)}")
    init = None if initial is None else initial.unsqueeze(0)
    return batched_greedy_k_center(points.unsqueeze(0), k, init, first=first)[0]


def sample_class_pool(
    labels: Tensor, num_classes: int, pool_size: int, generator: torch.Generator | None = None
) -> Tensor:
    """``(C, pool_size)`` dataset indices: ``pool_size`` random samples of each class, without replacement.

    A class with fewer samples than ``pool_size`` contributes all of them, in random order,
    and its row is padded with ``-1``.
    """
    if not is_int(pool_size) or pool_size < 1:
        raise ValueError(f"pool_size must be a positive int, got {pool_size!r}")
    labels = labels.cpu()
    pool = torch.full((num_classes, pool_size), -1, dtype=torch.long)
    order = torch.randperm(labels.numel(), generator=generator)
    shuffled = labels[order]
    for c in range(num_classes):
        members = order[shuffled == c][:pool_size]
        pool[c, : members.numel()] = members
    return pool


def select_per_class(pool_embeddings: Tensor, pool_mask: Tensor, k: int, initial: Tensor | None = None) -> Tensor:
    """Per-class greedy k-centre picks ``(C, k)`` into a pool ``(C, b, d)`` (``pool_mask`` marks real rows).

    ``initial (C, m, d)``: the current proxies of each class (Algorithm 2's ``rho_c``).
    Raises ``ValueError`` when a class has fewer pool samples than ``k``.
    """
    return batched_greedy_k_center(pool_embeddings, k, initial, mask=pool_mask)
