"""The training loader of a run: one ``DataLoader`` per run whose workers persist across epochs.

``EpochLoader(epoch, skip)`` sets the epoch on the batch sampler and the dataset and returns the loader,
which skips the first ``skip`` batches of the epoch (a run resumed inside an epoch). With loader workers
and a dataset that can share its epoch (``share_epoch``: the workers read it from shared memory) the
loader is made once and its workers persist: restarting them each epoch cost a GPU run most of its time
(docs/device.md). Otherwise a loader is made anew each epoch.
"""

from __future__ import annotations

from typing import Any, Iterator

from torch.utils.data import DataLoader, Sampler

__all__ = ["EpochLoader", "SkipBatches"]


class SkipBatches(Sampler):
    """A batch sampler that skips its first ``skip`` batches (resume inside an epoch)."""

    def __init__(self, batch_sampler: Sampler, skip: int) -> None:
        self.batch_sampler, self.skip = batch_sampler, skip

    def __iter__(self) -> Iterator[list[int]]:
        for i, batch in enumerate(self.batch_sampler):
            if i >= self.skip:
                yield batch

    def __len__(self) -> int:
        return max(0, len(self.batch_sampler) - self.skip)


class EpochLoader:
    """The loader of ``train`` under ``batch_sampler`` for each epoch; dropping it stops its workers."""

    def __init__(self, train: Any, batch_sampler: Any, num_workers: int, pin_memory: bool) -> None:
        self.train, self.batch_sampler = train, batch_sampler
        self.num_workers, self.pin_memory = num_workers, pin_memory
        self.persistent = num_workers > 0 and hasattr(train, "share_epoch")
        self.loader: DataLoader | None = None
        self.batches: SkipBatches | None = None

    def __call__(self, epoch: int, skip: int) -> DataLoader:
        """The loader for ``epoch``, without its first ``skip`` batches."""
        self.batch_sampler.set_epoch(epoch)
        self.train.set_epoch(epoch)
        if self.loader is None or not self.persistent:
            if self.persistent:
                self.train.share_epoch()
            self.batches = SkipBatches(self.batch_sampler, 0)
            self.loader = DataLoader(
                self.train,
                batch_sampler=self.batches,
                num_workers=self.num_workers,
                pin_memory=self.pin_memory,
                persistent_workers=self.persistent,
            )
        self.batches.skip = skip  # read when the epoch's iteration starts, in this process
        return self.loader
