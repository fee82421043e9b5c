"""L2-constrained softmax against a hand computation, and its use from the registry and with SFT."""

import math

import pytest
import torch

from dmlkit.losses import create_loss
from dmlkit.losses.l2_softmax_loss import L2SoftmaxLoss


def test_value_equals_cross_entropy_on_scaled_normalised_features():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(10, 6, generator=g, dtype=torch.float64), torch.randint(0, 4, (10,), generator=g)
    loss = L2SoftmaxLoss(4, 6, alpha=5.0).double()
    with torch.no_grad():
        loss.bias.copy_(torch.randn(4, generator=g, dtype=torch.float64))
    with torch.no_grad():
        by_hand = (
            sum(
                -math.log(float(torch.softmax(5.0 * x[i] / x[i].norm() @ loss.W + loss.bias, 0)[y[i]]))
                for i in range(10)
            )
            / 10
        )
    assert loss(x, y).item() == pytest.approx(by_hand, rel=1e-10)
    # scale invariance of the input: only the direction of a feature matters
    assert loss(3.7 * x, y).item() == pytest.approx(by_hand, rel=1e-10)


def test_gradients_reach_features_weights_and_learned_alpha():
    loss = create_loss("l2_softmax", num_classes=3, embedding_size=4, learn_alpha=True)
    x = torch.randn(6, 4, requires_grad=True)
    loss(x, torch.tensor([0, 1, 2, 0, 1, 2])).backward()
    assert x.grad.abs().sum() > 0 and loss.W.grad.abs().sum() > 0 and loss.alpha.grad is not None
    assert loss.outputs(x).sum(1).sub(1).abs().max() < 1e-6


def test_bad_input():
    with pytest.raises(ValueError, match="alpha"):
        L2SoftmaxLoss(3, 4, alpha=0.0)
    with pytest.raises(ValueError, match="labels must lie"):
        L2SoftmaxLoss(3, 4)(torch.randn(2, 4), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="ref_emb"):
        L2SoftmaxLoss(3, 4)(torch.randn(2, 4), torch.tensor([0, 1]), ref_emb=torch.randn(2, 4))
