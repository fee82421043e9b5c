"""Subsets of a dataset that keep the ``DMLDataset`` interface, and class-disjoint splits.

DML benchmarks split by class: the test classes are never seen in training,
and a validation set for early stopping is held out from the *train classes*
(``class_disjoint_split(train, 0.2)``), never from the test set.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from dmlkit.data.datasets.base import DMLDataset, _as_index_list
from dmlkit.data.seeding import make_generator
from dmlkit.validation import is_int, is_real


class LabelledSubset(DMLDataset):
    """The items ``indices`` of ``dataset``, relabelled ``0..C'-1`` over the classes they contain.

    New class ``k`` is the ``k``-th smallest parent class present
    (``parent_classes[k]``); ``class_names`` and ``class_categories`` are the
    parent's for those classes, and ``category_names`` is the parent's full
    list, so category ids mean the same in every subset of one dataset.
    Augmentation, ``set_epoch`` and ``with_augment`` act on the parent (item
    ``i`` of the subset is augmented as parent item ``indices[i]``).
    """

    def __init__(self, dataset: DMLDataset, indices: Sequence[int] | Tensor) -> None:
        idx = torch.as_tensor(_as_index_list(indices), dtype=torch.long)
        n = len(dataset)
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise ValueError(f"subset indices must lie in 0..{n - 1} (the parent has {n} items)")
        self.dataset = dataset
        self.indices = idx
        parent_labels = dataset.labels[idx]
        self.parent_classes = torch.unique(parent_labels)  # sorted
        remap = torch.full((max(dataset.num_classes, 1),), -1, dtype=torch.long)
        remap[self.parent_classes] = torch.arange(self.parent_classes.numel())
        self.labels = remap[parent_labels]
        pc = self.parent_classes.tolist()
        self.class_names = [dataset.class_names[c] for c in pc]
        self.class_categories = dataset.class_categories[self.parent_classes].clone()
        self.category_names = list(dataset.category_names)
        self.in_channels = dataset.in_channels

    # augmentation state lives in the parent
    @property
    def augment(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.dataset, "augment", False))

    @property
    def epoch(self) -> int:  # type: ignore[override]
        return int(getattr(self.dataset, "epoch", 0))

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)

    def share_epoch(self) -> None:
        self.dataset.share_epoch()

    def with_augment(self, augment: bool) -> "LabelledSubset":
        other = object.__new__(LabelledSubset)
        other.__dict__.update(self.__dict__)
        other.dataset = self.dataset.with_augment(augment)
        return other

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for a subset of {len(self)} items")
        image, _ = self.dataset[int(self.indices[index])]
        return image, int(self.labels[index])

    def get_batch(self, indices: Sequence[int] | Tensor) -> tuple[Tensor, Tensor]:
        idx = torch.as_tensor(_as_index_list(indices), dtype=torch.long)
        images, _ = self.dataset.get_batch(self.indices[idx])
        return images, self.labels[idx]


def subset_classes(dataset: DMLDataset, classes: Sequence[int] | Tensor) -> LabelledSubset:
    """The images of ``classes`` (class ids of ``dataset``), relabelled ``0..len(classes)-1`` in id order."""
    cls = torch.as_tensor(_as_index_list(classes), dtype=torch.long)
    if cls.numel() == 0:
        raise ValueError("subset_classes needs at least one class")
    if int(cls.min()) < 0 or int(cls.max()) >= dataset.num_classes:
        raise ValueError(f"class ids must lie in 0..{dataset.num_classes - 1}")
    keep = torch.isin(dataset.labels, cls)
    return LabelledSubset(dataset, torch.nonzero(keep).flatten())


def class_disjoint_split(
    dataset: DMLDataset, fraction: float, *, shuffle: bool = False, seed: int = 0
) -> tuple[LabelledSubset, LabelledSubset]:
    """Split ``dataset`` by class: ``(first, second)`` with ``second`` holding ``fraction`` of the classes.

    ``round(fraction * C)`` classes go to ``second``: the *last* ones by class id
    (as CUB/Cars put their test classes after the train classes), or, with
    ``shuffle=True``, a random choice drawn from ``seed``. Each part is a
    ``LabelledSubset`` relabelled ``0..C'-1``; no class is in both.
    """
    if not is_real(fraction) or not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be a number strictly between 0 and 1, got {fraction!r}")
    c = dataset.num_classes
    n_second = int(round(fraction * c))
    if n_second < 1 or n_second > c - 1:
        raise ValueError(
            f"fraction={fraction} of {c} classes leaves "
            f"{'no' if n_second < 1 else 'all'} classes in the second part; "
            "each part needs at least one class (use a larger dataset or another fraction)"
        )
    if shuffle:
        order = torch.randperm(c, generator=make_generator(seed, 0x5B1))
    else:
        order = torch.arange(c)
    first, second = order[: c - n_second].sort().values, order[c - n_second :].sort().values
    return subset_classes(dataset, first), subset_classes(dataset, second)


def class_fold_split(dataset: DMLDataset, num_folds: int, fold: int) -> tuple[LabelledSubset, LabelledSubset]:
    """Split ``dataset`` by class into ``num_folds`` contiguous folds: ``(the other folds, fold ``fold``)``.

    The fair protocol of Musgrave et al. (used by the thesis, Sec. 3.3.2.1): the
    train classes are cut into ``num_folds`` class-disjoint parts in class-id
    order (fold ``k`` holds classes ``[k*C/F, (k+1)*C/F)``); model ``k`` trains
    on the other parts and is early-stopped on part ``k``.
    """
    if not is_int(num_folds) or num_folds < 2:
        raise ValueError(f"num_folds must be an int >= 2, got {num_folds!r}")
    if not is_int(fold) or not 0 <= fold < num_folds:
        raise ValueError(f"fold must be an int in 0..{num_folds - 1}, got {fold!r}")
    c = dataset.num_classes
    if c < num_folds:
        raise ValueError(f"{c} classes cannot be cut into {num_folds} class-disjoint folds; use fewer folds")
    bounds = [round(k * c / num_folds) for k in range(num_folds + 1)]
    held = torch.arange(bounds[fold], bounds[fold + 1])
    rest = torch.cat([torch.arange(0, bounds[fold]), torch.arange(bounds[fold + 1], c)])
    return subset_classes(dataset, rest), subset_classes(dataset, held)


def sample_per_class(dataset: DMLDataset, max_per_class: int, seed: int = 0) -> DMLDataset:
    """At most ``max_per_class`` items of each class of ``dataset``, a random choice drawn from ``seed``
    (in item order; class ids unchanged); ``dataset`` itself when no class has more."""
    counts = torch.bincount(dataset.labels, minlength=dataset.num_classes)
    if int(counts.max()) <= max_per_class:
        return dataset
    gen = make_generator(seed, 0x5A3)
    keep = []
    for label in range(dataset.num_classes):
        members = torch.nonzero(dataset.labels == label).flatten()
        keep.append(members[torch.randperm(members.numel(), generator=gen)[:max_per_class]])
    return LabelledSubset(dataset, torch.cat(keep).sort().values)
