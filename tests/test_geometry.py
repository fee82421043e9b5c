"""SFT-paper diagnostics (dmlkit_lab.evaluation.geometry) against brute-force definitions and the paper's propositions."""

import pytest
import torch

from dmlkit.augment.sft import rotation_matrix
from dmlkit_lab.evaluation.geometry import (
    class_divergences,
    covariance_spectra,
    geometry_report,
    r_w,
    rotation_residuals,
    scatter_matrices,
)


def _data(seed=0, n=60, d=6, c=4):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(c).repeat(n // c)
    x = (
        torch.randn(n, d, generator=g, dtype=torch.float64)
        + 3 * torch.randn(c, d, generator=g, dtype=torch.float64)[labels]
    )
    return x, labels


def test_scatter_matrices_match_the_sums_of_eq7():
    x, y = _data()
    s_c, s_w = scatter_matrices(x, y)
    classes = torch.unique(y)
    ref_c = torch.zeros(6, 6, dtype=torch.float64)
    ref_w = torch.zeros(6, 6, dtype=torch.float64)
    for k in classes:
        xk = x[y == k]
        mu = xk.mean(0)
        ref_c += torch.outer(mu, mu)
        ref_w += sum(torch.outer(v - mu, v - mu) for v in xk) / len(xk)
    torch.testing.assert_close(s_c, ref_c / len(classes))
    torch.testing.assert_close(s_w, ref_w / len(classes))


def test_divergence_is_the_trace_of_eq11():
    x, y = _data(1)
    div = class_divergences(x, y)
    for k in range(4):
        xk = x[y == k]
        assert float(div[k]) == pytest.approx(float(((xk - xk.mean(0)) ** 2).sum(1).mean()))


def _orthogonal_layout(dev_dims):
    """Class means in dims 0-1, within-class deviations only in ``dev_dims``."""
    g = torch.Generator().manual_seed(3)
    labels = torch.arange(5).repeat(20)
    means = torch.zeros(5, 6, dtype=torch.float64)
    means[:, :2] = torch.randn(5, 2, generator=g, dtype=torch.float64) * 4
    noise = torch.zeros(100, 6, dtype=torch.float64)
    noise[:, dev_dims] = torch.randn(100, len(dev_dims), generator=g, dtype=torch.float64)
    noise -= torch.zeros(5, 6, dtype=torch.float64).index_add_(0, labels, noise)[labels] / 20  # exact class means
    return means[labels] + noise, labels


def test_r_w_is_zero_for_orthogonal_subspaces_and_one_inside():
    x, y = _orthogonal_layout([2, 3, 4])
    assert r_w(x, y, energy=0.999) == pytest.approx(0.0, abs=1e-12)
    x, y = _orthogonal_layout([0, 1])
    assert r_w(x, y, energy=0.999) == pytest.approx(1.0)


def test_rotation_residuals_equal_the_explicit_rotation_and_vanish_when_orthogonal():
    x, y = _data(2)
    g = torch.Generator().manual_seed(5)
    res = rotation_residuals(x, y, samples=50, generator=g)
    g = torch.Generator().manual_seed(5)
    pick = torch.randint(0, len(x), (50,), generator=g)
    other = (y[pick] + torch.randint(1, 4, (50,), generator=g)) % 4
    means = torch.stack([x[y == k].mean(0) for k in range(4)])
    sigma = x[pick] - means[y[pick]]
    a = rotation_matrix(means[y[pick]], means[other])
    ref = (torch.einsum("bij,bj->bi", a, sigma) - sigma).norm(dim=1)
    torch.testing.assert_close(res, ref)
    # Proposition 3: sigma orthogonal to the centres -> A sigma = sigma.
    x, y = _orthogonal_layout([2, 3, 4])
    assert float(rotation_residuals(x, y, samples=200).max()) < 1e-10


def test_spectra_see_equal_eigenvalues_behind_different_variances():
    g = torch.Generator().manual_seed(7)
    base = torch.randn(400, 5, generator=g, dtype=torch.float64) * torch.tensor(
        [3.0, 2.0, 1.0, 0.5, 0.2], dtype=torch.float64
    )
    parts, labels = [], []
    for k in range(4):
        q, _ = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=torch.float64))
        parts.append(base @ q.T + 10 * k)
        labels.append(torch.full((400,), k))
    out = covariance_spectra(torch.cat(parts), torch.cat(labels), num_classes=4, top=5)
    assert out["relative_spread"] < 1e-10
    assert out["variance_spread"] > 0.1


def test_report_and_bad_input():
    x, y = _data()
    report = geometry_report(x, y)
    # the report carries the values of the functions checked against brute force above
    assert report["r_w"] == pytest.approx(r_w(x, y, report["r_w_energy"]))
    div = class_divergences(x, y)
    assert report["divergence_mean"] == pytest.approx(float(div.mean()))
    assert report["divergence_std"] == pytest.approx(float(div.std(correction=0)))
    with pytest.raises(ValueError, match="NaN"):
        r_w(torch.full((4, 2), float("nan")), torch.tensor([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="two classes"):
        r_w(torch.randn(4, 2), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="integers"):
        r_w(torch.randn(4, 2), torch.tensor([0.0, 0, 1, 1]))
    with pytest.raises(ValueError, match="energy"):
        r_w(x, y, energy=0.0)
