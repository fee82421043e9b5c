"""Batch samplers by name: ``create_batch_sampler(name, dataset, batch_size, seed, **params)``.

- ``m_per_class``: ``batch_size / m`` classes with ``m`` images each (``MPerClassBatchSampler``); its classes
  drawn equally often (``class_draw="balanced"``, the default) or in proportion to their images
  (``class_draw="proportional"``, the plain sampling of a long-tailed set);
- ``fastap_random``: FastAP's "Random" sampling, whole classes until the batch is full;
- ``fastap_hard``: FastAP's "Hard" sampling, two super-categories per batch, half each
  (``unlabelled="pair"`` for the VehicleID variant).
All are seeded by ``(seed, epoch)`` and resume through ``state_dict``. Each is registered beside its class with
``@register_batch_sampler(name)`` on a ``factory(dataset, batch_size, seed=0, **params)``.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable
from typing import Any

from dmlkit.registry import Registry, import_submodules

__all__ = ["BATCH_SAMPLERS", "create_batch_sampler", "list_batch_samplers", "register_batch_sampler"]


def _import_samplers() -> None:
    """Import every module of ``dmlkit.data.samplers``, so that their ``register_batch_sampler`` run."""
    import_submodules(__name__.rpartition(".")[0], [str(Path(__file__).parent)])


# Filled on the first lookup: each sampler registers itself beside its class.
BATCH_SAMPLERS: Registry = Registry("batch sampler", populate=_import_samplers)


def register_batch_sampler(name: str) -> Callable:
    """Decorator registering ``factory(dataset, batch_size, seed=0, **params)`` as the batch sampler ``name``."""
    return BATCH_SAMPLERS.register(name)


def create_batch_sampler(name: str, dataset: Any, batch_size: int, seed: int = 0, **params: Any):
    """The batch sampler ``name`` over ``dataset``; unknown names or parameters list the valid ones."""
    return BATCH_SAMPLERS.create(name, dataset=dataset, batch_size=batch_size, seed=seed, **params)


def list_batch_samplers() -> list[str]:
    return BATCH_SAMPLERS.names()
