"""Trainable class proxies (``ProxyBank``) and the wrapper that makes any pair loss proxy-based.

``ProxyPairLoss(loss, bank)`` evaluates a pair or tuple loss of PML's signature
between the batch embeddings ``z_j`` (anchors) and the proxies ``rho_i``
(references), i.e. the data term ``(1/c) sum_i E_z [l(rho_i, z; theta)]`` of
Eq. 3.2.11 of the thesis, as

    loss(embeddings, labels, indices_tuple, ref_emb=proxies, ref_labels=proxy_labels)

so only proxy-sample pairs enter the loss (no sample-sample pairs).  A miner given
to the wrapper mines against the proxies as well.  ``ProxyBank.reinitialize``
re-initialises the proxies with greedy k-centre picks (Algorithm 2) from a pool
of sample embeddings, the step that starts each projection of Algorithm 1.

Proxy normalisation (``normalize``): ``"none"`` (default; PML's ``LpDistance`` and
``CosineSimilarity`` normalise the reference embeddings themselves), ``"l2"``, or
``"lipschitz"`` = ``v / max(1, ||v||)`` (thesis Sec. 3.2.4, the 1-Lipschitz
normalisation also offered by the model head as ``model.normalize: lipschitz``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from dmlkit.models.embedder import NORMALIZATIONS, normalize_embeddings
from dmlkit.proxies.kcenter import select_per_class

__all__ = ["ProxyBank", "ProxyPairLoss", "group_by_class"]


def group_by_class(embeddings: Tensor, labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor, Tensor]:
    """Pools ``(C, b, d)``, validity mask ``(C, b)`` and row indices ``(C, b)`` (-1 = padding) of ``embeddings``.

    ``b`` is the largest class count; rows keep the order of ``embeddings`` within each class.
    """
    if embeddings.dim() != 2 or labels.dim() != 1 or labels.shape[0] != embeddings.shape[0]:
        raise ValueError("embeddings must be (N, d) with one label per row in labels (N,)")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got range [{int(labels.min())}, {int(labels.max())}]")
    labels = labels.to(embeddings.device)
    counts = torch.bincount(labels, minlength=num_classes)
    b = max(int(counts.max()) if counts.numel() else 0, 1)
    order = torch.argsort(labels, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(labels.numel(), device=labels.device) - starts[labels[order]]
    rows = torch.full((num_classes, b), -1, dtype=torch.long, device=embeddings.device)
    rows[labels[order], slot] = order
    mask = rows >= 0
    pool = embeddings[rows.clamp(min=0)] * mask.unsqueeze(-1)
    return pool, mask, rows


class ProxyBank(nn.Module):
    """``proxies_per_class`` trainable proxies for each of ``num_classes`` classes, in ``dim`` dimensions.

    Attributes:
        proxies: ``nn.Parameter (C * k, d)``, class-major (rows ``c*k .. c*k+k-1`` belong to class ``c``).
        labels: buffer ``(C * k,)``, the class of each proxy.
    """

    def __init__(
        self, num_classes: int, proxies_per_class: int, dim: int, normalize: str = "none", seed: int = 0
    ) -> None:
        super().__init__()
        for name, value in (("num_classes", num_classes), ("proxies_per_class", proxies_per_class), ("dim", dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if normalize not in NORMALIZATIONS:
            raise ValueError(f"unknown proxy normalize '{normalize}'; valid values are: {', '.join(NORMALIZATIONS)}")
        self.num_classes, self.proxies_per_class, self.dim, self.normalize = num_classes, proxies_per_class, dim, normalize
        g = torch.Generator().manual_seed(seed)
        init = torch.nn.functional.normalize(torch.randn(num_classes * proxies_per_class, dim, generator=g), dim=1)
        self.proxies = nn.Parameter(init)
        self.register_buffer("labels", torch.arange(num_classes).repeat_interleave(proxies_per_class))

    def reference(self) -> Tensor:
        """The proxies as the loss sees them (after ``normalize``), ``(C * k, d)``."""
        return normalize_embeddings(self.proxies, self.normalize)

    def per_class(self) -> Tensor:
        """The current reference proxies as ``(C, k, d)`` (detached)."""
        return self.reference().detach().view(self.num_classes, self.proxies_per_class, self.dim)

    @torch.no_grad()
    def reinitialize(
        self, embeddings: Tensor, labels: Tensor, generator: torch.Generator | None = None, from_current: bool = True
    ) -> Tensor:
        """Set the proxies to greedy k-centre picks (Algorithm 2) among ``embeddings`` of each class.

        Args:
            embeddings: ``(N, d)`` pool of sample embeddings (b per class in CCP).
            labels: ``(N,)`` their classes.
            generator: when given, each class's pool is shuffled first (a random first pick
                when there are no current proxies); otherwise pool order is kept.
            from_current: distances count from the current proxies too (Algorithm 2's
                ``rho_c``); False starts each class from its first pool row.

        Returns:
            ``(C, k)`` indices into ``embeddings`` of the samples that became the proxies.

        Raises ``ValueError`` when a class has fewer than ``proxies_per_class`` samples in the pool.
        """
        if embeddings.shape[-1] != self.dim:
            raise ValueError(f"embeddings must have {self.dim} columns, got shape {tuple(embeddings.shape)}")
        if generator is not None:
            perm = torch.randperm(labels.numel(), generator=generator).to(embeddings.device)
            embeddings, labels, back = embeddings[perm], labels.to(embeddings.device)[perm], perm
        else:
            back = torch.arange(labels.numel(), device=embeddings.device)
        pool, mask, rows = group_by_class(embeddings.detach().to(self.proxies.dtype), labels, self.num_classes)
        counts = mask.sum(1)
        short = (counts < self.proxies_per_class).nonzero().flatten()
        if short.numel():
            c = int(short[0])
            raise ValueError(
                f"class {c} has {int(counts[c])} samples in the pool but {self.proxies_per_class} proxies per class "
                "are asked for; lower ccp.proxies_per_class (or ccp.pool_size must cover it: each class needs at "
                "least proxies_per_class training samples)"
            )
        initial = self.per_class().to(pool) if from_current else None
        picks = select_per_class(pool, mask, self.proxies_per_class, initial)
        chosen_rows = torch.gather(rows, 1, picks)
        self.proxies.copy_(embeddings[chosen_rows.flatten()].to(self.proxies))
        return back[chosen_rows]

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, proxies_per_class={self.proxies_per_class}, dim={self.dim}, normalize={self.normalize!r}"


class ProxyPairLoss(nn.Module):
    """A pair/tuple loss evaluated between the batch and the proxies of ``bank`` (Eq. 3.2.11, data term).

    Args:
        loss: any PML-signature loss that accepts ``ref_emb`` / ``ref_labels``.
        bank: the proxies.
        miner: optional PML miner, called as ``miner(embeddings, labels, proxies, proxy_labels)``.
    """

    def __init__(self, loss: nn.Module, bank: ProxyBank, miner: nn.Module | None = None) -> None:
        super().__init__()
        if any(True for _ in loss.parameters()):
            raise ValueError(
                f"{type(loss).__name__} has its own parameters (proxies or a classifier); CCP needs a pair or tuple "
                "loss (contrastive, triplet, multi_similarity, ...) whose references it replaces by proxies"
            )
        self.loss, self.bank, self.miner = loss, bank, miner

    def forward(
        self,
        embeddings: Tensor,
        labels: Tensor,
        indices_tuple: Any = None,
        ref_emb: Tensor | None = None,
        ref_labels: Tensor | None = None,
    ) -> Tensor:
        if ref_emb is not None or ref_labels is not None:
            raise ValueError("ProxyPairLoss uses its proxies as ref_emb; do not pass ref_emb / ref_labels")
        ref, ref_labels = self.bank.reference(), self.bank.labels
        ref = ref.to(embeddings.dtype)
        if indices_tuple is None and self.miner is not None:
            indices_tuple = self.miner(embeddings, labels, ref, ref_labels)
        return self.loss(embeddings, labels, indices_tuple, ref_emb=ref, ref_labels=ref_labels)
