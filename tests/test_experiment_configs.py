"""Every experiment config under configs/experiments trains for a few steps on a few glyph classes."""

from pathlib import Path

import pytest

from dmlkit.config import load_config
from dmlkit.assemble import build_trainer
from tests_helpers import TINY_OVERRIDES

SMOKE = TINY_OVERRIDES + [
    "train.max_steps=2",
    "train.val_every=2",
    "plots=false",
    "eval.clustering=false",
    "train.batch_size=12",
    "train.m_per_class=3",
]
CONFIGS = sorted(Path("configs/experiments").rglob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to("configs/experiments")))
def test_experiment_config_trains(path, tmp_path):
    summary = build_trainer(load_config(path, SMOKE), tmp_path / "run", quiet=True).fit()
    assert summary["steps"] == 2
    assert 0.0 <= summary["test"]["precision_at_1"] <= 1.0
