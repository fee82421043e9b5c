"""The zero-shot prediction loss of GSP (thesis Sec. 5.2.3) against brute-force references."""

import math

import pytest
import torch

from dmlkit.losses.zero_shot_prediction_loss import (
    ZeroShotPredictionLoss,
    class_disjoint_halves,
    pseudo_attributes,
    ridge_predictor,
    zero_shot_prediction_loss,
)


def _plan(b, m, n, mu, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(b, m, n, generator=g, dtype=dtype)
    return p / p.sum(dim=(1, 2), keepdim=True) * mu


@pytest.mark.parametrize("b,m", [(12, 5), (4, 9)])  # both branches: m <= b and m > b
def test_ridge_closed_form_matches_lstsq(b, m):
    g = torch.Generator().manual_seed(b * m)
    z = torch.rand(b, m, generator=g, dtype=torch.float64)
    v = torch.randn(b, 3, generator=g, dtype=torch.float64)
    eps = 0.05
    # ridge = least squares on the augmented system [Z; sqrt(eps) I] x = [V; 0]
    za = torch.cat([z, math.sqrt(eps) * torch.eye(m, dtype=z.dtype)])
    va = torch.cat([v, torch.zeros(m, 3, dtype=v.dtype)])
    expected = torch.linalg.lstsq(za, va).solution
    torch.testing.assert_close(ridge_predictor(z, v, eps), expected)
    # and it is a minimum of the P3 objective: the gradient vanishes
    a_t = ridge_predictor(z, v, eps).requires_grad_(True)
    obj = ((z @ a_t - v) ** 2).sum() + eps * (a_t**2).sum()
    (grad,) = torch.autograd.grad(obj, a_t)
    assert grad.abs().max() < 1e-9


def test_pseudo_attributes_are_a_distribution():
    plan = _plan(3, 4, 7, mu=0.3)
    z = pseudo_attributes(plan, 0.3)
    assert z.shape == (3, 4)
    torch.testing.assert_close(z.sum(1), torch.ones(3, dtype=z.dtype))
    torch.testing.assert_close(z[1, 2], plan[1, 2].sum() / 0.3)


@pytest.mark.parametrize("seed", range(5))
def test_halves_are_class_disjoint_and_cover_the_batch(seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 7, (20,), generator=g)
    for gen in (None, torch.Generator().manual_seed(seed)):
        b1, b2 = class_disjoint_halves(labels, gen)
        assert sorted(torch.cat([b1, b2]).tolist()) == list(range(20))
        assert not set(labels[b1].tolist()) & set(labels[b2].tolist())
        k = labels.unique().numel()
        assert labels[b1].unique().numel() == (k + 1) // 2
    assert [t.tolist() for t in class_disjoint_halves(labels)] == [t.tolist() for t in class_disjoint_halves(labels)]


def _brute_force_loss(z, labels, ups, eps, b1, b2, scale=1.0):
    """Eq. 5.2.4 with explicit loops: log(1 + sum_{j != y} exp(scale (v_j - v_y)^T A z))."""
    total = 0.0
    for fit, ev in ((b1, b2), (b2, b1)):
        zf, vf = z[fit], ups[labels[fit]]
        a = (
            vf.T @ torch.linalg.inv(zf @ zf.T + eps * torch.eye(len(fit), dtype=z.dtype)) @ zf
        )  # Upsilon_b (Z^T Z + eps)^-1 Z^T
        terms = []
        for i in ev.tolist():
            pred = a @ z[i]
            y = int(labels[i])
            s = sum(torch.exp(scale * (ups[j] - ups[y]) @ pred) for j in range(ups.shape[0]) if j != y)
            terms.append(torch.log(1 + s))
        total = total + torch.stack(terms).mean()
    return total


@pytest.mark.parametrize("scale", [1.0, 9.5])
def test_loss_matches_brute_force(scale):
    g = torch.Generator().manual_seed(3)
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 4, 4])
    z = torch.rand(10, 6, generator=g, dtype=torch.float64)
    ups = torch.randn(5, 4, generator=g, dtype=torch.float64)
    b1, b2 = class_disjoint_halves(labels, torch.Generator().manual_seed(1))
    got = zero_shot_prediction_loss(z, labels, ups, 0.05, (b1, b2), scale=scale)
    torch.testing.assert_close(got, _brute_force_loss(z, labels, ups, 0.05, b1, b2, scale))


def test_the_default_scale_is_the_author_codes_and_sharpens_the_softmax():
    """zsr_loss.py: softmax_scale = 9.5. With unit-scale class embeddings over many classes an unscaled loss
    stays near its uniform value 2 log c; the scaled one moves away from it."""
    loss = ZeroShotPredictionLoss(
        num_classes=200, num_prototypes=8, mu=0.3, embedding_dim=32, generator=torch.Generator().manual_seed(0)
    )
    assert loss.scale == 9.5 and loss.class_embeddings.shape == (200, 32)
    labels = torch.arange(10).repeat_interleave(3)
    plan = _plan(30, 8, 6, mu=0.3, seed=4, dtype=torch.float32)
    halves = class_disjoint_halves(labels, torch.Generator().manual_seed(0))
    z = pseudo_attributes(plan, 0.3)
    uniform = 2 * math.log(200)
    unscaled = float(zero_shot_prediction_loss(z, labels, loss.class_embeddings.detach(), 0.05, halves, scale=1.0))
    scaled = float(zero_shot_prediction_loss(z, labels, loss.class_embeddings.detach(), 0.05, halves, scale=9.5))
    assert abs(unscaled - uniform) < 0.02 * uniform  # 10.68 vs 10.60
    assert abs(scaled - uniform) > 5 * abs(unscaled - uniform)  # 11.80
    assert float(loss(plan, labels, torch.Generator().manual_seed(0))) == pytest.approx(scaled)
    assert loss.no_weight_decay() == ["class_embeddings"]


def test_gradcheck_float64():
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    plan = _plan(6, 3, 4, mu=0.5, seed=1).requires_grad_(True)
    ups = torch.randn(3, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64).requires_grad_(True)
    halves = class_disjoint_halves(labels)

    def f(p, u):
        return zero_shot_prediction_loss(pseudo_attributes(p, 0.5), labels, u, 0.05, halves)

    assert torch.autograd.gradcheck(f, (plan, ups))
    value = f(plan, ups)
    value.backward()
    assert torch.isfinite(plan.grad).all() and torch.isfinite(ups.grad).all() and plan.grad.abs().sum() > 0


def test_module_trains_class_embeddings_and_is_finite_for_uniform_plans():
    loss = ZeroShotPredictionLoss(num_classes=4, num_prototypes=3, mu=0.3)
    plan = torch.full((8, 3, 5), 0.3 / 15)  # identical pseudo-attributes: ridge keeps the system solvable
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    value = loss(plan, labels, torch.Generator().manual_seed(0))
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(loss.class_embeddings.grad).all()


def test_bad_input():
    loss = ZeroShotPredictionLoss(num_classes=4, num_prototypes=3)
    with pytest.raises(ValueError, match="2 classes"):
        loss(_plan(4, 3, 5, 0.3, dtype=torch.float32), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="prototypes"):
        loss(_plan(4, 5, 5, 0.3, dtype=torch.float32), torch.tensor([0, 0, 1, 1]))
    with pytest.raises(ValueError, match=r"\(B, m, n\)"):
        loss(torch.rand(4, 3), torch.tensor([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="mu"):
        ZeroShotPredictionLoss(4, 3, mu=1.5)
    with pytest.raises(ValueError, match="disjoint"):
        zero_shot_prediction_loss(
            torch.rand(4, 3),
            torch.tensor([0, 1, 0, 1]),
            torch.randn(2, 3),
            0.05,
            (torch.tensor([0, 1]), torch.tensor([2, 3])),
        )
