"""NetVLAD pooling (Arandjelovic et al., "NetVLAD: CNN architecture for weakly supervised place
recognition", CVPR 2016, Sec. 3.1), one of the pooling alternatives of thesis Sec. 5.3.5.

For ``K`` learnable cluster centres ``c_k`` and a soft assignment
``a_k(f_j) = softmax_k(w_k^T f_j + b_k)`` (a 1x1 convolution), NetVLAD aggregates the
residuals (Eq. 4 of the paper)::

    V(k, :) = sum_j a_k(f_j) (f_j - c_k)

then L2-normalises every row ``V(k, :)`` (intra-normalisation) and the
flattened ``K * C`` vector.  The local features are L2-normalised first
(``normalize_input``, the usual practice; off gives Eq. 4 on raw features).
Output size ``num_clusters * dim`` (the thesis compares 8x16 and 64x128 versions).
Normalisations divide by ``max(||v||, 1e-12)``, so all-zero maps give finite values.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from dmlkit.pooling.registry import register_pooling
from dmlkit.validation import check_int

__all__ = ["MAX_CLUSTERS", "NetVLAD", "netvlad"]

MAX_CLUSTERS = 4096
"""Largest accepted number of clusters (the output has clusters x channels entries)."""


def netvlad(
    x: torch.Tensor,
    centroids: torch.Tensor,
    assign_weight: torch.Tensor,
    assign_bias: torch.Tensor | None = None,
    normalize_input: bool = True,
) -> torch.Tensor:
    """NetVLAD of a map ``x`` (B, C, h, w) with centres (K, C) and assignment (K, C) [+ (K,)] -> (B, K*C)."""
    if x.ndim != 4:
        raise ValueError(f"pooling expects a local feature map (B, C, h, w), got shape {tuple(x.shape)}")
    c = x.shape[1]
    if centroids.ndim != 2 or centroids.shape[1] != c or assign_weight.shape != centroids.shape:
        raise ValueError(
            f"NetVLAD centroids and assign_weight must both be (K, {c}), "
            f"got {tuple(centroids.shape)} and {tuple(assign_weight.shape)}"
        )
    feats = x.flatten(2)  # (B, C, n)
    if normalize_input:
        feats = F.normalize(feats, p=2, dim=1)
    logits = torch.einsum("kc,bcn->bkn", assign_weight, feats)
    if assign_bias is not None:
        logits = logits + assign_bias[None, :, None]
    a = logits.softmax(dim=1)  # (B, K, n)
    vlad = torch.bmm(a, feats.transpose(1, 2)) - a.sum(dim=-1, keepdim=True) * centroids[None]  # (B, K, C)
    vlad = F.normalize(vlad, p=2, dim=2)  # intra-normalisation
    return F.normalize(vlad.flatten(1), p=2, dim=1)


@register_pooling("netvlad")
class NetVLAD(nn.Module):
    """NetVLAD pooling ``(B, dim, h, w) -> (B, num_clusters * dim)``.

    Args:
        dim: channels of the local features.
        num_clusters: ``K`` cluster centres (64 by default), at most ``MAX_CLUSTERS``.
        normalize_input: L2-normalise each local feature before the assignment (True).
        generator: optional ``torch.Generator`` for the initialisation (centres ``N(0, 1/dim)``,
            assignment weights uniform in ``+-1/sqrt(dim)``, zero bias).
    """

    def __init__(
        self,
        dim: int,
        num_clusters: int = 64,
        normalize_input: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        check_int("NetVLAD num_clusters", num_clusters, 1)
        if num_clusters > MAX_CLUSTERS:
            raise ValueError(f"NetVLAD num_clusters={num_clusters} is more than {MAX_CLUSTERS}; choose fewer")
        self.dim = dim
        self.num_clusters = num_clusters
        self.normalize_input = normalize_input
        bound = 1.0 / math.sqrt(dim)
        self.centroids = nn.Parameter(torch.randn(num_clusters, dim, generator=generator) * bound)
        weight = torch.rand(num_clusters, dim, generator=generator) * (2 * bound) - bound
        self.assign_weight = nn.Parameter(weight)
        self.assign_bias = nn.Parameter(torch.zeros(num_clusters))

    def output_dim(self, input_dim: int) -> int:
        return self.num_clusters * input_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 4 and x.shape[1] != self.dim:
            raise ValueError(f"NetVLAD was built for {self.dim} channels but the feature map has {x.shape[1]}")
        return netvlad(x, self.centroids, self.assign_weight, self.assign_bias, self.normalize_input)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_clusters={self.num_clusters}, normalize_input={self.normalize_input}"
