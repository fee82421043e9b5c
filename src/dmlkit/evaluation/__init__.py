"""Evaluation of embeddings: retrieval, clustering and verification metrics.

Embed query and reference sets, then

* :func:`evaluate_embeddings` -- the one evaluation of a run: retrieval metrics and,
  optionally, clustering metrics;
* :func:`retrieval_metrics` -- P@1, Recall@K, R-precision, MAP@R from one exact
  Euclidean k-nearest-neighbour search (values equal to pytorch-metric-learning's
  ``AccuracyCalculator``); :func:`retrieval_metrics_from_file` streams embeddings
  from disk (``streaming``);
* :func:`sharded_retrieval_metrics`, :func:`evaluate_embedding_shards` -- the same
  metrics when the queries and the gallery are sharded over the processes of a
  ``torchrun`` job (``sharded``): equal to one process's, no process holds the gallery;
* :func:`clustering_metrics` -- NMI and pairwise F1 of faiss k-means
  (:func:`clustering_metrics_from_file` from disk: k-means on a sample, assignment streamed,
  ``clustering_streamed``);
* :func:`plan_index`, :func:`build_index`, :func:`load_index`, :func:`tune_search` -- the faiss
  indexes of approximate evaluation, parameters from the data size, search tuned to a recall@1
  against exact search (``approx_index``);
* :func:`knn_search` -- the blocked exact k-nearest-neighbour search underneath;
  :func:`device_knn_search` -- the same on the embeddings' device (a GPU), which ``retrieval_metrics``
  uses for GPU tensors (``knn_device``);
* :func:`kfold_accuracy`, :func:`tar_at_far` -- face verification: LFW-style 10-fold
  accuracy and TAR at FAR from pair scores (``verification``);
* :func:`zero_shot_attribute_eval` -- zero-shot prediction from GSP's pseudo-attributes, the
  thesis' Sec. 5.3.3 (``zero_shot``).

The SFT paper's embedding geometry (``geometry_report``, ``r_w``, ...) and the prototype convex
combinations of the thesis' Ch. 4 (``pcc_diagnostics``, ...) are the lab's studies:
``dmlkit_lab.evaluation.geometry`` and ``dmlkit_lab.evaluation.pcc``. Their old names here still
work, with a ``FutureWarning``, until dmlkit 0.2 (``dmlkit.moved``).

Nothing here imports training code.
"""

from dmlkit.evaluation.approx_index import (
    IndexPlan,
    TunePoint,
    build_index,
    default_nlist,
    load_index,
    plan_index,
    recall_at_1,
    tune_search,
    wilson_lower,
)
from dmlkit.evaluation.clustering import clustering_metrics, kmeans_assign, nmi, pairwise_f1
from dmlkit.evaluation.evaluate_embeddings import evaluate_embedding_shards, evaluate_embeddings
from dmlkit.evaluation.embedding_file import open_embeddings
from dmlkit.evaluation.knn import DEFAULT_MAX_BLOCK_BYTES, KNNResult, knn_search
from dmlkit.evaluation.knn_device import DEVICE_BLOCK_BYTES, device_knn_search
from dmlkit.evaluation.zero_shot import per_class_means, zero_shot_attribute_eval
from dmlkit.evaluation.metric_registry import (
    RetrievalMetric,
    register_retrieval_metric,
    retrieval_metric_list,
    unregister_retrieval_metric,
)
from dmlkit.evaluation.metric_values import MetricSums, metric_names, per_query_values, short_metric_name
from dmlkit.evaluation.relevance import Relevance, relevance, undefined_metrics
from dmlkit.evaluation.retrieval import metrics_from_neighbours, retrieval_metrics
from dmlkit.evaluation.sharded import MIN_BLOCK_ROWS, sharded_retrieval_metrics
from dmlkit.evaluation.streaming import (
    APPROX_METHODS,
    clustering_metrics_from_file,
    nearest_distances_from_file,
    retrieval_metrics_from_file,
)
from dmlkit.evaluation.verification import (
    best_threshold,
    kfold_accuracy,
    pair_scores,
    tar_at_far,
    verification_metrics,
)

__all__ = [
    "evaluate_embeddings",
    "evaluate_embedding_shards",
    # retrieval
    "retrieval_metrics",
    "metric_names",
    # retrieval metrics as plug-ins
    "register_retrieval_metric",
    "unregister_retrieval_metric",
    "retrieval_metric_list",
    "RetrievalMetric",
    "metrics_from_neighbours",
    "per_query_values",
    "MetricSums",
    "short_metric_name",
    "relevance",
    "Relevance",
    "undefined_metrics",
    "knn_search",
    "KNNResult",
    "DEFAULT_MAX_BLOCK_BYTES",
    "device_knn_search",
    "DEVICE_BLOCK_BYTES",
    # shards over the processes of a job (torchrun)
    "sharded_retrieval_metrics",
    "MIN_BLOCK_ROWS",
    # clustering
    "clustering_metrics",
    "kmeans_assign",
    "nmi",
    "pairwise_f1",
    # embeddings on disk
    "retrieval_metrics_from_file",
    "clustering_metrics_from_file",
    "nearest_distances_from_file",
    "open_embeddings",
    "APPROX_METHODS",
    # approximate search for evaluation (faiss)
    "IndexPlan",
    "default_nlist",
    "TunePoint",
    "plan_index",
    "build_index",
    "load_index",
    "recall_at_1",
    "tune_search",
    "wilson_lower",
    # verification
    "verification_metrics",
    "kfold_accuracy",
    "tar_at_far",
    "pair_scores",
    "best_threshold",
    # zero-shot prediction from GSP pseudo-attributes (thesis Sec. 5.3.3)
    "zero_shot_attribute_eval",
    "per_class_means",
]

_GEOMETRY = (
    "geometry_report",
    "class_means",
    "scatter_matrices",
    "r_w",
    "r_w_curve",
    "class_divergences",
    "rotation_residuals",
    "covariance_spectra",
)
_PCC = ("pcc_diagnostics", "pcc_embedding", "prototype_cover_delta", "prototype_histogram", "nearest_prototype")
_MOVED = {**{n: "dmlkit_lab.evaluation.geometry" for n in _GEOMETRY}, **{n: "dmlkit_lab.evaluation.pcc" for n in _PCC}}


def __getattr__(name: str):
    from dmlkit.moved import moved_name

    return moved_name(__name__, name, _MOVED)
