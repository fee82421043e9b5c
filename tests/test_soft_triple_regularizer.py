"""SoftTriple's centre regulariser (Eq. 13): brute-force value, PML agreement, finite gradient where centres meet."""

import math

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.regularizers import SparseCentersRegularizer

from dmlkit.losses import create_loss
from dmlkit.losses.soft_triple_regularizer import MergingCentersRegularizer


def _eq13(weights, classes, k, eps):
    """Eq. 13 by loops: sum over classes and pairs t < s of sqrt(2 - 2 <w_t, w_s> + eps) - sqrt(eps), / (C K (K-1))."""
    w = F.normalize(weights, dim=1)
    total = 0.0
    for c in range(classes):
        for t in range(k):
            for s in range(t + 1, k):
                sim = min(float(w[c * k + t] @ w[c * k + s]), 1.0)
                total += math.sqrt(2 - 2 * sim + eps) - math.sqrt(eps)
    return total / (classes * k * (k - 1))


@pytest.mark.parametrize("classes, k", [(1, 2), (3, 4), (5, 3)])
def test_value_is_eq13_by_brute_force(classes, k):
    g = torch.Generator().manual_seed(classes * 10 + k)
    weights = torch.randn(classes * k, 6, generator=g, dtype=torch.float64)
    reg = MergingCentersRegularizer(classes, k, eps=1e-4)
    assert float(reg(weights)) == pytest.approx(_eq13(weights, classes, k, 1e-4), rel=1e-10)


def test_equals_pmls_regulariser_for_separated_centres():
    g = torch.Generator().manual_seed(0)
    weights = torch.randn(4 * 3, 8, generator=g, dtype=torch.float64)
    ours = float(MergingCentersRegularizer(4, 3, eps=1e-12)(weights))
    assert ours == pytest.approx(float(SparseCentersRegularizer(4, 3)(weights)), rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradient_stays_finite_and_bounded_when_centres_meet(dtype):
    g = torch.Generator().manual_seed(3)
    weights = torch.randn(2 * 3, 5, generator=g, dtype=dtype)
    weights[1] = weights[0] * 2.0  # two centres of class 0 at the same direction
    weights.requires_grad_(True)
    MergingCentersRegularizer(2, 3, eps=1e-4)(weights).backward()
    assert torch.isfinite(weights.grad).all()
    assert weights.grad.abs().max() < 1.0 / math.sqrt(1e-4)  # |d term / d s| <= 1/sqrt(eps), times unit-norm factors


def test_merged_centres_cost_nothing_and_gradcheck_passes():
    base = torch.randn(1, 4, dtype=torch.float64)
    assert float(MergingCentersRegularizer(1, 2)(torch.cat([base, 3 * base]))) == pytest.approx(0.0, abs=1e-12)
    weights = torch.randn(2 * 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(MergingCentersRegularizer(2, 3), (weights,))


def test_soft_triple_trains_with_it_and_bad_arguments_are_errors():
    loss = create_loss("soft_triple", num_classes=3, embedding_size=4, centers_per_class=2)
    assert isinstance(loss.weight_regularizer, MergingCentersRegularizer)
    value = loss(torch.randn(6, 4), torch.tensor([0, 0, 1, 1, 2, 2]))
    value.backward()
    assert torch.isfinite(loss.fc.grad).all()
    with pytest.raises(ValueError, match="centers_per_class >= 2"):
        MergingCentersRegularizer(3, 1)
    with pytest.raises(ValueError, match="eps must be > 0"):
        MergingCentersRegularizer(3, 2, eps=0.0)
