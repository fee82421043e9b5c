"""The Trainer's evaluation: embed a split with the model being trained and score it.

One process embeds the whole split and scores it (on the GPU when the run is there,
:mod:`dmlkit.evaluation.knn_device`). Several processes each embed their shard (``shard_indices``) with the
bare module (no DDP collectives while embedding) and score the shards against each other
(``evaluate_embedding_shards``): no process gathers the embeddings for retrieval, and every process gets the
values of one process. The queries are gathered, in dataset order, only where clustering or the plots need
them (:meth:`Evaluator.test`). This is the one gather path of the training loop. ``validation_score`` is the
value the stopping rule sees, refused when the validation split leaves it undefined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import Subset

from dmlkit.distributed import gather_shards, shard_indices
from dmlkit.engine.config import EvalConfig
from dmlkit.engine.embed import embed_dataset
from dmlkit.evaluation.evaluate_embeddings import evaluate_embedding_shards, evaluate_embeddings

__all__ = ["Evaluator", "validation_score"]

Shard = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # embeddings, labels, positions in the dataset


@dataclass
class Evaluator:
    """Metrics of datasets under the model a Trainer trains.

    ``model``: returns the module to embed with (a method's view of the Fabric-wrapped model);
    ``bare_model``: the same view of the unwrapped module, for the shards of several processes.
    """

    fabric: Any
    cfg: EvalConfig
    model: Callable[[], nn.Module]
    bare_model: Callable[[], nn.Module]
    seed: int
    num_workers: int = 0

    @property
    def _single(self) -> bool:
        return self.fabric.world_size == 1

    def _search_device(self) -> torch.device | None:
        return self.fabric.device if self.fabric.device.type == "cuda" else None

    def embed(self, dataset: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings and labels of ``dataset`` in dataset order, on the CPU (several processes: gathered)."""
        if self._single:
            return embed_dataset(
                self.model(), dataset, self.cfg.batch_size, self.fabric.device, num_workers=self.num_workers
            )
        return self._gathered(self.embed_shard(dataset), len(dataset))

    def embed_shard(self, dataset: Any) -> Shard:
        """This process's shard of ``dataset``: embeddings, labels and dataset positions."""
        idx = shard_indices(len(dataset), self.fabric.global_rank, self.fabric.world_size)
        model, device = self.bare_model(), self.fabric.device
        if len(idx) == 0:  # more processes than items: an empty shard, still in every collective
            emb, lab = embed_dataset(model, Subset(dataset, [0]), 1, device)
            return emb[:0], lab[:0], idx
        local, labels = embed_dataset(model, Subset(dataset, idx.tolist()), self.cfg.batch_size, device)
        return local, labels, idx

    def _gathered(self, shard: Shard, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        device = self.fabric.device
        idx = shard[2].to(device)
        return gather_shards(shard[0].to(device), idx, n).cpu(), gather_shards(shard[1].to(device), idx, n).cpu()

    def evaluate(self, dataset: Any, with_clustering: bool = False, reference: Any = None) -> dict[str, float]:
        """Retrieval (and clustering) metrics of ``dataset`` within itself, or as queries against ``reference``."""
        if self._single:
            embeddings, labels = self.embed(dataset)
            return self._metrics(embeddings, labels, reference, with_clustering)
        return self._sharded_metrics(self.embed_shard(dataset), reference, with_clustering)

    def test(self, dataset: Any, reference: Any, keep_embeddings: bool) -> tuple[dict[str, float], Any, Any]:
        """The final test: ``(metrics, embeddings, labels)``; the embeddings (gathered in dataset order with
        several processes) only when one process has them anyway or ``keep_embeddings`` asks (plots)."""
        if self._single:
            embeddings, labels = self.embed(dataset)
            return self._metrics(embeddings, labels, reference, self.cfg.clustering), embeddings, labels
        shard = self.embed_shard(dataset)
        gathered = self._gathered(shard, len(dataset)) if self.cfg.clustering or keep_embeddings else None
        metrics = self._sharded_metrics(shard, reference, self.cfg.clustering, gathered)
        embeddings, labels = gathered if gathered is not None else (None, None)
        return metrics, embeddings, labels

    def _sharded_metrics(
        self,
        shard: Shard,
        reference: Any,
        with_clustering: bool,
        gathered: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> dict[str, float]:
        refs = self.embed_shard(reference) if reference is not None else (None, None, None)
        return evaluate_embedding_shards(
            *shard, *refs, ks=tuple(self.cfg.ks), clustering=with_clustering, seed=self.seed, gathered=gathered
        )

    def _metrics(
        self, embeddings: torch.Tensor, labels: torch.Tensor, reference: Any, with_clustering: bool
    ) -> dict[str, float]:
        refs = self.embed(reference) if reference is not None else (None, None)
        return evaluate_embeddings(
            embeddings,
            labels,
            *refs,
            ks=tuple(self.cfg.ks),
            clustering=with_clustering,
            seed=self.seed,
            search_device=self._search_device(),
        )


def validation_score(metrics: dict[str, float], metric: str, step: int, dataset: Any) -> float:
    """``metrics[metric]`` of a validation at ``step``; a ValueError when it is NaN with finite weights: no
    query of the validation split ``dataset`` has another image of its class among the references."""
    score = metrics[metric]
    if score != score:
        raise ValueError(
            f"validation {metric} at step {step} is undefined (nan): no validation query has another "
            f"image of its class among the references. The validation split holds {len(dataset)} images of "
            f"{getattr(dataset, 'num_classes', '?')} classes; every class needs at least 2 images (a dataset or "
            "split with more images per class, or another data.val_fraction)"
        )
    return score
