"""Exactness of the k-NN search: float64 re-ranking of the float32 candidates, under a certificate.

The blocked float32 search (:mod:`dmlkit.evaluation.knn_tiles`) collects
``k' = k + max(4, k // 4)`` candidates per query (:func:`candidate_count`).
This module makes the final ``k`` exact for the float32 inputs:

1. Re-ranking (:func:`rerank`): the candidates' squared distances are
   recomputed by direct differences ``sum((q - r)^2)`` in float64
   (:func:`exact_squared_distances`) and sorted; exact ties go to the smaller
   reference index, as in a stable brute-force sort and in faiss
   (:func:`rank_by_distance`).
2. Certificate (:func:`uncertified_queries`): any reference not collected has
   an expanded squared distance of at least ``e`` (the worst collected), hence
   a true one of at least ``e - delta``, with ``delta = 5 gamma_{d+2}
   (|q - m|^2 + max |r - m|^2)`` the rounding bound of the float32 expansion
   of the vectors centred on the reference mean ``m`` (:func:`mean_row`):
   Higham's ``gamma_n = n u / (1 - n u)``, ``u = 2^-24``, four ``gamma`` for
   the expansion and one more for rounding ``x - m``. A query whose k-th
   re-ranked distance is below ``e - delta`` has its exact ``k`` nearest.
3. Repair (:func:`search_again_in_float64`): the queries the certificate does
   not cover (near-duplicates far from the mean, where the expansion cancels
   catastrophically) are searched again by float64 direct differences over
   all references (:func:`float64_nearest`), then re-ranked the same way.

Distances never change under a common shift, so centring on ``m`` only
shrinks the norms, hence ``delta``. This module is a part of
:func:`dmlkit.evaluation.knn_search`, not an API of its own.
"""

from __future__ import annotations

import torch

from dmlkit.evaluation.knn_inputs import EmbeddingSource
from dmlkit.evaluation.knn_workers import Workers


def candidate_count(k: int, available: int) -> int:
    """Neighbours collected by the float32 expansion before the exact re-ranking."""
    return min(available, k + max(4, k // 4))


def mean_row(src: EmbeddingSource, block: int) -> torch.Tensor:
    """Float64 mean of the rows of ``src``, read ``block`` rows at a time."""
    total = torch.zeros(src.d, dtype=torch.float64)
    for s0 in range(0, src.n, block):
        total += src.rows(s0, min(src.n, s0 + block)).double().sum(dim=0)
    return total / src.n


def rerank(
    q: EmbeddingSource,
    r: EmbeddingSource,
    candidates: torch.Tensor,
    k: int,
    max_block_bytes: int,
    workers: Workers,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The best ``k`` of each query's ``candidates`` by float64 squared distance:
    ``(squared distances, indices)``, both ``(n_query, k)``, nearest first."""
    d2 = exact_squared_distances(q, r, candidates, max_block_bytes, workers)
    d2, idx = rank_by_distance(d2, candidates)
    return d2[:, :k].contiguous(), idx[:, :k].contiguous()


def uncertified_queries(
    q: EmbeddingSource,
    reference: EmbeddingSource | None,
    worst_collected_score: torch.Tensor,
    kth_squared_distance: torch.Tensor,
    block: int,
    shift: torch.Tensor,
) -> torch.Tensor:
    """Sorted rows of the queries whose ``k`` kept neighbours are not certified exact.

    ``worst_collected_score``: each query's worst float32 score ``-|q - r|^2 / 2``
    among the collected candidates; ``kth_squared_distance``: its k-th re-ranked
    float64 squared distance; ``reference`` ``None`` for a self-search.
    """
    qn = _squared_norms(q, block, shift)
    rn_max = float(_squared_norms(reference, block, shift).max()) if reference is not None else float(qn.max())
    # 4 gamma for the expansion, one more for rounding x - shift.
    delta = 5.0 * _gamma(q.d + 2) * (qn + rn_max)
    worst_collected = worst_collected_score.double() * -2.0
    kth = kth_squared_distance * (1.0 + 1e-12)  # float64 direct differences
    return torch.nonzero(worst_collected - delta <= kth).flatten()


def search_again_in_float64(
    q: EmbeddingSource,
    r: EmbeddingSource,
    rows: torch.Tensor,
    num_candidates: int,
    exclude_self: bool,
    max_block_bytes: int,
    workers: Workers,
    shift: torch.Tensor,
    d2: torch.Tensor,
    idx: torch.Tensor,
) -> None:
    """Replace the neighbours of query ``rows`` in ``(d2, idx)`` by those of a
    float64 search over every reference (``num_candidates`` re-ranked, best kept)."""
    k = idx.shape[1]
    fi = float64_nearest(q, r, rows, num_candidates, exclude_self, max_block_bytes, shift)
    fd = exact_squared_distances(q, r, fi, max_block_bytes, workers, rows=rows)
    fd, fi = rank_by_distance(fd, fi)
    idx[rows] = fi[:, :k]
    d2[rows] = fd[:, :k]


def _gamma(m: int) -> float:
    """Higham's gamma_m for float32: bound on the relative error of an m-term sum."""
    u = 2.0**-24
    return m * u / (1.0 - m * u)


def _squared_norms(src: EmbeddingSource, block: int, shift: torch.Tensor) -> torch.Tensor:
    """``|x - shift|^2`` of every row, float64."""
    out = torch.empty(src.n, dtype=torch.float64)
    for s0 in range(0, src.n, block):
        s1 = min(src.n, s0 + block)
        out[s0:s1] = (src.rows(s0, s1).double() - shift.double()).pow(2).sum(dim=1)
    return out


def rank_by_distance(d2: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort each row's candidates by distance, breaking exact ties by the smaller
    reference index (the order of a brute-force stable sort, and of faiss)."""
    by_index = idx.argsort(dim=1, stable=True)
    d2, idx = d2.gather(1, by_index), idx.gather(1, by_index)
    d2, order = torch.sort(d2, dim=1, stable=True)
    return d2, idx.gather(1, order)


def exact_squared_distances(
    q: EmbeddingSource,
    r: EmbeddingSource,
    idx: torch.Tensor,
    max_block_bytes: int,
    workers: Workers,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Squared distances ``|q_i - r_idx[i, j]|^2`` by direct differences in float64
    (exact to ~1e-16 relative for the float32 inputs). ``rows``: the query row of
    each line of ``idx`` (sorted), when not all queries in order."""
    n, k = idx.shape
    chunk_rows = max(1, max_block_bytes // max(1, 8 * k * q.d))
    out = torch.empty(n, k, dtype=torch.float64)

    def chunk(a0: int) -> None:
        a1 = min(n, a0 + chunk_rows)
        queries = q.rows(a0, a1).double() if rows is None else _gather_float64(q, rows[a0:a1])
        diff = _gather_float64(r, idx[a0:a1]).sub_(queries.unsqueeze(1))
        out[a0:a1] = diff.pow_(2).sum(dim=2)

    workers.run(chunk, range(0, n, chunk_rows))
    return out


def _gather_float64(src: EmbeddingSource, index: torch.Tensor) -> torch.Tensor:
    """Rows of ``src`` at ``index`` (any shape, repeats allowed) in float64; a
    memmap reads each distinct row once."""
    if src.streamed:
        uniq, inv = torch.unique(index, return_inverse=True)
        return src.rows_at(uniq).double()[inv]
    return src.rows_at(index).double()


def float64_nearest(
    q: EmbeddingSource,
    r: EmbeddingSource,
    rows: torch.Tensor,
    k: int,
    exclude_self: bool,
    max_block_bytes: int,
    shift: torch.Tensor,
) -> torch.Tensor:
    """Indices of the ``k`` nearest references of the given query rows by float64
    direct differences (ties to the smaller index), in blocks of at most ``max_block_bytes``."""
    shift = shift.double()
    row_chunk = max(1, min(len(rows), 1024))
    col_block = max(1, max_block_bytes // (8 * row_chunk))
    out_i = torch.empty(len(rows), k, dtype=torch.int64)
    for c0 in range(0, len(rows), row_chunk):
        sub = rows[c0 : c0 + row_chunk]
        qx = q.rows_at(sub).double() - shift
        out_i[c0 : c0 + len(sub)] = _float64_nearest_chunk(qx, sub, r, k, exclude_self, col_block, shift)
    return out_i


def _float64_nearest_chunk(
    qx: torch.Tensor,
    sub: torch.Tensor,
    r: EmbeddingSource,
    k: int,
    exclude_self: bool,
    col_block: int,
    shift: torch.Tensor,
) -> torch.Tensor:
    """:func:`float64_nearest` of the centred queries ``qx`` (query rows ``sub``),
    references read ``col_block`` at a time."""
    best_v = torch.full((len(sub), k), float("inf"), dtype=torch.float64)
    best_i = torch.full((len(sub), k), -1, dtype=torch.int64)
    for b0 in range(0, r.n, col_block):
        b1 = min(r.n, b0 + col_block)
        rx = r.rows(b0, b1).double() - shift
        # Direct differences, not the expansion: exact duplicates get exactly 0.
        d = torch.cdist(qx, rx, compute_mode="donot_use_mm_for_euclid_dist").pow_(2)
        if exclude_self:
            own = (sub >= b0) & (sub < b1)
            d[own.nonzero().flatten(), sub[own] - b0] = float("inf")
        cv = torch.cat([best_v, d], dim=1)
        ci = torch.cat([best_i, torch.arange(b0, b1).expand(len(sub), -1)], dim=1)
        # A stable sort keeps (distance, index) order: kept candidates come from
        # earlier blocks (smaller indices) and each block is in index order.
        best_v, sel = torch.sort(cv, dim=1, stable=True)
        best_v, best_i = best_v[:, :k], ci.gather(1, sel[:, :k])
    return best_i
