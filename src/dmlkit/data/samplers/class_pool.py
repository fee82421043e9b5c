"""Whole-class filling for FastAP's samplers: item indices per class and a running random class order.

``ClassPool`` holds the item indices of every class (at most ``max_images_per_class`` of them used per
draw) and fills ``need`` indices with all the images of classes drawn from a ``ClassStream``, the last
class only partly; ``ClassStream`` visits its classes in a running random order, each once per round.
``as_labels`` turns the samplers' labels into a checked tensor.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor


__all__ = ["ClassPool", "ClassStream", "as_labels"]


def as_labels(labels: Sequence[int] | Tensor | np.ndarray, name: str = "labels") -> Tensor:
    """``labels`` as a 1-d int64 tensor of class ids; a ValueError names ``name`` if it is empty or not integers."""
    lab = torch.as_tensor(np.asarray(labels.cpu() if isinstance(labels, Tensor) else labels))
    if lab.dim() != 1 or lab.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-d sequence of class ids")
    if lab.is_floating_point() or lab.dtype == torch.bool:
        raise ValueError(f"{name} must be integers, got dtype {lab.dtype}")
    return lab.long()


class ClassStream:
    """A running random order over a fixed list of classes: every class once per round.

    ``next(g, avoid)`` returns the next class; when a new round starts, classes
    in ``avoid`` (those already in the current (half-)batch) go to its end, so
    a pool with enough images never repeats a class within one (half-)batch.
    """

    def __init__(self, classes: list[int]) -> None:
        self.classes = classes
        self.queue: list[int] = []
        self.pos = 0

    def next(self, g: torch.Generator, avoid: set[int]) -> int:
        if self.pos == len(self.queue):
            order = [self.classes[i] for i in torch.randperm(len(self.classes), generator=g).tolist()]
            self.queue = [c for c in order if c not in avoid] + [c for c in order if c in avoid]
            self.pos = 0
        c = self.queue[self.pos]
        self.pos += 1
        return c


class ClassPool:
    """Item indices per class, and how to fill ``need`` indices with whole classes."""

    def __init__(self, labels: Tensor, max_images_per_class: int | None) -> None:
        classes, inverse = torch.unique(labels, return_inverse=True)
        order = torch.argsort(inverse, stable=True)
        counts = torch.bincount(inverse, minlength=classes.numel())
        self.class_ids = classes.tolist()  # position -> label value
        self.members = list(torch.split(order, counts.tolist()))  # position -> item indices
        cap = max_images_per_class if max_images_per_class is not None else int(counts.max())
        self.cap = cap
        self.usable = torch.clamp(counts, max=cap)  # images a class can contribute

    def fill(self, stream: ClassStream, g: torch.Generator, need: int) -> list[int]:
        """``need`` indices: all (up to the cap) images of classes from ``stream``; the last one partial."""
        out: list[int] = []
        chosen: set[int] = set()
        while len(out) < need:
            c = stream.next(g, chosen)
            chosen.add(c)
            members = self.members[c]
            take = min(int(self.usable[c]), need - len(out))
            pick = torch.randperm(members.numel(), generator=g)[:take]
            out.extend(members[pick].tolist())
        return out
