"""The papers' batch shape for numerical comparisons (half precision, CUDA): 180 L2-normalised embeddings of 512
dimensions, 60 classes x 3, with classes that overlap (centres at 0.35 of the noise); and the relative error."""

from __future__ import annotations

import torch
import torch.nn.functional as F

CLASSES, PER_CLASS, DIM = 60, 3, 512


def papers_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(CLASSES, DIM, generator=g)
    labels = torch.arange(CLASSES).repeat_interleave(PER_CLASS)
    return F.normalize(centres[labels] * 0.35 + torch.randn(len(labels), DIM, generator=g), dim=1), labels


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """``|a - b| / |b|`` in float32 on the CPU (either may be half precision or on a GPU)."""
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))
