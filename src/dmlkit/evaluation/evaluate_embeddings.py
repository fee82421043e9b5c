"""Retrieval metrics, and optionally clustering metrics, of a set of embeddings: the one evaluation of a run.

Used by the trainer (validation and test), ``dmlkit evaluate`` and the fair protocol.
"""

from __future__ import annotations

from typing import Sequence

import torch

from dmlkit.evaluation.clustering import clustering_metrics
from dmlkit.evaluation.retrieval import retrieval_metrics

__all__ = ["evaluate_embeddings"]


def evaluate_embeddings(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    ref_embeddings: torch.Tensor | None = None,
    ref_labels: torch.Tensor | None = None,
    ks: Sequence[int] = (1, 2, 4, 8),
    clustering: bool = False,
    seed: int = 0,
) -> dict[str, float]:
    """P@1, R@K, R-precision, MAP@R of the queries ``embeddings`` (against ``ref_embeddings``, else among
    themselves, leaving each query out); with ``clustering`` also NMI and F1 of k-means on the queries."""
    metrics = retrieval_metrics(embeddings, labels, ref_embeddings, ref_labels, ks=tuple(ks))
    if clustering:
        metrics.update(clustering_metrics(embeddings, labels, seed=seed))
    return metrics
