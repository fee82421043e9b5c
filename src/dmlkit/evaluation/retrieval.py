"""Retrieval metrics of embeddings: P@1, Recall@K, R-precision, MAP@R.

One exact k-nearest-neighbour search (``dmlkit.evaluation.knn``) feeds every
metric; the metrics are then computed from the ``(n_query, K)`` table of
whether each neighbour shares the query's label, without Python loops over
queries or labels.

The metrics are the registered ones (``metric_registry``; the built-ins in
``metric_definitions``: P@1, Recall@K, R-precision, MAP@R, as pytorch-metric-learning's
``AccuracyCalculator`` defines them, PML 2.9, ``k="max_bin_count"``, whose values these reproduce to
float64 rounding given the same neighbour order: see the float32 ties below). What counts as relevant,
``R_i`` and lone queries are defined once, in ``relevance``.

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

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from dmlkit.evaluation.knn import DEFAULT_MAX_BLOCK_BYTES, exact_neighbours
from dmlkit.evaluation.knn_device import DeviceEmbeddings, check_same_device, device_neighbours, on_accelerator
from dmlkit.evaluation.knn_inputs import EmbeddingSource, check_block_bytes, check_pair
from dmlkit.evaluation.metric_values import MetricSums, metric_names
from dmlkit.evaluation.relevance import Relevance, relevance, undefined_metrics
from dmlkit.validation import is_int

__all__ = ["metric_names", "metrics_from_neighbours", "retrieval_metrics"]

ArrayLike = torch.Tensor | np.ndarray


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
            f"{emb_name} has {n} rows but {name} has {len(arr)} entries; pass exactly one label per embedding."
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
        ``{name: value}`` for the registered metrics (``metric_names(ks)``:
        by default ``precision_at_1``, ``recall_at_{k}`` for k in ks,
        ``r_precision``, ``mean_average_precision_at_r``) as Python floats;
        equal to ``AccuracyCalculator(k="max_bin_count").get_accuracy(...)``
        of PML for the three metrics PML also has.

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
    r, rl, exclude_self = _reference_side(q, ql, reference, reference_labels, ref_includes_query, source)
    rel = relevance(ql, rl, exclude_self)
    if not rel.active.any():
        return undefined_metrics(ks)
    num_k = rel.neighbours_needed(ks, (q if r is None else r).n - int(exclude_self))
    if isinstance(q, DeviceEmbeddings):
        idx, _ = device_neighbours(q, r, num_k, exclude_self)  # type: ignore[arg-type]
    else:
        idx, _ = exact_neighbours(q, r, num_k, exclude_self, max_block_bytes)
    return metrics_from_neighbours(idx.cpu().numpy(), rel, ks)


def _reference_side(
    q,
    ql: np.ndarray,
    reference: ArrayLike | None,
    reference_labels: ArrayLike | None,
    ref_includes_query: bool,
    source: type,
) -> tuple:
    """``(reference embeddings or None, reference labels or None, exclude_self)``, checked against the queries."""
    if reference is None:
        if reference_labels is not None:
            raise ValueError(
                "reference_labels was given without reference; pass both, or neither "
                "to use the queries as their own references."
            )
        return None, None, True
    r = source(reference, "reference")
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
    return r, rl, exclude_self


def metrics_from_neighbours(
    idx: np.ndarray, rel: Relevance, ks: tuple[int, ...], chunk_elems: int = 2**22
) -> dict[str, float]:
    """The registered metrics from the ``(n_query, K)`` neighbour table (reference positions), in row chunks."""
    n, num_k = idx.shape
    sums = MetricSums(ks)
    rows = max(1, chunk_elems // max(1, num_k))
    for a0 in range(0, n, rows):
        sel = np.flatnonzero(rel.active[a0 : a0 + rows]) + a0
        match = rel.reference_codes[idx[sel]] == rel.query_codes[sel, None]
        sums.add(match, rel.counts[sel])
    return sums.result()
