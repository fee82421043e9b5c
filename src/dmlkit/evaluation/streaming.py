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

Approximate mode (``approx="ivf"``, ``"ivf_sq8"`` or ``"hnsw"``, or ``index_file``)
    A faiss index is built block by block with parameters chosen from ``n``
    (``approx_index.py``: IVF ``nlist ~ sqrt(n)`` lists trained on a seeded sample of
    ``40 nlist`` rows; HNSW ``M = 32``), or read from ``index_file`` (a faiss file or a
    ``dmlkit index build`` folder, which must hold exactly these rows: dimension and count are
    checked). Unless ``approx_params`` fixes it, the search parameter (IVF ``nprobe``, HNSW
    ``efSearch``) is tuned: the cheapest value whose recall@1 against exact search on
    ``tune_sample`` seeded queries reaches ``target_recall`` (0.95) with 95% confidence (Wilson
    lower bound, ``approx_index.tune_search``). Every query is then searched
    for ``K + 1`` neighbours. The quality is reported with the metrics: ``approx_recall_at_1`` is
    the fraction of ``recall_sample`` other seeded queries (disjoint from the tuning sample when
    ``n`` allows) whose approximate nearest neighbour is at the exact nearest distance (found by the
    exact streamed search above, one pass for both samples). The index holds a float32 copy of the
    data (``4 n d`` bytes; ``ivf_sq8`` a quarter of that; HNSW adds about ``8 M n``), outside the
    budget; while an IVF index is filled its growing lists can briefly take up to twice that
    (measured: 954 MiB peak for a 488 MiB gallery of 1M x 128).

``query_sample`` evaluates a seeded random subset of the queries (against all
references) instead of all of them: an unbiased estimate of every metric, for
galleries where even approximate search of every query is too slow.

Clustering: :func:`clustering_metrics_from_file` lives in ``clustering_streamed.py`` and is
re-exported here.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dmlkit.evaluation.approx_index import (
    APPROX_METHODS,
    build_index,
    load_index,
    plan_index,
    recall_at_1,
    search_neighbours,
    search_param_name,
    set_search_param,
    tune_search,
)
from dmlkit.evaluation.clustering_streamed import clustering_metrics_from_file
from dmlkit.evaluation.embedding_file import open_embeddings
from dmlkit.evaluation.knn import DEFAULT_MAX_BLOCK_BYTES, knn_search
from dmlkit.evaluation.metric_values import MetricSums
from dmlkit.evaluation.relevance import Relevance, relevance, undefined_metrics
from dmlkit.evaluation.retrieval import check_ks, check_labels
from dmlkit.validation import is_int, is_real

__all__ = [
    "retrieval_metrics_from_file",
    "clustering_metrics_from_file",
    "nearest_distances_from_file",
    "APPROX_METHODS",
]

_MIN_ROWS = 64


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


def _merge(
    d1: torch.Tensor, i1: torch.Tensor, d2: torch.Tensor, i2: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Best ``k`` of two (distance, index) tables, ordered by distance then index."""
    d, i = torch.cat([d1, d2], dim=1), torch.cat([i1, i2], dim=1)
    by_index = torch.argsort(i, dim=1, stable=True)
    d, i = d.gather(1, by_index), i.gather(1, by_index)
    by_dist = torch.argsort(d, dim=1, stable=True)[:, :k]
    return d.gather(1, by_dist), i.gather(1, by_dist)


def _exact(
    arr: np.ndarray, q: torch.Tensor, q_ids: torch.Tensor, k: int, block: int, tile: int
) -> tuple[torch.Tensor, torch.Tensor]:
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


def _exact_nearest(arr: np.ndarray, ids: np.ndarray, block: int, tile: int) -> np.ndarray:
    """Exact squared distance from each row ``ids`` to its nearest other row, queries taken ``block`` at a time."""
    out = np.empty(len(ids))
    for s in range(0, len(ids), block):
        part = ids[s : s + block]
        q = torch.from_numpy(np.ascontiguousarray(arr[part], dtype=np.float32))
        dist, _ = _exact(arr, q, torch.from_numpy(part), 1, block, tile)
        out[s : s + len(part)] = dist[:, 0].numpy()
    return out


def nearest_distances_from_file(embeddings: str | Path | np.ndarray, ids: Any, *, budget_mb: float = 256) -> np.ndarray:
    """Exact squared distance from each row ``ids`` to its nearest other row, streamed within ``budget_mb``.

    The reference that approximate search is measured against (``approx_recall_at_1``).
    """
    arr = open_embeddings(embeddings, min_rows=2)
    n, d = arr.shape
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise ValueError(f"ids must be row numbers in 0..{n - 1}")
    if not is_real(budget_mb) or not budget_mb > 0:
        raise ValueError(f"budget_mb must be a positive number of megabytes; got {budget_mb!r}")
    budget = int(budget_mb * 2**20)
    tile = min(DEFAULT_MAX_BLOCK_BYTES, budget // 4)
    return _exact_nearest(arr, ids, _block_rows(budget, d, 1, tile, n), tile)


def _check_samples(**sizes: Any) -> None:
    for name, value in sizes.items():
        if not is_int(value, numpy=True) or value < 1:
            raise ValueError(f"{name} must be a positive number of queries; got {value!r} (1000 is usual)")


def _approx_setup(
    arr: np.ndarray,
    approx: str | None,
    approx_params: dict[str, Any] | None,
    index_file: str | Path | None,
    target_recall: float,
    recall_sample: int,
    tune_sample: int,
    block: int,
    tile: int,
    rng: np.random.Generator,
    seed: int,
) -> tuple[tuple[Any, int], dict[str, float]]:
    """``(index, rerank)`` (built or loaded, search parameter set or tuned) and the ``approx_*`` entries of the result."""
    n, d = arr.shape
    params = dict(approx_params or {})
    _check_samples(recall_sample=recall_sample, tune_sample=tune_sample)
    if not is_real(target_recall) or not 0 < target_recall <= 1:
        raise ValueError(f"target_recall must be in (0, 1]; got {target_recall!r} (0.95 is usual)")
    if index_file is not None:
        index = load_index(index_file, n, d)
        extra = sorted(set(params) - {"nprobe", "efSearch", "rerank"})
        if extra:
            raise ValueError(
                f"approx_params {extra} are build parameters, fixed in the saved index; "
                "pass only nprobe, efSearch or rerank"
            )
        name = search_param_name(index)
        fixed = params.get(name)
        if ({"nprobe", "efSearch"} - {name}) & set(params):
            raise ValueError(
                f"'{index_file}' is searched with {name}; pass approx_params={{'{name}': ...}} or none to tune it"
            )
        rerank = int(params.get("rerank", 0))
        info: dict[str, float] = {}
    else:
        plan = plan_index(n, str(approx), params)
        index = build_index(plan, lambda s, e: _rows(arr, s, e).numpy(), n, d, block, seed)
        fixed, name, rerank = plan.search_param, plan.search_name, plan.rerank
        info = {"approx_nlist": float(plan.nlist)} if plan.nlist else {"approx_M": float(plan.M)}
    tune = 0 if fixed is not None else min(n, int(tune_sample))
    report = min(n, int(recall_sample))
    order = rng.permutation(n)
    report_ids = np.sort(order[:report])
    tune_ids = np.sort(order[report : report + tune] if report + tune <= n else order[n - tune :])
    both = np.concatenate([report_ids, tune_ids])
    exact = _exact_nearest(arr, both, block, tile)
    if fixed is None:
        q = np.ascontiguousarray(arr[tune_ids], dtype=np.float32)
        chosen, curve = tune_search(index, arr, q, tune_ids, exact[report:], target_recall, rerank=rerank)
        reached = curve[-1].lower >= target_recall or curve[-1].recall == 1.0
        info.update(approx_tune_sample=float(tune), approx_target_reached=float(reached))
        if not reached:
            warnings.warn(
                f"no {name} reached recall@1 {target_recall} (best {curve[-1].recall:.3f} at {name}={chosen}); "
                "on data this hard exact search (approx=None) is as fast",
                RuntimeWarning,
                stacklevel=3,
            )
    else:
        set_search_param(index, int(fixed))
        chosen = int(fixed)
    q = np.ascontiguousarray(arr[report_ids], dtype=np.float32)
    info.update(
        {
            f"approx_{name}": float(chosen),
            "approx_recall_at_1": recall_at_1(index, arr, q, report_ids, exact[:report], rerank),
            "approx_recall_sample": float(report),
        }
    )
    return (index, rerank), info


def retrieval_metrics_from_file(
    embeddings: str | Path | np.ndarray,
    labels: Any,
    ks: Sequence[int] = (1, 2, 4, 8),
    *,
    budget_mb: float = 256,
    approx: str | None = None,
    approx_params: dict[str, Any] | None = None,
    index_file: str | Path | None = None,
    target_recall: float = 0.95,
    recall_sample: int = 1000,
    tune_sample: int = 1000,
    query_sample: int | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """Self-retrieval metrics of the ``(n, d)`` embeddings in a ``.npy`` file (or memmap), streamed in blocks.

    Args:
        embeddings: path of a ``.npy`` file (opened memory-mapped) or a numpy array / memmap.
        labels: ``(n,)`` integer class labels (in memory).
        ks: the ``K`` of each ``recall_at_{K}``.
        budget_mb: memory bound of the exact search's buffers (see module docstring).
        approx: ``None`` (exact), ``"ivf"``, ``"ivf_sq8"`` or ``"hnsw"`` (faiss); ``approx_params`` sets
            ``nlist``, ``nprobe``, ``train_size`` (IVF; ``rerank`` for ``ivf_sq8``) or ``M``,
            ``efConstruction``, ``efSearch`` (HNSW);
            by default they are chosen from ``n`` and the search parameter is tuned to ``target_recall``.
        index_file: a saved faiss index of exactly these rows (file, or ``dmlkit index build`` folder),
            used instead of building one (implies approximate mode).
        target_recall: recall@1 against exact search that the tuned search parameter must reach.
        recall_sample: queries on which approximate search is checked against exact search.
        tune_sample: queries on which the search parameter is tuned (disjoint from ``recall_sample``).
        query_sample: evaluate this many seeded random queries instead of all ``n``.
        seed: seed of the samples (IVF training set, recall sample, query sample).

    Returns:
        The registered metrics' keys (``metric_names(ks)``); in approximate mode also ``approx_recall_at_1``,
        ``approx_recall_sample``, the search parameter used (``approx_nprobe`` or ``approx_efSearch``),
        the build parameter (``approx_nlist`` or ``approx_M``, unless loaded) and, when tuned,
        ``approx_tune_sample`` and ``approx_target_reached`` (1.0 or 0.0); with ``query_sample``
        also ``num_queries``.
    """
    ks = check_ks(ks)
    arr = open_embeddings(embeddings, min_rows=2)
    n, d = arr.shape
    rel = relevance(_integer_labels(labels, n), None, exclude_self=True)
    if not is_real(budget_mb) or not budget_mb > 0:
        raise ValueError(f"budget_mb must be a positive number of megabytes; got {budget_mb!r}")
    if not rel.active.any():
        return undefined_metrics(ks)
    k = rel.neighbours_needed(ks, n - 1)
    budget = int(budget_mb * 2**20)
    tile = min(DEFAULT_MAX_BLOCK_BYTES, budget // 4)
    block = _block_rows(budget, d, k, tile, n)

    rng = np.random.default_rng(seed)
    queries = (
        np.arange(n) if query_sample is None else np.sort(rng.choice(n, size=min(n, int(query_sample)), replace=False))
    )
    index, info = None, {}
    if approx is not None or index_file is not None:
        index, info = _approx_setup(
            arr, approx, approx_params, index_file, target_recall, recall_sample, tune_sample, block, tile, rng, seed
        )
    out = _streamed_sums(arr, rel, queries, k, block, tile, index, ks).result()
    if query_sample is not None:
        out["num_queries"] = float(len(queries))
    out.update(info)
    return out


def _integer_labels(labels: Any, n: int) -> np.ndarray:
    y = check_labels(labels, "labels", n, "embeddings")
    if y.dtype.kind == "f" and not np.all(np.mod(y, 1) == 0):
        raise ValueError("labels must be integer class ids; got fractional values")
    return y


def _streamed_sums(
    arr: np.ndarray,
    rel: Relevance,
    queries: np.ndarray,
    k: int,
    block: int,
    tile: int,
    index: tuple[Any, int] | None,
    ks: tuple[int, ...],
) -> MetricSums:
    """The metric sums of ``queries``, searched ``block`` at a time (exactly, or in ``index``)."""
    sums = MetricSums(ks)
    codes = rel.query_codes
    for a0 in range(0, len(queries), block):
        q_ids_np = queries[a0 : a0 + block]
        q = torch.from_numpy(np.ascontiguousarray(arr[q_ids_np], dtype=np.float32))
        if not bool(torch.isfinite(q).all()):
            raise ValueError("the embeddings contain NaN or infinite values; check the model output before evaluating.")
        if index is None:
            idx_np = _exact(arr, q, torch.from_numpy(q_ids_np), k, block, tile)[1].numpy()
        else:
            idx_np = search_neighbours(index[0], q.numpy(), q_ids_np, k, arr, index[1])[1]
        neighbour_codes = np.where(idx_np >= 0, codes[np.clip(idx_np, 0, None)], -1)
        active = rel.active[q_ids_np]
        match = neighbour_codes[active] == codes[q_ids_np][active, None]
        sums.add(match, rel.counts[q_ids_np][active])
    return sums
