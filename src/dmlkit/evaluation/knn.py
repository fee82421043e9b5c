"""Exact k-nearest neighbours in Euclidean distance, computed in blocks.

This is the search that the retrieval metrics (``dmlkit.evaluation.retrieval``)
rest on. It never materialises the ``n_query x n_reference`` distance matrix:
scores are computed one tile at a time with a matrix product, and each tile is
reduced straight into a running ``(n_query, k')`` top-k table.

1. Candidates by a float32 expansion
    A tile holds ``s(q, r) = q.r - |q|^2/2 - |r|^2/2 = -|q - r|^2 / 2`` from one
    matrix product of augmented vectors ``[q, -|q|^2/2, 1]`` and
    ``[r, 1, -|r|^2/2]`` (the expansion faiss' ``IndexFlatL2`` uses for large
    inputs). ``s`` is symmetric, so a self-search (``reference=None``) computes
    only the tiles on and above the block diagonal and feeds each tile to its
    rows and to its columns: half the products of a plain search.
    ``k' = k + max(4, k // 4)`` candidates are kept per query.

2. Selection ("filter" method, used when ``k'`` is small relative to a tile)
    Every row keeps its current worst kept score as a threshold. A tile is first
    reduced to maxima over groups of ``_GROUP`` columns (and, for the column side
    of a symmetric tile, over groups of rows); only groups whose maximum beats
    the row's threshold are gathered and merged. After ``m`` columns a new tile
    of ``B`` columns holds about ``k' B / m`` new members of a row's top-k', so
    almost all of a tile is discarded by one cheap reduction. The first tile of
    every row (the diagonal tile in a self-search) is merged with a dense
    ``topk``. The "dense" method (large ``k``) instead reduces strips of full
    reference width with one ``topk`` each.

3. Exact re-ranking with a certificate
    The candidates' squared distances are recomputed by direct differences
    ``sum((q - r)^2)`` in float64 and the best ``k`` kept. Any reference not collected has
    an expanded squared distance of at least ``e`` (the worst collected), hence
    a true one of at least ``e - delta``, ``delta = 4 gamma_{d+2} (|q|^2 +
    max|r|^2)`` being the rounding bound of the float32 expansion (Higham's
    ``gamma_m = m u / (1 - m u)``, ``u = 2^-24``). A query whose k-th
    recomputed distance is below ``e - delta`` has its exact ``k`` nearest; the
    others (near-duplicates far from the origin, where the expansion cancels
    catastrophically) are searched again in float64. So results are exact for
    the float32 inputs (ranked by float64 distances; exact ties go to the
    smaller reference index, as in a stable brute-force sort).

Exclusion of the query itself (``exclude_self``)
    With ``exclude_self=True`` the reference with the same index as the query
    (``reference[i]`` for ``query[i]``) is never returned: pytorch-metric-
    learning's ``ref_includes_query`` convention (the first ``len(query)``
    references are the queries). It is index-based, so a duplicate of the query
    at another index is still found.

Threads and memory
    Tiles are processed by ``torch.get_num_threads()`` worker threads, each
    running torch single-threaded on its own tile (in a self-search, rounds of
    tiles with disjoint blocks, so no two workers touch the same rows). Coarse
    tasks keep the search fast when other processes compete for the cores,
    where many small multi-threaded ops stall on their synchronisation.
    Extra memory is the tiles in flight (``<= max_block_bytes`` in all), the
    ``(n_query, k')`` tables (float32 scores, int64 indices), and augmented
    float32 copies of the inputs (two of a self-searched set, one of a
    reference set). Numpy memmaps are read block by block and never loaded
    whole.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, NamedTuple

import numpy as np
import torch

__all__ = ["DEFAULT_MAX_BLOCK_BYTES", "KNNResult", "knn_search"]

#: Default bound on the bytes of the float32 score tiles in flight (one per
#: worker thread; with 2 threads, two 2048 x 2048 tiles).
DEFAULT_MAX_BLOCK_BYTES = 32 * 2**20

# Columns (row side) and rows (column side) of a tile are reduced in groups of
# this many before thresholding; tiles are padded to multiples of _GROUP.
_GROUP = 32
# Column-side groups are smaller: their members are a column apart in memory.
_COL_GROUP = 16
# Block boundaries are multiples of this, so grouped axes have lengths that are
# multiples of 8 (vectorised reductions).
_UNIT = 8 * _GROUP
# The filter method is used when k <= block_size / _FILTER_K_RATIO.
_FILTER_K_RATIO = 8
_NEG_INF = float("-inf")


class KNNResult(NamedTuple):
    """Neighbours of each query, nearest first.

    ``distances``: float32 ``(n_query, k)`` Euclidean (or squared) distances.
    ``indices``: int64 ``(n_query, k)`` row indices into the reference set.
    """

    distances: torch.Tensor
    indices: torch.Tensor


# --------------------------------------------------------------------------- #
# Input handling
# --------------------------------------------------------------------------- #


class _Source:
    """A 2-D float matrix read in float32 row blocks (tensor, ndarray or memmap)."""

    def __init__(self, x: object, name: str) -> None:
        self.name = name
        if isinstance(x, torch.Tensor):
            data: torch.Tensor | np.ndarray = x.detach()
        elif isinstance(x, np.ndarray):
            data = x
        else:
            try:
                data = np.asarray(x)
            except Exception as exc:  # pragma: no cover - exotic inputs
                raise ValueError(
                    f"{name} must be a torch.Tensor or numpy array of shape (n, d); "
                    f"got {type(x).__name__}"
                ) from exc
        if data.ndim != 2:
            raise ValueError(
                f"{name} must be 2-D with shape (n, d); got shape {tuple(data.shape)}. "
                "Reshape it, e.g. x.reshape(len(x), -1)."
            )
        n, d = int(data.shape[0]), int(data.shape[1])
        if n == 0 or d == 0:
            raise ValueError(
                f"{name} is empty (shape {tuple(data.shape)}); pass at least one "
                "embedding with at least one dimension."
            )
        if isinstance(data, torch.Tensor):
            if data.is_complex() or not (data.is_floating_point() or _is_int(data.dtype)):
                raise ValueError(f"{name} must hold real numbers; got dtype {data.dtype}")
        elif not (np.issubdtype(data.dtype, np.floating) or np.issubdtype(data.dtype, np.integer)):
            raise ValueError(f"{name} must hold real numbers; got dtype {data.dtype}")
        self.n, self.d = n, d
        # numpy memmaps are streamed; everything else is converted once.
        self._lazy = isinstance(data, np.memmap)
        if self._lazy:
            self._data: torch.Tensor | np.ndarray = data
        else:
            t = torch.as_tensor(data).to(device="cpu", dtype=torch.float32)
            if not bool(torch.isfinite(t).all()):
                raise _non_finite(name)
            self._data = t.contiguous()

    def rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` as a float32 tensor (checked finite when streamed)."""
        if not self._lazy:
            assert isinstance(self._data, torch.Tensor)
            return self._data[start:stop]
        block = torch.from_numpy(np.array(self._data[start:stop], dtype=np.float32))
        if not bool(torch.isfinite(block).all()):
            raise _non_finite(self.name)
        return block

    def rows_at(self, index: torch.Tensor) -> torch.Tensor:
        """Rows at sorted unique ``index`` as a float32 tensor."""
        if not self._lazy:
            assert isinstance(self._data, torch.Tensor)
            return self._data[index]
        block = np.asarray(self._data[index.numpy()], dtype=np.float32)
        return torch.from_numpy(block)


def _is_int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _non_finite(name: str) -> ValueError:
    return ValueError(
        f"{name} contains NaN or infinite values; check the model output "
        "(e.g. a diverged loss) or drop those rows before evaluating."
    )


def _augment(x: torch.Tensor, left: bool, pad_to: int, shift: torch.Tensor) -> torch.Tensor:
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


def _bounds(n: int, block: int) -> list[tuple[int, int]]:
    """Split ``range(n)`` into near-equal blocks of at most ``block`` rows, every
    boundary a multiple of ``_UNIT`` (so only the last block is ragged)."""
    unit = _UNIT if block >= _UNIT else _GROUP
    units = math.ceil(n / unit)
    per = max(1, block // unit)
    nblocks = math.ceil(units / per)
    edges = [min(n, round(i * units / nblocks) * unit) for i in range(nblocks + 1)]
    return [(edges[i], edges[i + 1]) for i in range(nblocks) if edges[i + 1] > edges[i]]


def _padded(n: int) -> int:
    return math.ceil(n / _GROUP) * _GROUP


def _block_size(max_block_bytes: int) -> int:
    side = int(math.isqrt(max(1, max_block_bytes) // 4))
    unit = _UNIT if side >= _UNIT else _GROUP
    return max(_GROUP, side - side % unit)


# --------------------------------------------------------------------------- #
# Running top-k table
# --------------------------------------------------------------------------- #


class _TopK:
    """Per-row best ``k`` scores (in no particular order) with their column
    indices; ``thr`` is each row's worst kept score."""

    def __init__(self, n: int, k: int) -> None:
        self.k = k
        self.vals = torch.full((n, k), _NEG_INF, dtype=torch.float32)
        self.idx = torch.full((n, k), -1, dtype=torch.int64)
        self.thr = torch.full((n,), _NEG_INF, dtype=torch.float32)

    def dense(self, scores: torch.Tensor, row0: int, col0: int) -> None:
        """Merge every entry of ``scores`` (rows ``row0..``, columns ``col0..``)."""
        r = scores.shape[0]
        kk = min(self.k, scores.shape[1])
        tv, ti = torch.topk(scores, kk, dim=1, sorted=False)
        rows = slice(row0, row0 + r)
        cv = torch.cat([self.vals[rows], tv], dim=1)
        ci = torch.cat([self.idx[rows], ti.add_(col0)], dim=1)
        nv, sel = torch.topk(cv, self.k, dim=1, sorted=False)
        self.vals[rows] = nv
        self.idx[rows] = ci.gather(1, sel)
        self.thr[rows] = nv.amin(dim=1)

    def sparse(self, rows: torch.Tensor, cand_vals: torch.Tensor, cand_cols: torch.Tensor) -> None:
        """Merge candidate groups: ``rows`` (h,) ascending global row ids, one row
        per group, and the group's scores/columns ``(h, g)``."""
        keep = cand_vals > self.thr[rows].unsqueeze(1)
        hit = keep.nonzero()
        if hit.shape[0] == 0:
            return
        gi, gj = hit[:, 0], hit[:, 1]
        crow = rows[gi]
        cval = cand_vals[gi, gj]
        ccol = cand_cols[gi, gj]
        urows, counts = torch.unique_consecutive(crow, return_counts=True)
        width = int(counts.max())
        grp = torch.repeat_interleave(torch.arange(urows.shape[0]), counts)
        starts = torch.cumsum(counts, 0) - counts
        pos = torch.arange(crow.shape[0]) - starts[grp] + self.k
        pv = torch.full((urows.shape[0], self.k + width), _NEG_INF, dtype=torch.float32)
        pi = torch.full((urows.shape[0], self.k + width), -1, dtype=torch.int64)
        pv[:, : self.k] = self.vals[urows]
        pi[:, : self.k] = self.idx[urows]
        pv[grp, pos] = cval
        pi[grp, pos] = ccol
        nv, sel = torch.topk(pv, self.k, dim=1, sorted=False)
        self.vals[urows] = nv
        self.idx[urows] = pi.gather(1, sel)
        self.thr[urows] = nv.amin(dim=1)


def _absorb_rows(top: _TopK, s: torch.Tensor, nr: int, row0: int, col0: int) -> None:
    """Row side of tile ``s`` (columns a multiple of ``_GROUP``, padding at -inf):
    merge into rows ``row0..row0+nr``.

    Group ``g`` of a row holds the columns ``g, g + m, g + 2m, ...`` (``m`` =
    columns / ``_GROUP``): reducing over a strided middle axis vectorises over
    the contiguous one, several times faster than reducing contiguous runs.
    """
    ng = s.shape[1] // _GROUP
    grouped = s[:nr].view(nr, _GROUP, ng)
    gmax = grouped.amax(dim=1)
    hit = (gmax > top.thr[row0 : row0 + nr].unsqueeze(1)).nonzero()
    if hit.shape[0] == 0:
        return
    ri, gi = hit[:, 0], hit[:, 1]
    cand = grouped[ri, :, gi]  # (h, _GROUP)
    cols = (gi + col0).unsqueeze(1) + torch.arange(0, _GROUP * ng, ng)
    top.sparse(ri + row0, cand, cols)


def _absorb_cols(top: _TopK, s: torch.Tensor, nc: int, row0: int, col0: int) -> None:
    """Column side of tile ``s`` (rows a multiple of ``_GROUP``, padding at -inf):
    the tile's columns ``col0..col0+nc`` are rows of the table whose candidates
    are the tile's rows ``row0..``."""
    ng = s.shape[0] // _COL_GROUP
    grouped = s[:, :nc].view(ng, _COL_GROUP, nc)
    gmax = grouped.amax(dim=1)  # (ng, nc)
    hit = (gmax.t() > top.thr[col0 : col0 + nc].unsqueeze(1)).nonzero()  # sorted by column
    if hit.shape[0] == 0:
        return
    cj, gi = hit[:, 0], hit[:, 1]
    cand = grouped[gi, :, cj]  # (h, _COL_GROUP)
    cols = (gi * _COL_GROUP + row0).unsqueeze(1) + torch.arange(_COL_GROUP)
    top.sparse(cj + col0, cand, cols)


def _mask_self(s: torch.Tensor, row0: int, row1: int, col0: int, col1: int) -> None:
    lo, hi = max(row0, col0), min(row1, col1)
    if lo < hi:
        ids = torch.arange(lo, hi)
        s[ids - row0, ids - col0] = _NEG_INF


# --------------------------------------------------------------------------- #
# Search strategies
# --------------------------------------------------------------------------- #


class _Workers:
    """Runs batches of independent tasks on ``n`` threads, each running torch
    single-threaded (``torch.set_num_threads`` is thread-local, so the caller's
    setting is untouched).

    Coarse tasks (whole tiles) instead of many small multi-threaded ops keep the
    search fast when other processes compete for the cores: an OpenMP barrier
    per small op stalls whenever one core is taken, a whole tile does not.
    """

    def __init__(self, n: int) -> None:
        self.n = max(1, n)
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> "_Workers":
        if self.n > 1:
            self._pool = ThreadPoolExecutor(self.n, initializer=torch.set_num_threads, initargs=(1,))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def run(self, fn: Callable[..., None], items: Sequence[object]) -> None:
        """``fn(item)`` for every item (concurrently); waits and re-raises."""
        if self._pool is None or len(items) <= 1:
            for item in items:
                fn(item)
            return

        def task(item: object) -> None:
            with torch.no_grad():
                fn(item)

        futures = [self._pool.submit(task, item) for item in items]
        for f in futures:
            f.result()


class _Buffers(threading.local):
    """One reusable float32 tile buffer per thread."""

    def get(self, rows: int, cols: int) -> torch.Tensor:
        buf = getattr(self, "buf", None)
        if buf is None or buf.numel() < rows * cols:
            buf = self.buf = torch.empty(rows * cols, dtype=torch.float32)
        return buf[: rows * cols].view(rows, cols)


def _round_robin(n: int) -> list[list[tuple[int, int]]]:
    """All pairs ``a < b`` of ``range(n)`` in rounds of disjoint pairs (circle method)."""
    ids: list[int] = list(range(n)) + ([-1] if n % 2 else [])
    m = len(ids)
    rounds = []
    for _ in range(m - 1):
        pairs = [(ids[i], ids[m - 1 - i]) for i in range(m // 2)]
        rounds.append([(min(p), max(p)) for p in pairs if -1 not in p])
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return [r for r in rounds if r]


def _filter_self(
    src: _Source, k: int, exclude_self: bool, block: int, workers: _Workers, shift: torch.Tensor
) -> _TopK:
    """Self-search: tiles on and above the diagonal, each feeding rows and columns.

    Pass 1 merges the diagonal tiles densely (independent per block). Pass 2
    visits the tiles above the diagonal in rounds of disjoint block pairs, so
    the tiles of one round touch disjoint rows of the table and run concurrently.
    """
    n = src.n
    bounds = _bounds(n, block)
    top = _TopK(n, k)
    buffers = _Buffers()
    cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def pieces(a: int) -> tuple[torch.Tensor, torch.Tensor]:
        if a in cache:
            return cache[a]
        s, e = bounds[a]
        x = src.rows(s, e)
        out = _augment(x, True, _padded(e - s), shift), _augment(x, False, _padded(e - s), shift)
        if not src._lazy:
            cache[a] = out
        return out

    def tile(left: torch.Tensor, right: torch.Tensor, nr: int, nc: int) -> torch.Tensor:
        out = buffers.get(left.shape[0], right.shape[0])
        torch.mm(left, right.t(), out=out)
        out[nr:] = _NEG_INF
        out[:, nc:] = _NEG_INF
        return out

    def diagonal(a: int) -> None:
        a0, a1 = bounds[a]
        la, ra = pieces(a)
        s = tile(la, ra, a1 - a0, a1 - a0)
        if exclude_self:
            s.diagonal().fill_(_NEG_INF)
        top.dense(s[: a1 - a0, : a1 - a0], a0, a0)

    def off_diagonal(pair: tuple[int, int]) -> None:
        a, b = pair
        (a0, a1), (b0, b1) = bounds[a], bounds[b]
        s = tile(pieces(a)[0], pieces(b)[1], a1 - a0, b1 - b0)
        _absorb_rows(top, s, a1 - a0, a0, b0)
        _absorb_cols(top, s, b1 - b0, a0, b0)

    workers.run(diagonal, range(len(bounds)))
    for pairs in _round_robin(len(bounds)):
        workers.run(off_diagonal, pairs)
    return top


def _filter_cross(
    q: _Source, r: _Source, k: int, exclude_self: bool, block: int, workers: _Workers, shift: torch.Tensor
) -> _TopK:
    """Each query block against every reference tile, row side only; query
    blocks are independent and run concurrently."""
    qb, rbounds = _bounds(q.n, block), _bounds(r.n, block)
    top = _TopK(q.n, k)
    buffers = _Buffers()
    rcache: dict[int, torch.Tensor] = {}

    def right(b: int) -> torch.Tensor:
        if b in rcache:
            return rcache[b]
        b0, b1 = rbounds[b]
        rb = _augment(r.rows(b0, b1), False, _padded(b1 - b0), shift)
        if not r._lazy:
            rcache[b] = rb
        return rb

    if not r._lazy:
        workers.run(right, range(len(rbounds)))

    def strip(a: tuple[int, int]) -> None:
        a0, a1 = a
        la = _augment(q.rows(a0, a1), True, a1 - a0, shift)
        for b, (b0, b1) in enumerate(rbounds):
            rb = right(b)
            s = buffers.get(la.shape[0], rb.shape[0])
            torch.mm(la, rb.t(), out=s)
            s[:, b1 - b0 :] = _NEG_INF
            if exclude_self:
                _mask_self(s, a0, a1, b0, b1)
            if b == 0:
                top.dense(s, a0, b0)
            else:
                _absorb_rows(top, s, a1 - a0, a0, b0)

    workers.run(strip, qb)
    return top


def _dense(
    q: _Source, r: _Source, k: int, exclude_self: bool, max_block_bytes: int, workers: _Workers,
    shift: torch.Tensor,
) -> _TopK:
    """Strips of full reference width, one ``topk`` per strip (any ``k``)."""
    top = _TopK(q.n, k)
    col_block = _block_size(max_block_bytes)
    rbounds = [(s, min(r.n, s + col_block)) for s in range(0, r.n, col_block)]
    rows_per_strip = max(1, max_block_bytes // (4 * r.n))
    rcache: dict[int, torch.Tensor] = {}

    def right(b: int) -> torch.Tensor:
        if b in rcache:
            return rcache[b]
        b0, b1 = rbounds[b]
        rb = _augment(r.rows(b0, b1), False, b1 - b0, shift)
        if not r._lazy:
            rcache[b] = rb
        return rb

    if not r._lazy:
        workers.run(right, range(len(rbounds)))

    def strip(a0: int) -> None:
        a1 = min(q.n, a0 + rows_per_strip)
        la = _augment(q.rows(a0, a1), True, a1 - a0, shift)
        out = torch.empty(a1 - a0, r.n, dtype=torch.float32)
        for b, (b0, b1) in enumerate(rbounds):
            torch.mm(la, right(b).t(), out=out[:, b0:b1])
        if exclude_self:
            _mask_self(out, a0, a1, 0, r.n)
        tv, ti = torch.topk(out, k, dim=1)
        top.vals[a0:a1] = tv
        top.idx[a0:a1] = ti

    workers.run(strip, range(0, q.n, rows_per_strip))
    return top


# --------------------------------------------------------------------------- #
# Public API
# --------------------------------------------------------------------------- #


def _gamma(m: int) -> float:
    """Higham's gamma_m for float32: bound on the relative error of an m-term sum."""
    u = 2.0**-24
    return m * u / (1.0 - m * u)


def _mean(src: _Source, block: int) -> torch.Tensor:
    total = torch.zeros(src.d, dtype=torch.float64)
    for s0 in range(0, src.n, block):
        total += src.rows(s0, min(src.n, s0 + block)).double().sum(dim=0)
    return total / src.n


def _sq_norms(src: _Source, block: int, shift: torch.Tensor) -> torch.Tensor:
    """``|x - shift|^2`` of every row, float64."""
    out = torch.empty(src.n, dtype=torch.float64)
    for s0 in range(0, src.n, block):
        s1 = min(src.n, s0 + block)
        out[s0:s1] = (src.rows(s0, s1).double() - shift.double()).pow(2).sum(dim=1)
    return out


def _candidate_count(k: int, available: int) -> int:
    """Neighbours collected by the float32 expansion before the exact re-ranking."""
    return min(available, k + max(4, k // 4))


def _search(
    q: _Source,
    r: _Source | None,
    k: int,
    exclude_self: bool,
    max_block_bytes: int,
    method: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``k`` of ``q`` against ``r`` (``None``: against ``q`` itself).

    Returns ``(indices, squared distances)``, both ``(n_query, k)``, nearest
    first. Arguments are assumed validated.

    1. The blocked float32 expansion collects ``k' > k`` candidates per query.
    2. Their squared distances are recomputed by direct differences in float64
       and the best ``k`` kept.
    3. Certificate: every reference not collected has an expanded squared
       distance of at least ``e`` (the worst collected one), so a true squared
       distance of at least ``e - delta`` with ``delta = 5 gamma_{d+2}
       (|q - m|^2 + max |r - m|^2)`` the rounding bound of the expansion of the
       vectors centred on the reference mean ``m``. When ``e - delta``
       exceeds the k-th recomputed distance the k kept are the exact k
       nearest. Queries that fail the certificate (tight clusters far from the
       mean, say) collect their ``k'`` candidates again with a float64
       expansion, re-ranked the same way.
    """
    ref = q if r is None else r
    available = ref.n - int(exclude_self)
    kc = _candidate_count(k, available)
    n_workers = torch.get_num_threads()
    # Each worker holds one tile, so the tiles share the budget.
    budget = max(1, max_block_bytes // n_workers)
    block = _block_size(budget)
    if method == "auto":
        method = "filter" if kc * _FILTER_K_RATIO <= min(block, ref.n) else "dense"
    with torch.no_grad(), _Workers(n_workers) as workers:
        # Distances do not change under a shift; centring on the reference mean
        # shrinks the norms, hence the rounding error of the expansion.
        shift = _mean(ref, block).float()
        if method == "dense":
            top = _dense(q, ref, kc, exclude_self, budget, workers, shift)
        elif r is None:
            top = _filter_self(q, kc, exclude_self, block, workers, shift)
        else:
            top = _filter_cross(q, ref, kc, exclude_self, block, workers, shift)
        d2 = _exact_distances(q, ref, top.idx, budget, workers)
        d2, idx = _rank(d2, top.idx)
        d2, idx = d2[:, :k].contiguous(), idx[:, :k].contiguous()
        if kc < available:
            qn = _sq_norms(q, block, shift)
            rn_max = float(_sq_norms(ref, block, shift).max()) if r is not None else float(qn.max())
            # 4 gamma for the expansion, one more for rounding x - shift.
            delta = 5.0 * _gamma(q.d + 2) * (qn + rn_max)
            worst_collected = top.vals.amin(dim=1).double() * -2.0
            kth = d2[:, -1] * (1.0 + 1e-12)  # float64 direct differences
            failed = torch.nonzero(worst_collected - delta <= kth).flatten()
            if failed.numel():
                fi = _float64_rows(q, ref, failed, kc, exclude_self, budget, shift)
                fd = _exact_distances(q, ref, fi, budget, workers, rows=failed)
                fd, fi = _rank(fd, fi)
                idx[failed] = fi[:, :k]
                d2[failed] = fd[:, :k]
    return idx, d2.float()


def _rank(d2: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort each row's candidates by distance, breaking exact ties by the smaller
    reference index (the order of a brute-force stable sort, and of faiss)."""
    by_index = idx.argsort(dim=1, stable=True)
    d2, idx = d2.gather(1, by_index), idx.gather(1, by_index)
    d2, order = torch.sort(d2, dim=1, stable=True)
    return d2, idx.gather(1, order)


def _float64_rows(
    q: _Source, r: _Source, rows: torch.Tensor, k: int, exclude_self: bool, max_block_bytes: int,
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
        qx = (q.rows_at(sub) if q._lazy else q.rows(0, q.n)[sub]).double() - shift
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
        out_i[c0 : c0 + len(sub)] = best_i
    return out_i


def _check_k(k: object, n_reference: int, exclude_self: bool) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be a positive integer; got {k!r}")
    available = n_reference - int(exclude_self)
    if k < 1 or k > available:
        raise ValueError(
            f"k must be between 1 and {available} (the number of candidate references"
            f"{' once each query itself is excluded' if exclude_self else ''}); got {k}"
        )
    return int(k)


def _check_block_bytes(max_block_bytes: object) -> int:
    if (
        isinstance(max_block_bytes, bool)
        or not isinstance(max_block_bytes, (int, np.integer))
        or max_block_bytes <= 0
    ):
        raise ValueError(f"max_block_bytes must be a positive integer; got {max_block_bytes!r}")
    return int(max_block_bytes)


def _check_pair(q: _Source, r: _Source, exclude_self: bool) -> None:
    if r.d != q.d:
        raise ValueError(
            f"query and reference have different dimensions ({q.d} vs {r.d}); "
            "embed both sets with the same model."
        )
    if exclude_self and r.n < q.n:
        raise ValueError(
            f"excluding each query from its own neighbours needs reference[i] to be "
            f"query[i], but reference has {r.n} rows and query has {q.n}. Put the "
            "queries first in the reference set, or do not exclude them."
        )


def _exact_distances(
    q: _Source,
    r: _Source,
    idx: torch.Tensor,
    max_block_bytes: int,
    workers: _Workers,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Squared distances ``|q_i - r_idx[i, j]|^2`` by direct differences in float64
    (exact to ~1e-16 relative for the float32 inputs). ``rows``: the query row of
    each line of ``idx`` (sorted), when not all queries in order."""
    n, k = idx.shape
    chunk_rows = max(1, max_block_bytes // max(1, 8 * k * q.d))
    out = torch.empty(n, k, dtype=torch.float64)

    def gather(src: _Source, index: torch.Tensor) -> torch.Tensor:
        if src._lazy:
            uniq, inv = torch.unique(index, return_inverse=True)
            return src.rows_at(uniq).double()[inv]
        return src.rows(0, src.n)[index].double()

    def chunk(a0: int) -> None:
        a1 = min(n, a0 + chunk_rows)
        queries = q.rows(a0, a1).double() if rows is None else gather(q, rows[a0:a1])
        diff = gather(r, idx[a0:a1]).sub_(queries.unsqueeze(1))
        out[a0:a1] = diff.pow_(2).sum(dim=2)

    workers.run(chunk, range(0, n, chunk_rows))
    return out


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
        itself is exactly 0.
        Ties are broken arbitrarily.

    Raises:
        ValueError: on non-2-D, empty or non-finite inputs, mismatched
            dimensions, or an impossible ``k``.
    """
    if method not in ("auto", "filter", "dense"):
        raise ValueError(f"method must be 'auto', 'filter' or 'dense'; got {method!r}")
    max_block_bytes = _check_block_bytes(max_block_bytes)
    q = _Source(query, "query")
    r = None if reference is None else _Source(reference, "reference")
    ref = q if r is None else r
    if exclude_self is None:
        exclude_self = r is None
    exclude_self = bool(exclude_self)
    _check_pair(q, ref, exclude_self)
    k = _check_k(k, ref.n, exclude_self)
    idx, dist = _search(q, r, k, exclude_self, max_block_bytes, method)
    if not squared:
        dist = dist.sqrt()
    return KNNResult(dist, idx)
