"""``loss.params.distance`` as a mapping builds the PML distance (losses/pml_options.py)."""

import pytest
import torch
from pytorch_metric_learning.distances import LpDistance

from dmlkit.losses.config import LossConfig, build_loss


def test_a_distance_mapping_builds_the_pml_distance_and_changes_the_loss():
    raw = LossConfig(name="contrastive", miner=None, params={"distance": {"name": "lp", "normalize_embeddings": False}})
    loss, _ = build_loss(raw, 2, 2)
    assert isinstance(loss.distance, LpDistance) and loss.distance.normalize_embeddings is False
    x, y = torch.tensor([[0.3, 0.0], [0.0, 0.3]]), torch.tensor([0, 0])  # one positive pair, distance 0.3 * sqrt 2
    assert float(loss(x, y)) == pytest.approx(0.3 * 2**0.5, rel=1e-5)
    default, _ = build_loss(LossConfig(name="contrastive", miner=None), 2, 2)
    assert float(default(x, y)) == pytest.approx(2**0.5, rel=1e-5)  # PML's default normalises onto the circle


def test_an_unknown_distance_is_refused():
    with pytest.raises(ValueError, match="loss.params.distance needs name"):
        build_loss(LossConfig(name="contrastive", params={"distance": {"name": "manhattan"}}), 2, 2)
    with pytest.raises(ValueError, match="valid keys"):
        build_loss(LossConfig(name="contrastive", params={"distance": {"name": "lp", "normalise": False}}), 2, 2)
