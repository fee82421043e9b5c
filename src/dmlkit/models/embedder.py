"""The embedding model: backbone -> local feature map -> pooling -> linear head -> normalisation.

Two architectures are built from it:

* the usual one: backbone map -> pooling -> ``nn.Linear`` head -> normalisation;
* the thesis' Sec. 5.2.4 one (``head="none"`` with a ``local_projection``): backbone map ->
  per-pixel 1x1 convolution to the local embedding size -> pooling (GSP) -> normalisation;
  the pooled vector *is* the embedding, no linear layer follows the pooling. With GAP the two
  are the same function up to the head's bias (GAP commutes with a 1x1 convolution:
  ``mean_j(W f_j + b) = W mean_j(f_j) + b``), and PyTorch initialises a 1x1 ``Conv2d(C, d)``
  and a ``Linear(C, d)`` from the same distribution with the same number of draws, so a
  GAP model of either kind built from the same random state has equal weights.

``Embedder`` keeps the four stages of the DML pipeline apart so that each can be
swapped by name (see ``dmlkit.models.config.build_embedder``) and each
intermediate result can be read: ``local_features`` (B, C, h, w),
``pooled_features`` (B, C'), ``forward`` (B, d).  ``encode`` returns all three
from one pass, for objectives that need the local features too (e.g. GSP's
zero-shot prediction loss).

Normalisations of the embedding ``v = head(pooled)``:

* ``"l2"``: ``v / ||v||_2`` -- the embeddings of most DML work (thesis
  Sec. 3.3.2.1: "the embedding vectors are l2 normalized").
* ``"lipschitz"``: ``v / max(1, ||v||_2)`` -- thesis Sec. 3.2.4 (embedding
  function): "we apply v/||v||_2 if ||v||_2 >= 1 or no normalization otherwise";
  unlike the l2 normalisation this map is 1-Lipschitz, so the loss stays
  Lipschitz continuous (Lemma 3.2.1).
* ``"none"``: ``v`` unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from dmlkit.validation import is_int

__all__ = ["HEADS", "NORMALIZATIONS", "Embedder", "EmbedderOutput", "lipschitz_normalize", "normalize_embeddings"]

NORMALIZATIONS = ("l2", "lipschitz", "none")
HEADS = ("linear", "none")


def lipschitz_normalize(v: torch.Tensor) -> torch.Tensor:
    """``v / max(1, ||v||_2)`` row-wise (thesis Sec. 3.2.4): projects onto the unit ball."""
    return v / v.norm(dim=-1, keepdim=True).clamp(min=1.0)


def normalize_embeddings(v: torch.Tensor, mode: str) -> torch.Tensor:
    """Apply normalisation ``mode`` (one of ``NORMALIZATIONS``) to the rows of ``v``."""
    if mode == "l2":
        return F.normalize(v, p=2, dim=-1)
    if mode == "lipschitz":
        return lipschitz_normalize(v)
    if mode == "none":
        return v
    raise ValueError(f"unknown normalize '{mode}'; valid values are: {', '.join(NORMALIZATIONS)}")


@dataclass
class EmbedderOutput:
    """All intermediate results of one forward pass of an ``Embedder``."""

    local: torch.Tensor  # (B, C, h, w) backbone feature map
    pooled: torch.Tensor  # (B, C') pooled feature
    embedding: torch.Tensor  # (B, d) normalised embedding
    plan: torch.Tensor | None = None  # (B, m, n) transport plan, when the pooling has one (GSP)


class Embedder(nn.Module):
    """Backbone, pooling, linear head and normalisation as one module.

    Args:
        backbone: module mapping images to ``(B, C, h, w)`` with an ``out_channels`` attribute.
        pooling: module mapping ``(B, C, h, w)`` to ``(B, C')`` with ``output_dim(C) -> C'``.
        embedding_dim: size ``d`` of the embedding.
        normalize: ``"l2"`` (default), ``"lipschitz"`` or ``"none"``.
        local_projection: optional module applied to the backbone map before pooling, e.g. the
            per-pixel 1x1 convolution of the thesis' Sec. 5.2.4 (``local_projection_conv``); it must
            expose ``out_channels``, the channel count the pooling then sees.
        head: ``"linear"`` (an ``nn.Linear(C', d)`` after the pooling) or ``"none"`` (the pooled
            vector is the embedding, Sec. 5.2.4; needs ``C' == embedding_dim``).

    Attributes:
        head: the ``nn.Linear(C', d)``, or ``nn.Identity()`` for ``head="none"``.
    """

    def __init__(
        self,
        backbone: nn.Module,
        pooling: nn.Module,
        embedding_dim: int,
        normalize: str = "l2",
        local_projection: nn.Module | None = None,
        head: str = "linear",
    ) -> None:
        super().__init__()
        if normalize not in NORMALIZATIONS:
            raise ValueError(f"unknown normalize '{normalize}'; valid values are: {', '.join(NORMALIZATIONS)}")
        if not isinstance(embedding_dim, int) or embedding_dim < 1:
            raise ValueError(f"embedding_dim must be a positive integer, got {embedding_dim!r}")
        if head not in HEADS:
            raise ValueError(f"unknown head '{head}'; valid values are: {', '.join(HEADS)}")
        local_dim = getattr(backbone if local_projection is None else local_projection, "out_channels", None)
        if not isinstance(local_dim, int):
            raise ValueError(
                "the backbone (or local projection) must expose its channel count as an integer attribute 'out_channels'"
            )
        if not hasattr(pooling, "output_dim"):
            raise ValueError("the pooling module must implement output_dim(input_dim) -> int")
        self.backbone = backbone
        if local_projection is not None:
            self.local_projection = local_projection
        self.pooling = pooling
        self.local_dim = local_dim
        self.pooled_dim = int(pooling.output_dim(local_dim))
        self.embedding_dim = embedding_dim
        self.normalize = normalize
        if head == "none" and self.pooled_dim != embedding_dim:
            raise ValueError(
                f"head 'none' makes the pooled vector the embedding, but the pooling gives {self.pooled_dim} "
                f"values and embedding_dim is {embedding_dim}; set model.local_dim: {embedding_dim} (the 1x1 "
                "convolution of Sec. 5.2.4) or model.embedding_dim to the pooled size"
            )
        self.head_kind = head
        self.head = nn.Linear(self.pooled_dim, embedding_dim) if head == "linear" else nn.Identity()

    def new_layers(self) -> list[nn.Module]:
        """The layers added on top of the backbone: local projection, pooling and head.

        An optimiser gives them the new-layer learning rate (``train.head_lr``) when the
        backbone is fine-tuned at a lower one (``dmlkit.engine.optim.parameter_groups``).
        """
        return [m for m in (getattr(self, "local_projection", None), self.pooling, self.head) if m is not None]

    def local_features(self, x: torch.Tensor) -> torch.Tensor:
        """Backbone feature map ``(B, C, h, w)`` (after the local projection, when there is one)."""
        local = self.backbone(x)
        projection = getattr(self, "local_projection", None)
        return local if projection is None else projection(local)

    def pooled_features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled feature ``(B, C')`` (before the head)."""
        return self.pooling(self.local_features(x))

    def embed_pooled(self, pooled: torch.Tensor) -> torch.Tensor:
        """Head and normalisation applied to already pooled features ``(B, C') -> (B, d)``."""
        return normalize_embeddings(self.head(pooled), self.normalize)

    def encode(self, x: torch.Tensor) -> EmbedderOutput:
        """One pass returning the local map, the pooled feature, the embedding and the pooling's plan.

        ``plan`` is filled when the pooling module has ``forward_with_plan`` (GSP's
        transport plan, used by the zero-shot prediction loss, Sec. 5.2.3), else None.
        """
        local = self.local_features(x)
        plan = None
        if hasattr(self.pooling, "forward_with_plan"):
            pooled, plan = self.pooling.forward_with_plan(local)
        else:
            pooled = self.pooling(local)
        return EmbedderOutput(local=local, pooled=pooled, embedding=self.embed_pooled(pooled), plan=plan)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embeddings ``(B, embedding_dim)``."""
        return self.embed_pooled(self.pooled_features(x))

    def extra_repr(self) -> str:
        return (
            f"local_dim={self.local_dim}, pooled_dim={self.pooled_dim}, head={self.head_kind!r}, "
            f"normalize={self.normalize!r}"
        )


def local_projection_conv(in_channels: int, out_channels: int) -> nn.Conv2d:
    """The per-pixel linear embedding of local features (thesis Sec. 5.2.4): a 1x1 convolution."""
    if not is_int(out_channels) or out_channels < 1:
        raise ValueError(f"model.local_dim must be a positive integer or null, got {out_channels!r}")
    return nn.Conv2d(in_channels, out_channels, kernel_size=1)
