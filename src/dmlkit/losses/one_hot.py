"""One-hot label vectors for the classifier losses, with the checks a user's labels need.

``one_hot_labels(labels, num_classes, dtype)`` turns class indices ``(B,)`` into
the label vectors ``(B, num_classes)`` that CE' / CE'' compare class outputs with
(the uniform points of the weak metric of the classification-baseline paper); ``check_one_hot(targets)``
validates label vectors given directly.  Both raise ``ValueError`` on bad input.
"""

from __future__ import annotations

import torch

__all__ = ["check_one_hot", "one_hot_labels"]


def one_hot_labels(labels: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """``(B,)`` integer class indices in ``[0, num_classes)`` -> one-hot rows ``(B, num_classes)`` of ``dtype``."""
    if labels.dtype.is_floating_point or labels.dtype == torch.bool or labels.dtype.is_complex:
        raise ValueError(f"labels must be an integer tensor of class indices, got {labels.dtype}")
    if labels.ndim != 1:
        raise ValueError(f"labels must have shape (B,), got {tuple(labels.shape)}")
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes - 1}], got [{int(labels.min())}, {int(labels.max())}]")
    return torch.nn.functional.one_hot(labels.long(), num_classes).to(dtype)


def check_one_hot(targets: torch.Tensor) -> None:
    """``ValueError`` unless every row of ``targets`` is a one-hot vector."""
    if not ((targets == 0) | (targets == 1)).all() or not (targets.sum(dim=-1) == 1).all():
        raise ValueError("targets must be one-hot rows (entries 0/1, exactly one 1 per row)")
