"""Batch samplers by name: ``create_batch_sampler(name, dataset, batch_size, seed, **params)``.

- ``m_per_class``: ``batch_size / m`` classes with ``m`` images each (``MPerClassBatchSampler``); its classes
  drawn equally often (``class_draw="balanced"``, the default) or in proportion to their images
  (``class_draw="proportional"``, the plain sampling of a long-tailed set);
- ``fastap_random``: FastAP's "Random" sampling, whole classes until the batch is full;
- ``fastap_hard``: FastAP's "Hard" sampling, two super-categories per batch, half each
  (``unlabelled="pair"`` for the VehicleID variant).
All are seeded by ``(seed, epoch)`` and resume through ``state_dict``.
"""

from __future__ import annotations

from typing import Any

from dmlkit.data.samplers.fastap import HardCategoryBatchSampler, RandomClassBatchSampler
from dmlkit.data.samplers.m_per_class import MPerClassBatchSampler
from dmlkit.registry import Registry, check_kwargs

BATCH_SAMPLERS: Registry = Registry("batch sampler")


@BATCH_SAMPLERS.register("m_per_class")
def m_per_class(dataset: Any, batch_size: int, seed: int = 0, m: int = 4, batches_per_epoch: int | None = None,
                class_draw: str = "balanced"):
    return MPerClassBatchSampler(dataset.labels, batch_size, m, seed=seed, batches_per_epoch=batches_per_epoch,
                                 class_draw=class_draw)


@BATCH_SAMPLERS.register("fastap_random")
def fastap_random(dataset: Any, batch_size: int, seed: int = 0, **params: Any):
    check_kwargs(RandomClassBatchSampler, params, "batch sampler 'fastap_random'")
    return RandomClassBatchSampler.from_dataset(dataset, batch_size, seed=seed, **params)


@BATCH_SAMPLERS.register("fastap_hard")
def fastap_hard(dataset: Any, batch_size: int, seed: int = 0, **params: Any):
    check_kwargs(HardCategoryBatchSampler, params, "batch sampler 'fastap_hard'")
    return HardCategoryBatchSampler.from_dataset(dataset, batch_size, seed=seed, **params)


def create_batch_sampler(name: str, dataset: Any, batch_size: int, seed: int = 0, **params: Any):
    """The batch sampler ``name`` over ``dataset``; unknown names or parameters list the valid ones."""
    return BATCH_SAMPLERS.create(name, dataset=dataset, batch_size=batch_size, seed=seed, **params)


def list_batch_samplers() -> list[str]:
    return BATCH_SAMPLERS.names()
