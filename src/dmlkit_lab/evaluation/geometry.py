"""Geometry of an embedding space: the diagnostics of the SFT paper (Sec. 3.4, 4.4; Fig. 2, 4, 6).

* :func:`scatter_matrices` -- ``S_c`` and ``S_w`` of Eq. 7: the mean outer product of the
  class means and the mean over classes of each class's scatter (covariance, ``1/N_k``).
* :func:`r_w` -- Eq. 8: ``trace(U^T S_w U) / trace(S_w)`` with ``U`` the leading
  eigenvectors of ``S_c`` that hold a given fraction of its energy (eigenvalue sum).
  ``r_w = 0`` means the subspace of the means and that of the within-class deviations
  ``sigma`` are orthogonal, the condition under which SFT equals the translation
  (Proposition 3); Fig. 6c plots it against the energy fraction (:func:`r_w_curve`).
* :func:`class_divergences` -- the divergence of each class, ``trace(S_{w,k})`` of Eq. 11
  (mean squared distance to the class mean), whose spread Fig. 4a compares.
* :func:`rotation_residuals` -- the distribution of ``||A sigma - sigma||`` (Fig. 6a):
  ``sigma = x - mu_y`` of a feature, ``A`` the SFT rotation from its class centre to the
  centre of a random other class. Small values mean SFT barely differs from translation.
* :func:`covariance_spectra` -- eigenvalues of the class covariances (Fig. 2c) and their
  relative spread across classes (the paper's "about 8% on average").

Everything works on ``(N, d)`` embeddings and integer labels, in float64, with no training
code. Classes with fewer than two samples have no scatter and are skipped where noted.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor


__all__ = [
    "class_means",
    "scatter_matrices",
    "r_w",
    "r_w_curve",
    "class_divergences",
    "rotation_residuals",
    "covariance_spectra",
    "geometry_report",
]


def _check(embeddings: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    x = torch.as_tensor(embeddings)
    y = torch.as_tensor(labels)
    if x.ndim != 2:
        raise ValueError(f"embeddings must have shape (N, d), got {tuple(x.shape)}")
    if y.shape != (x.shape[0],):
        raise ValueError(f"labels must have shape ({x.shape[0]},), one per embedding; got {tuple(y.shape)}")
    if y.dtype.is_floating_point or y.dtype == torch.bool:
        raise ValueError(f"labels must be integers, got {y.dtype}")
    if not torch.isfinite(x).all():
        raise ValueError("embeddings contain NaN or Inf; check the model's outputs")
    _, codes = torch.unique(y, return_inverse=True)
    if codes.numel() == 0 or int(codes.max()) < 1:
        raise ValueError("the geometry diagnostics need at least two classes")
    return x.to(torch.float64), codes


def class_means(embeddings: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """``(means (C, d), counts (C,))`` of the classes in sorted label order."""
    x, codes = _check(embeddings, labels)
    return _means(x, codes)


def _means(x: Tensor, codes: Tensor) -> tuple[Tensor, Tensor]:
    c = int(codes.max()) + 1
    counts = torch.bincount(codes, minlength=c)
    sums = torch.zeros(c, x.shape[1], dtype=x.dtype).index_add_(0, codes, x)
    return sums / counts[:, None], counts


def scatter_matrices(embeddings: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """``(S_c, S_w)`` of Eq. 7: ``S_c = 1/C sum_i mu_i mu_i^T``, ``S_w = 1/C sum_i 1/N_i sum_k (x_k - mu_i)(x_k - mu_i)^T``."""
    x, codes = _check(embeddings, labels)
    means, counts = _means(x, codes)
    c = means.shape[0]
    s_c = means.T @ means / c
    dev = x - means[codes]
    weights = (1.0 / counts.to(x.dtype))[codes]
    s_w = (dev * weights[:, None]).T @ dev / c
    return s_c, s_w


def _energy_basis(s_c: Tensor, energy: float) -> Tensor:
    if not 0.0 < energy <= 1.0:
        raise ValueError(f"energy must lie in (0, 1], got {energy!r}")
    values, vectors = torch.linalg.eigh(s_c)
    values, vectors = values.flip(0).clamp_min(0), vectors.flip(1)
    total = float(values.sum())
    if total <= 0:
        return vectors[:, :0]
    cum = torch.cumsum(values, 0) / total
    k = int(torch.searchsorted(cum, torch.tensor(energy, dtype=cum.dtype) - 1e-12)) + 1
    return vectors[:, : min(k, vectors.shape[1])]


def r_w(embeddings: Tensor, labels: Tensor, energy: float = 0.99) -> float:
    """Eq. 8 of the SFT paper: the share of within-class energy in the subspace holding ``energy`` of ``S_c``."""
    s_c, s_w = scatter_matrices(embeddings, labels)
    return _r_w(s_c, s_w, energy)


def _r_w(s_c: Tensor, s_w: Tensor, energy: float) -> float:
    u = _energy_basis(s_c, energy)
    total = float(torch.trace(s_w))
    if total <= 0:
        return 0.0
    return float(torch.trace(u.T @ s_w @ u)) / total


def r_w_curve(
    embeddings: Tensor, labels: Tensor, energies: Sequence[float] = (0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
) -> dict[float, float]:
    """``{energy: r_w}`` for several energy fractions (Fig. 6c)."""
    s_c, s_w = scatter_matrices(embeddings, labels)
    return {float(e): _r_w(s_c, s_w, float(e)) for e in energies}


def class_divergences(embeddings: Tensor, labels: Tensor) -> Tensor:
    """Divergence of each class, ``trace(S_{w,k})`` of Eq. 11 = mean squared distance to the class mean, ``(C,)``."""
    x, codes = _check(embeddings, labels)
    means, counts = _means(x, codes)
    sq = ((x - means[codes]) ** 2).sum(1)
    return torch.zeros(means.shape[0], dtype=x.dtype).index_add_(0, codes, sq) / counts.to(x.dtype)


def rotation_residuals(
    embeddings: Tensor, labels: Tensor, samples: int = 2000, generator: torch.Generator | None = None
) -> Tensor:
    """``||A sigma - sigma||`` for ``samples`` random features (Fig. 6a).

    For a feature ``x`` of class ``y``: ``sigma = x - mu_y``, ``A`` the SFT rotation
    (Eq. 4) from ``mu_y`` to the centre of a uniformly drawn other class. Drawn with
    ``generator`` (default: seed 0).
    """
    x, codes = _check(embeddings, labels)
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    means, _ = _means(x, codes)
    c = means.shape[0]
    pick = torch.randint(0, x.shape[0], (samples,), generator=g)
    own = codes[pick]
    other = (own + torch.randint(1, c, (samples,), generator=g)) % c
    sigma = x[pick] - means[own]
    return rotation_displacement(sigma, means[own], means[other])


def rotation_displacement(sigma: Tensor, mu_from: Tensor, mu_to: Tensor) -> Tensor:
    """``||A sigma - sigma||`` for the SFT rotation ``A`` (Eq. 4) that takes ``mu_from`` to ``mu_to``, per row.

    ``A`` rotates by the angle ``a`` between the centres in the plane they span and fixes its
    orthogonal complement, so ``||A s - s|| = 2 sin(a/2) ||P s||`` with ``P`` the projection onto
    that plane and ``2 sin(a/2) = sqrt(2 (1 - cos a))``. (For exactly anti-parallel centres the plane
    is not defined; only the ``mu_from`` direction is counted then.)
    """
    n1 = torch.nn.functional.normalize(mu_from, dim=1)
    u = torch.nn.functional.normalize(mu_to, dim=1)
    cos = (n1 * u).sum(dim=1).clamp(-1.0, 1.0)
    n2 = torch.nn.functional.normalize(u - cos[:, None] * n1, dim=1)
    in_plane = ((sigma * n1).sum(dim=1) ** 2 + (sigma * n2).sum(dim=1) ** 2).sqrt()
    return torch.sqrt(2.0 * (1.0 - cos)) * in_plane


def covariance_spectra(embeddings: Tensor, labels: Tensor, num_classes: int = 4, top: int = 32) -> dict[str, Any]:
    """Eigenvalues of the covariances of the ``num_classes`` largest classes (Fig. 2c).

    Returns ``eigenvalues`` ``(num_classes, top)`` (descending), ``variances`` (the
    covariance diagonals, Fig. 2b) and ``relative_spread``: the mean over the leading
    ``top`` positions of (std across classes / mean across classes) of the eigenvalues,
    with the same figure for the diagonal variances for comparison.
    """
    x, codes = _check(embeddings, labels)
    counts = torch.bincount(codes)
    order = torch.argsort(counts, descending=True, stable=True)[:num_classes]
    if int(counts[order[-1]]) < 2:
        raise ValueError("covariance spectra need classes with at least two samples")
    eig, diag = [], []
    for cls in order.tolist():
        xc = x[codes == cls]
        cov = torch.cov(xc.T, correction=0)
        eig.append(torch.linalg.eigvalsh(cov).flip(0)[:top].clamp_min(0))
        diag.append(torch.diagonal(cov)[:top])
    eig_t, diag_t = torch.stack(eig), torch.stack(diag)

    def spread(v: Tensor) -> float:
        mean = v.mean(0)
        keep = mean > 1e-12
        return float((v.std(0, correction=0)[keep] / mean[keep]).mean()) if keep.any() else 0.0

    return {
        "eigenvalues": eig_t,
        "variances": diag_t,
        "relative_spread": spread(eig_t),
        "variance_spread": spread(diag_t),
    }


def geometry_report(embeddings: Tensor, labels: Tensor, energy: float = 0.99, seed: int = 0) -> dict[str, Any]:
    """The scalar diagnostics of this module in one JSON-ready dict."""
    div = class_divergences(embeddings, labels)
    res = rotation_residuals(embeddings, labels, generator=torch.Generator().manual_seed(seed))
    spectra = covariance_spectra(embeddings, labels)
    return {
        "r_w": r_w(embeddings, labels, energy),
        "r_w_energy": energy,
        "r_w_curve": {str(k): v for k, v in r_w_curve(embeddings, labels).items()},
        "divergence_mean": float(div.mean()),
        "divergence_std": float(div.std(correction=0)),
        "rotation_residual_mean": float(res.mean()),
        "rotation_residual_median": float(res.median()),
        "eigenvalue_spread": spectra["relative_spread"],
        "variance_spread": spectra["variance_spread"],
    }
