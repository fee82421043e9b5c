"""Batch samplers for metric learning: every batch holds several classes with several images each.

``MPerClassBatchSampler`` builds each batch from ``batch_size // m`` distinct
classes and ``m`` images of each, so every batch contains positive pairs for
pair/triplet losses and miners. Its batches are a pure function of
``(seed, epoch)`` (a ``torch.Generator``, no global RNG), so a run resumed from
``state_dict()`` replays exactly the batches it would have seen.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Sampler

from dmlkit.data.samplers.registry import register_batch_sampler
from dmlkit.data.seeding import check_seed, make_generator
from dmlkit.validation import check_int, is_int

#: How ``MPerClassBatchSampler`` draws the classes of a batch: equally often, or in proportion to their images.
CLASS_DRAWS = ("balanced", "proportional")


class EpochBatchSampler(Sampler[list[int]]):
    """Base of dmlkit's batch samplers: the batches of an epoch are a pure function of (seed, epoch).

    Subclasses set ``seed``, ``epoch`` and ``batches_per_epoch`` and implement ``batches(epoch)``;
    this base gives ``set_epoch``, ``__len__``, ``__iter__`` and the ``state_dict`` that resumes a run.
    """

    seed: int
    epoch: int
    batches_per_epoch: int

    def batches(self, epoch: int) -> list[list[int]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        if not is_int(epoch) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        self.epoch = epoch

    def __len__(self) -> int:
        return self.batches_per_epoch

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches(self.epoch)

    def state_dict(self) -> dict[str, Any]:
        """``{"seed", "epoch"}``: all that determines the batches (with the labels and sizes)."""
        return {"seed": self.seed, "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = {"seed", "epoch"} - set(state)
        if missing:
            raise ValueError(f"sampler state lacks {sorted(missing)}; expected the keys seed and epoch")
        check_seed(state["seed"], "sampler state seed")
        self.seed = state["seed"]
        self.set_epoch(state["epoch"])


class MPerClassBatchSampler(EpochBatchSampler):
    """Yield ``batches_per_epoch`` batches of ``batch_size // m`` classes x ``m`` indices each.

    Args:
        labels: class label of every dataset item (tensor, array or sequence of ints).
        batch_size: indices per batch; a multiple of ``m``.
        m: images per class in a batch. A class with fewer than ``m`` images is
            sampled with replacement; otherwise its ``m`` images are distinct.
        seed: base seed; epoch ``e`` draws from ``derive_seed(seed, e)``.
        batches_per_epoch: batches per ``iter()``; default ``len(labels) // batch_size`` (at least 1).
        class_draw: how the classes of a batch are drawn (``CLASS_DRAWS``):

            - ``"balanced"`` (default): a running random order, every class used once before any class is
              used again (across batch boundaries within an epoch): classes are drawn equally often
              whatever their size, class-balanced re-sampling on a long-tailed set;
            - ``"proportional"``: each batch's classes drawn with probability proportional to their
              number of images, without replacement within the batch (``torch.multinomial``), so every
              image is drawn about equally often: the instance-proportional ("plain") sampling of a
              long-tailed set, with ``m`` images per class kept for the pair losses and miners.

    The classes of one batch are distinct. Indices of a batch are grouped
    by class, ``m`` at a time. Call ``set_epoch(e)`` before iterating epoch ``e``
    (as with ``DistributedSampler``); iterating twice without it replays the epoch.
    """

    def __init__(
        self,
        labels: Sequence[int] | Tensor | np.ndarray,
        batch_size: int,
        m: int,
        seed: int = 0,
        batches_per_epoch: int | None = None,
        class_draw: str = "balanced",
    ) -> None:
        if class_draw not in CLASS_DRAWS:
            raise ValueError(
                f"class_draw must be one of {CLASS_DRAWS} (classes drawn equally often, or in proportion "
                f"to their images), got {class_draw!r}"
            )
        lab = torch.as_tensor(np.asarray(labels.cpu() if isinstance(labels, Tensor) else labels))
        if lab.dim() != 1 or lab.numel() == 0:
            raise ValueError("labels must be a non-empty 1-d sequence of class ids")
        if lab.is_floating_point() or lab.dtype == torch.bool:
            raise ValueError(f"labels must be integers, got dtype {lab.dtype}")
        lab = lab.long()
        for name, value in (("batch_size", batch_size), ("m", m)):
            check_int(name, value, 1)
        if batch_size % m:
            raise ValueError(
                f"batch_size={batch_size} is not a multiple of m={m}; each batch holds batch_size/m classes "
                f"with m images each (e.g. batch_size={max(m, batch_size // m * m)})"
            )
        classes, inverse = torch.unique(lab, return_inverse=True)
        self.classes_per_batch = batch_size // m
        if self.classes_per_batch > classes.numel():
            raise ValueError(
                f"batch_size/m = {self.classes_per_batch} classes per batch, but the labels hold only "
                f"{classes.numel()} classes; lower batch_size or raise m (batch_size <= {classes.numel() * m})"
            )
        if batches_per_epoch is None:
            batches_per_epoch = max(1, lab.numel() // batch_size)
        elif not is_int(batches_per_epoch) or batches_per_epoch < 1:
            raise ValueError(f"batches_per_epoch must be a positive int or None, got {batches_per_epoch!r}")
        check_seed(seed)

        self.labels = lab
        self.batch_size = batch_size
        self.m = m
        self.seed = seed
        self.batches_per_epoch = batches_per_epoch
        self.epoch = 0
        self.class_draw = class_draw
        self.classes = classes
        order = torch.argsort(inverse, stable=True)
        counts = torch.bincount(inverse, minlength=classes.numel())
        self._counts = counts
        self._members = list(torch.split(order, counts.tolist()))  # item indices of each class

    def batches(self, epoch: int) -> list[list[int]]:
        """All batches of ``epoch`` (what ``iter()`` yields after ``set_epoch(epoch)``)."""
        g = make_generator(self.seed, epoch)
        m = self.m
        draws = self._proportional_classes(g) if self.class_draw == "proportional" else self._balanced_classes(g)
        out: list[list[int]] = []
        for _ in range(self.batches_per_epoch):
            batch: list[int] = []
            for c in next(draws):
                members = self._members[c]
                n = members.numel()
                if n >= m:
                    pick = torch.randperm(n, generator=g)[:m]
                else:
                    pick = torch.randint(n, (m,), generator=g)
                batch.extend(members[pick].tolist())
            out.append(batch)
        return out

    def _balanced_classes(self, g: torch.Generator) -> Iterator[list[int]]:
        """The class positions of each batch in turn, in a running random order (each class once per round)."""
        n_classes, k = len(self._members), self.classes_per_batch
        queue: list[int] = []  # the current round of classes, consumed from position ``pos``
        pos = 0
        while True:
            chosen: list[int] = []
            while len(chosen) < k:
                if pos == len(queue):
                    # A new round; classes already in this batch go to its end. The batch needs at
                    # most n_classes - len(chosen) more, so it never reaches them.
                    perm = torch.randperm(n_classes, generator=g).tolist()
                    taken = set(chosen)
                    queue = [c for c in perm if c not in taken] + [c for c in perm if c in taken]
                    pos = 0
                chosen.append(queue[pos])
                pos += 1
            yield chosen

    def _proportional_classes(self, g: torch.Generator) -> Iterator[list[int]]:
        """The class positions of each batch in turn, each drawn in proportion to its images, distinct in a batch."""
        weights = self._counts.double()
        while True:
            yield torch.multinomial(weights, self.classes_per_batch, replacement=False, generator=g).tolist()


@register_batch_sampler("m_per_class")
def m_per_class(
    dataset: Any,
    batch_size: int,
    seed: int = 0,
    m: int = 4,
    batches_per_epoch: int | None = None,
    class_draw: str = "balanced",
) -> MPerClassBatchSampler:
    return MPerClassBatchSampler(
        dataset.labels, batch_size, m, seed=seed, batches_per_epoch=batches_per_epoch, class_draw=class_draw
    )
