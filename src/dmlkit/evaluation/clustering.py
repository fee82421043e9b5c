"""Clustering quality of embeddings: NMI and pairwise F1 after k-means.

``clustering_metrics`` clusters the embeddings with faiss k-means into as many
clusters as there are distinct labels (the protocol of the DML literature and
of pytorch-metric-learning's ``AccuracyCalculator``: 20 iterations, faiss
defaults otherwise) and scores the assignment against the labels with two pure
functions that only need the two labelings:

* :func:`nmi` -- normalised mutual information with the arithmetic mean of the
  entropies, ``NMI = I(Y; C) / ((H(Y) + H(C)) / 2)`` (natural logarithms). It
  equals scikit-learn's ``normalized_mutual_info_score`` (default
  ``average_method="arithmetic"``), edge cases included: two labelings that
  each have a single group give 1.0; zero mutual information gives 0.0.
* :func:`pairwise_f1` -- the pair-counting F1 reported next to NMI in DML
  papers: over all unordered pairs of items, a pair is predicted
  positive when both items share a cluster and truly positive when they also
  share a label. ``precision = TP / (TP + FP)``, ``recall = TP / (TP + FN)``,
  ``F1 = 2 P R / (P + R)``.

Both are computed from the sparse contingency table ``n_ij`` (items with label
``i`` in cluster ``j``), in ``O(N log N)`` time and ``O(N)`` memory, never over
all pairs: ``TP = sum_ij C(n_ij, 2)``, ``TP + FP = sum_j C(b_j, 2)``,
``TP + FN = sum_i C(a_i, 2)`` with ``a``, ``b`` the row and column sums.

The k-means needs the ``faiss`` extra (``pip install 'dmlkit[faiss]'``); without it ``clustering_metrics``
raises ``dmlkit.extras.MissingExtra`` naming it. There is no fallback: another k-means would report other
values under the same names. ``nmi`` and ``pairwise_f1`` need no extra.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from dmlkit.extras import require

__all__ = ["clustering_metrics", "kmeans_assign", "nmi", "pairwise_f1"]


def _labeling(x: object, name: str) -> np.ndarray:
    arr = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one label per item); got shape {arr.shape}.")
    if arr.size == 0:
        raise ValueError(f"{name} is empty; pass at least one label.")
    return arr


def _contingency(
    labels_true: object, labels_pred: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Non-zero cells of the contingency table.

    Returns ``(cells, row_of_cell, col_of_cell, row_sums, col_sums)``, all int64.
    """
    t = _labeling(labels_true, "labels_true")
    p = _labeling(labels_pred, "labels_pred")
    if t.shape[0] != p.shape[0]:
        raise ValueError(
            f"labels_true has {t.shape[0]} items but labels_pred has {p.shape[0]}; "
            "pass one true label and one predicted cluster per item."
        )
    _, ti = np.unique(t, return_inverse=True)
    _, pi = np.unique(p, return_inverse=True)
    ti = ti.reshape(-1).astype(np.int64)
    pi = pi.reshape(-1).astype(np.int64)
    n_pred = int(pi.max()) + 1
    keys, cells = np.unique(ti * n_pred + pi, return_counts=True)
    rows, cols = np.divmod(keys, n_pred)
    row_sums = np.bincount(ti).astype(np.int64)
    col_sums = np.bincount(pi).astype(np.int64)
    return cells.astype(np.int64), rows, cols, row_sums, col_sums


def _entropy(counts: np.ndarray) -> float:
    if counts.size <= 1:
        return 0.0
    total = float(counts.sum())
    c = counts.astype(np.float64)
    return float(-np.sum((c / total) * (np.log(c) - math.log(total))))


def nmi(labels_true: object, labels_pred: object) -> float:
    """Normalised mutual information, arithmetic normalisation (see module docstring)."""
    cells, rows, cols, a, b = _contingency(labels_true, labels_pred)
    if a.size == b.size == 1:
        return 1.0
    if a.size == 1 or b.size == 1:
        return 0.0
    n = float(cells.sum())
    c = cells.astype(np.float64)
    p = c / n
    outer = a[rows] * b[cols]  # int64, exact
    terms = p * (np.log(c) - math.log(n)) + p * (-np.log(outer.astype(np.float64)) + 2.0 * math.log(n))
    terms = np.where(np.abs(terms) < np.finfo(np.float64).eps, 0.0, terms)
    mi = max(0.0, float(terms.sum()))
    if mi == 0.0:
        return 0.0
    return float(mi / ((_entropy(a) + _entropy(b)) / 2.0))


def _pairs(x: np.ndarray) -> int:
    return int((x * (x - 1) // 2).sum())


def pairwise_f1(labels_true: object, labels_pred: object) -> float:
    """Pair-counting F1 of a clustering (see module docstring).

    Degenerate cases: when neither labeling puts any two items together (no
    positive pairs at all) the two agree on every pair and the result is 1.0;
    otherwise a zero precision or recall gives 0.0.
    """
    cells, _, _, a, b = _contingency(labels_true, labels_pred)
    tp = _pairs(cells)
    pred_pos = _pairs(b)
    true_pos = _pairs(a)
    if pred_pos == 0 and true_pos == 0:
        return 1.0
    if tp == 0:
        return 0.0
    precision = tp / pred_pos
    recall = tp / true_pos
    return float(2.0 * precision * recall / (precision + recall))


def kmeans_assign(embeddings: object, n_clusters: int, seed: int = 0, niter: int = 20, nredo: int = 1) -> np.ndarray:
    """Cluster index of every row after faiss k-means (``niter`` iterations, best
    of ``nredo`` seeded runs by k-means objective). Needs the ``faiss`` extra."""
    faiss = require("faiss", "faiss", "k-means of the clustering metrics (NMI, F1)")

    x = embeddings.detach().cpu().numpy() if isinstance(embeddings, torch.Tensor) else np.asarray(embeddings)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be 2-D with shape (n, d); got shape {x.shape}.")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"embeddings is empty (shape {x.shape}); pass at least one embedding.")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(x).all():
        raise ValueError(
            "embeddings contains NaN or infinite values; check the model output or drop those rows before evaluating."
        )
    if not 1 <= n_clusters <= x.shape[0]:
        raise ValueError(f"n_clusters must be between 1 and {x.shape[0]} (the number of rows); got {n_clusters}")
    # min_points_per_centroid only controls faiss' "too few points" warning.
    km = faiss.Kmeans(
        x.shape[1],
        int(n_clusters),
        niter=int(niter),
        nredo=int(nredo),
        seed=int(seed),
        verbose=False,
        min_points_per_centroid=1,
    )
    km.train(x)
    _, assign = km.index.search(x, 1)
    return assign.reshape(-1).astype(np.int64)


def clustering_metrics(
    embeddings: object, labels: object, seed: int = 0, niter: int = 20, nredo: int = 1
) -> dict[str, float]:
    """``{"NMI": nmi, "F1": pairwise_f1}`` of faiss k-means with one cluster per label.

    Args:
        embeddings: ``(n, d)`` embeddings (torch tensor or numpy array).
        labels: ``(n,)`` class labels.
        seed: seed of the k-means initialisation (results are deterministic for
            a given seed and thread count).
        niter: k-means iterations (20, as in PML).
        nredo: k-means runs, the one with the lowest objective is kept (PML: 1).
    """
    y = _labeling(labels, "labels")
    n_rows = len(embeddings)
    if n_rows != y.shape[0]:
        raise ValueError(
            f"embeddings has {n_rows} rows but labels has {y.shape[0]} entries; pass exactly one label per embedding."
        )
    n_clusters = int(np.unique(y).size)
    assign = kmeans_assign(embeddings, n_clusters, seed=seed, niter=niter, nredo=nredo)
    return {"NMI": nmi(y, assign), "F1": pairwise_f1(y, assign)}
