"""The interface every dmlkit dataset follows (``DMLDataset``) and a checker for it.

A DML dataset is a labelled image set whose labels are contiguous class ids
``0..C-1`` *within the split*: train and test of a class-disjoint benchmark
each start at 0. Besides the per-image ``labels`` it describes its classes
(``class_names``) and, where the data has one, a super-category per class
(``class_categories`` indexing ``category_names``), used by hierarchical
evaluation and category-aware samplers.

``__getitem__(i)`` returns ``(image, label)``: a float tensor ``(in_channels, H, W)``
(normalised as the dataset documents) and a Python ``int``. Random
augmentation is a pure function of ``(seed, epoch, i)``; ``set_epoch`` moves
to the next epoch's draws. Datasets never touch global RNG state.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset
from dmlkit.validation import is_int

if TYPE_CHECKING:
    from dmlkit.data.transforms.eval_preprocess import ImagePreprocess


class DMLDataset(Dataset):
    """Base class of dmlkit datasets.

    Subclasses set, in ``__init__``:

    - ``labels``: ``LongTensor (N,)``, class ids ``0..C-1`` within this split;
    - ``class_names``: ``list[str]`` of length ``C``;
    - ``class_categories``: ``LongTensor (C,)`` indexing ``category_names``, ``-1`` for a
      class without a category (PKU VehicleID); ``category_names`` may be empty, then
      ``class_categories`` is all ``-1``;
    - ``in_channels``: 1 (grey) or 3 (RGB);

    and implement ``__getitem__``. Class attribute ``SPLITS`` names the splits
    the constructor's ``split`` argument accepts; ``prepare`` downloads,
    verifies or renders the data once (a no-op by default).
    """

    SPLITS: ClassVar[tuple[str, ...]] = ()

    labels: Tensor
    class_names: list[str]
    class_categories: Tensor
    category_names: list[str]
    in_channels: int = 1
    augment: bool = False

    # ----------------------------------------------------------- interface
    #: Where the images come from, for ``dmlkit data list`` (embedded, downloaded, or files the user provides).
    SOURCE: ClassVar[str] = ""
    #: (classes, images) of the whole published dataset, for ``dmlkit data list``; None where settings decide it.
    PUBLISHED_SIZE: ClassVar[tuple[int, int] | None] = None

    @classmethod
    def local_state(cls, name: str) -> str:
        """What this machine holds of dataset ``name`` (registered with this class), for ``dmlkit data list``."""
        return "needs data.root"

    def __len__(self) -> int:
        return int(self.labels.numel())

    def __getitem__(self, index: int) -> tuple[Tensor, int]:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def num_categories(self) -> int:
        return len(self.category_names)

    @property
    def categories(self) -> Tensor:
        """Per-image category ids ``(N,)`` (all ``-1`` where the dataset has no categories)."""
        return self.class_categories[self.labels]

    @property
    def epoch(self) -> int:
        """The epoch whose augmentation draws ``__getitem__`` makes (``set_epoch``)."""
        cell = self.__dict__.get("_epoch_cell")
        return int(cell) if cell is not None else int(self.__dict__.get("_epoch", 0))

    @epoch.setter
    def epoch(self, value: int) -> None:
        cell = self.__dict__.get("_epoch_cell")
        if cell is not None:
            cell.fill_(int(value))
        else:
            self.__dict__["_epoch"] = int(value)

    def set_epoch(self, epoch: int) -> None:
        """Reseed augmentation: item ``i`` of epoch ``e`` is augmented from ``(seed, e, i)``.

        ``DataLoader`` workers hold their own copies of the dataset: call :meth:`share_epoch` before the
        workers start for persistent workers to see the new epoch (the Trainer does); otherwise recreate
        the loader each epoch.
        """
        if not is_int(epoch) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        self.epoch = epoch

    def share_epoch(self) -> None:
        """Keep the epoch in shared memory, so that the workers of a persistent ``DataLoader`` (started
        after this call) read what ``set_epoch`` sets in the main process: the same draws as a loader
        made anew each epoch, without restarting the workers."""
        if self.__dict__.get("_epoch_cell") is None:
            self.__dict__["_epoch_cell"] = torch.tensor(self.epoch, dtype=torch.int64).share_memory_()

    def get_batch(self, indices: Sequence[int] | Tensor) -> tuple[Tensor, Tensor]:
        """Images ``(B, C, H, W)`` and labels ``(B,)`` of ``indices``; equal to stacking ``self[i]``.

        Subclasses may override it with a vectorised version (no data loader needed).
        """
        idx = _as_index_list(indices)
        items = [self[i] for i in idx]
        if not items:
            raise ValueError("get_batch needs at least one index")
        return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items], dtype=torch.long)

    def __getitems__(self, indices: list[int]) -> list[tuple[Tensor, int]]:
        """Batched fetching for ``DataLoader`` (PyTorch >= 2.0 calls it with a batch's indices)."""
        images, labels = self.get_batch(indices)
        return list(zip(images.unbind(0), labels.tolist()))

    def with_augment(self, augment: bool) -> "DMLDataset":
        """A shallow copy (sharing the image storage) with augmentation switched on or off."""
        other = copy.copy(self)
        other.augment = bool(augment)
        return other

    @classmethod
    def eval_preprocess(cls, image_size: int, **params: Any) -> "ImagePreprocess":
        """The eval transform of this dataset's images as an ``ImagePreprocess`` (``data.image_size`` and
        ``data.params``): what lets a run trained on it embed, search, serve and export image files."""
        raise ValueError(
            f"dataset class {cls.__name__} does not state its eval transform, so its runs cannot embed image files; "
            "implement the classmethod eval_preprocess(image_size, **params) -> ImagePreprocess "
            "(dmlkit.data.transforms.eval_preprocess)"
        )

    @classmethod
    def prepare(cls, root: str | Path | None = None, **kwargs: Any) -> Path | None:
        """Make the data available under ``root`` (download, verify, render); return where it lies."""
        return None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(images={len(self)}, classes={self.num_classes}, "
            f"categories={self.num_categories}, augment={self.augment})"
        )


def _as_index_list(indices: Sequence[int] | Tensor) -> list[int]:
    if isinstance(indices, Tensor):
        return [int(i) for i in indices.reshape(-1).tolist()]
    return [int(i) for i in indices]


def no_categories(num_classes: int) -> Tensor:
    """``class_categories`` for a dataset without super-categories: all ``-1``."""
    return torch.full((num_classes,), -1, dtype=torch.long)


def check_dataset(dataset: Any) -> None:
    """Raise ``ValueError`` naming the first way ``dataset`` breaks the ``DMLDataset`` interface.

    Checks types and shapes of ``labels``, ``class_names``, ``class_categories``
    and ``category_names``, that labels are contiguous ``0..C-1`` with every
    class present, and that item 0 is an ``(image, int)`` pair of the right
    channel count. Cheap: it reads a single item.
    """
    name = type(dataset).__name__
    for attr in ("labels", "class_names", "class_categories", "category_names", "in_channels", "num_classes"):
        if not hasattr(dataset, attr):
            raise ValueError(f"{name} lacks attribute '{attr}' of the DMLDataset interface")
    labels = dataset.labels
    if not isinstance(labels, Tensor) or labels.dtype != torch.long or labels.dim() != 1:
        raise ValueError(f"{name}.labels must be a 1-d LongTensor, got {type(labels).__name__}")
    c = dataset.num_classes
    if c != len(dataset.class_names):
        raise ValueError(f"{name}.num_classes={c} but it has {len(dataset.class_names)} class names")
    if len(dataset) != labels.numel():
        raise ValueError(f"{name} has {len(dataset)} items but {labels.numel()} labels")
    if labels.numel():
        counts = torch.bincount(labels, minlength=c)
        if int(labels.min()) < 0 or counts.numel() != c or bool((counts == 0).any()):
            raise ValueError(f"{name}.labels must be contiguous ids 0..{c - 1} with every class present")
    cats = dataset.class_categories
    if not isinstance(cats, Tensor) or cats.dtype != torch.long or tuple(cats.shape) != (c,):
        raise ValueError(f"{name}.class_categories must be a LongTensor of shape ({c},)")
    k = len(dataset.category_names)
    if c and k and (int(cats.min()) < -1 or int(cats.max()) >= k):
        raise ValueError(f"{name}.class_categories must index its {k} category_names (or be -1: no category)")
    if c and not k and bool((cats != -1).any()):
        raise ValueError(f"{name} has no category_names, so class_categories must be all -1")
    if len(dataset):
        image, label = dataset[0]
        if not isinstance(image, Tensor) or image.dim() != 3 or image.shape[0] != dataset.in_channels:
            raise ValueError(f"{name}[0] must return an image tensor ({dataset.in_channels}, H, W)")
        if not isinstance(label, int) or label != int(labels[0]):
            raise ValueError(f"{name}[0] must return its label as a Python int equal to labels[0]")
