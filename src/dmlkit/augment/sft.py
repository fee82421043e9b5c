"""Feature transforms of the SFT paper (Zhu, Bai, Wei: "Spherical Feature Transform for Deep Metric Learning").

A feature ``x`` of a class with centre ``mu_from`` is moved into a class with centre
``mu_to``:

* :func:`spherical_transform` -- SFT, Eq. 3-4: ``x~ = A x`` with ``A`` the rotation in the
  plane spanned by the two centres (Proposition 1) that turns the direction of ``mu_from``
  into the direction of ``mu_to``. Applied as a rank-2 update in ``O(B d)``; the ``d x d``
  matrix is never formed.
* :func:`translation_transform` -- the translation transform of FTL, Eq. 2:
  ``x~ = x + mu_to - mu_from``.
* :func:`degenerate_transform` -- SFT-d, the "degenerated form of SFT" of Sec. 3.4: Eq. 2
  applied *before* L2 normalisation, then re-projected onto the unit sphere.
* :func:`rotation_matrix` -- the explicit matrix ``A`` of Eq. 4 (for tests and benchmarks).

All functions are batched over leading dimensions (``x`` is ``(B, d)``; centres are
``(B, d)`` or a single ``(d,)``, anything that broadcasts) and differentiable in all inputs.

Edge cases of the rotation (one documented rule, shared by :func:`spherical_transform` and
:func:`rotation_matrix`):

* a zero centre (``|mu| <= tiny``, the smallest normal number of the dtype): identity;
* parallel centres (same direction, angle 0): identity -- this is just Eq. 4 with
  ``alpha = 0``; the rank-2 update is written without dividing by ``sin(alpha)``, so it
  and its gradient are smooth there;
* anti-parallel centres (``cos(alpha) < 0`` and ``|mu_to/|mu_to| - cos(alpha) n1| <=
  sqrt(eps)`` of the dtype): the plane of Eq. 4 is undefined (any plane containing ``n1``
  works). We use the deterministic plane spanned by ``n1`` and the standard basis vector
  ``e_k`` with ``k = argmin_i |n1_i|`` (first index on ties), Gram-Schmidt orthogonalised
  against ``n1``, and rotate by ``alpha = pi``: ``A = I - 2 n1 n1^T - 2 n2 n2^T``. This is
  a proper rotation (det +1) that takes ``mu_from`` to the direction of ``mu_to``. Requires
  ``d >= 2`` (in one dimension no rotation maps ``1`` to ``-1``).

Numerics: with ``n1 = mu_from/|mu_from|``, ``u = mu_to/|mu_to|``, ``c = n1.u = cos(alpha)``
and ``w = u - c n1`` (so ``|w| = sin(alpha)`` and ``w = sin(alpha) n2``), Eq. 4 applied to
``x`` is

    A x = x + w (n1.x) - n1 (w.x) + (c - 1) n1 (n1.x) + k w (w.x),

with ``k = (c - 1) / |w|^2 = -1 / (1 + c)``. We use ``-1/(1+c)`` when ``c > 0`` (no division
by a small ``|w|`` near parallel centres) and ``(c - 1)/|w|^2`` when ``c <= 0`` (no division
by a small ``1 + c`` near anti-parallel ones). ``w`` is orthogonalised against ``n1`` twice
and ``(c, |w|)`` rescaled to unit length, so ``A`` is orthogonal to rounding error even for
nearly anti-parallel centres.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

__all__ = [
    "spherical_transform",
    "translation_transform",
    "degenerate_transform",
    "rotation_matrix",
    "create_transform",
    "list_transforms",
]


def _check(name: str, t: Tensor, d: int | None = None) -> None:
    if not isinstance(t, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() < 1:
        raise ValueError(f"{name} must have a last (feature) dimension, got a scalar")
    if d is not None and t.shape[-1] != d:
        raise ValueError(
            f"{name} has feature dimension {t.shape[-1]} but x has {d}: pass centres of the same dimension as the features"
        )


def _broadcast(x: Tensor, mu_from: Tensor, mu_to: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    _check("x", x)
    d = x.shape[-1]
    _check("mu_from", mu_from, d)
    _check("mu_to", mu_to, d)
    try:
        return torch.broadcast_tensors(x, mu_from, mu_to)  # type: ignore[return-value]
    except RuntimeError as e:
        raise ValueError(
            f"x {tuple(x.shape)}, mu_from {tuple(mu_from.shape)} and mu_to {tuple(mu_to.shape)} do not broadcast: "
            "give centres of shape (B, d) matching x, or (d,)"
        ) from e


def _dot(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).sum(-1, keepdim=True)


def _safe_norm(v: Tensor, tiny: float) -> tuple[Tensor, Tensor]:
    """``(|v|, |v| > tiny)`` with a gradient that is finite everywhere (zero vectors get norm 1)."""
    sq = _dot(v, v)
    ok = sq > tiny * tiny
    return torch.sqrt(torch.where(ok, sq, torch.ones_like(sq))), ok


def _fallback_axis(n1: Tensor) -> Tensor:
    """Unit vector orthogonal to ``n1``: ``e_k`` with ``k = argmin |n1_k|``, orthogonalised against ``n1``."""
    k = n1.detach().abs().argmin(dim=-1, keepdim=True)
    e = torch.zeros_like(n1).scatter_(-1, k, 1.0)
    e = e - torch.gather(n1, -1, k) * n1
    norm, _ = _safe_norm(e, torch.finfo(n1.dtype).tiny)
    return e / norm


class _Plane:
    """The quantities of Eq. 4 for a batch of centre pairs (see the module docstring)."""

    def __init__(self, mu_from: Tensor, mu_to: Tensor) -> None:
        if mu_from.shape[-1] < 2:
            raise ValueError(
                "the spherical transform needs feature dimension d >= 2 (a rotation in d = 1 is the identity)"
            )
        finfo = torch.finfo(mu_from.dtype)
        tiny = finfo.tiny
        nf, ok_f = _safe_norm(mu_from, tiny)
        nt, ok_t = _safe_norm(mu_to, tiny)
        n1 = mu_from / nf
        u = mu_to / nt
        c = _dot(n1, u)
        w = u - c * n1
        w = w - _dot(n1, w) * n1  # second Gram-Schmidt pass: w orthogonal to n1 to rounding error
        s, ok_s = _safe_norm(w, tiny)
        s = torch.where(ok_s, s, torch.zeros_like(s))
        r2 = c * c + s * s  # rescale so that cos^2 + sin^2 = 1 (r2 = 0 only for a zero centre)
        r = torch.sqrt(torch.where(r2 > tiny, r2, torch.ones_like(r2)))
        c, w, s = c / r, w / r, s / r
        self.identity = ~(ok_f & ok_t)
        self.anti = (c < 0) & (s <= finfo.eps**0.5) & ~self.identity
        self.n1, self.c, self.w, self.s = n1, c, w, s

    def normal(self) -> Tensor:
        """``n2`` of Eq. 4 (the fallback axis for anti-parallel centres); arbitrary unit vector if parallel."""
        s_safe = torch.where(self.s > 0, self.s, torch.ones_like(self.s))
        n2 = torch.where(self.s > 0, self.w / s_safe, _fallback_axis(self.n1))
        return torch.where(self.anti, _fallback_axis(self.n1), n2)


def spherical_transform(x: Tensor, mu_from: Tensor, mu_to: Tensor) -> Tensor:
    """SFT, Eq. 3-4 of the SFT paper: rotate ``x`` by the rotation that takes ``mu_from`` to ``mu_to``.

    ``A = I + sin(a)(n2 n1^T - n1 n2^T) + (cos(a) - 1)(n1 n1^T + n2 n2^T)`` with
    ``n1 = mu_from/|mu_from|``, ``n2`` the unit component of ``mu_to`` orthogonal to ``n1``
    and ``a`` the angle between the centres, applied as a rank-2 update in ``O(B d)``.
    Only the directions of the centres matter, so unnormalised class means work as well
    as normalised ones; ``A`` preserves norms, so features on the unit sphere stay there.

    Args:
        x: features ``(..., d)``, typically L2-normalised embeddings ``(B, d)``.
        mu_from: centre of each feature's own class, ``(B, d)`` or ``(d,)``.
        mu_to: centre of each feature's target class, ``(B, d)`` or ``(d,)``.

    Returns:
        ``A x`` with the broadcast shape of the inputs. Zero centres give the identity;
        parallel centres the identity; anti-parallel centres the rotation by ``pi`` in a
        fixed plane (see the module docstring). No NaN in value or gradient.
    """
    x, mu_from, mu_to = _broadcast(x, mu_from, mu_to)
    p = _Plane(mu_from, mu_to)
    n1, c, w = p.n1, p.c, p.w
    a1 = _dot(n1, x)
    aw = _dot(w, x)
    one = torch.ones_like(c)
    # k = -1/(1+c) = (c-1)/|w|^2, each evaluated where its denominator is large.
    k_pos = -1.0 / torch.where(c > 0, 1.0 + c, one)
    s2 = p.s * p.s
    k_neg = (c - 1.0) / torch.where((c > 0) | (s2 == 0), one, s2)
    k = torch.where(c > 0, k_pos, k_neg)
    general = x + w * a1 - n1 * aw + (c - 1.0) * n1 * a1 + k * w * aw
    # Anti-parallel: rotation by pi in the plane (n1, e): A = I - 2 n1 n1^T - 2 e e^T.
    e = _fallback_axis(n1)
    anti = x - 2.0 * n1 * a1 - 2.0 * e * _dot(e, x)
    out = torch.where(p.anti, anti, general)
    return torch.where(p.identity, x, out)


def translation_transform(x: Tensor, mu_from: Tensor, mu_to: Tensor) -> Tensor:
    """Translation transform (FTL), Eq. 2 of the SFT paper: ``x + mu_to - mu_from``."""
    x, mu_from, mu_to = _broadcast(x, mu_from, mu_to)
    return x + (mu_to - mu_from)


def degenerate_transform(x_unnormalised: Tensor, mu_from: Tensor, mu_to: Tensor, eps: float = 1e-12) -> Tensor:
    """SFT-d, the degenerated form of SFT (Sec. 3.4 of the SFT paper, after Proposition 2).

    "We use Eq. 2 before feature normalization and then reproject them back to the
    hypersphere": ``normalize(x + mu_to - mu_from)``, where ``x`` is the embedding *before*
    L2 normalisation and ``mu_from``/``mu_to`` are class centres estimated in that same
    unnormalised space (e.g. a :class:`~dmlkit.augment.centers.ClassCenters` fed with the
    pre-normalisation embeddings), not the centres of the normalised features.

    Returns unit vectors ``(..., d)``; a translated feature that is exactly zero stays zero
    (``torch.nn.functional.normalize`` with ``eps``), without NaN in value or gradient.
    """
    y = translation_transform(x_unnormalised, mu_from, mu_to)
    return torch.nn.functional.normalize(y, p=2.0, dim=-1, eps=eps)


def rotation_matrix(mu_from: Tensor, mu_to: Tensor) -> Tensor:
    """The explicit ``d x d`` matrix ``A`` of Eq. 4, batched: ``(..., d)`` centres -> ``(..., d, d)``.

    Built literally from Eq. 4 (``n1``, ``n2`` by Gram-Schmidt, ``a = atan2(sin, cos)``),
    with the edge-case rules of the module docstring. Costs ``O(d^2)`` memory per pair: for
    tests and benchmarks, not for training (use :func:`spherical_transform`).
    """
    _check("mu_from", mu_from)
    _check("mu_to", mu_to, mu_from.shape[-1])
    mu_from, mu_to = torch.broadcast_tensors(mu_from, mu_to)
    p = _Plane(mu_from, mu_to)
    n1, n2 = p.n1, p.normal()
    alpha = torch.atan2(p.s, p.c)
    alpha = torch.where(p.anti, torch.full_like(alpha, torch.pi), alpha)
    alpha = torch.where(p.identity, torch.zeros_like(alpha), alpha)
    d = n1.shape[-1]
    eye = torch.eye(d, dtype=n1.dtype, device=n1.device)
    outer = lambda a, b: a.unsqueeze(-1) * b.unsqueeze(-2)  # noqa: E731
    sin = torch.sin(alpha).unsqueeze(-1)
    cosm1 = (torch.cos(alpha) - 1.0).unsqueeze(-1)
    return eye + (outer(n2, n1) - outer(n1, n2)) * sin + (outer(n1, n1) + outer(n2, n2)) * cosm1


Transform = Callable[[Tensor, Tensor, Tensor], Tensor]

_TRANSFORMS: dict[str, Transform] = {
    "sft": spherical_transform,
    "translation": translation_transform,
    "sft-d": degenerate_transform,
}


def list_transforms() -> list[str]:
    """Names accepted by :func:`create_transform`."""
    return sorted(_TRANSFORMS)


def create_transform(name: str) -> Transform:
    """The transform called ``name``: ``"sft"`` (Eq. 3-4), ``"translation"`` (Eq. 2) or ``"sft-d"`` (Sec. 3.4)."""
    try:
        return _TRANSFORMS[name]
    except KeyError:
        raise ValueError(f"unknown transform {name!r}: choose one of {list_transforms()}") from None
