"""Global poolings of a local feature map: GAP, GMP, GAP+GMP and GeM.

Each pooling is a plain function on tensors ``(B, C, h, w) -> (B, C)`` plus an
``nn.Module`` registered under a name (``gap``, ``gmp``, ``gap+gmp``, ``gem``).

* GAP (global average pooling): ``f_c = (1/hw) sum_{ij} x_{c,ij}``.  Chapter 4
  of the thesis reads GAP as a convex combination of prototypes; it is the
  default of most DML baselines (e.g. Sec. 3.3.2.1).
* GMP (global max pooling): ``f_c = max_{ij} x_{c,ij}``.
* GAP+GMP: the sum of the two, a common DML pooling for ResNet backbones.
* GeM (generalised mean, Radenovic et al., "Fine-tuning CNN image retrieval with
  no human annotation", TPAMI 2018, Eq. 3): ``f_c = ((1/hw) sum_{ij} x_{c,ij}^p)^(1/p)``
  with ``x`` clamped to ``[eps, inf)``; ``p = 1`` is GAP and ``p -> inf`` tends to
  GMP.  ``p`` is one learnable scalar, initialised to 3 as in that paper.
"""

from __future__ import annotations

import torch
from torch import nn

from dmlkit.pooling.registry import register_pooling

__all__ = ["GAP", "GMP", "GAPGMP", "GeM", "gap", "gmp", "gap_gmp", "gem"]


def _check_map(x: torch.Tensor) -> None:
    if x.ndim != 4:
        raise ValueError(f"pooling expects a local feature map (B, C, h, w), got shape {tuple(x.shape)}")


def gap(x: torch.Tensor) -> torch.Tensor:
    """Global average pooling ``(B, C, h, w) -> (B, C)``."""
    _check_map(x)
    return x.mean(dim=(-2, -1))


def gmp(x: torch.Tensor) -> torch.Tensor:
    """Global max pooling ``(B, C, h, w) -> (B, C)``."""
    _check_map(x)
    return x.amax(dim=(-2, -1))


def gap_gmp(x: torch.Tensor) -> torch.Tensor:
    """Sum of global average and global max pooling ``(B, C, h, w) -> (B, C)``."""
    return gap(x) + gmp(x)


def gem(x: torch.Tensor, p: float | torch.Tensor = 3.0, eps: float = 1e-6) -> torch.Tensor:
    """Generalised-mean pooling ``((1/hw) sum_ij clamp(x, eps)^p)^(1/p)``, ``(B, C, h, w) -> (B, C)``.

    Computed as ``m * (mean((x/m)^p))^(1/p)`` with ``m`` the per-channel maximum
    (treated as a constant), which is the same function and the same gradient but
    does not under- or overflow for large ``p``.
    """
    _check_map(x)
    x = x.clamp(min=eps)
    m = x.detach().amax(dim=(-2, -1), keepdim=True)
    pooled = (x / m).pow(p).mean(dim=(-2, -1)).pow(1.0 / p)
    return pooled * m.squeeze(-1).squeeze(-1)


class _GlobalPool(nn.Module):
    """Base of the parameter-free poolings: keeps ``dim`` and keeps the channel count."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def output_dim(self, input_dim: int) -> int:
        return input_dim

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


@register_pooling("gap")
class GAP(_GlobalPool):
    """Global average pooling module, see ``gap``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gap(x)


@register_pooling("gmp")
class GMP(_GlobalPool):
    """Global max pooling module, see ``gmp``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gmp(x)


@register_pooling("gap+gmp")
class GAPGMP(_GlobalPool):
    """GAP + GMP module, see ``gap_gmp``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gap_gmp(x)


@register_pooling("gem")
class GeM(_GlobalPool):
    """Generalised-mean pooling with a learnable exponent ``p`` (Radenovic et al. 2018, Eq. 3).

    Args:
        dim: channels of the local features (the output has the same number).
        p: initial exponent (3, the value of Radenovic et al.); must be >= 1.
        eps: lower clamp of the features before the power (1e-6).
        learn_p: make ``p`` a trainable parameter (True) or a fixed buffer.
    """

    def __init__(self, dim: int, p: float = 3.0, eps: float = 1e-6, learn_p: bool = True) -> None:
        super().__init__(dim)
        if p < 1:
            raise ValueError(f"GeM exponent p must be >= 1 (1 = GAP, large = GMP), got {p}")
        if eps <= 0:
            raise ValueError(f"GeM eps must be positive, got {eps}")
        self.eps = eps
        p_tensor = torch.tensor([float(p)])
        if learn_p:
            self.p = nn.Parameter(p_tensor)
        else:
            self.register_buffer("p", p_tensor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gem(x, self.p, self.eps)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, p={float(self.p.detach()):.4g}, eps={self.eps}"
