"""The running top-k table of the exact k-NN search, and the group filter that feeds it.

:class:`TopKTable` keeps, for every query row, its best ``k`` scores seen so
far (in no particular order), their reference indices, and its current worst
kept score, the row's *threshold*. A score tile (rows: queries, columns:
references; higher is nearer) reaches it in one of two ways:

* :meth:`TopKTable.merge_dense`: one ``topk`` over every entry of the tile (the
  first tile of each row, and the diagonal tiles of a self-search);
* the group filter, :func:`absorb_tile_rows` / :func:`absorb_tile_columns`: the
  tile is first reduced to maxima over groups of ``GROUP`` columns (or, for the
  column side of a symmetric tile, of ``COLUMN_GROUP`` rows); only the groups
  whose maximum beats the row's threshold are gathered and merged
  (:meth:`TopKTable.merge_candidates`). After ``m`` columns a new tile of ``B``
  columns holds about ``k B / m`` new members of a row's top-k, so almost all
  of a tile is discarded by one cheap reduction.

Tiles given to the group filter are padded to multiples of ``GROUP`` (rows and
columns) with ``-inf``. This module is a part of
:func:`dmlkit.evaluation.knn_search`, not an API of its own.
"""

from __future__ import annotations

import torch

#: Columns (row side) and rows (column side) of a tile are reduced in groups of
#: this many before thresholding; tiles are padded to multiples of GROUP.
GROUP = 32
#: Column-side groups are smaller: their members are a column apart in memory.
COLUMN_GROUP = 16

NEG_INF = float("-inf")


class TopKTable:
    """Per-row best ``k`` scores (in no particular order) with their column
    indices; ``threshold`` is each row's worst kept score."""

    def __init__(self, n: int, k: int) -> None:
        self.k = k
        self.scores = torch.full((n, k), NEG_INF, dtype=torch.float32)
        self.indices = torch.full((n, k), -1, dtype=torch.int64)
        self.threshold = torch.full((n,), NEG_INF, dtype=torch.float32)

    def merge_dense(self, scores: torch.Tensor, row0: int, col0: int) -> None:
        """Merge every entry of ``scores`` (rows ``row0..``, columns ``col0..``)."""
        r = scores.shape[0]
        kk = min(self.k, scores.shape[1])
        tv, ti = torch.topk(scores, kk, dim=1, sorted=False)
        rows = slice(row0, row0 + r)
        cv = torch.cat([self.scores[rows], tv], dim=1)
        ci = torch.cat([self.indices[rows], ti.add_(col0)], dim=1)
        self._keep_best(rows, cv, ci)

    def merge_candidates(self, rows: torch.Tensor, cand_scores: torch.Tensor, cand_cols: torch.Tensor) -> None:
        """Merge candidate groups: ``rows`` (h,) ascending global row ids, one row
        per group, and the group's scores/columns ``(h, g)``. Only candidates
        above their row's threshold are kept."""
        keep = cand_scores > self.threshold[rows].unsqueeze(1)
        hit = keep.nonzero()
        if hit.shape[0] == 0:
            return
        gi, gj = hit[:, 0], hit[:, 1]
        urows, padded_scores, padded_cols = self._pad_per_row(rows[gi], cand_scores[gi, gj], cand_cols[gi, gj])
        self._keep_best(urows, padded_scores, padded_cols)

    def store(self, row0: int, scores: torch.Tensor, indices: torch.Tensor) -> None:
        """Overwrite rows ``row0..`` with their final ``k`` scores and indices
        (thresholds are left stale: nothing is merged into these rows afterwards)."""
        self.scores[row0 : row0 + scores.shape[0]] = scores
        self.indices[row0 : row0 + scores.shape[0]] = indices

    def _pad_per_row(
        self, crow: torch.Tensor, cval: torch.Tensor, ccol: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Candidates (one per entry of ascending ``crow``) laid out after each
        distinct row's current ``k``: ``(rows, scores, columns)``, ``-inf`` padded."""
        urows, counts = torch.unique_consecutive(crow, return_counts=True)
        width = int(counts.max())
        grp = torch.repeat_interleave(torch.arange(urows.shape[0]), counts)
        starts = torch.cumsum(counts, 0) - counts
        pos = torch.arange(crow.shape[0]) - starts[grp] + self.k
        pv = torch.full((urows.shape[0], self.k + width), NEG_INF, dtype=torch.float32)
        pi = torch.full((urows.shape[0], self.k + width), -1, dtype=torch.int64)
        pv[:, : self.k] = self.scores[urows]
        pi[:, : self.k] = self.indices[urows]
        pv[grp, pos] = cval
        pi[grp, pos] = ccol
        return urows, pv, pi

    def _keep_best(self, rows: slice | torch.Tensor, scores: torch.Tensor, cols: torch.Tensor) -> None:
        """Rows ``rows`` keep the best ``k`` of ``scores`` (one line per row)."""
        nv, sel = torch.topk(scores, self.k, dim=1, sorted=False)
        self.scores[rows] = nv
        self.indices[rows] = cols.gather(1, sel)
        self.threshold[rows] = nv.amin(dim=1)


def absorb_tile_rows(top: TopKTable, s: torch.Tensor, nr: int, row0: int, col0: int) -> None:
    """Row side of tile ``s`` (columns a multiple of ``GROUP``, padding at -inf):
    merge into rows ``row0..row0+nr``.

    Group ``g`` of a row holds the columns ``g, g + m, g + 2m, ...`` (``m`` =
    columns / ``GROUP``): reducing over a strided middle axis vectorises over
    the contiguous one, several times faster than reducing contiguous runs.
    """
    ng = s.shape[1] // GROUP
    grouped = s[:nr].view(nr, GROUP, ng)
    gmax = grouped.amax(dim=1)
    hit = (gmax > top.threshold[row0 : row0 + nr].unsqueeze(1)).nonzero()
    if hit.shape[0] == 0:
        return
    ri, gi = hit[:, 0], hit[:, 1]
    cand = grouped[ri, :, gi]  # (h, GROUP)
    cols = (gi + col0).unsqueeze(1) + torch.arange(0, GROUP * ng, ng)
    top.merge_candidates(ri + row0, cand, cols)


def absorb_tile_columns(top: TopKTable, s: torch.Tensor, nc: int, row0: int, col0: int) -> None:
    """Column side of tile ``s`` (rows a multiple of ``COLUMN_GROUP``, padding at
    -inf): the tile's columns ``col0..col0+nc`` are rows of the table whose
    candidates are the tile's rows ``row0..``."""
    ng = s.shape[0] // COLUMN_GROUP
    grouped = s[:, :nc].view(ng, COLUMN_GROUP, nc)
    gmax = grouped.amax(dim=1)  # (ng, nc)
    hit = (gmax.t() > top.threshold[col0 : col0 + nc].unsqueeze(1)).nonzero()  # sorted by column
    if hit.shape[0] == 0:
        return
    cj, gi = hit[:, 0], hit[:, 1]
    cand = grouped[gi, :, cj]  # (h, COLUMN_GROUP)
    cols = (gi * COLUMN_GROUP + row0).unsqueeze(1) + torch.arange(COLUMN_GROUP)
    top.merge_candidates(cj + col0, cand, cols)
