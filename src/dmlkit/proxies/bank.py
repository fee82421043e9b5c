"""Trainable class proxies (``ProxyBank``) and the wrapper that makes any pair loss proxy-based.

``ProxyPairLoss(loss, bank)`` evaluates a pair or tuple loss of PML's signature
between the batch embeddings ``z_j`` (anchors) and the proxies ``rho_i``
(references), i.e. the data term ``(1/c) sum_i E_z [l(rho_i, z; theta)]`` of
Eq. 3.2.11 of the thesis, as

    loss(embeddings, labels, indices_tuple, ref_emb=proxies, ref_labels=proxy_labels)

so only proxy-sample pairs enter the loss (the official code's extra batch-pair term
is CCP's ``batch`` objective term, ``dmlkit.methods.ccp``).  A miner given to the
wrapper mines against the proxies as well.  With ``proxy_anchor=True`` the roles swap,
``loss(proxies, proxy_labels, ref_emb=embeddings, ref_labels=labels)``: the proxies are
the anchors, as ``l(rho_i, z)`` of Eq. 3.2.11 writes it and the official code does by
default (for triplet: ``||rho - z+|| - ||rho - z-|| + m`` instead of ``||z - rho+|| - ||z - rho-|| + m``).

``ProxyBank.reinitialize`` re-initialises the proxies with greedy k-centre picks
(Algorithm 2) from a pool of sample embeddings, the step that starts each projection
of Algorithm 1.  Algorithm 2 measures ``||u - v||`` between pool embeddings ``u`` and
proxies ``v``, so both must lie in one space: the pool carries the model's
normalisation (``pool_normalize``, e.g. ``l2``) and the proxies are mapped through the
same normalisation before the distances (raw proxies drift off the unit sphere under
Adam and weight decay, and would be measured against unit-norm samples otherwise).
``remember()`` keeps the current proxies as ``rho_star`` (the projection's best,
Algorithm 1's ``rho*``), the set the next k-centre counts from.

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
from dmlkit.validation import is_int

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
        self,
        num_classes: int,
        proxies_per_class: int,
        dim: int,
        normalize: str = "none",
        seed: int = 0,
        pool_normalize: str = "none",
    ) -> None:
        super().__init__()
        for name, value in (("num_classes", num_classes), ("proxies_per_class", proxies_per_class), ("dim", dim)):
            if not is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name, value in (("normalize", normalize), ("pool_normalize", pool_normalize)):
            if value not in NORMALIZATIONS:
                raise ValueError(f"unknown proxy {name} '{value}'; valid values are: {', '.join(NORMALIZATIONS)}")
        self.num_classes, self.proxies_per_class, self.dim, self.normalize = (
            num_classes,
            proxies_per_class,
            dim,
            normalize,
        )
        self.pool_normalize = pool_normalize
        g = torch.Generator().manual_seed(seed)
        init = torch.nn.functional.normalize(torch.randn(num_classes * proxies_per_class, dim, generator=g), dim=1)
        self.proxies = nn.Parameter(init)
        self.register_buffer("labels", torch.arange(num_classes).repeat_interleave(proxies_per_class))
        self.register_buffer("rho_star", init.clone())

    def no_weight_decay(self) -> set[str]:
        """Names of parameters that coupled weight decay must not shrink (see ``dmlkit.engine.optim``)."""
        return {"proxies"}

    def reference(self) -> Tensor:
        """The proxies as the loss sees them (after ``normalize``), ``(C * k, d)``."""
        return normalize_embeddings(self.proxies, self.normalize)

    def per_class(self, proxies: Tensor | None = None) -> Tensor:
        """The reference proxies (``proxies``, default the current ones) as ``(C, k, d)`` (detached)."""
        ref = self.reference() if proxies is None else normalize_embeddings(proxies, self.normalize)
        return ref.detach().view(self.num_classes, self.proxies_per_class, self.dim)

    def in_pool_space(self, proxies: Tensor | None = None) -> Tensor:
        """``(C, k, d)`` proxies mapped into the pool's space (``pool_normalize``), where Algorithm 2 measures."""
        flat = self.per_class(proxies).reshape(-1, self.dim)
        return normalize_embeddings(flat, self.pool_normalize).view(self.num_classes, self.proxies_per_class, self.dim)

    @torch.no_grad()
    def remember(self) -> None:
        """``rho_star <- rho``: keep the current proxies (the best state of the current projection)."""
        self.rho_star.copy_(self.proxies.detach())

    @torch.no_grad()
    def reinitialize(
        self,
        embeddings: Tensor,
        labels: Tensor,
        generator: torch.Generator | None = None,
        from_current: bool = True,
        initial: Tensor | None = None,
    ) -> Tensor:
        """Set the proxies to greedy k-centre picks (Algorithm 2) among ``embeddings`` of each class.

        Args:
            labels: ``(N,)`` their classes.
            generator: when given, each class's pool is shuffled first (a random first pick
                when there are no current proxies); otherwise pool order is kept.
            embeddings: ``(N, d)`` pool embeddings, in the model's output space (``pool_normalize``).
            from_current: distances count from proxies too (Algorithm 2's ``rho_c``), mapped into
                the pool's space (``in_pool_space``); False starts each class from its first pool row.
            initial: ``(C * k, d)`` raw proxies to count from (CCP: ``rho_star``, the projection's
                best); default the current proxies.

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
                "are asked for; lower methods.ccp.proxies_per_class (or methods.ccp.pool_size must cover it: each class needs at "
                "least proxies_per_class training samples)"
            )
        rho = self.in_pool_space(initial).to(pool) if from_current else None
        picks = select_per_class(pool, mask, self.proxies_per_class, rho)
        chosen_rows = torch.gather(rows, 1, picks)
        self.proxies.copy_(embeddings[chosen_rows.flatten()].to(self.proxies))
        return back[chosen_rows]

    def extra_repr(self) -> str:
        return (
            f"num_classes={self.num_classes}, proxies_per_class={self.proxies_per_class}, dim={self.dim}, "
            f"normalize={self.normalize!r}, pool_normalize={self.pool_normalize!r}"
        )


class ProxyPairLoss(nn.Module):
    """A pair/tuple loss evaluated between the batch and the proxies of ``bank`` (Eq. 3.2.11, data term).

    Args:
        loss: any PML-signature loss that accepts ``ref_emb`` / ``ref_labels``.
        bank: the proxies.
        miner: optional PML miner, called as ``miner(anchors, anchor_labels, references, reference_labels)``.
        proxy_anchor: the proxies are the anchors and the batch the references (see the module docstring).
    """

    def __init__(
        self, loss: nn.Module, bank: ProxyBank, miner: nn.Module | None = None, proxy_anchor: bool = False
    ) -> None:
        super().__init__()
        if any(True for _ in loss.parameters()):
            raise ValueError(
                f"{type(loss).__name__} has its own parameters (proxies or a classifier); CCP needs a pair or tuple "
                "loss (contrastive, triplet, multi_similarity, ...) whose references it replaces by proxies"
            )
        self.loss, self.bank, self.miner, self.proxy_anchor = loss, bank, miner, bool(proxy_anchor)

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
        anchors, anchor_labels, ref = embeddings, labels, ref.to(embeddings.dtype)
        if self.proxy_anchor:
            anchors, anchor_labels, ref, ref_labels = ref, ref_labels, embeddings, labels
        if indices_tuple is None and self.miner is not None:
            indices_tuple = self.miner(anchors, anchor_labels, ref, ref_labels)
        return self.loss(anchors, anchor_labels, indices_tuple, ref_emb=ref, ref_labels=ref_labels)
