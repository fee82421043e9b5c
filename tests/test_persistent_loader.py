"""Persistent loader workers see each epoch's augmentation (``DMLDataset.share_epoch``), so the Trainer keeps
its workers across epochs (restarting them cost a GPU run most of its time, docs/device.md) and trains exactly
as with a loader made anew each epoch."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from dmlkit.assemble import build_trainer
from dmlkit.config import load_config
from dmlkit.data import create_dataset


def _batches(loader: DataLoader) -> torch.Tensor:
    return torch.cat([images for images, _ in loader])


def test_persistent_workers_draw_the_epoch_set_in_the_main_process():
    train = create_dataset("glyphs", split="train", max_classes=6, augment=True, seed=0)
    train.share_epoch()
    order = list(range(len(train)))
    loader = DataLoader(train, batch_size=8, sampler=order, num_workers=2, persistent_workers=True)
    seen = []
    for epoch in (0, 1, 2):
        train.set_epoch(epoch)
        seen.append(_batches(loader))
    for epoch, images in enumerate(seen):
        train.set_epoch(epoch)
        in_process = DataLoader(train, batch_size=8, sampler=order)  # the draws of the main process
        assert torch.equal(images, _batches(in_process))
    assert not torch.equal(seen[0], seen[1])  # augmentation moved with the epoch


def test_a_run_with_persistent_workers_equals_one_without_workers(tmp_path):
    results = []
    for workers in (0, 2):
        cfg = load_config(
            "configs/quickstart.yaml",
            [
                "data.max_classes=40",
                "train.max_steps=30",
                "train.val_every=30",
                "plots=false",
                "eval.clustering=false",
                f"data.num_workers={workers}",
                "train.threads=1",
            ],
        )  # 40 classes: about 5 batches an epoch, so 30 steps cross several epochs
        results.append(build_trainer(cfg, tmp_path / f"w{workers}", quiet=True).fit()["test"])
    assert results[0] == results[1]
