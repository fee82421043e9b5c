"""DeLF-style attention pooling (Noh et al., "Large-Scale Image Retrieval with Attentive Deep
Features", ICCV 2017, Sec. 4), one of the pooling alternatives of thesis Sec. 5.3.5.

A small scoring network on the feature map -- 1x1 convolution, ReLU, 1x1
convolution to one channel, softplus -- gives every pixel a non-negative weight
``alpha_j``; the pooled feature is the weighted sum ``(1/n) sum_j alpha_j f_j``
(DeLF's Eq. 1 is the plain sum ``sum_j alpha_j f_j``; the constant ``1/n``
keeps the scale of GAP for any map size and does not change the direction).
With all ``alpha_j = 1`` it is GAP.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dmlkit.pooling.registry import register_pooling
from dmlkit.validation import check_int

__all__ = ["AttentionPool", "attention_pool"]


def _check_map(x: torch.Tensor, dim: int | None = None) -> None:
    if x.ndim != 4:
        raise ValueError(f"pooling expects a local feature map (B, C, h, w), got shape {tuple(x.shape)}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"the pooling was built for {dim} channels but the feature map has {x.shape[1]}")


def attention_pool(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Attention-weighted pooling ``(1/n) sum_j alpha_j f_j``: ``x`` (B, C, h, w), ``weights`` (B, 1, h, w) -> (B, C)."""
    _check_map(x)
    if weights.ndim != 4 or weights.shape[1] != 1 or weights.shape[0] != x.shape[0] or weights.shape[2:] != x.shape[2:]:
        raise ValueError(
            f"attention weights must be (B, 1, h, w) = ({x.shape[0]}, 1, {x.shape[2]}, {x.shape[3]}), "
            f"got {tuple(weights.shape)}"
        )
    return (x * weights).mean(dim=(-2, -1))


@register_pooling("attention")
class AttentionPool(nn.Module):
    """DeLF-style attention pooling ``(B, dim, h, w) -> (B, dim)``.

    Args:
        dim: channels of the local features (the output has the same number).
        hidden_dim: channels of the scoring network's hidden layer (default ``dim``; DeLF uses 512).
    """

    def __init__(self, dim: int, hidden_dim: int | None = None) -> None:
        super().__init__()
        hidden = dim if hidden_dim is None else hidden_dim
        check_int("attention hidden_dim", hidden, 1)
        self.dim = dim
        self.hidden_dim = hidden
        self.score = nn.Sequential(nn.Conv2d(dim, hidden, 1), nn.ReLU(inplace=True), nn.Conv2d(hidden, 1, 1))

    def output_dim(self, input_dim: int) -> int:
        return input_dim

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """Per-pixel weights ``softplus(score(x))``, shape (B, 1, h, w)."""
        _check_map(x, self.dim)
        return F.softplus(self.score(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return attention_pool(x, self.attention(x))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, hidden_dim={self.hidden_dim}"
