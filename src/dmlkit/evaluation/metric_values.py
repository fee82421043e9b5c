"""The registered retrieval metrics' result keys, each query's values and their sums over queries.

Each query's row of values depends on that query alone, so shards of queries computed by different processes
give the rows one process would, and the sums in query order are the same to the last bit. Importing this module
registers the built-in metrics (``metric_definitions``) before any key is listed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dmlkit.evaluation import metric_definitions  # noqa: F401  (registers the built-in metrics)
from dmlkit.evaluation.metric_registry import retrieval_metric_list

__all__ = ["MetricSums", "metric_names", "per_query_values", "short_metric_name"]


def metric_names(ks: Sequence[int] = (1, 2, 4, 8)) -> list[str]:
    """The result keys of the registered metrics for ``ks``, in order: the columns of :func:`per_query_values`."""
    return [column for metric in retrieval_metric_list() for column in metric.columns(ks)]


def per_query_values(match: np.ndarray, big_r: np.ndarray, ks: Sequence[int]) -> np.ndarray:
    """Each query's value of every column of :func:`metric_names` (``ks``): ``(c, len(metric_names(ks)))`` float64.

    ``match`` (c, K) bool: neighbour j of query i shares its label; ``big_r`` (c,) int: R of each query (all > 0).
    """
    columns = [v for metric in retrieval_metric_list() for v in metric.values(match, big_r, ks)]
    out = np.empty((match.shape[0], len(columns)), dtype=np.float64)
    for j, column in enumerate(columns):
        out[:, j] = column
    return out


def short_metric_name(column: str) -> str:
    """A result key's table header: ``precision_at_1`` -> ``P@1``, ``recall_at_4`` -> ``R@4``,
    ``mean_average_precision_at_r`` -> ``MAP@R``; a key of no registered metric is its own header."""
    for metric in retrieval_metric_list():
        if not metric.per_k:
            if column == metric.name:
                return metric.short
            continue
        prefix, suffix = metric.name.split("{k}", 1)
        k = column[len(prefix) : len(column) - len(suffix)]
        if column.startswith(prefix) and column.endswith(suffix) and k.isdigit():
            return metric.short.format(k=k)
    return column


class MetricSums:
    """Running per-column sums over queries (float64, in the order the queries are added), averaged at the end."""

    def __init__(self, ks: Sequence[int]) -> None:
        self.ks = tuple(ks)
        self.names = metric_names(self.ks)
        self.count = 0
        self.sums = [0.0] * len(self.names)

    def add(self, match: np.ndarray, big_r: np.ndarray) -> None:
        """Add the queries of ``match`` (c, K) and ``big_r`` (c,), as in :func:`per_query_values`."""
        if match.shape[0]:
            self.add_values(per_query_values(match, big_r, self.ks))

    def add_values(self, values: np.ndarray) -> None:
        """Add queries given by their :func:`per_query_values` rows."""
        if values.shape[0] == 0:
            return
        if values.shape[1] != len(self.names):
            raise ValueError(
                f"{values.shape[1]} metric columns where {len(self.names)} are registered "
                f"({', '.join(self.names)}); every process must register the same metrics"
            )
        self.count += values.shape[0]
        for j in range(len(self.names)):
            self.sums[j] += float(values[:, j].sum())

    def result(self) -> dict[str, float]:
        """``{name: mean over the added queries}``."""
        return {name: total / self.count for name, total in zip(self.names, self.sums)}
