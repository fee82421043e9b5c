"""What the training loop does differently with several processes (DDP under torchrun).

Each process trains on its slice of every global batch (``shard_sampler``); the objective sees the whole
global batch, gathered in global-batch order with the gradient of this process's slice (``global_batch``);
a stop signal that reached any process stops every process after the same step (``signal_anywhere``).
With one process each function returns its input unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

from dmlkit.distributed import ShardedBatchSampler, all_gather_no_grad, all_gather_with_grad

__all__ = ["global_batch", "shard_sampler", "signal_anywhere"]


def shard_sampler(sampler: Any, fabric: Any) -> Any:
    """``sampler``, or with several processes the slice of each of its batches that this process trains on."""
    if fabric.world_size == 1:
        return sampler
    return ShardedBatchSampler(sampler, fabric.global_rank, fabric.world_size)


def global_batch(
    fabric: Any, embeddings: torch.Tensor, labels: torch.Tensor, batch: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Embeddings (with gradient), labels and the encoder's extra tensors (``batch["extras"]``, replaced in
    ``batch``) of every process's slice, in global-batch order."""
    if fabric.world_size == 1:
        return embeddings, labels
    embeddings, labels = all_gather_with_grad(embeddings), all_gather_no_grad(labels)
    batch["labels"] = labels
    for key in batch.get("extras", ()):
        if not isinstance(batch[key], torch.Tensor):
            raise ValueError(f"batch['{key}'] must be a tensor with a batch dimension to train on several processes")
        batch[key] = all_gather_with_grad(batch[key])
    return embeddings, labels


def signal_anywhere(fabric: Any, received: int) -> int:
    """The signal number that reached this or any other process after this step (0: none)."""
    if fabric.world_size == 1:
        return received
    flags = all_gather_no_grad(torch.tensor([received], device=fabric.device))
    return int(flags.max())
