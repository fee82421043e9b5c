"""The built-in retrieval metrics: P@1, Recall@K, R-precision and MAP@R, one registered function each.

Definitions follow pytorch-metric-learning's ``AccuracyCalculator`` (PML 2.9, ``k="max_bin_count"``) and, for
R-precision and MAP@R, Musgrave et al., "A Metric Learning Reality Check" (ECCV 2020). For query ``i`` with
``R_i`` relevant references and neighbours ``nn_1, nn_2, ...`` (nearest first):

* ``precision_at_1``: ``[label(nn_1) == label(q)]``.
* ``recall_at_{k}`` (the DML "Recall@K", a hit rate): ``[some neighbour among the k nearest has the query's
  label]``; for ``k`` above the number of candidate references, all of them.
* ``r_precision``: ``(# same-label among the R_i nearest) / R_i``.
* ``mean_average_precision_at_r``: ``(1 / R_i) * sum_{j <= R_i} P@j * [label(nn_j) == label(q)]``, with ``P@j``
  the precision among the ``j`` nearest.

Each is the mean of these values over the non-lone queries (``metric_registry``).
"""

from __future__ import annotations

import numpy as np

from dmlkit.evaluation.metric_registry import register_retrieval_metric


@register_retrieval_metric("precision_at_1", short="P@1")
def precision_at_1(match: np.ndarray, big_r: np.ndarray) -> np.ndarray:
    return match[:, 0]


@register_retrieval_metric("recall_at_{k}", per_k=True, short="R@{k}")
def recall_at_k(match: np.ndarray, big_r: np.ndarray, k: int) -> np.ndarray:
    return match[:, : min(k, match.shape[1])].any(axis=1)


def _hits_within_r(match: np.ndarray, big_r: np.ndarray) -> np.ndarray:
    """``match`` limited to each query's ``R_i`` nearest neighbours."""
    ranks = np.arange(1, match.shape[1] + 1, dtype=np.float64)
    return match & (ranks[None, :] <= big_r[:, None])


@register_retrieval_metric("r_precision", short="RP")
def r_precision(match: np.ndarray, big_r: np.ndarray) -> np.ndarray:
    return _hits_within_r(match, big_r).sum(axis=1) / big_r


@register_retrieval_metric("mean_average_precision_at_r", short="MAP@R")
def mean_average_precision_at_r(match: np.ndarray, big_r: np.ndarray) -> np.ndarray:
    hits = _hits_within_r(match, big_r)
    precision_at_j = np.cumsum(hits, axis=1) / np.arange(1, match.shape[1] + 1, dtype=np.float64)
    return (precision_at_j * hits).sum(axis=1) / big_r
