"""What each query counts as relevant, for every retrieval path (exact, sharded, streamed).

* Labels are turned into shared integer codes (compared exactly, never through float32).
* ``R_i`` is the number of references that share query ``i``'s label, minus one when the query itself is among
  the references (self-retrieval, or ``ref_includes_query``).
* A query is **lone** when ``R_i == 0``; lone queries are left out of every metric (PML's
  ``not_lone_query_mask``). When every query is lone, every metric is NaN, with a warning.
* The search returns ``K = max(max_i R_i, max(ks))`` neighbours, or all candidate references if fewer.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dmlkit.evaluation.metric_values import metric_names

__all__ = ["Relevance", "relevance", "undefined_metrics"]


@dataclass(frozen=True)
class Relevance:
    """Label codes of queries and references, and each query's ``R_i``."""

    query_codes: np.ndarray
    reference_codes: np.ndarray
    counts: np.ndarray  # R_i per query

    @property
    def active(self) -> np.ndarray:
        """Queries that are not lone (``R_i > 0``)."""
        return self.counts > 0

    def neighbours_needed(self, ks: Sequence[int], candidates: int) -> int:
        """``K``: enough neighbours for every registered metric, at most ``candidates``."""
        return min(candidates, max([int(self.counts.max()), *ks]))


def relevance(query_labels: np.ndarray, reference_labels: np.ndarray | None, exclude_self: bool) -> Relevance:
    """The :class:`Relevance` of ``query_labels`` against ``reference_labels`` (``None``: the queries themselves).

    ``exclude_self``: reference ``i`` is query ``i`` and is not counted as its relevant item.
    """
    if reference_labels is None:
        _, codes = np.unique(query_labels, return_inverse=True)
        q_codes = r_codes = codes.reshape(-1).astype(np.int64)
    else:
        n = len(query_labels)
        _, codes = np.unique(np.concatenate([query_labels, reference_labels]), return_inverse=True)
        codes = codes.reshape(-1)
        q_codes, r_codes = codes[:n].astype(np.int64), codes[n:].astype(np.int64)
    per_label = np.bincount(r_codes, minlength=int(max(q_codes.max(initial=0), r_codes.max(initial=0))) + 1)
    return Relevance(q_codes, r_codes, per_label[q_codes] - int(exclude_self))


def undefined_metrics(ks: Sequence[int], stacklevel: int = 3) -> dict[str, float]:
    """Every metric NaN, with the warning that says why: no query has a relevant reference."""
    warnings.warn(
        "No query label occurs among the other reference items, so every retrieval metric is undefined (nan).",
        RuntimeWarning,
        stacklevel=stacklevel,
    )
    return {name: math.nan for name in metric_names(ks)}
