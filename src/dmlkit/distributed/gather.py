"""All-gather of embeddings with gradient, and a loss wrapper that sees the global batch.

Why the gradient is scaled by the world size (and the loss is not)
------------------------------------------------------------------
Let the global batch be ``X = [X_1; ...; X_N]``, where process ``r`` computes
``X_r = f(theta; I_r)`` from its own images ``I_r``. One process on the whole
batch minimises ``L(X) + R(theta)`` (``L`` a pair/proxy loss, ``R`` terms that do
not go through the batch, e.g. the CCP projection term) and gets::

    g = sum_r J_r^T dL/dX_r + dR/dtheta + (d/dphi for the loss's own parameters phi, e.g. proxies)

with ``J_r = dX_r/dtheta``. With N processes, each gathers ``Y = [X_1; ...; X_N]``
(the same values everywhere) and computes the same ``L(Y)``; autograd on process
``r`` reaches ``theta`` only through its own slice ``X_r`` (the others arrive as
constants). If the gather's backward hands ``s * dL/dY[slice r]`` to ``X_r``,
process ``r`` holds ``s J_r^T dL/dX_r + dR/dtheta``, and DDP replaces every model
gradient by the mean over processes::

    (1/N) sum_r (s J_r^T dL/dX_r + dR/dtheta) = (s/N) sum_r J_r^T dL/dX_r + dR/dtheta.

So ``s = N`` gives exactly the single-process gradient. The factor belongs in
the gather's backward, not on the loss: scaling the loss by N would also scale
``dR/dtheta`` and the gradient of the loss's own parameters (proxies, which are
not wrapped by DDP and get identical, unaveraged gradients on every process) by
N. The loss value each process reports is the single-process value.
``scale_grad_for_ddp=False`` (``s = 1``) gives the plain partial derivative of
``L`` with respect to the local slice, for loops that sum gradients themselves.

An equivalent formulation all-reduces (sums) ``dL/dY`` in the backward and takes
the local slice: as every process holds the same ``dL/dY`` the sum is ``N`` times
it. This module skips that communication; it relies on every process computing
the same loss from the same gathered values (deterministic losses, miners and
samplers with the same seed, which is how dmlkit's components behave).

Batch normalisation and other layers that look at the batch inside the model
still see only the local slice (as in any DDP run), so equality with one process
holds for models without such layers, or with synchronised ones.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = [
    "GlobalBatchLoss",
    "all_gather_no_grad",
    "all_gather_with_grad",
    "gather_shards",
    "is_distributed",
    "rank",
    "world_size",
]


def is_distributed() -> bool:
    """A default process group with more than one process is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _gather_sizes(n: int, device: torch.device) -> list[int]:
    size = torch.tensor([n], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    return [int(s) for s in sizes]


def _gather(x: Tensor) -> tuple[Tensor, list[int]]:
    """Concatenation over processes of ``x`` (first dimension may differ), and each process's size."""
    sizes = _gather_sizes(x.shape[0], x.device)
    most = max(sizes)
    padded = x.new_zeros((most, *x.shape[1:]))
    padded[: x.shape[0]] = x
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat([p[:s] for p, s in zip(parts, sizes)]), sizes


class _AllGatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, scale: float) -> Tensor:  # type: ignore[override]
        out, sizes = _gather(x.detach())
        r = dist.get_rank()
        ctx.start = sum(sizes[:r])
        ctx.stop = ctx.start + sizes[r]
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        local = grad[ctx.start : ctx.stop]
        return (local * ctx.scale if ctx.scale != 1.0 else local.clone()), None


def all_gather_with_grad(x: Tensor, scale_grad_for_ddp: bool = True) -> Tensor:
    """``[x_0; x_1; ...; x_{N-1}]`` from all N processes (rank order), differentiable for the local ``x``.

    The backward returns to ``x`` its slice of the incoming gradient times ``N``
    (``scale_grad_for_ddp=True``, to cancel DDP's averaging: see the module
    docstring) or times 1. Without a process group (or with one process) ``x``
    is returned unchanged. Local sizes may differ between processes.
    """
    if not isinstance(x, Tensor) or x.dim() < 1:
        raise ValueError("x must be a tensor with a batch dimension, e.g. embeddings of shape (B, d)")
    if not is_distributed():
        return x
    scale = float(dist.get_world_size()) if scale_grad_for_ddp else 1.0
    return _AllGatherWithGrad.apply(x, scale)


@torch.no_grad()
def all_gather_no_grad(x: Tensor) -> Tensor:
    """``[x_0; ...; x_{N-1}]`` without gradient (labels, indices); ``x`` itself without a process group."""
    if not is_distributed():
        return x
    return _gather(x)[0]


@torch.no_grad()
def gather_shards(values: Tensor, indices: Tensor, total: int) -> Tensor:
    """Reassemble a dataset-order tensor from shards: process ``r`` holds ``values`` at rows ``indices``.

    Every process gets the full ``(total, ...)`` tensor. Each row must be held by
    exactly one process (e.g. ``shard_indices``); a row held by none raises.
    """
    if values.shape[0] != indices.shape[0]:
        raise ValueError(
            f"values has {values.shape[0]} rows but indices has {indices.shape[0]}; pass one index per row"
        )
    all_values = all_gather_no_grad(values)
    all_indices = all_gather_no_grad(indices.to(values.device, torch.int64))
    if all_indices.numel() != total or torch.unique(all_indices).numel() != total:
        raise ValueError(
            f"the shards hold {all_indices.numel()} rows ({torch.unique(all_indices).numel()} distinct) "
            f"but the dataset has {total}; shard with dmlkit.distributed.shard_indices"
        )
    out = all_values.new_empty((total, *values.shape[1:]))
    out[all_indices] = all_values
    return out


class GlobalBatchLoss(nn.Module):
    """A PML-signature loss computed on the global batch of all processes.

    ``GlobalBatchLoss(loss, miner)(embeddings, labels)`` gathers the local
    embeddings (with gradient, ``all_gather_with_grad``) and labels of every
    process, mines on the global batch and returns ``loss`` of the global batch:
    the value and, after DDP's gradient averaging, the gradients of one process
    on the whole batch. ``ref_emb`` / ``ref_labels`` (a cross-batch memory, say)
    are used as given and must be the same on every process. Local
    ``indices_tuple`` cannot be mapped to the global batch: pass the miner here.
    The loss's parameters (proxies) are this module's parameters, unchanged.
    """

    def __init__(self, loss: nn.Module, miner: nn.Module | None = None, scale_grad_for_ddp: bool = True) -> None:
        super().__init__()
        if not callable(loss):
            raise ValueError("loss must be a callable loss with PML's signature (embeddings, labels, ...)")
        self.loss = loss
        self.miner = miner
        self.scale_grad_for_ddp = scale_grad_for_ddp

    def forward(
        self,
        embeddings: Tensor,
        labels: Tensor,
        indices_tuple: Any = None,
        ref_emb: Tensor | None = None,
        ref_labels: Tensor | None = None,
    ) -> Tensor:
        if indices_tuple is not None:
            raise ValueError(
                "GlobalBatchLoss mines on the global batch; pass the miner to GlobalBatchLoss(loss, miner) "
                "instead of local indices_tuple"
            )
        emb = all_gather_with_grad(embeddings, self.scale_grad_for_ddp)
        lab = all_gather_no_grad(labels)
        if self.miner is not None:
            indices_tuple = self.miner(emb, lab, ref_emb, ref_labels) if ref_emb is not None else self.miner(emb, lab)
        if ref_emb is None:
            return self.loss(emb, lab, indices_tuple)
        return self.loss(emb, lab, indices_tuple, ref_emb, ref_labels)
