"""Retrieval metrics, and optionally clustering metrics, of a set of embeddings: the one evaluation of a run.

Used by the trainer (validation and test), ``dmlkit evaluate`` and the fair protocol.
:func:`evaluate_embedding_shards` is the same evaluation when each process of a job
holds a shard of the queries and of the gallery (``torchrun``): the retrieval metrics
are computed without gathering the embeddings (``sharded.py``); only clustering,
when asked for, gathers the queries (to every process; rank 0 runs k-means).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from dmlkit.distributed import gather_shards, is_distributed
from dmlkit.evaluation.clustering import clustering_metrics
from dmlkit.evaluation.retrieval import retrieval_metrics
from dmlkit.evaluation.sharded import sharded_retrieval_metrics

__all__ = ["evaluate_embeddings", "evaluate_embedding_shards"]


def evaluate_embeddings(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    ref_embeddings: torch.Tensor | None = None,
    ref_labels: torch.Tensor | None = None,
    ks: Sequence[int] = (1, 2, 4, 8),
    clustering: bool = False,
    seed: int = 0,
    search_device: torch.device | str | None = None,
) -> dict[str, float]:
    """P@1, R@K, R-precision, MAP@R of the queries ``embeddings`` (against ``ref_embeddings``, else among
    themselves, leaving each query out); with ``clustering`` also NMI and F1 of k-means on the queries.

    ``search_device``: a GPU to run the exact neighbour search on (the embeddings are copied there once,
    :mod:`dmlkit.evaluation.knn_device`); ``None`` searches where the embeddings are."""
    query, reference = embeddings, ref_embeddings
    if search_device is not None:
        query = embeddings.to(search_device)
        reference = None if ref_embeddings is None else ref_embeddings.to(search_device)
    metrics = retrieval_metrics(query, labels, reference, ref_labels, ks=tuple(ks))
    if clustering:
        metrics.update(clustering_metrics(embeddings, labels, seed=seed))
    return metrics


def evaluate_embedding_shards(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    ids: torch.Tensor,
    ref_embeddings: torch.Tensor | None = None,
    ref_labels: torch.Tensor | None = None,
    ref_ids: torch.Tensor | None = None,
    ks: Sequence[int] = (1, 2, 4, 8),
    clustering: bool = False,
    seed: int = 0,
    gathered: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, float]:
    """:func:`evaluate_embeddings` of the whole sets, called by every process with its shards.

    ``ids`` (``ref_ids``): the positions of this process's rows in the whole query (gallery)
    set, e.g. ``shard_indices``. Every process gets the same dict, equal to one process's.
    With ``clustering``, the queries are gathered (or ``gathered``, the whole set in id order,
    is used) and rank 0 runs k-means; its NMI and F1 are sent to every process.
    """
    metrics = sharded_retrieval_metrics(
        embeddings, labels, ref_embeddings, ref_labels, ks=tuple(ks), query_ids=ids, reference_ids=ref_ids
    )
    if clustering:
        if gathered is None:
            total = _total(len(ids))
            device = _comm_device()
            ids_dev = torch.as_tensor(ids, dtype=torch.int64).to(device)
            gathered = (
                gather_shards(embeddings.to(device), ids_dev, total).cpu(),
                gather_shards(labels.to(device), ids_dev, total).cpu(),
            )
        scores = [clustering_metrics(*gathered, seed=seed) if not is_distributed() or dist.get_rank() == 0 else None]
        if is_distributed():
            dist.broadcast_object_list(scores, src=0)
        metrics.update(scores[0])
    return metrics


def _comm_device() -> torch.device:
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _total(n_local: int) -> int:
    """Rows over all processes."""
    if not is_distributed():
        return n_local
    count = torch.tensor([n_local], dtype=torch.int64, device=_comm_device())
    dist.all_reduce(count)
    return int(count.item())
