"""Poolings against brute-force definitions, and the pooling registry."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dmlkit.pooling import GeM, create_pooling, gap, gap_gmp, gem, gmp, list_poolings
from dmlkit.pooling import registry as pooling_registry


def brute(x: torch.Tensor, reduce) -> torch.Tensor:
    """Apply ``reduce`` to the list of the h*w values of every (b, c), one at a time."""
    b, c, h, w = x.shape
    out = torch.empty(b, c, dtype=x.dtype)
    for i, j in itertools.product(range(b), range(c)):
        out[i, j] = reduce([float(x[i, j, u, v]) for u in range(h) for v in range(w)])
    return out


def test_gap_gmp_brute_force():
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    assert torch.allclose(gap(x), brute(x, lambda vs: sum(vs) / len(vs)))
    assert torch.equal(gmp(x), brute(x, max))
    assert torch.allclose(gap_gmp(x), brute(x, lambda vs: sum(vs) / len(vs) + max(vs)))


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, 7.5])
def test_gem_brute_force(p):
    x = torch.rand(2, 3, 4, 4, dtype=torch.float64) * 2
    eps = 1e-6
    expected = brute(x, lambda vs: (sum(max(v, eps) ** p for v in vs) / len(vs)) ** (1 / p))
    assert torch.allclose(gem(x, p, eps), expected)


def test_gem_p1_is_gap_and_large_p_tends_to_max():
    x = torch.rand(2, 4, 5, 5, dtype=torch.float64) + 0.1
    assert torch.allclose(gem(x, 1.0), gap(x))
    errors = [float((gem(x, p) - gmp(x)).abs().max()) for p in (10.0, 100.0, 1000.0)]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.01 * float(gmp(x).min())


def test_gem_large_p_does_not_overflow_in_float32():
    x = torch.rand(1, 3, 4, 4) * 50 + 1
    out = gem(x, 400.0)
    assert torch.isfinite(out).all()
    assert torch.allclose(out, gmp(x), rtol=0.01)


def test_gem_clamps_negative_values():
    x = -torch.rand(1, 2, 3, 3)
    assert torch.allclose(gem(x, 3.0, eps=1e-3), torch.full((1, 2), 1e-3))


def test_gem_gradient_matches_naive_formula():
    """The max-rescaled computation has the gradient of the textbook formula (x and p)."""
    x = (torch.rand(2, 3, 4, 4, dtype=torch.float64) + 0.05).requires_grad_()
    p = torch.tensor([3.3], dtype=torch.float64, requires_grad=True)
    gx, gp = torch.autograd.grad(gem(x, p).sum(), (x, p))
    naive = x.clamp(min=1e-6).pow(p).mean(dim=(2, 3)).pow(1 / p)
    nx, np_ = torch.autograd.grad(naive.sum(), (x, p))
    assert torch.allclose(gx, nx) and torch.allclose(gp, np_)
    assert torch.autograd.gradcheck(lambda a, b: gem(a, b), (x, p))


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 4),
    st.floats(1.0, 8.0),
)
def test_gem_between_gap_and_gmp(b, c, h, w, p):
    """Power-mean inequality: GAP <= GeM_p <= GMP for positive inputs."""
    x = torch.rand(b, c, h, w, dtype=torch.float64) + 0.01
    g = gem(x, p)
    assert (gap(x) <= g + 1e-9).all() and (g <= gmp(x) + 1e-9).all()


@pytest.mark.parametrize("name", list_poolings())
def test_registered_pooling_runs(name):
    dim = 8
    pool = create_pooling(name, dim)
    x = torch.randn(3, dim, 4, 4, requires_grad=True)
    out = pool(x)
    assert out.shape == (3, pool.output_dim(dim))
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", ["gap", "gmp", "gap+gmp", "gem"])
def test_required_poolings_exist(name):
    assert name in list_poolings()


def test_modules_match_functions():
    x = torch.rand(2, 5, 3, 3)
    assert torch.equal(create_pooling("gap", 5)(x), gap(x))
    assert torch.equal(create_pooling("gmp", 5)(x), gmp(x))
    assert torch.equal(create_pooling("gap+gmp", 5)(x), gap_gmp(x))
    assert torch.allclose(create_pooling("gem", 5, p=2.0)(x), gem(x, 2.0))


def test_gem_p_learnable_or_fixed():
    learn = GeM(4)
    assert [n for n, _ in learn.named_parameters()] == ["p"] and learn.p.item() == 3.0
    fixed = GeM(4, p=2.0, learn_p=False)
    assert list(fixed.parameters()) == [] and "p" in dict(fixed.named_buffers())
    with pytest.raises(ValueError, match="p must be >= 1"):
        GeM(4, p=0.5)


def test_pooling_registry_errors():
    with pytest.raises(ValueError, match="valid names are: .*gap, gap[+]gmp"):
        create_pooling("avg", 8)
    with pytest.raises(ValueError, match="valid parameters are: dim, p, eps, learn_p"):
        create_pooling("gem", 8, power=3)
    with pytest.raises(ValueError, match="dim"):
        create_pooling("gap", 0)
    with pytest.raises(ValueError, match="local feature map"):
        gap(torch.ones(2, 3))


def test_register_pooling_extends_registry(monkeypatch):
    monkeypatch.setattr(pooling_registry._POOLINGS, "_factories", dict(pooling_registry._POOLINGS._factories))

    @pooling_registry.register_pooling("half_gap")
    class HalfGAP(torch.nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()

        def forward(self, x):
            return gap(x)[:, ::2]

        def output_dim(self, input_dim: int) -> int:
            return (input_dim + 1) // 2

    assert "half_gap" in list_poolings()
    assert create_pooling("half_gap", 6)(torch.rand(1, 6, 2, 2)).shape == (1, 3)
    with pytest.raises(ValueError, match="registered twice"):
        pooling_registry.register_pooling("gap")(HalfGAP)
