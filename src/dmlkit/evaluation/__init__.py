"""Evaluation of embeddings: exact kNN retrieval metrics and clustering metrics.

Embed query and reference sets, then

* :func:`retrieval_metrics` -- P@1, Recall@K, R-precision, MAP@R from one exact
  Euclidean k-nearest-neighbour search (values equal to pytorch-metric-learning's
  ``AccuracyCalculator``);
* :func:`clustering_metrics` -- NMI and pairwise F1 of faiss k-means;
* :func:`knn_search` -- the blocked exact k-nearest-neighbour search underneath.
* :func:`kfold_accuracy`, :func:`tar_at_far` -- face verification: LFW-style 10-fold
  accuracy and TAR at FAR from pair scores (``verification``).

Nothing here imports training code.
"""

from dmlkit.evaluation.clustering import clustering_metrics, kmeans_assign, nmi, pairwise_f1
from dmlkit.evaluation.knn import DEFAULT_MAX_BLOCK_BYTES, KNNResult, knn_search
from dmlkit.evaluation.retrieval import metric_names, retrieval_metrics
from dmlkit.evaluation.verification import kfold_accuracy, pair_scores, tar_at_far, verification_metrics

__all__ = [
    "DEFAULT_MAX_BLOCK_BYTES",
    "KNNResult",
    "clustering_metrics",
    "kmeans_assign",
    "knn_search",
    "metric_names",
    "nmi",
    "pairwise_f1",
    "retrieval_metrics",
    "kfold_accuracy",
    "pair_scores",
    "tar_at_far",
    "verification_metrics",
]
