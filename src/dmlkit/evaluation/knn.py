"""Exact k-nearest neighbours in Euclidean distance, computed in blocks: :func:`knn_search`.

This is the search that the retrieval metrics (``dmlkit.evaluation.retrieval``)
rest on. It never materialises the ``n_query x n_reference`` distance matrix,
and its results are exact for the float32 inputs. It runs in three steps, each
in a module of its own:

1. Candidates (:mod:`~dmlkit.evaluation.knn_tiles`): float32 score tiles
    ``-|q - r|^2 / 2`` from one matrix product of augmented vectors, reduced
    tile by tile into a running top-``k'`` table
    (:mod:`~dmlkit.evaluation.knn_topk`), ``k' = k + max(4, k // 4)``. A
    self-search (``reference=None``) computes only the tiles on and above the
    block diagonal. The "filter" method skips most of a tile by thresholding
    group maxima; the "dense" method (large ``k``) runs one ``topk`` per strip.
2. Exact re-ranking (:mod:`~dmlkit.evaluation.knn_certificate`): the
    candidates' squared distances are recomputed by direct differences in
    float64 and the best ``k`` kept, nearest first; exact ties go to the
    smaller reference index, as in a stable brute-force sort.
3. Certificate (same module): a float64 bound on the rounding of the float32
    expansion proves, query by query, that no reference left out is nearer.
    The queries it does not cover (near-duplicates far from the mean, where the
    expansion cancels catastrophically) are searched again in float64.

Exclusion of the query itself (``exclude_self``)
    With ``exclude_self=True`` the reference with the same index as the query
    (``reference[i]`` for ``query[i]``) is never returned: pytorch-metric-
    learning's ``ref_includes_query`` convention (the first ``len(query)``
    references are the queries). It is index-based, so a duplicate of the query
    at another index is still found.

Threads and memory
    Tiles are processed by ``torch.get_num_threads()`` worker threads
    (:mod:`~dmlkit.evaluation.knn_workers`), each running torch single-threaded
    on its own tile (in a self-search, rounds of tiles with disjoint blocks, so
    no two workers touch the same rows). Extra memory is the tiles in flight
    (``<= max_block_bytes`` in all), the ``(n_query, k')`` tables (float32
    scores, int64 indices), and augmented float32 copies of the inputs (two of
    a self-searched set, one of a reference set). Numpy memmaps are read block
    by block and never loaded whole (:mod:`~dmlkit.evaluation.knn_inputs`).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
import torch

from dmlkit.evaluation.knn_certificate import (
    candidate_count,
    mean_row,
    rerank,
    search_again_in_float64,
    uncertified_queries,
)
from dmlkit.evaluation.knn_inputs import EmbeddingSource, check_block_bytes, check_k, check_pair
from dmlkit.evaluation.knn_tiles import choose_method, collect_candidates, tile_side
from dmlkit.evaluation.knn_workers import Workers

__all__ = ["DEFAULT_MAX_BLOCK_BYTES", "KNNResult", "knn_search"]

#: Default bound on the bytes of the float32 score tiles in flight (one per
#: worker thread; with 2 threads, two 2048 x 2048 tiles).
DEFAULT_MAX_BLOCK_BYTES = 32 * 2**20


class KNNResult(NamedTuple):
    """Neighbours of each query, nearest first.

    ``distances``: float32 ``(n_query, k)`` Euclidean (or squared) distances.
    ``indices``: int64 ``(n_query, k)`` row indices into the reference set.
    """

    distances: torch.Tensor
    indices: torch.Tensor


def knn_search(
    query: torch.Tensor | np.ndarray,
    k: int,
    reference: torch.Tensor | np.ndarray | None = None,
    *,
    exclude_self: bool | None = None,
    max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
    squared: bool = False,
    method: Literal["auto", "filter", "dense"] = "auto",
) -> KNNResult:
    """Exact ``k`` nearest references of every query in Euclidean distance.

    Args:
        query: ``(n_query, d)`` embeddings (torch tensor, numpy array or memmap).
        k: number of neighbours, ``1 <= k <= n_reference`` (minus one when
            ``exclude_self``). There is no other cap.
        reference: ``(n_reference, d)`` embeddings; ``None`` searches ``query``
            against itself (and then only half the products are computed).
        exclude_self: never return ``reference[i]`` as a neighbour of
            ``query[i]``. Defaults to ``True`` when ``reference is None`` and to
            ``False`` otherwise; with an explicit reference it requires
            ``n_reference >= n_query`` (PML's ``ref_includes_query``).
        max_block_bytes: bound on the float32 score tiles in flight (one per
            worker thread, ``torch.get_num_threads()`` workers); peak extra
            memory is about this, plus the ``(n_query, k)`` tables, plus
            augmented float32 copies of in-memory inputs.
        squared: return squared distances.
        method: ``"filter"`` (threshold-filtered tiles, fast for small ``k``),
            ``"dense"`` (one ``topk`` per strip) or ``"auto"``.

    Returns:
        :class:`KNNResult` with ``distances`` and ``indices``, nearest first.
        The neighbours are exact for the float32 inputs (candidates from the
        float32 expansion, re-ranked by float64 direct differences under a
        rounding certificate; see the module docstring), and the distances
        (float32) are the direct-difference ones, so a point's distance to
        itself is exactly 0. Exact ties (equal float64 distances) go to the
        smaller reference index.

    Raises:
        ValueError: on non-2-D, empty or non-finite inputs, mismatched
            dimensions, or an impossible ``k``.
    """
    if method not in ("auto", "filter", "dense"):
        raise ValueError(f"method must be 'auto', 'filter' or 'dense'; got {method!r}")
    max_block_bytes = check_block_bytes(max_block_bytes)
    q = EmbeddingSource(query, "query")
    r = None if reference is None else EmbeddingSource(reference, "reference")
    ref = q if r is None else r
    if exclude_self is None:
        exclude_self = r is None
    exclude_self = bool(exclude_self)
    check_pair(q, ref, exclude_self)
    k = check_k(k, ref.n, exclude_self)
    idx, dist = exact_neighbours(q, r, k, exclude_self, max_block_bytes, method)
    if not squared:
        dist = dist.sqrt()
    return KNNResult(dist, idx)


def exact_neighbours(
    q: EmbeddingSource,
    r: EmbeddingSource | None,
    k: int,
    exclude_self: bool,
    max_block_bytes: int,
    method: str = "auto",
    float64: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``k`` of ``q`` against ``r`` (``None``: against ``q`` itself):
    :func:`knn_search` on validated arguments.

    Returns ``(indices, squared distances)``, int64 and float32 (float64, the
    direct-difference values the ranking used, with ``float64=True``), both
    ``(n_query, k)``, nearest first.
    """
    ref = q if r is None else r
    available = ref.n - int(exclude_self)
    kc = candidate_count(k, available)
    n_workers = torch.get_num_threads()
    # Each worker holds one tile, so the tiles share the budget.
    budget = max(1, max_block_bytes // n_workers)
    block = tile_side(budget)
    method = choose_method(method, kc, block, ref.n)
    with torch.no_grad(), Workers(n_workers) as workers:
        # Distances do not change under a shift; centring on the reference mean
        # shrinks the norms, hence the rounding error of the expansion.
        shift = mean_row(ref, block).float()
        top = collect_candidates(q, r, kc, exclude_self, method, block, budget, workers, shift)
        d2, idx = rerank(q, ref, top.indices, k, budget, workers)
        if kc < available:  # otherwise every reference was a candidate
            worst_collected = top.scores.amin(dim=1)
            failed = uncertified_queries(q, r, worst_collected, d2[:, -1], block, shift)
            if failed.numel():
                search_again_in_float64(q, ref, failed, kc, exclude_self, budget, workers, shift, d2, idx)
    return idx, (d2 if float64 else d2.float())
