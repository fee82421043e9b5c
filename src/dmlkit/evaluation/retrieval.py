"""Retrieval metrics of embeddings: P@1, Recall@K, R-precision, MAP@R.

One exact k-nearest-neighbour search (``dmlkit.evaluation.knn``) feeds every
metric; the metrics are then computed from the ``(n_query, K)`` table of
whether each neighbour shares the query's label, without Python loops over
queries or labels.

Definitions follow pytorch-metric-learning's ``AccuracyCalculator`` (PML 2.9,
default settings, ``k="max_bin_count"``), whose values these reproduce (to
float64 rounding, given the same neighbour order: see the float32 ties below),
and, for R-precision and MAP@R, Musgrave et al., "A Metric Learning Reality
Check" (ECCV 2020):

* ``R_i`` is the number of references that share query ``i``'s label, minus one
  when the query itself is among the references (``reference=None`` or
  ``ref_includes_query=True``).
* A query is **lone** when ``R_i == 0`` (no other item has its label). Lone
  queries are left out of every metric, Recall@K included; this is PML's
  ``not_lone_query_mask``. If every query is lone, every metric is ``nan``
  (PML returns ``nan`` as well) and a warning is issued.
* ``precision_at_1``: mean over queries of ``[label(nn_1) == label(q)]``.
* ``recall_at_{k}`` (the DML "Recall@K", i.e. hit rate): mean over queries of
  ``[some neighbour among the k nearest has the query's label]``. For
  ``k`` larger than the number of candidate references, all of them are used.
* ``r_precision``: mean over queries of ``(# same-label among the R_i nearest) / R_i``.
* ``mean_average_precision_at_r``: mean over queries of
  ``(1 / R_i) * sum_{j <= R_i} P@j * [label(nn_j) == label(q)]``, where ``P@j``
  is the precision among the ``j`` nearest (MAP@R as defined in the Reality
  Check paper).

Conventions:

* The neighbour search (:func:`dmlkit.evaluation.knn.knn_search`) is exact
  for the float32 embeddings, up to ties within float32 rounding. PML's
  default search is faiss ``IndexFlatL2``, which ranks by exact differences
  for small query sets (faiss 1.15: ``n_query * d < 128000``) and by the
  float32 expansion ``|q|^2 + |r|^2 - 2 q.r`` above that. The values are then
  equal to PML's except for queries whose same-label and different-label
  neighbours are tied within float32 rounding of that expansion, and PML's own
  values for such queries change with faiss' BLAS block sizes and thread
  count. (On the 60,502 x 128 data of ``benchmarks/retrieval.py``, dmlkit and
  PML agree exactly; changing faiss' block sizes from 4096/1024 to 1000/1500
  flips one query and moves PML's P@1 by 1/60,099.)
* ``reference=None`` uses the queries as their own references and never
  returns a query as its own neighbour (PML's ``ref_includes_query=True``).
  With ``ref_includes_query=True`` and an explicit reference, the first
  ``len(query)`` references must be the queries (same labels), and reference
  ``i`` is excluded for query ``i``.
* Labels are compared exactly. (PML casts labels to float32 first, so PML would
  merge integer labels above 2**24 that differ by less than float32 spacing.)
* Embeddings are used in float32 on CPU; numpy memmaps are streamed block by
  block and never loaded whole.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from dmlkit.evaluation.knn import DEFAULT_MAX_BLOCK_BYTES, exact_neighbours
from dmlkit.evaluation.knn_device import DeviceEmbeddings, check_same_device, device_neighbours, on_accelerator
from dmlkit.evaluation.knn_inputs import EmbeddingSource, check_block_bytes, check_pair
from dmlkit.validation import is_int

__all__ = ["retrieval_metrics", "metric_names"]

ArrayLike = torch.Tensor | np.ndarray


def metric_names(ks: Sequence[int] = (1, 2, 4, 8)) -> list[str]:
    """Keys of the dict :func:`retrieval_metrics` returns, in order."""
    return (
        ["precision_at_1"]
        + [f"recall_at_{k}" for k in ks]
        + ["r_precision", "mean_average_precision_at_r"]
    )


def check_labels(x: object, name: str, n: int, emb_name: str) -> np.ndarray:
    """``x`` as a 1-D numpy array of ``n`` real labels, one per row of ``emb_name``."""
    if x is None:
        raise ValueError(f"{name} is missing; pass one label per row of {emb_name}.")
    if isinstance(x, torch.Tensor):
        arr = x.detach().cpu().numpy()
    else:
        arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D with one label per row of {emb_name}; got shape "
            f"{arr.shape}. Flatten it (labels.reshape(-1)) if it holds one label per row."
        )
    if len(arr) != n:
        raise ValueError(
            f"{emb_name} has {n} rows but {name} has {len(arr)} entries; pass exactly "
            "one label per embedding."
        )
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric (integers preferred); got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN; every item needs a real label.")
    return arr


def check_ks(ks: Iterable[int]) -> tuple[int, ...]:
    """``ks`` as a tuple of distinct positive ints, in their first order."""
    try:
        out = tuple(ks)
    except TypeError:
        raise ValueError(f"ks must be a sequence of positive integers; got {ks!r}") from None
    for k in out:
        if not is_int(k, numpy=True) or k < 1:
            raise ValueError(f"ks must contain positive integers; got {k!r} in {out!r}")
    return tuple(dict.fromkeys(int(k) for k in out))  # unique, in order


def retrieval_metrics(
    query: ArrayLike,
    query_labels: ArrayLike,
    reference: ArrayLike | None = None,
    reference_labels: ArrayLike | None = None,
    ks: Sequence[int] = (1, 2, 4, 8),
    *,
    ref_includes_query: bool = False,
    max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
) -> dict[str, float]:
    """Retrieval metrics of ``query`` against ``reference`` (see module docstring).

    Args:
        query: ``(n_query, d)`` embeddings (torch tensor, numpy array or memmap).
        query_labels: ``(n_query,)`` class labels.
        reference: ``(n_reference, d)`` embeddings, or ``None`` to use the
            queries as their own references (each query excluded from its own
            neighbours).
        reference_labels: ``(n_reference,)`` labels; required with ``reference``.
        ks: the ``K`` of each ``recall_at_{K}``.
        ref_includes_query: the first ``n_query`` references are the queries
            themselves; exclude reference ``i`` for query ``i``.
        max_block_bytes: bound on one score tile of the neighbour search.

    Returns:
        ``{"precision_at_1", "recall_at_{k}" for k in ks, "r_precision",
        "mean_average_precision_at_r"}`` as Python floats; equal to
        ``AccuracyCalculator(k="max_bin_count").get_accuracy(...)`` of PML for
        the three metrics PML also has.

    Raises:
        ValueError: embeddings not 2-D, empty or non-finite; dimensions of query
            and reference differ; label count differs from embedding count;
            reference given without labels (or the reverse); bad ``ks``.
    """
    ks = check_ks(ks)
    max_block_bytes = check_block_bytes(max_block_bytes)
    # Embeddings on a GPU are searched there (dmlkit.evaluation.knn_device), not copied back.
    source = DeviceEmbeddings if on_accelerator(query) else EmbeddingSource
    q = source(query, "query")
    ql = check_labels(query_labels, "query_labels", q.n, "query")
    if reference is None:
        if reference_labels is not None:
            raise ValueError(
                "reference_labels was given without reference; pass both, or neither "
                "to use the queries as their own references."
            )
        r, rl, exclude_self = None, ql, True
        ref = q
    else:
        ref = r = source(reference, "reference")
        if isinstance(q, DeviceEmbeddings):
            check_same_device(q, r)  # type: ignore[arg-type]
        rl = check_labels(reference_labels, "reference_labels", r.n, "reference")
        exclude_self = bool(ref_includes_query)
        check_pair(q, r, exclude_self)
        if exclude_self and not np.array_equal(ql, rl[: q.n]):
            raise ValueError(
                "ref_includes_query=True needs reference_labels[:len(query)] to equal "
                "query_labels (the queries must come first in the reference set)."
            )

    # Label codes shared by query and reference; R_i = same-label references.
    _, codes = np.unique(np.concatenate([ql, rl]), return_inverse=True)
    q_codes = codes[: q.n].astype(np.int64)
    r_codes = codes[q.n :].astype(np.int64) if r is not None else q_codes
    per_label = np.bincount(r_codes, minlength=int(codes.max()) + 1)
    rel_count = per_label[q_codes] - int(exclude_self)
    active = rel_count > 0

    names = metric_names(ks)
    if not active.any():
        warnings.warn(
            "No query label occurs among the other reference items, so every "
            "retrieval metric is undefined (nan).",
            RuntimeWarning,
            stacklevel=2,
        )
        return {name: math.nan for name in names}

    available = ref.n - int(exclude_self)
    num_k = min(available, max([int(rel_count[active].max()), *ks]))
    if isinstance(q, DeviceEmbeddings):
        idx, _ = device_neighbours(q, r, num_k, exclude_self)  # type: ignore[arg-type]
    else:
        idx, _ = exact_neighbours(q, r, num_k, exclude_self, max_block_bytes)
    return _metrics_from_neighbours(idx.cpu().numpy(), q_codes, r_codes, rel_count, active, ks, names)


def per_query_values(match: np.ndarray, big_r: np.ndarray, ks: tuple[int, ...]) -> np.ndarray:
    """Each query's contribution to every metric, ``(c, 3 + len(ks))`` float64:
    ``[hit at 1, hit within k for k in ks, R-precision, AP@R]``.

    ``match`` (c, K) bool: neighbour j of query i shares its label; ``big_r``
    (c,) int: R of each query (all > 0). Each row depends only on that query's
    ``match`` row and ``R``, so shards of queries give the rows of one process.
    """
    c, num_k = match.shape
    ranks = np.arange(1, num_k + 1, dtype=np.float64)
    out = np.empty((c, 3 + len(ks)), dtype=np.float64)
    out[:, 0] = match[:, 0]
    for j, k in enumerate(ks):
        out[:, 1 + j] = match[:, : min(k, num_k)].any(axis=1)
    hits = match & (ranks[None, :] <= big_r[:, None])
    out[:, -2] = hits.sum(axis=1) / big_r
    prec = np.cumsum(hits, axis=1) / ranks
    out[:, -1] = (prec * hits).sum(axis=1) / big_r
    return out


class MetricSums:
    """Running per-metric sums over queries (float64), averaged at the end."""

    def __init__(self, ks: tuple[int, ...]) -> None:
        self.ks = ks
        self.count = 0
        self.p1 = self.rp = self.ap = 0.0
        self.recall = dict.fromkeys(ks, 0)

    def add(self, match: np.ndarray, big_r: np.ndarray) -> None:
        """``match`` (c, K) bool: neighbour j of query i shares its label;
        ``big_r`` (c,) int: R of each query (all > 0)."""
        if match.shape[0] == 0:
            return
        self.add_values(per_query_values(match, big_r, self.ks))

    def add_values(self, values: np.ndarray) -> None:
        """Add queries given by their :func:`per_query_values` rows, summed in the given order."""
        c = values.shape[0]
        if c == 0:
            return
        self.count += c
        self.p1 += float(values[:, 0].sum())
        for j, k in enumerate(self.ks):
            self.recall[k] += int(values[:, 1 + j].sum())
        self.rp += float(values[:, -2].sum())
        self.ap += float(values[:, -1].sum())

    def result(self, names: list[str]) -> dict[str, float]:
        out = {"precision_at_1": self.p1 / self.count}
        out.update({f"recall_at_{k}": self.recall[k] / self.count for k in self.ks})
        out["r_precision"] = self.rp / self.count
        out["mean_average_precision_at_r"] = self.ap / self.count
        return {name: float(out[name]) for name in names}


def _metrics_from_neighbours(
    idx: np.ndarray,
    q_codes: np.ndarray,
    r_codes: np.ndarray,
    rel_count: np.ndarray,
    active: np.ndarray,
    ks: tuple[int, ...],
    names: list[str],
    chunk_elems: int = 2**22,
) -> dict[str, float]:
    """Metrics from the ``(n_query, K)`` neighbour table, in row chunks."""
    n, num_k = idx.shape
    sums = MetricSums(ks)
    rows = max(1, chunk_elems // max(1, num_k))
    for a0 in range(0, n, rows):
        sel = np.flatnonzero(active[a0 : a0 + rows]) + a0
        match = r_codes[idx[sel]] == q_codes[sel, None]
        sums.add(match, rel_count[sel])
    return sums.result(names)
