"""What a component declares is asked of it, not derived from its name: a loss registered
with ``takes_miner=True`` gets the config's miner as its own parameters (as ``xbm`` does), and a pooling class
that declares ``reports_selection_entropy`` gets the GSP diagnostics (as ``gsp`` and ``gsp_gmp`` do). The toy
components are registered by the tests and removed after them."""

from __future__ import annotations

import pytest
import torch
from pytorch_metric_learning.losses import ContrastiveLoss
from torch import nn

from dmlkit.config import load_config
from dmlkit.losses import build_loss, register_loss
from dmlkit.losses.config import LossConfig
from dmlkit.losses.registry import _LOSSES
from dmlkit.methods.gsp_diagnostics import GSPDiagnostics
from dmlkit.pooling import register_pooling
from dmlkit.pooling.registry import _POOLINGS


@pytest.fixture
def self_mining_loss():
    seen: dict = {}

    @register_loss("toy_self_mining", builds=ContrastiveLoss, takes_miner=True)
    def toy(miner: str | None = None, miner_params: dict | None = None):
        """A loss that mines inside itself."""
        seen.update(miner=miner, miner_params=miner_params)
        return ContrastiveLoss()

    yield seen
    _LOSSES.unregister("toy_self_mining")


def test_a_loss_that_takes_its_miner_gets_the_configs_miner_and_none_runs_outside(self_mining_loss):
    loss, miner = build_loss(
        LossConfig(name="toy_self_mining", miner="multi_similarity", miner_params={"epsilon": 0.2}),
        num_classes=None,
        embedding_size=None,
    )
    assert isinstance(loss, ContrastiveLoss) and miner is None
    assert self_mining_loss == {"miner": "multi_similarity", "miner_params": {"epsilon": 0.2}}
    with pytest.raises(ValueError, match="give the toy_self_mining miner either as loss.miner or as loss.params"):
        build_loss(
            LossConfig(name="toy_self_mining", miner="multi_similarity", params={"miner": "pair_margin"}),
            num_classes=None,
            embedding_size=None,
        )
    _, outside = build_loss(LossConfig(name="contrastive", miner="multi_similarity"), None, None)
    assert outside is not None  # an ordinary loss: the miner runs outside it


class _EntropyPool(nn.Module):
    reports_selection_entropy = True

    def __init__(self, dim: int) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


class _SilentPool(_EntropyPool):
    reports_selection_entropy = False


@pytest.fixture
def toy_poolings():
    register_pooling("toy_entropy_pool")(_EntropyPool)
    register_pooling("toy_silent_pool")(_SilentPool)
    yield
    _POOLINGS.unregister("toy_entropy_pool")
    _POOLINGS.unregister("toy_silent_pool")


@pytest.mark.parametrize(
    "pooling, logged",
    [("gsp", True), ("gsp_gmp", True), ("gap", False), ("toy_entropy_pool", True), ("toy_silent_pool", False)],
)
def test_gsp_diagnostics_follow_what_the_pooling_declares(toy_poolings, pooling, logged):
    cfg = load_config("configs/quickstart.yaml", [f"model.pooling={pooling}"])
    assert (GSPDiagnostics.from_config(cfg) is not None) == logged
