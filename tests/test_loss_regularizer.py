"""``loss.params.embedding_regularizer`` as a mapping builds the PML regularizer (losses/pml_options.py):
Sohn's N-pair loss (unnormalised dot products plus an L2 penalty) from a config, against a hand computation."""

import pytest
import torch
import torch.nn.functional as F

from dmlkit.losses.config import LossConfig, build_loss

SOHN = {
    "distance": {"name": "dot", "normalize_embeddings": False},
    "embedding_regularizer": {"name": "lp", "power": 2},
    "embedding_reg_weight": 0.01,
}


def test_sohn_npair_is_the_softmax_over_raw_dot_products_plus_the_mean_squared_norm():
    x = torch.tensor([[1.0, 2.0], [0.5, 1.5], [-1.0, 0.3], [-2.0, 0.1]], dtype=torch.float64)
    y = torch.tensor([0, 0, 1, 1])
    loss, miner = build_loss(LossConfig(name="npair", miner=None, params=SOHN), 2, 2)
    assert miner is None
    anchors, positives = x[[0, 2]], x[[1, 3]]  # the first positive pair of each label
    logits = anchors @ positives.T
    expected = F.cross_entropy(logits, torch.tensor([0, 1])) + 0.01 * (x**2).sum(1).mean()
    assert float(loss(x, y)) == pytest.approx(float(expected), rel=1e-9)
    plain, _ = build_loss(LossConfig(name="npair", miner=None), 2, 2)  # PML's default: cosine logits, no penalty
    n = F.normalize(x, dim=1)
    assert float(plain(x, y)) == pytest.approx(
        float(F.cross_entropy(n[[0, 2]] @ n[[1, 3]].T, torch.tensor([0, 1]))), rel=1e-9
    )


def test_an_unknown_or_malformed_regularizer_is_refused():
    with pytest.raises(ValueError, match="loss.params.embedding_regularizer needs name: one of lp"):
        build_loss(LossConfig(name="npair", miner=None, params={"embedding_regularizer": {"name": "l2"}}), 2, 2)
    with pytest.raises(ValueError, match="lp takes p and power"):
        build_loss(
            LossConfig(name="npair", miner=None, params={"embedding_regularizer": {"name": "lp", "pow": 2}}), 2, 2
        )
