"""The data of the SFT unbalanced-training study: its closed-set head/tail split and its training batches.

``make_unbalanced_split`` draws the head and tail classes and their training images; ``training_batches``
draws the positions of every step's batch, uniform over images (the natural, unbalanced class frequencies)
or class-balanced (the re-sampling control). Each draw has its own seeded generator
(``make_generator(seed, tag, ...)``): the global random state is never used.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dmlkit.data.seeding import make_generator
from dmlkit.validation import is_int

__all__ = [
    "AUGMENTER_TAG",
    "INIT_TAG",
    "SAMPLINGS",
    "UnbalancedSplit",
    "make_unbalanced_split",
    "positive_int",
    "training_batches",
]

SAMPLINGS = ("uniform", "class_balanced")

# Tags that separate the study's random streams derived from one seed: the split, the initial weights, SFT's
# feature generator, the uniform and the class-balanced batches.
SPLIT_TAG, INIT_TAG, AUGMENTER_TAG, BATCHES_TAG, BALANCED_BATCHES_TAG = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class UnbalancedSplit:
    """A closed-set head/tail split: study class ``k`` is dataset class ``classes[k]``.

    Study classes ``0 .. num_head-1`` are head, ``num_head .. num_head+num_tail-1`` tail.
    ``*_indices`` index the dataset's images; ``*_labels`` are study class ids.
    """

    classes: Tensor  # (C,) dataset class ids
    num_head: int
    train_indices: Tensor
    train_labels: Tensor
    test_indices: Tensor
    test_labels: Tensor

    @property
    def num_classes(self) -> int:
        return int(self.classes.numel())

    @property
    def num_tail(self) -> int:
        return self.num_classes - self.num_head

    @property
    def is_head(self) -> Tensor:
        """``(C,)`` bool: study class is a head class."""
        return torch.arange(self.num_classes) < self.num_head

    @property
    def class_counts(self) -> Tensor:
        """``(C,)`` training images per study class."""
        return torch.bincount(self.train_labels, minlength=self.num_classes)


def positive_int(name: str, value: object) -> int:
    """``value`` when it is an int >= 1, else a ValueError naming ``name``."""
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def make_unbalanced_split(
    labels: Tensor,
    num_head: int,
    num_tail: int,
    head_train: int,
    tail_train: int,
    min_images: int,
    seed: int,
) -> UnbalancedSplit:
    """Draw head and tail classes among those with ``>= min_images`` images, and their train images.

    Head classes keep ``head_train`` random images for training, tail classes
    ``tail_train``; all other images of the chosen classes form the test set.
    Everything is drawn from ``make_generator(seed, 1)``.
    """
    for name, value in (
        ("num_head", num_head),
        ("num_tail", num_tail),
        ("head_train", head_train),
        ("tail_train", tail_train),
        ("min_images", min_images),
    ):
        positive_int(name, value)
    if tail_train >= head_train:
        raise ValueError(
            f"tail_train ({tail_train}) must be smaller than head_train ({head_train}): tail classes are short of samples"
        )
    if min_images <= head_train:
        raise ValueError(
            f"min_images ({min_images}) must exceed head_train ({head_train}) so every head class keeps a test image"
        )
    labels = torch.as_tensor(labels).long().flatten()
    counts = torch.bincount(labels)
    eligible = torch.nonzero(counts >= min_images).flatten()
    if num_head + num_tail > eligible.numel():
        raise ValueError(
            f"only {eligible.numel()} classes have >= {min_images} images, but num_head + num_tail = {num_head + num_tail}: "
            "ask for fewer classes or lower min_images"
        )
    g = make_generator(seed, SPLIT_TAG)
    classes = eligible[torch.randperm(eligible.numel(), generator=g)[: num_head + num_tail]]
    train_idx, train_lab, test_idx, test_lab = [], [], [], []
    for k, c in enumerate(classes.tolist()):
        images = torch.nonzero(labels == c).flatten()
        images = images[torch.randperm(images.numel(), generator=g)]
        n = head_train if k < num_head else tail_train
        train_idx.append(images[:n])
        test_idx.append(images[n:])
        train_lab.append(torch.full((n,), k, dtype=torch.long))
        test_lab.append(torch.full((images.numel() - n,), k, dtype=torch.long))
    return UnbalancedSplit(
        classes, num_head, torch.cat(train_idx), torch.cat(train_lab), torch.cat(test_idx), torch.cat(test_lab)
    )


def _uniform_batches(n: int, batch_size: int, steps: int, seed: int) -> list[Tensor]:
    """``steps`` batches of positions ``0..n-1``: epochs of seeded permutations, last partial batch dropped."""
    bs = min(batch_size, n)
    out: list[Tensor] = []
    epoch = 0
    while len(out) < steps:
        perm = torch.randperm(n, generator=make_generator(seed, BATCHES_TAG, epoch))
        out.extend(perm[i : i + bs] for i in range(0, n - bs + 1, bs))
        epoch += 1
    return out[:steps]


def _class_balanced_batches(labels: Tensor, batch_size: int, steps: int, seed: int) -> list[Tensor]:
    """``steps`` batches of positions drawn with replacement, each class equally likely (images uniform within it).

    The usual re-sampling remedy for a long tail: a tail class with 2 training images is drawn as often as a
    head class with 10, so its classifier weights see as many updates; the control SFT's unbalanced scheme is
    measured against (a classifier trained on more tail *draws*, without new tail *features*).
    """
    counts = torch.bincount(labels)
    weights = 1.0 / counts[labels].double()
    g = make_generator(seed, BALANCED_BATCHES_TAG)
    return [torch.multinomial(weights, batch_size, replacement=True, generator=g) for _ in range(steps)]


def training_batches(split: UnbalancedSplit, sampling: str, batch_size: int, steps: int, seed: int) -> list[Tensor]:
    """``steps`` batches of positions into ``split.train_indices``, by ``sampling`` (one of ``SAMPLINGS``)."""
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    if sampling == "class_balanced":
        return _class_balanced_batches(split.train_labels, batch_size, steps, seed)
    return _uniform_batches(split.train_indices.numel(), batch_size, steps, seed)
