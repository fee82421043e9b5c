"""Candidates of the exact k-NN search: blocked float32 score tiles reduced into a top-k table.

The ``n_query x n_reference`` distance matrix is never materialised: scores
are computed one tile at a time with a matrix product, and each tile is
reduced straight into a running :class:`~dmlkit.evaluation.knn_topk.TopKTable`.

Scores
    A tile holds ``s(q, r) = q.r - |q|^2/2 - |r|^2/2 = -|q - r|^2 / 2`` from one
    matrix product of augmented vectors ``[q, -|q|^2/2, 1]`` and
    ``[r, 1, -|r|^2/2]`` (:func:`augment`; the expansion faiss' ``IndexFlatL2``
    uses for large inputs), the vectors first shifted by a common ``shift``.

Methods
    * "filter", self-search (``reference=None``): ``s`` is symmetric, so only
      the tiles on and above the block diagonal are computed, and each one
      feeds its rows and its columns (half the products of a plain search).
      Diagonal tiles are merged densely; the others go through the group
      filter, in rounds of disjoint block pairs run concurrently.
    * "filter", query against reference: every query block against every
      reference tile, row side only; the first tile of a row is merged densely.
    * "dense" (large ``k``): strips of full reference width, one ``topk`` each.
    :func:`choose_method` picks "filter" when ``k`` is small relative to a tile.

Memory
    One tile per worker thread (``max_block_bytes`` in all), the table, and
    augmented float32 copies of in-memory inputs (two of a self-searched set,
    one of a reference set). Blocks of a memmap are augmented when used and
    dropped after. This module is a part of :func:`dmlkit.evaluation.knn_search`,
    not an API of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Generic, TypeVar

import torch

from dmlkit.evaluation.knn_inputs import EmbeddingSource
from dmlkit.evaluation.knn_topk import (
    GROUP,
    NEG_INF,
    TopKTable,
    absorb_tile_columns,
    absorb_tile_rows,
)
from dmlkit.evaluation.knn_workers import TileBuffers, Workers, round_robin_pairs

# Block boundaries are multiples of this, so grouped axes have lengths that are
# multiples of 8 (vectorised reductions).
_UNIT = 8 * GROUP
# The filter method is used when k <= block_size / _FILTER_K_RATIO.
_FILTER_K_RATIO = 8

_Block = TypeVar("_Block")


def tile_side(max_block_bytes: int) -> int:
    """Side of a square float32 tile of at most ``max_block_bytes`` bytes, a
    multiple of ``_UNIT`` (of ``GROUP`` for small budgets)."""
    side = int(math.isqrt(max(1, max_block_bytes) // 4))
    unit = _UNIT if side >= _UNIT else GROUP
    return max(GROUP, side - side % unit)


def choose_method(method: str, candidates: int, block: int, n_reference: int) -> str:
    """``method``, with ``"auto"`` resolved to ``"filter"`` or ``"dense"``."""
    if method != "auto":
        return method
    return "filter" if candidates * _FILTER_K_RATIO <= min(block, n_reference) else "dense"


def collect_candidates(
    query: EmbeddingSource,
    reference: EmbeddingSource | None,
    k: int,
    exclude_self: bool,
    method: str,
    block: int,
    max_block_bytes: int,
    workers: Workers,
    shift: torch.Tensor,
) -> TopKTable:
    """Top-``k`` table of ``query`` against ``reference`` (``None``: itself) by
    float32 scores. ``block``: tile side of the filter method;
    ``max_block_bytes``: strip budget of the dense method."""
    if method == "dense":
        ref = query if reference is None else reference
        return dense_search(query, ref, k, exclude_self, max_block_bytes, workers, shift)
    if reference is None:
        return filter_self_search(query, k, exclude_self, block, workers, shift)
    return filter_cross_search(query, reference, k, exclude_self, block, workers, shift)


def augment(x: torch.Tensor, left: bool, pad_to: int, shift: torch.Tensor) -> torch.Tensor:
    """``[y, -|y|^2/2, 1]`` (left) or ``[y, 1, -|y|^2/2]`` (right) for
    ``y = x - shift``, zero-padded rows."""
    n, d = x.shape
    out = torch.zeros(pad_to, d + 2, dtype=torch.float32)
    y = out[:n, :d]
    torch.sub(x, shift, out=y)
    half_sq = y.pow(2).sum(dim=1).mul_(-0.5)
    if left:
        out[:n, d] = half_sq
        out[:n, d + 1] = 1.0
    else:
        out[:n, d] = 1.0
        out[:n, d + 1] = half_sq
    return out


def block_bounds(n: int, block: int) -> list[tuple[int, int]]:
    """Split ``range(n)`` into near-equal blocks of at most ``block`` rows, every
    boundary a multiple of ``_UNIT`` (so only the last block is ragged)."""
    unit = _UNIT if block >= _UNIT else GROUP
    units = math.ceil(n / unit)
    per = max(1, block // unit)
    nblocks = math.ceil(units / per)
    edges = [min(n, round(i * units / nblocks) * unit) for i in range(nblocks + 1)]
    return [(edges[i], edges[i + 1]) for i in range(nblocks) if edges[i + 1] > edges[i]]


def _group_padded(n: int) -> int:
    return math.ceil(n / GROUP) * GROUP


def _mask_self(s: torch.Tensor, row0: int, row1: int, col0: int, col1: int) -> None:
    """Set the scores of reference ``i`` for query ``i`` to -inf in the tile of
    rows ``row0:row1`` and columns ``col0:col1``."""
    lo, hi = max(row0, col0), min(row1, col1)
    if lo < hi:
        ids = torch.arange(lo, hi)
        s[ids - row0, ids - col0] = NEG_INF


class _BlockCache(Generic[_Block]):
    """``make(b)`` of block ``b``, kept after first use when ``keep`` (in-memory
    sources) and recomputed on every use otherwise (memmaps are never held whole)."""

    def __init__(self, make: Callable[[int], _Block], keep: bool) -> None:
        self._make, self._keep = make, keep
        self._cache: dict[int, _Block] = {}

    def __call__(self, b: int) -> _Block:
        if b in self._cache:
            return self._cache[b]
        value = self._make(b)
        if self._keep:
            self._cache[b] = value
        return value


def _right_blocks(
    src: EmbeddingSource,
    bounds: list[tuple[int, int]],
    pad: Callable[[int], int],
    workers: Workers,
    shift: torch.Tensor,
) -> _BlockCache[torch.Tensor]:
    """Right-augmented reference blocks, computed up front (concurrently) for an
    in-memory source."""

    def make(b: int) -> torch.Tensor:
        b0, b1 = bounds[b]
        return augment(src.rows(b0, b1), False, pad(b1 - b0), shift)

    blocks = _BlockCache(make, keep=not src.streamed)
    if not src.streamed:
        workers.run(blocks, range(len(bounds)))
    return blocks


def filter_self_search(
    src: EmbeddingSource, k: int, exclude_self: bool, block: int, workers: Workers, shift: torch.Tensor
) -> TopKTable:
    """Self-search: tiles on and above the diagonal, each feeding rows and columns.

    Pass 1 merges the diagonal tiles densely (independent per block). Pass 2
    visits the tiles above the diagonal in rounds of disjoint block pairs, so
    the tiles of one round touch disjoint rows of the table and run concurrently.
    """
    bounds = block_bounds(src.n, block)
    top = TopKTable(src.n, k)
    buffers = TileBuffers()

    def make_sides(a: int) -> tuple[torch.Tensor, torch.Tensor]:
        s, e = bounds[a]
        x = src.rows(s, e)
        return augment(x, True, _group_padded(e - s), shift), augment(x, False, _group_padded(e - s), shift)

    sides = _BlockCache(make_sides, keep=not src.streamed)

    def tile(left: torch.Tensor, right: torch.Tensor, nr: int, nc: int) -> torch.Tensor:
        out = buffers.get(left.shape[0], right.shape[0])
        torch.mm(left, right.t(), out=out)
        out[nr:] = NEG_INF
        out[:, nc:] = NEG_INF
        return out

    def diagonal(a: int) -> None:
        a0, a1 = bounds[a]
        la, ra = sides(a)
        s = tile(la, ra, a1 - a0, a1 - a0)
        if exclude_self:
            s.diagonal().fill_(NEG_INF)
        top.merge_dense(s[: a1 - a0, : a1 - a0], a0, a0)

    def off_diagonal(pair: tuple[int, int]) -> None:
        a, b = pair
        (a0, a1), (b0, b1) = bounds[a], bounds[b]
        s = tile(sides(a)[0], sides(b)[1], a1 - a0, b1 - b0)
        absorb_tile_rows(top, s, a1 - a0, a0, b0)
        absorb_tile_columns(top, s, b1 - b0, a0, b0)

    workers.run(diagonal, range(len(bounds)))
    for pairs in round_robin_pairs(len(bounds)):
        workers.run(off_diagonal, pairs)
    return top


def filter_cross_search(
    q: EmbeddingSource,
    r: EmbeddingSource,
    k: int,
    exclude_self: bool,
    block: int,
    workers: Workers,
    shift: torch.Tensor,
) -> TopKTable:
    """Each query block against every reference tile, row side only; query
    blocks are independent and run concurrently."""
    rbounds = block_bounds(r.n, block)
    top = TopKTable(q.n, k)
    buffers = TileBuffers()
    right = _right_blocks(r, rbounds, _group_padded, workers, shift)

    def strip(a: tuple[int, int]) -> None:
        a0, a1 = a
        la = augment(q.rows(a0, a1), True, a1 - a0, shift)
        for b, (b0, b1) in enumerate(rbounds):
            rb = right(b)
            s = buffers.get(la.shape[0], rb.shape[0])
            torch.mm(la, rb.t(), out=s)
            s[:, b1 - b0 :] = NEG_INF
            if exclude_self:
                _mask_self(s, a0, a1, b0, b1)
            if b == 0:
                top.merge_dense(s, a0, b0)
            else:
                absorb_tile_rows(top, s, a1 - a0, a0, b0)

    workers.run(strip, block_bounds(q.n, block))
    return top


def dense_search(
    q: EmbeddingSource,
    r: EmbeddingSource,
    k: int,
    exclude_self: bool,
    max_block_bytes: int,
    workers: Workers,
    shift: torch.Tensor,
) -> TopKTable:
    """Strips of full reference width, one ``topk`` per strip (any ``k``)."""
    top = TopKTable(q.n, k)
    col_block = tile_side(max_block_bytes)
    rbounds = [(s, min(r.n, s + col_block)) for s in range(0, r.n, col_block)]
    rows_per_strip = max(1, max_block_bytes // (4 * r.n))
    right = _right_blocks(r, rbounds, lambda rows: rows, workers, shift)

    def strip(a0: int) -> None:
        a1 = min(q.n, a0 + rows_per_strip)
        la = augment(q.rows(a0, a1), True, a1 - a0, shift)
        out = torch.empty(a1 - a0, r.n, dtype=torch.float32)
        for b, (b0, b1) in enumerate(rbounds):
            torch.mm(la, right(b).t(), out=out[:, b0:b1])
        if exclude_self:
            _mask_self(out, a0, a1, 0, r.n)
        tv, ti = torch.topk(out, k, dim=1)
        top.store(a0, tv, ti)

    workers.run(strip, range(0, q.n, rows_per_strip))
    return top
