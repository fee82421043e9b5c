"""NMI and pairwise F1 of embeddings too large for memory: k-means on a sample, assignment streamed in blocks.

:func:`clustering_metrics_from_file` computes what :func:`dmlkit.evaluation.clustering_metrics` computes
(faiss k-means with one cluster per label, 20 iterations; ``nmi`` and ``pairwise_f1`` of
``clustering.py``) for an ``(n, d)`` array on disk (a ``.npy`` file, opened memory-mapped) or any numpy
array, within a memory budget:

1. Centroids: faiss k-means (``faiss.Kmeans``, ``seed``, ``niter``) fitted on a seeded sample of
   ``s`` rows (all rows when ``s = n``). By default ``s = min(n, 256 k, rows that fit)``: 256 points per
   centroid is where faiss itself stops using more points. ``sample_size`` sets ``s`` (at least ``k``);
   faiss then keeps every sampled row (no subsampling of its own).
2. Assignment: every row goes to its nearest centroid (``IndexFlatL2`` search of the centroids),
   ``b`` rows at a time, so only the sample, the centroids and one block are in memory.
3. Scores: NMI and F1 of the labels against the assignment (``O(n)`` labels in memory, 16 bytes per item).

Memory: ``budget_mb`` covers the sample (``4 s d`` bytes), the centroids (``4 k d``) and one block
(``4 b d``); by default the rows left after the centroids are shared evenly between sample and block.
faiss's own distance tiles (a few MiB) and the label arrays are outside it. A budget that cannot hold
``k`` sample rows and one block is refused with the least budget that works.

Cost: ``niter`` passes of ``s x k`` distances, then one pass of ``n x k``: with one class per five
items (SOP-like labels, ``k = n / 5``) clustering a million rows is about ``2 n^2 d / 5`` flops for the
assignment alone, the dominant cost of evaluating such a gallery.

When ``s = n`` (everything fits) the values equal ``clustering_metrics`` of the same rows and seed.
The result reports ``sample_size`` (``s``) and ``num_clusters`` (``k``) with ``NMI`` and ``F1``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from dmlkit.evaluation.clustering import nmi, pairwise_f1
from dmlkit.evaluation.embedding_file import open_embeddings
from dmlkit.evaluation.retrieval import check_labels
from dmlkit.extras import require
from dmlkit.validation import is_int, is_real

__all__ = ["clustering_metrics_from_file"]

#: faiss stops using more than this many points per centroid by default (``max_points_per_centroid``).
POINTS_PER_CENTROID = 256


def _rows(arr: np.ndarray, index: np.ndarray | slice, where: str) -> np.ndarray:
    block = np.ascontiguousarray(arr[index], dtype=np.float32)
    if not np.isfinite(block).all():
        raise ValueError(
            f"the embeddings contain NaN or infinite values ({where}); check the model output "
            "or drop those rows before evaluating"
        )
    return block


def clustering_plan(n: int, d: int, k: int, budget_mb: float, sample_size: int | None = None) -> tuple[int, int]:
    """``(s, b)``: k-means sample size and assignment block rows for ``n`` rows of dimension ``d``, ``k`` clusters."""
    if not is_real(budget_mb) or not budget_mb > 0:
        raise ValueError(f"budget_mb must be a positive number of megabytes; got {budget_mb!r}")
    if not 1 <= k <= n:
        raise ValueError(f"cannot make {k} clusters of {n} rows; pass one label per row with at most n distinct labels")
    row = 4 * d
    rows_left = (int(budget_mb * 2**20) - row * k) // row  # rows of sample + block after the centroids
    if sample_size is None:
        s = min(n, POINTS_PER_CENTROID * k, max(k, rows_left // 2))
    else:
        if not is_int(sample_size, numpy=True) or sample_size < k:
            raise ValueError(f"sample_size must be an integer of at least the {k} clusters; got {sample_size!r}")
        s = min(n, int(sample_size))
    b = min(n, rows_left - s)
    if b < 1:
        need = math.ceil(row * (k + s + 1) / 2**20 * 1000) / 1000
        fix = f"raise budget_mb to at least {need}" + (
            " or lower sample_size" if sample_size is not None and s > k else ""
        )
        raise ValueError(
            f"budget_mb={budget_mb} cannot hold {k} centroids, a k-means sample of {s} rows and one "
            f"assignment block of d={d}: {fix}"
        )
    return s, b


def clustering_metrics_from_file(
    embeddings: str | Path | np.ndarray,
    labels: Any,
    *,
    budget_mb: float = 256,
    sample_size: int | None = None,
    seed: int = 0,
    niter: int = 20,
) -> dict[str, float]:
    """``{"NMI", "F1", "sample_size", "num_clusters"}`` of k-means with one cluster per label (module docstring).

    Args:
        embeddings: path of a ``.npy`` file (opened memory-mapped) or a numpy array / memmap, ``(n, d)``.
        labels: ``(n,)`` class labels (in memory).
        budget_mb: memory for the sample, the centroids and one assignment block.
        sample_size: rows k-means is fitted on (default: as many as fit, at most ``256 k``).
        seed: seed of the sample and of the k-means initialisation.
        niter: k-means iterations (20, as in ``clustering_metrics`` and PML).
    """
    faiss = require("faiss", "faiss", "k-means of the clustering metrics (NMI, F1)")

    arr = open_embeddings(embeddings, min_rows=1)
    n, d = arr.shape
    y = check_labels(labels, "labels", n, "embeddings")
    k = int(np.unique(y).size)
    s, b = clustering_plan(n, d, k, budget_mb, sample_size)
    if s == n:
        sample = _rows(arr, slice(0, n), "k-means sample")
    else:
        picks = np.sort(np.random.default_rng(seed).choice(n, size=s, replace=False))
        sample = _rows(arr, picks, "k-means sample")
    km = faiss.Kmeans(
        d,
        k,
        niter=int(niter),
        nredo=1,
        seed=int(seed),
        verbose=False,
        min_points_per_centroid=1,
        max_points_per_centroid=max(POINTS_PER_CENTROID, -(-s // k)),
    )
    km.train(sample)
    del sample
    assign = np.empty(n, dtype=np.int64)
    for s0 in range(0, n, b):
        s1 = min(n, s0 + b)
        _, a = km.index.search(_rows(arr, slice(s0, s1), f"rows {s0}..{s1 - 1}"), 1)
        assign[s0:s1] = a.reshape(-1)
    return {"NMI": nmi(y, assign), "F1": pairwise_f1(y, assign), "sample_size": float(s), "num_clusters": float(k)}
