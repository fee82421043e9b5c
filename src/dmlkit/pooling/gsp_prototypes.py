"""Data-driven initialisation of GSP's prototypes: greedy k-centre on a memory of GAP-pooled vectors.

The thesis does not say how the prototypes of Ch. 5 start. The author's code (TF layer
``GeneralizedSumPooling``) pools with GAP during a warm-up, writes the normalised pooled vectors of
the training batches into a memory of 1,024 rows, and, once the memory is full, sets the prototypes
to a greedy k-centre selection of the memory; from then on the layer pools with GSP. This is
consistent with Ch. 4, where prototypes are the greedy k-centres of the features (Algorithm 2).

``PrototypeMemory`` is that memory (buffers, so a checkpoint holds it and a resumed run continues
the warm-up where it stopped); ``kcenter_prototypes`` is the selection: greedy farthest-first
(Algorithm 2 with no initial centres, as ``dmlkit.proxies.kcenter`` runs it for CCP; written out
here because ``proxies`` builds on ``models``, which builds on ``pooling``) over all rows,
starting at row 0, ties to the smallest index.
(The author's code instead takes the first ``m`` rows as the initial set and picks the ``m``
prototypes among the remaining rows; both are farthest-first covers of the memory.)
"""

from __future__ import annotations

import torch
from torch import nn
from dmlkit.validation import check_int

__all__ = ["PROTOTYPE_INITS", "PrototypeMemory", "kcenter_prototypes"]

PROTOTYPE_INITS = ("random", "kcenter")


def kcenter_prototypes(memory: torch.Tensor, m: int) -> torch.Tensor:
    """``m`` rows of ``memory (M, d)`` chosen by greedy k-centre (Algorithm 2), first pick row 0: ``(m, d)``."""
    if memory.ndim != 2 or memory.shape[0] < m:
        raise ValueError(
            f"k-centre needs a memory of at least {m} rows (the prototypes), got shape {tuple(memory.shape)}"
        )
    dist = torch.full((memory.shape[0],), float("inf"), dtype=memory.dtype, device=memory.device)
    picks = []
    q = 0
    for _ in range(m):
        picks.append(q)
        dist = torch.minimum(dist, (memory - memory[q]).norm(dim=1))
        dist[q] = -float("inf")  # never picked twice, even when rows repeat
        q = int(dist.argmax())
    return memory[picks].clone()


class PrototypeMemory(nn.Module):
    """A fill-once memory of ``size`` pooled vectors of ``dim`` values, after ``skip`` training batches.

    ``add(vectors)`` counts a training batch and, past the first ``skip`` batches, appends the
    vectors until the memory is full; ``full`` says when the k-centre selection can run.
    """

    def __init__(self, size: int, dim: int, skip: int = 0) -> None:
        super().__init__()
        check_int("GSP memory_size", size, 1, hint="pooled vectors kept for k-centre")
        check_int("GSP warmup_steps", skip, 0, hint="batches before the memory fills")
        self.size, self.skip = size, skip
        self.register_buffer("rows", torch.zeros(size, dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.register_buffer("batches", torch.zeros((), dtype=torch.long))

    @property
    def full(self) -> bool:
        return int(self.count) >= self.size

    @torch.no_grad()
    def add(self, vectors: torch.Tensor) -> None:
        self.batches += 1
        if int(self.batches) <= self.skip or self.full:
            return
        start = int(self.count)
        take = min(vectors.shape[0], self.size - start)
        self.rows[start : start + take] = vectors[:take].detach().to(self.rows.dtype)
        self.count += take

    def extra_repr(self) -> str:
        return f"size={self.size}, skip={self.skip}"
