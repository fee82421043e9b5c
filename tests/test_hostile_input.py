"""Hostile and malformed input: foreign or tampered checkpoints, NaN embeddings, bad labels, bad config values."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from dmlkit.config import load_config
from dmlkit.data.samplers.m_per_class import MPerClassBatchSampler
from dmlkit.engine.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from dmlkit.evaluation import clustering_metrics, retrieval_metrics


class _Payload:
    """Unpickling this would create a file: a stand-in for code execution from a checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("writer", ["torch", "pickle"])
def test_checkpoint_with_code_is_refused_without_running_it(tmp_path, writer):
    marker, path = tmp_path / "executed", tmp_path / "evil.pt"
    state = {"format_version": 1, "model": _Payload(marker)}
    if writer == "torch":
        torch.save(state, path)
    else:
        path.write_bytes(pickle.dumps(state, protocol=2))
    with pytest.raises(CheckpointError, match="could not be read"):
        load_checkpoint(path)
    assert not marker.exists()


def test_tampered_and_foreign_checkpoints_are_refused(tmp_path):
    good = tmp_path / "good.pt"
    save_checkpoint(good, {"model": {"w": torch.ones(3)}})
    assert load_checkpoint(good)["model"]["w"].sum() == 3
    data = bytearray(good.read_bytes())
    (tmp_path / "truncated.pt").write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(tmp_path / "truncated.pt")
    (tmp_path / "noise.pt").write_bytes(os.urandom(256))
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "noise.pt")
    torch.save({"state_dict": {"w": torch.ones(3)}}, tmp_path / "foreign.pt")  # e.g. a Lightning checkpoint
    with pytest.raises(CheckpointError, match="not a dmlkit checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_embeddings_are_refused(bad):
    x = np.random.default_rng(0).standard_normal((12, 3)).astype(np.float32)
    x[4, 1] = bad
    y = np.arange(12) % 3
    with pytest.raises(ValueError, match="NaN or infinite"):
        retrieval_metrics(x, y)
    with pytest.raises(ValueError, match="NaN or infinite"):
        clustering_metrics(x, y)


def test_labels_that_are_not_integers_are_refused():
    x = np.random.default_rng(0).standard_normal((8, 2)).astype(np.float32)
    with pytest.raises(ValueError, match="numeric"):
        retrieval_metrics(x, np.array(list("abababab")))
    with pytest.raises(ValueError, match="NaN"):
        retrieval_metrics(x, np.array([0, 1, np.nan, 1, 0, 1, 0, 1]))
    with pytest.raises(ValueError, match="integers"):
        MPerClassBatchSampler(np.arange(8) * 0.5, batch_size=4, m=2)


def test_single_class_is_refused_by_the_sampler():
    with pytest.raises(ValueError, match="only 1 classes"):
        MPerClassBatchSampler(np.zeros(20, dtype=np.int64), batch_size=8, m=4)


def test_single_class_training_split_is_refused_before_training(tmp_path):
    from dmlkit.assemble import build_trainer
    from tests_helpers import TINY_OVERRIDES

    cfg = load_config(
        "configs/quickstart.yaml",
        TINY_OVERRIDES + ["data.max_classes=2", "data.val_fraction=0.5", "train.batch_size=4"],
    )
    with pytest.raises(ValueError, match="at least 2"):
        build_trainer(cfg, tmp_path / "one", quiet=True).fit()


@pytest.mark.parametrize(
    "override,key",
    [
        ("train.val_every=0", "val_every"),
        ("train.log_every=-1", "log_every"),
        ("train.batch_size=0", "batch_size"),
        ("train.max_steps=-5", "max_steps"),
        ("train.max_steps=99999999999999999", "max_steps"),
        ("train.lr=-0.1", "lr"),
        ("train.lr=.inf", "lr"),
        ("train.weight_decay=-1", "weight_decay"),
        ("train.momentum=1.5", "momentum"),
        ("train.betas=[0.9, 1.0]", "betas"),
        ("train.grad_clip=0", "grad_clip"),
        ("train.devices=0", "devices"),
        ("train.patience=-1", "patience"),
        ("train.plateau_factor=1", "plateau_factor"),
        ("train.head_lr=-1", "head_lr"),
    ],
)
def test_impossible_config_values_name_their_key(override, key):
    with pytest.raises(ValueError, match=f"train.{key}"):
        load_config("configs/quickstart.yaml", [override])
