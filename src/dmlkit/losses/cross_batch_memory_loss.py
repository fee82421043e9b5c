"""Cross-batch memory (XBM; Wang et al., "Cross-Batch Memory for Embedding Learning", CVPR 2020).

``CrossBatchMemoryLoss`` wraps PML's ``CrossBatchMemory``: a FIFO queue of the
last ``memory_size`` (detached) embeddings and labels serves as the reference set
of a pair/tuple loss, so each anchor of the batch meets far more negatives than
the batch holds.  What this class adds to PML's:

* PML's loss signature ``(embeddings, labels, indices_tuple=None, ref_emb=None,
  ref_labels=None)``, so it plugs in wherever a dmlkit/PML loss does (the memory
  *is* the reference set, so ``ref_emb`` must stay None).
* ``start_iteration``: the first ``start_iteration`` training calls use the loss
  on the batch alone and leave the memory empty, the warm-up that makes the
  memory's features "slowly drifting" (XBM Sec. 3; thesis Sec. 3.3.2.1: "1K
  steps of training with the baseline loss prior to integrate XBM").
* the queue position and the warm-up counter are part of ``state_dict``.

Registered as ``xbm``: ``create_loss("xbm", loss="contrastive", memory_size=...,
embedding_size=...)``.
"""

from __future__ import annotations

from typing import Any

import torch
from pytorch_metric_learning.losses import CrossBatchMemory

from dmlkit.losses.registry import (
    create_loss,
    create_miner,
    default_miner,
    get_loss_entry,
    list_losses,
    register_loss,
)

__all__ = ["CrossBatchMemoryLoss", "xbm", "xbm_supported_losses"]


class CrossBatchMemoryLoss(CrossBatchMemory):
    """A pair/tuple loss computed against a memory of past embeddings (XBM).

    Args:
        loss: the inner PML loss (must be one ``CrossBatchMemory.supported_losses()`` lists).
        embedding_size: size of the embeddings stored.
        memory_size: number of embeddings kept (FIFO).
        miner: optional PML miner run between the batch and the memory.
        start_iteration: training calls that use the batch alone before the memory starts.
    """

    def __init__(
        self,
        loss: torch.nn.Module,
        embedding_size: int,
        memory_size: int = 1024,
        miner: torch.nn.Module | None = None,
        start_iteration: int = 0,
    ) -> None:
        if memory_size < 1:
            raise ValueError(f"xbm memory_size must be positive, got {memory_size}")
        if start_iteration < 0:
            raise ValueError(f"xbm start_iteration must be >= 0, got {start_iteration}")
        super().__init__(loss, embedding_size, memory_size=memory_size, miner=miner)
        self.start_iteration = start_iteration
        self.iteration = 0

    def forward(  # type: ignore[override]
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        indices_tuple: Any = None,
        ref_emb: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
        enqueue_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if ref_emb is not None or ref_labels is not None:
            raise ValueError("xbm uses its memory as the reference set; call it without ref_emb/ref_labels")
        if enqueue_mask is None and len(embeddings) > self.memory_size:
            raise ValueError(
                f"the batch ({len(embeddings)}) is larger than the xbm memory ({self.memory_size}); raise memory_size"
            )
        if self.training and torch.is_grad_enabled():
            self.iteration += 1
            if self.iteration <= self.start_iteration:
                if self.miner is not None and indices_tuple is None:
                    indices_tuple = self.miner(embeddings, labels)
                return self.loss(embeddings, labels, indices_tuple)
        return super().forward(embeddings, labels, indices_tuple=indices_tuple, enqueue_mask=enqueue_mask)

    def get_extra_state(self) -> dict[str, Any]:
        return {"queue_idx": self.queue_idx, "has_been_filled": self.has_been_filled, "iteration": self.iteration}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.queue_idx = int(state["queue_idx"])
        self.has_been_filled = bool(state["has_been_filled"])
        self.iteration = int(state["iteration"])

    def extra_repr(self) -> str:
        return f"memory_size={self.memory_size}, start_iteration={self.start_iteration}"


def xbm_supported_losses() -> list[str]:
    """Registered loss names that can sit inside the cross-batch memory."""
    supported = set(CrossBatchMemory.supported_losses())
    return [
        n
        for n in list_losses()
        if (b := get_loss_entry(n).builds) is not None and b.__name__ in supported and n != "xbm"
    ]


@register_loss("xbm", builds=None, takes_miner=True)
def xbm(
    embedding_size: int,
    loss: str = "contrastive",
    loss_params: dict[str, Any] | None = None,
    memory_size: int = 1024,
    miner: str | None = "default",
    miner_params: dict[str, Any] | None = None,
    start_iteration: int = 1000,
) -> CrossBatchMemoryLoss:
    """Cross-batch memory (Wang et al., CVPR 2020) around the registered loss ``loss`` (built with ``loss_params``).

    Defaults: ``loss = "contrastive"`` (thesis Sec. 3.3.2.1: XBM is evaluated
    with C1 and C2, contrastive being the best baseline of the XBM paper);
    ``start_iteration = 1000`` (thesis: "1K steps of training with the baseline
    loss prior to integrate XBM"); ``memory_size = 1024`` (PML's default -- the
    thesis sizes the memory in batches per dataset: (S, L) = (3, 25) batches for
    CUB and Cars196, (100, 400) for In-shop, (400, 1400) for SOP); ``miner =
    "default"`` mines batch-vs-memory pairs with the inner loss's default miner
    (none for contrastive; None disables mining).
    """
    if loss == "xbm":
        raise ValueError("xbm cannot wrap itself; pick the inner loss, e.g. loss='contrastive'")
    supported = xbm_supported_losses()
    if loss not in list_losses():
        raise ValueError(f"unknown xbm inner loss '{loss}'; valid values are: {', '.join(supported)}")
    if loss not in supported:
        raise ValueError(f"xbm cannot wrap loss '{loss}'; valid values are: {', '.join(supported)}")
    inner = create_loss(loss, embedding_size=embedding_size, **(loss_params or {}))
    miner_name = default_miner(loss) if miner == "default" else miner
    if miner_name is None and miner_params:
        raise ValueError("xbm got miner_params but no miner; set miner to a name of list_miners()")
    memory_miner = create_miner(miner_name, **(miner_params or {})) if miner_name is not None else None
    return CrossBatchMemoryLoss(
        inner, embedding_size, memory_size=memory_size, miner=memory_miner, start_iteration=start_iteration
    )
