"""Retrieval metrics of embeddings too large for memory: streamed from a ``.npy`` file in blocks.

:func:`retrieval_metrics_from_file` computes the metrics of
:func:`dmlkit.evaluation.retrieval_metrics` (self-retrieval: every item is a
query against all the others, the query itself excluded; same definitions, see
``retrieval.py``) from an ``(n, d)`` float array on disk, opened as a numpy
memmap. Memory is bounded by ``budget_mb``, apart from ``O(n)`` label arrays
(about 32 bytes per item) and, in approximate mode, the faiss index.

Exact mode
    Queries are taken in blocks of ``b`` rows; each block is searched against
    every reference block of ``b`` rows with the exact blocked search of
    ``knn.py`` (``knn_search``: float32 expansion, certified float64
    re-ranking), and the per-block ``(b, K)`` tables are merged into a running
    top-``K`` ordered by (squared distance, reference index), ``K = max(max R_i,
    max ks)``. The query itself is removed by index. The metrics are summed per
    query block (``MetricSums`` of ``retrieval.py``), so nothing of size ``n x K`` is
    kept. ``b`` is the largest block whose buffers fit the budget: about
    ``b (24 d + 72 K)`` bytes plus the search's score tiles. The values equal
    ``retrieval_metrics`` up to neighbours whose float32 squared distances tie
    across blocks (``retrieval_metrics`` breaks such ties by float64 distance).
    Time is ``O(n^2 d)``: exact search of a million items takes hours on a CPU.

Approximate mode (``approx="ivf"`` or ``"hnsw"``)
    A faiss index (``IndexIVFFlat`` with ``nlist ~ sqrt(n)`` lists, trained on a
    seeded sample of ``40 nlist`` points, searched with ``nprobe = nlist / 16`` lists by default; or ``IndexHNSWFlat``, ``M``
    links, ``efSearch``) is filled block by block and searched for ``K + 1``
    neighbours per query. Its measured quality is reported with the metrics:
    ``approx_recall_at_1`` is the fraction of ``recall_sample`` seeded queries
    whose approximate nearest neighbour is at the exact nearest distance
    (found by the exact streamed search above). The index holds a float32 copy
    of the data (``4 n d`` bytes; HNSW adds about ``8 M n``), outside the budget; while
    an IVF index is filled its growing lists can briefly take up to twice that
    (measured: 954 MiB peak for a 488 MiB gallery of 1M x 128).

``query_sample`` evaluates a seeded random subset of the queries (against all
references) instead of all of them: an unbiased estimate of every metric, for
galleries where even approximate search of every query is too slow.

Clustering (:func:`clustering_metrics_from_file`)
    NMI and pairwise F1 as in ``clustering.py``, with faiss k-means trained on
    at most ``min(n, 256 k, budget / 4d)`` rows (a seeded sample when that is
    fewer than ``n``; faiss itself subsamples to ``256 k`` points), and every
    row assigned to its nearest centroid block by block. When all rows fit,
    the values equal ``clustering_metrics``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dmlkit.evaluation.knn import DEFAULT_MAX_BLOCK_BYTES, knn_search
from dmlkit.evaluation.retrieval import MetricSums, check_ks, check_labels, metric_names

__all__ = ["retrieval_metrics_from_file", "clustering_metrics_from_file", "APPROX_METHODS"]

APPROX_METHODS = ("ivf", "hnsw")
_MIN_ROWS = 64


def _open(data: str | Path | np.ndarray) -> np.ndarray:
    if isinstance(data, (str, Path)):
        path = Path(data)
        if not path.is_file():
            raise ValueError(f"embeddings file '{path}' does not exist; save the embeddings with numpy.save(path, array)")
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as err:
            raise ValueError(f"'{path}' is not a .npy array of embeddings ({err}); write it with numpy.save") from err
    elif isinstance(data, np.ndarray):
        arr = data
    else:
        raise ValueError(f"pass the path of a .npy file or a numpy array / memmap; got {type(data).__name__}")
    if arr.ndim != 2 or arr.shape[0] < 2 or arr.shape[1] < 1:
        raise ValueError(f"embeddings must have shape (n, d) with n >= 2; got {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"embeddings must hold real numbers; got dtype {arr.dtype}")
    return arr


def _rows(arr: np.ndarray, start: int, stop: int) -> torch.Tensor:
    block = torch.from_numpy(np.array(arr[start:stop], dtype=np.float32))
    if not bool(torch.isfinite(block).all()):
        raise ValueError(
            f"the embeddings contain NaN or infinite values (rows {start}..{stop - 1}); "
            "check the model output or drop those rows before evaluating."
        )
    return block


def _block_rows(budget_bytes: int, d: int, k: int, tile_bytes: int, n: int) -> int:
    per_row = 24 * d + 72 * (k + 1)
    rows = (budget_bytes - tile_bytes) // per_row
    if rows < _MIN_ROWS:
        need = (tile_bytes + _MIN_ROWS * per_row) / 2**20
        raise ValueError(f"budget_mb is too small for d={d}, K={k}: raise it to at least {math.ceil(need)} MB")
    return int(min(rows, n))


def _merge(d1: torch.Tensor, i1: torch.Tensor, d2: torch.Tensor, i2: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Best ``k`` of two (distance, index) tables, ordered by distance then index."""
    d, i = torch.cat([d1, d2], dim=1), torch.cat([i1, i2], dim=1)
    by_index = torch.argsort(i, dim=1, stable=True)
    d, i = d.gather(1, by_index), i.gather(1, by_index)
    by_dist = torch.argsort(d, dim=1, stable=True)[:, :k]
    return d.gather(1, by_dist), i.gather(1, by_dist)


def _exact(arr: np.ndarray, q: torch.Tensor, q_ids: torch.Tensor, k: int, block: int, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact ``k`` nearest rows of ``arr`` (squared distances, indices) for queries ``q`` (rows ``q_ids``, excluded)."""
    n = arr.shape[0]
    best_d = torch.empty(len(q), 0)
    best_i = torch.empty(len(q), 0, dtype=torch.int64)
    for c0 in range(0, n, block):
        c1 = min(n, c0 + block)
        kc = min(k + 1, c1 - c0)
        res = knn_search(q, kc, _rows(arr, c0, c1), exclude_self=False, squared=True, max_block_bytes=tile)
        idx = res.indices + c0
        dist = res.distances.masked_fill(idx == q_ids[:, None], math.inf)
        best_d, best_i = _merge(best_d, best_i, dist, idx, k)
    return best_d, best_i


def _build_index(arr: np.ndarray, method: str, params: dict[str, Any], block: int, seed: int) -> Any:
    import faiss

    n, d = arr.shape
    if method == "ivf":
        nlist = int(params.get("nlist", max(1, min(n // 39, round(math.sqrt(n))))))
        quantizer = faiss.IndexFlatL2(d)
        index = faiss.IndexIVFFlat(quantizer, d, nlist)
        rng = np.random.default_rng(seed)
        train_n = min(n, int(params.get("train_size", 40 * nlist)))
        sample = np.sort(rng.choice(n, size=train_n, replace=False))
        index.train(np.ascontiguousarray(arr[sample], dtype=np.float32))
        index.nprobe = int(params.get("nprobe", max(1, nlist // 16)))
    elif method == "hnsw":
        index = faiss.IndexHNSWFlat(d, int(params.get("M", 32)))
        index.hnsw.efConstruction = int(params.get("efConstruction", 40))
        index.hnsw.efSearch = int(params.get("efSearch", 64))
    else:
        raise ValueError(f"approx must be None or one of {APPROX_METHODS}; got {method!r}")
    for s in range(0, n, block):
        index.add(np.ascontiguousarray(_rows(arr, s, min(n, s + block)).numpy()))
    return index


def _approx(index: Any, q: torch.Tensor, q_ids: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    dist, idx = index.search(np.ascontiguousarray(q.numpy()), k + 1)
    dist, idx = torch.from_numpy(dist), torch.from_numpy(idx)
    dist = dist.masked_fill((idx == q_ids[:, None]) | (idx < 0), math.inf)
    order = torch.argsort(dist, dim=1, stable=True)[:, :k]
    return dist.gather(1, order), idx.gather(1, order)


def retrieval_metrics_from_file(
    embeddings: str | Path | np.ndarray,
    labels: Any,
    ks: Sequence[int] = (1, 2, 4, 8),
    *,
    budget_mb: float = 256,
    approx: str | None = None,
    approx_params: dict[str, Any] | None = None,
    recall_sample: int = 1000,
    query_sample: int | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """Self-retrieval metrics of the ``(n, d)`` embeddings in a ``.npy`` file (or memmap), streamed in blocks.

    Args:
        embeddings: path of a ``.npy`` file (opened memory-mapped) or a numpy array / memmap.
        labels: ``(n,)`` integer class labels (in memory).
        ks: the ``K`` of each ``recall_at_{K}``.
        budget_mb: memory bound of the exact search's buffers (see module docstring).
        approx: ``None`` (exact), ``"ivf"`` or ``"hnsw"`` (faiss); ``approx_params`` sets
            ``nlist``, ``nprobe``, ``train_size`` (IVF) or ``M``, ``efConstruction``, ``efSearch`` (HNSW).
        recall_sample: queries on which approximate search is checked against exact search.
        query_sample: evaluate this many seeded random queries instead of all ``n``.
        seed: seed of the samples (IVF training set, recall sample, query sample).

    Returns:
        The keys of ``metric_names(ks)``; with ``approx`` also ``approx_recall_at_1`` and
        ``approx_recall_sample``; with ``query_sample`` also ``num_queries``.
    """
    ks = check_ks(ks)
    arr = _open(embeddings)
    n, d = arr.shape
    y = check_labels(labels, "labels", n, "embeddings")
    if y.dtype.kind == "f" and not np.all(np.mod(y, 1) == 0):
        raise ValueError("labels must be integer class ids; got fractional values")
    if isinstance(budget_mb, bool) or not isinstance(budget_mb, (int, float)) or not budget_mb > 0:
        raise ValueError(f"budget_mb must be a positive number of megabytes; got {budget_mb!r}")
    _, codes = np.unique(y, return_inverse=True)
    codes = codes.reshape(-1).astype(np.int64)
    rel_count = np.bincount(codes)[codes] - 1
    names = metric_names(ks)
    if not (rel_count > 0).any():
        warnings.warn("No label occurs twice, so every retrieval metric is undefined (nan).", RuntimeWarning, stacklevel=2)
        return {name: math.nan for name in names}
    k = min(n - 1, max([int(rel_count.max()), *ks]))
    budget = int(budget_mb * 2**20)
    tile = min(DEFAULT_MAX_BLOCK_BYTES, budget // 4)
    block = _block_rows(budget, d, k, tile, n)

    rng = np.random.default_rng(seed)
    queries = np.arange(n) if query_sample is None else np.sort(rng.choice(n, size=min(n, int(query_sample)), replace=False))
    index = None if approx is None else _build_index(arr, approx, dict(approx_params or {}), block, seed)
    sums = MetricSums(ks)
    for a0 in range(0, len(queries), block):
        q_ids_np = queries[a0 : a0 + block]
        q_ids = torch.from_numpy(q_ids_np)
        q = torch.from_numpy(np.ascontiguousarray(arr[q_ids_np], dtype=np.float32))
        if not bool(torch.isfinite(q).all()):
            raise ValueError("the embeddings contain NaN or infinite values; check the model output before evaluating.")
        _, idx = _exact(arr, q, q_ids, k, block, tile) if index is None else _approx(index, q, q_ids, k)
        idx_np = idx.numpy()
        neighbour_codes = np.where(idx_np >= 0, codes[np.clip(idx_np, 0, None)], -1)
        active = rel_count[q_ids_np] > 0
        match = neighbour_codes[active] == codes[q_ids_np][active, None]
        sums.add(match, rel_count[q_ids_np][active])
    out = sums.result(names)
    if query_sample is not None:
        out["num_queries"] = float(len(queries))
    if index is not None:
        sample = np.sort(rng.choice(n, size=min(n, int(recall_sample)), replace=False))
        s_ids = torch.from_numpy(sample)
        s = torch.from_numpy(np.ascontiguousarray(arr[sample], dtype=np.float32))
        exact_d, _ = _exact(arr, s, s_ids, 1, block, tile)
        approx_d, _ = _approx(index, s, s_ids, 1)
        found = approx_d[:, 0] <= exact_d[:, 0] * (1 + 1e-5) + 1e-12
        out["approx_recall_at_1"] = float(found.double().mean())
        out["approx_recall_sample"] = float(len(sample))
    return out


def clustering_metrics_from_file(
    embeddings: str | Path | np.ndarray, labels: Any, *, budget_mb: float = 256, seed: int = 0, niter: int = 20
) -> dict[str, float]:
    """``{"NMI", "F1"}`` of faiss k-means with one cluster per label, for embeddings on disk (see module docstring)."""
    import faiss

    from dmlkit.evaluation.clustering import nmi, pairwise_f1

    arr = _open(embeddings)
    n, d = arr.shape
    y = check_labels(labels, "labels", n, "embeddings")
    if isinstance(budget_mb, bool) or not isinstance(budget_mb, (int, float)) or not budget_mb > 0:
        raise ValueError(f"budget_mb must be a positive number of megabytes; got {budget_mb!r}")
    k = int(np.unique(y).size)
    rows = int(budget_mb * 2**20) // (8 * d)  # the sample, and one block of the same size for assignment
    if rows < k:
        raise ValueError(f"budget_mb is too small to cluster into {k} clusters of d={d}: raise it to at least {math.ceil(8 * d * k / 2**20)} MB")
    size = min(n, 256 * k, rows)
    if size == n:
        sample = _rows(arr, 0, n).numpy()
    else:
        picks = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
        sample = np.ascontiguousarray(arr[picks], dtype=np.float32)
        if not np.isfinite(sample).all():
            raise ValueError("the embeddings contain NaN or infinite values; check the model output before evaluating.")
    km = faiss.Kmeans(d, k, niter=int(niter), nredo=1, seed=int(seed), verbose=False, min_points_per_centroid=1)
    km.train(sample)
    del sample
    assign = np.empty(n, dtype=np.int64)
    for s0 in range(0, n, rows):
        s1 = min(n, s0 + rows)
        _, a = km.index.search(np.ascontiguousarray(_rows(arr, s0, s1).numpy()), 1)
        assign[s0:s1] = a.reshape(-1)
    return {"NMI": nmi(y, assign), "F1": pairwise_f1(y, assign)}
