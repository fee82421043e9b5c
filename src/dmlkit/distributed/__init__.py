"""Data-parallel training across processes: gathers with gradient, global-batch losses, sharding.

``all_gather_with_grad`` and ``GlobalBatchLoss`` let N processes compute exactly
the loss and the gradients of one process on the global batch (see
``gather.py`` for the derivation); ``ShardedBatchSampler`` gives each process
its slice of every global batch; ``gather_shards`` collects evaluation
embeddings computed in shards. None of these import the engine: they work in a
user's own DDP loop.
"""

from dmlkit.distributed.gather import (
    GlobalBatchLoss,
    all_gather_no_grad,
    all_gather_with_grad,
    gather_shards,
    is_distributed,
    rank,
    world_size,
)
from dmlkit.distributed.sharding import ShardedBatchSampler, shard_indices

__all__ = [
    "GlobalBatchLoss",
    "ShardedBatchSampler",
    "all_gather_no_grad",
    "all_gather_with_grad",
    "gather_shards",
    "is_distributed",
    "rank",
    "shard_indices",
    "world_size",
]
