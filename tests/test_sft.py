"""SFT transforms (Eq. 2-5 and Sec. 3.4 of the SFT paper; Proposition 3 of its supplement)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dmlkit.augment import (
    create_transform,
    degenerate_transform,
    list_transforms,
    rotation_matrix,
    spherical_transform,
    translation_transform,
)

F64 = torch.float64


def unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True)


def data(seed: int, b: int = 6, d: int = 9, dtype: torch.dtype = F64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, d, generator=g, dtype=dtype) for _ in range(3))


def edge_centres(d: int = 5, dtype: torch.dtype = F64):
    """Rows: generic, parallel, anti-parallel, zero mu_from, zero mu_to, both zero, nearly anti-parallel."""
    g = torch.Generator().manual_seed(1)
    a = torch.randn(7, d, generator=g, dtype=dtype)
    b = torch.randn(7, d, generator=g, dtype=dtype)
    b[1] = 2.5 * a[1]
    b[2] = -0.5 * a[2]
    a[3] = 0.0
    b[4] = 0.0
    a[5] = 0.0
    b[5] = 0.0
    b[6] = -a[6] + 1e-3 * b[6]
    return a, b


seeds = st.integers(0, 2**31 - 1)
dims = st.integers(2, 12)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, d=dims)
def test_maps_unit_centre_to_unit_centre(seed: int, d: int) -> None:
    _, a, b = data(seed, d=d)
    a, b = unit(a), unit(b)
    torch.testing.assert_close(spherical_transform(a, a, b), b)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, d=dims)
def test_maps_centre_direction_for_any_norms(seed: int, d: int) -> None:
    _, a, b = data(seed, d=d)
    torch.testing.assert_close(spherical_transform(a, a, b), unit(b) * a.norm(dim=-1, keepdim=True))


@settings(max_examples=40, deadline=None)
@given(seed=seeds, d=dims)
def test_orthogonal_preserves_norms_and_inner_products(seed: int, d: int) -> None:
    x, a, b = data(seed, d=d)
    y = x.roll(1, 0)
    tx, ty = spherical_transform(x, a, b), spherical_transform(y, a, b)
    torch.testing.assert_close(tx.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close((tx * ty).sum(-1), (x * y).sum(-1))


def test_vectors_orthogonal_to_both_centres_are_unchanged() -> None:
    x, a, b = data(3, d=10)
    q, _ = torch.linalg.qr(torch.stack([a, b], dim=-1))  # (B, d, 2) basis of span(a, b)
    x_perp = x - (q @ (q.transpose(-1, -2) @ x.unsqueeze(-1))).squeeze(-1)
    torch.testing.assert_close(spherical_transform(x_perp, a, b), x_perp)


@settings(max_examples=30, deadline=None)
@given(seed=seeds, d=st.integers(3, 12))
def test_proposition_3_degenerates_to_translation(seed: int, d: int) -> None:
    """Supplement, Prop. 3 / Eq. 5: if sigma is orthogonal to both centres, A(mu1 + sigma) = mu2 + sigma."""
    sigma, mu1, mu2 = data(seed, d=d)
    mu2 = unit(mu2) * mu1.norm(dim=-1, keepdim=True)  # same norm: a rotation can map mu1 onto mu2
    q, _ = torch.linalg.qr(torch.stack([mu1, mu2], dim=-1))
    sigma = sigma - (q @ (q.transpose(-1, -2) @ sigma.unsqueeze(-1))).squeeze(-1)
    x1 = mu1 + sigma
    torch.testing.assert_close(spherical_transform(x1, mu1, mu2), translation_transform(x1, mu1, mu2))
    torch.testing.assert_close(spherical_transform(x1, mu1, mu2), mu2 + sigma)


def test_sft_differs_from_translation_in_general() -> None:
    x, a, b = data(4)
    a, b, x = unit(a), unit(b), unit(x)
    assert (spherical_transform(x, a, b) - translation_transform(x, a, b)).abs().max() > 1e-2


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_rank2_equals_explicit_matrix(dtype: torch.dtype) -> None:
    x, a, b = data(5, b=8, d=7, dtype=dtype)
    ea, eb = edge_centres(7, dtype)
    a, b = torch.cat([a, ea]), torch.cat([b, eb])
    x = torch.cat([x, torch.randn(7, 7, dtype=dtype)])
    A = rotation_matrix(a, b)
    expected = (A @ x.unsqueeze(-1)).squeeze(-1)
    tol = 1e-12 if dtype == F64 else 1e-5
    torch.testing.assert_close(spherical_transform(x, a, b), expected, atol=tol, rtol=tol)


def test_rotation_matrix_literal_eq4() -> None:
    """Eq. 4 by hand for a 3-d example: rotation by 90 degrees from e1 to e2 about e3."""
    e = torch.eye(3, dtype=F64)
    A = rotation_matrix(e[0], 2 * e[1])
    expected = torch.tensor([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype=F64)
    torch.testing.assert_close(A, expected)


def test_rotation_matrix_is_proper_rotation_including_edge_cases() -> None:
    a, b = edge_centres(6)
    A = rotation_matrix(a, b)
    eye = torch.eye(6, dtype=F64).expand_as(A)
    torch.testing.assert_close(A @ A.transpose(-1, -2), eye)
    torch.testing.assert_close(torch.linalg.det(A), torch.ones(7, dtype=F64))


def test_edge_cases_values() -> None:
    a, b = edge_centres(5)
    x = torch.randn(7, 5, dtype=F64, generator=torch.Generator().manual_seed(2))
    y = spherical_transform(x, a, b)
    assert torch.isfinite(y).all()
    for i in (1, 3, 4, 5):  # parallel and zero centres: identity
        torch.testing.assert_close(y[i], x[i])
    # anti-parallel: takes mu_from to mu_to's direction, and is orthogonal
    for i in (2, 6):
        torch.testing.assert_close(
            spherical_transform(a[i], a[i], b[i]), unit(b[i]) * a[i].norm(), atol=1e-9, rtol=1e-9
        )
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))


def test_antiparallel_plane_is_deterministic_and_documented() -> None:
    n1 = unit(torch.tensor([0.9, 0.05, -0.4, 0.3], dtype=F64))
    x = torch.tensor([0.3, -1.0, 2.0, 0.5], dtype=F64)
    y = spherical_transform(x, n1, -n1)
    e = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=F64)  # argmin |n1_k| is k = 1
    e = unit(e - (e @ n1) * n1)
    expected = x - 2 * (x @ n1) * n1 - 2 * (x @ e) * e
    torch.testing.assert_close(y, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_edge_cases_gradients_are_finite(dtype: torch.dtype) -> None:
    a, b = edge_centres(5, dtype)
    x = torch.randn(7, 5, dtype=dtype)
    for fn in (spherical_transform, degenerate_transform, translation_transform):
        xs, as_, bs = (t.clone().requires_grad_(True) for t in (x, a, b))
        fn(xs, as_, bs).pow(2).sum().backward()
        for t in (xs, as_, bs):
            assert torch.isfinite(t.grad).all(), fn.__name__
    # degenerate transform whose translated vector is exactly zero
    xs = (b - a).neg().clone().requires_grad_(True)
    out = degenerate_transform(xs, a, b)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(xs.grad).all()


def test_gradcheck_float64() -> None:
    x, a, b = (t.requires_grad_(True) for t in data(6, b=4, d=5))
    assert torch.autograd.gradcheck(spherical_transform, (x, a, b))
    assert torch.autograd.gradcheck(degenerate_transform, (x, a, b))
    assert torch.autograd.gradcheck(translation_transform, (x, a, b))


def test_gradcheck_near_parallel_and_negative_cosine() -> None:
    x, a, b = data(7, b=3, d=4)
    b = torch.stack([a[0] + 1e-4 * b[0], -a[1] + 0.3 * b[1], b[2]])  # near parallel, c < 0, generic
    args = tuple(t.clone().requires_grad_(True) for t in (x, a, b))
    assert torch.autograd.gradcheck(spherical_transform, args)


def test_gradient_matches_explicit_matrix() -> None:
    x, a, b = data(8, b=5, d=6)
    args1 = [t.clone().requires_grad_(True) for t in (x, a, b)]
    args2 = [t.clone().requires_grad_(True) for t in (x, a, b)]
    w = torch.randn(5, 6, dtype=F64)
    (spherical_transform(*args1) * w).sum().backward()
    A = rotation_matrix(args2[1], args2[2])
    ((A @ args2[0].unsqueeze(-1)).squeeze(-1) * w).sum().backward()
    for t1, t2 in zip(args1, args2):
        torch.testing.assert_close(t1.grad, t2.grad)


def test_broadcast_single_centre_pair() -> None:
    x, a, b = data(9)
    torch.testing.assert_close(
        spherical_transform(x, a[0], b[0]), spherical_transform(x, a[:1].expand_as(x), b[:1].expand_as(x))
    )


def test_translation_and_degenerate_formulas() -> None:
    x, a, b = data(10)
    torch.testing.assert_close(translation_transform(x, a, b), x + b - a)
    y = x + b - a
    torch.testing.assert_close(degenerate_transform(x, a, b), y / y.norm(dim=-1, keepdim=True))
    torch.testing.assert_close(degenerate_transform(x, a, b).norm(dim=-1), torch.ones(6, dtype=F64))


def test_sphere_is_preserved_in_float32() -> None:
    x, a, b = data(11, b=60, d=512, dtype=torch.float32)
    x = unit(x)
    y = spherical_transform(x, unit(a), unit(b))
    torch.testing.assert_close(y.norm(dim=-1), torch.ones(60), atol=1e-5, rtol=0)


def test_errors() -> None:
    x, a, b = data(12)
    with pytest.raises(ValueError, match="dimension"):
        spherical_transform(x, a[:, :3], b)
    with pytest.raises(ValueError, match="broadcast"):
        spherical_transform(x, a[:4], b[:4])
    with pytest.raises(ValueError, match="d >= 2"):
        spherical_transform(x[:, :1], a[:, :1], b[:, :1])
    with pytest.raises(ValueError, match="unknown transform"):
        create_transform("rotate")


def _rotation_by_matrix_exp(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Eq. 3-4 built independently of ``_Plane``: exp(angle * (n2 n1^T - n1 n2^T)) applied to each row."""
    out = []
    for xi, ai, bi in zip(x, a, b):
        n1, u = unit(ai), unit(bi)
        n2 = unit(u - (u @ n1) * n1)
        angle = torch.arccos((n1 @ u).clamp(-1, 1))
        out.append(torch.linalg.matrix_exp(angle * (torch.outer(n2, n1) - torch.outer(n1, n2))) @ xi)
    return torch.stack(out)


REFERENCES = {
    "sft": _rotation_by_matrix_exp,
    "translation": lambda x, a, b: x + b - a,  # Eq. 2
    "sft_d": lambda x, a, b: unit(x + b - a),  # Sec. 3.4: Eq. 2, then back onto the sphere
}


@pytest.mark.parametrize("name", list_transforms())
def test_registry_entries_equal_their_equation(name: str) -> None:
    x, a, b = data(13)
    reference = REFERENCES[name.replace("-", "_")]
    torch.testing.assert_close(create_transform(name)(x, a, b), reference(x, a, b), atol=1e-10, rtol=0)


@pytest.mark.parametrize("delta", [0.0, 1e-7, 1e-5, 1e-3])
def test_nearly_antiparallel_float32_stays_orthogonal(delta: float) -> None:
    g = torch.Generator().manual_seed(14)
    a = unit(torch.randn(16, 32, generator=g))
    b = -a + delta * torch.randn(16, 32, generator=g)
    x = torch.randn(16, 32, generator=g)
    y = spherical_transform(x, a, b)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(spherical_transform(a, a, b), unit(b), atol=1e-3, rtol=0)


def test_benchmark_runs_small(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.sft import main, run

    r = run(batch=4, dim=8, repeats=1, warmup=0)
    assert r["max_abs_diff"] < 1e-5 and r["forward"]["ratio"] > 0
    assert main(["--batch", "4", "--dim", "8", "--repeats", "1", "--step-repeats", "0"]) == 0
    assert "ratio" in capsys.readouterr().out


def test_step_cost_benchmark_runs_every_variant():
    from benchmarks.sft_step import VARIANTS, format_step_table, step_costs

    r = step_costs(batch_classes=4, per_class=2, dim=8, repeats=1)
    assert set(r["variants"]) == set(VARIANTS) and r["variants"]["baseline"]["ratio"] == 1.0
    assert "sft_d" in format_step_table(r)
