"""Retrieval metrics as plug-ins: each one a function of the relevance of a query's nearest neighbours.

A retrieval metric is registered by name with :func:`register_retrieval_metric` and is then computed by every
evaluation path: the exact search (``retrieval_metrics``), the sharded one over several processes
(``sharded_retrieval_metrics``), the streamed one over a ``.npy`` file (``retrieval_metrics_from_file``), the
trainer's validation and test, ``dmlkit evaluate``, the protocols' tables and the HTML report. The built-in
metrics (``metric_definitions.py``) are registered the same way; ``metric_values.py`` turns the registered list
into result keys, per-query values and their sums.

A metric function takes

* ``match``: ``(c, K)`` bool, whether neighbour ``j`` of query ``i`` (nearest first) shares its label, and
* ``big_r``: ``(c,)`` int, ``R_i``, the number of references that share query ``i``'s label (all > 0: lone
  queries are left out before any metric sees them),

and returns the ``(c,)`` float64 value of each query; the metric is their mean over queries. ``K`` is at least
``max(max_i R_i, max(ks))``, unless fewer references exist. A metric registered with ``per_k=True`` has a name
with ``{k}`` in it (``recall_at_{k}``), takes a third argument ``k`` and gives one value per ``k`` of the
evaluation's ``ks``.

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dmlkit.registry import Registry

__all__ = ["RetrievalMetric", "register_retrieval_metric", "retrieval_metric_list", "unregister_retrieval_metric"]

MetricFunction = Callable[..., np.ndarray]


@dataclass(frozen=True)
class RetrievalMetric:
    """One registered metric: its name (``{k}`` in it when ``per_k``), its function and its short table header."""

    name: str
    function: MetricFunction
    per_k: bool = False
    short: str = ""

    def columns(self, ks: Sequence[int]) -> list[str]:
        """The result keys of this metric for the evaluation's ``ks``."""
        return [self.name.format(k=k) for k in ks] if self.per_k else [self.name]

    def values(self, match: np.ndarray, big_r: np.ndarray, ks: Sequence[int]) -> list[np.ndarray]:
        """One ``(c,)`` array per column of :meth:`columns`."""
        if self.per_k:
            return [self.function(match, big_r, k) for k in ks]
        return [self.function(match, big_r)]


_METRICS: Registry[RetrievalMetric] = Registry("retrieval metric")  # registration order: the order computed


def register_retrieval_metric(
    name: str, *, per_k: bool = False, short: str = ""
) -> Callable[[MetricFunction], MetricFunction]:
    """Decorator registering ``function(match, big_r[, k]) -> (c,) values`` as the retrieval metric ``name``.

    ``short`` is its header in tables (``"MAP@R"``; ``{k}`` is filled in for ``per_k`` metrics); by default the
    name itself. Registering a name twice is an error; metrics are computed in registration order.
    """
    if not isinstance(name, str) or not name.isidentifier() and "{k}" not in name:
        raise ValueError(f"a retrieval metric's name must be an identifier (with '{{k}}' when per_k); got {name!r}")
    if per_k != ("{k}" in name):
        raise ValueError(
            f"retrieval metric {name!r}: per_k=True needs '{{k}}' in the name (e.g. 'recall_at_{{k}}') "
            "and a name with '{k}' needs per_k=True"
        )

    def add(function: MetricFunction) -> MetricFunction:
        if name in _METRICS:
            raise ValueError(
                f"retrieval metric '{name}' is registered twice; unregister_retrieval_metric('{name}') first"
            )
        _METRICS.register(name, RetrievalMetric(name, function, per_k, short or name))
        return function

    return add


def unregister_retrieval_metric(name: str) -> None:
    """Remove the metric ``name`` (e.g. a test's or a notebook's own); an unknown name is an error."""
    if name not in _METRICS:
        raise ValueError(f"no retrieval metric '{name}' is registered; registered: {', '.join(_METRICS.in_order())}")
    _METRICS.unregister(name)


def retrieval_metric_list() -> list[RetrievalMetric]:
    """The registered metrics, in registration order (the built-ins first)."""
    return [_METRICS.get(name) for name in _METRICS.in_order()]
