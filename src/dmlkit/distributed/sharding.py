"""Sharding of batches and datasets over processes, without overlap.

``ShardedBatchSampler`` wraps a batch sampler that yields *global* batches
(e.g. ``MPerClassBatchSampler`` with the global batch size) and yields process
``rank``'s contiguous slice of each. The gathered slices, in rank order, are the
global batch in its original order, so a global-batch loss on N processes sees
exactly what one process would. ``shard_indices`` splits a dataset for
evaluation (``gather_shards`` puts the embeddings back in dataset order).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch.utils.data import Sampler
from dmlkit.validation import is_int


def _check_rank(rank: int, world_size: int) -> None:
    for name, value in (("rank", rank), ("world_size", world_size)):
        if not is_int(value):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")


class ShardedBatchSampler(Sampler[list[int]]):
    """Process ``rank``'s slice ``batch[rank * b : (rank + 1) * b]`` (``b = len(batch) / world_size``) of every global batch.

    The global batch size must be divisible by ``world_size`` (every process then
    runs the same number of equally sized steps). ``set_epoch``, ``state_dict``
    and ``load_state_dict`` are the wrapped sampler's: the global batches, hence
    the shards, stay a pure function of (seed, epoch).
    """

    def __init__(self, batch_sampler: Any, rank: int, world_size: int) -> None:
        _check_rank(rank, world_size)
        self.batch_sampler, self.rank, self.world_size = batch_sampler, rank, world_size
        size = getattr(batch_sampler, "batch_size", None)
        if isinstance(size, int) and size % world_size:
            raise ValueError(
                f"the global batch size {size} is not divisible by the {world_size} processes; "
                f"set train.batch_size to a multiple of {world_size} (e.g. {size - size % world_size or world_size})"
            )

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batch_sampler:
            if len(batch) % self.world_size:
                raise ValueError(
                    f"a global batch of {len(batch)} items cannot be split evenly over {self.world_size} processes; "
                    "use a batch size divisible by the number of processes"
                )
            b = len(batch) // self.world_size
            yield list(batch[self.rank * b : (self.rank + 1) * b])

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        return self.batch_sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batch_sampler.load_state_dict(state)


def shard_indices(n: int, rank: int, world_size: int) -> torch.Tensor:
    """Indices ``rank, rank + world_size, ...`` of ``range(n)``: the shards are disjoint and cover it."""
    _check_rank(rank, world_size)
    if not is_int(n) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    return torch.arange(rank, n, world_size)
