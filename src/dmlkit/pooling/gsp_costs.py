"""GSP's transport costs (thesis Sec. 5.2.1) and their hand-written gradient.

``c_ij = || w_i/max(1,||w_i||) - f_j/max(1,||f_j||) ||_2`` between the ``m`` prototypes ``w_i`` and
the ``n`` local features ``f_j`` of each sample, shape ``(B, m, n)``: the thesis' normalisation
(``normalization="unit_ball"``).  The author's code l2-normalises both instead
(``PartialTransport(normalization='l2')``): ``normalization="l2"``, ``u / ||u||`` (a zero vector stays 0).
Below, ``r`` is the scale of a vector (``1 / max(1, ||u||)`` or ``1 / ||u||``) and ``[radial]`` says
whether the scale depends on ``u`` (``||u|| >= 1`` for the unit ball, always for l2).

Forward: with ``r_j`` the scale of ``f_j`` and ``w~_i = r(w_i) w_i``, the squared
distance is ``||w~_i||^2 + ||f~_j||^2 - 2 r_j (w~_i . f_j)``: one matrix product of the raw features
with the normalised prototypes; ``f~ = r f`` is never formed.  Squared distances are clamped at
``1e-12`` before the square root, so a prototype on a feature has cost ``1e-6`` and gradient 0.
The costs are returned as a ``(B, m, n)`` view of ``(B, n, m)`` memory (the product's layout).

Backward (``costs_backward``), the chain rule of that forward.  With ``G_ji = 2 dL/dsq_ij`` (``g / c``,
0 where the distance was clamped), ``G'_ji = -r_j G_ji``, ``S_j = sum_i G_ji``, ``T_i = sum_j G_ji``:

* ``dL/dw~_i = T_i w~_i + sum_j G'_ji f_j``, then through the normalisation
  (``r (g - [radial] (g . w~) w~)``);
* ``dL/df_j = Q_j + r_j^2 (S_j - a_j) f_j`` with ``Q_j = sum_i G'_ji w~_i`` and the radial part
  ``a_j = [radial] (S_j ||f~_j||^2 + Q_j . f_j)`` (the same normalisation, written out).

Two matrix products of ``G'`` and work on ``(B, n)`` vectors.  ``gsp_costs`` wraps this in an
autograd Function; the GSP layer (``dmlkit.pooling.gsp``) calls ``costs_backward`` from its own
backward.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch.autograd.function import once_differentiable

__all__ = ["COST_NORMALIZATIONS", "gsp_costs", "normalize_rows"]  # the layer uses the rest (costs_forward, ...)

_MIN_SQ_DIST = 1e-12  # squared distances are clamped here so that sqrt has a finite gradient at 0
_L2_MIN_SQ_NORM = 1e-24  # l2: norms are clamped at 1e-12 (as torch.nn.functional.normalize), so 0 stays 0

COST_NORMALIZATIONS = ("unit_ball", "l2")
"""``unit_ball``: ``u / max(1, ||u||)`` (thesis Sec. 5.2.1); ``l2``: ``u / ||u||`` (the author's code)."""


def check_normalization(normalization: str) -> None:
    if normalization not in COST_NORMALIZATIONS:
        raise ValueError(
            f"GSP normalization must be one of {', '.join(COST_NORMALIZATIONS)} (unit_ball: the thesis' "
            f"u / max(1, ||u||); l2: the author's code), got {normalization!r}"
        )


def check_inputs(features: torch.Tensor, prototypes: torch.Tensor) -> None:
    """Shapes and dtypes of GSP's inputs, with errors that say what to pass."""
    if features.ndim != 3:
        raise ValueError(
            f"GSP features must be (B, n, d) (batch, local features, channels), got shape {tuple(features.shape)}; "
            "for a feature map (B, d, h, w) use the GSP module or x.flatten(2).transpose(1, 2)"
        )
    if prototypes.ndim != 2 or prototypes.shape[1] != features.shape[2]:
        raise ValueError(
            f"GSP prototypes must be (m, d) with d = {features.shape[2]} (the feature channels), "
            f"got shape {tuple(prototypes.shape)}"
        )
    if features.shape[1] < 1 or prototypes.shape[0] < 1:
        raise ValueError("GSP needs at least one local feature and one prototype")
    if not features.is_floating_point() or not prototypes.is_floating_point():
        raise ValueError("GSP features and prototypes must be floating-point tensors")


def _scale(sq_norm: torch.Tensor, normalization: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(r, [radial])`` from ``||u||^2``: ``r = 1 / max(1, ||u||)`` or ``1 / ||u||``, and where ``r`` depends on ``u``."""
    floor = 1.0 if normalization == "unit_ball" else _L2_MIN_SQ_NORM
    return sq_norm.clamp(min=floor).rsqrt(), sq_norm >= floor


def normalize_rows(u: torch.Tensor, normalization: str = "unit_ball") -> torch.Tensor:
    """Rows of ``u`` as the costs see them: ``u / max(1, ||u||_2)`` (Sec. 5.2.1) or ``u / ||u||_2`` (``l2``)."""
    return u * _scale(torch.linalg.vecdot(u, u), normalization)[0].unsqueeze(-1)


class CostsContext(NamedTuple):
    """What the costs' gradient needs from the forward."""

    features: torch.Tensor  # f, (B, n, d) (the input itself, not a copy)
    costs: torch.Tensor  # c, (B, m, n)
    sq: torch.Tensor | None  # the unclamped squared distances; kept only when some were clamped
    f_sq: torch.Tensor  # ||f_j||^2, (B, n)
    w: torch.Tensor  # w~, (m, d)
    w_sq: torch.Tensor  # ||w_i||^2, (m,)


def _feature_scale(f_sq: torch.Tensor, normalization: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(r, ||f~||^2 = ||f||^2 r^2, [radial])`` from ``||f||^2``."""
    r_f, radial = _scale(f_sq, normalization)
    return r_f, f_sq * r_f * r_f, radial


def _squared_distances(
    features: torch.Tensor, prototypes: torch.Tensor, normalization: str
) -> tuple[torch.Tensor, ...]:
    """``(sq (B, n, m), ||f||^2, w~, ||w||^2)``: the expanded squared distance of the module docstring."""
    f_sq = torch.linalg.vecdot(features, features)  # ||f_j||^2, (B, n)
    r_f, fh_sq, _ = _feature_scale(f_sq, normalization)
    w_sq = torch.linalg.vecdot(prototypes, prototypes)  # (m,)
    w = prototypes * _scale(w_sq, normalization)[0][:, None]  # w~, (m, d)
    dots = torch.matmul(features, w.t())  # f_j . w~_i, (B, n, m)
    sq = torch.add(fh_sq[:, :, None], torch.linalg.vecdot(w, w)).addcmul_(dots, r_f[:, :, None], value=-2.0)
    return sq, f_sq, w, w_sq


def costs_forward(
    features: torch.Tensor, prototypes: torch.Tensor, normalization: str = "unit_ball"
) -> tuple[torch.Tensor, CostsContext]:
    """Costs ``(B, m, n)`` and the context of their gradient (no autograd graph is recorded by callers
    that use ``costs_backward``; under plain autograd the operations differentiate as usual)."""
    sq, f_sq, w, w_sq = _squared_distances(features, prototypes, normalization)
    # a prototype (numerically) on a feature; export, compile and trace cannot branch on values: they always clamp
    clamped = torch.compiler.is_compiling() or torch.jit.is_tracing() or bool(sq.amin() < _MIN_SQ_DIST)
    c = (sq.clamp(min=_MIN_SQ_DIST) if clamped else sq).sqrt()
    costs = c.transpose(1, 2)
    return costs, CostsContext(features, costs, sq.transpose(1, 2) if clamped else None, f_sq, w, w_sq)


def _normalize_grad(g: torch.Tensor, u_hat: torch.Tensor, u_sq: torch.Tensor, normalization: str) -> torch.Tensor:
    """Gradient through ``u -> r u`` given ``dL/du~``: ``r (g - [radial] (g.u~) u~)``."""
    r, radial_mask = _scale(u_sq, normalization)
    radial = torch.linalg.vecdot(g, u_hat).mul_(radial_mask)[:, None]  # a clamp passes its gradient at equality
    return torch.addcmul(g, radial, u_hat, value=-1.0).mul_(r[:, None])


def costs_backward(
    ctx: CostsContext,
    g_c: torch.Tensor,
    need_features: bool = True,
    need_prototypes: bool = True,
    normalization: str = "unit_ball",
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(dL/df (B, n, d), dL/dw (m, d))`` from ``dL/dc`` (formulas in the module docstring)."""
    features = ctx.features
    b, n, d = features.shape
    m = ctx.w.shape[0]
    g_sq = g_c / ctx.costs  # = 2 dL/dsq (sqrt), (B, m, n)
    if ctx.sq is not None:
        g_sq.masked_fill_(ctx.sq < _MIN_SQ_DIST, 0.0)  # the clamp passes no gradient below 1e-12
    g_t = g_sq.transpose(1, 2).reshape(b * n, m)  # G, rows j (free when g_c is laid out as the costs)
    f_sq = ctx.f_sq.reshape(b * n, 1)
    r_f, fh_sq, radial_mask = _feature_scale(f_sq, normalization)
    g_scaled = g_t * r_f.neg()  # G'
    g_f = g_w = None
    if need_features:
        q = torch.mm(g_scaled, ctx.w).view(b, n, d)  # Q
        s = g_t.sum(dim=1, keepdim=True)  # S
        radial = torch.addcmul(torch.linalg.vecdot(q, features).reshape(b * n, 1), s, fh_sq).mul_(radial_mask)
        g_f = q.addcmul_(features, (s - radial).mul_(r_f * r_f).view(b, n, 1))
    if need_prototypes:
        g_wh = torch.mm(g_scaled.t(), features.reshape(b * n, d))  # sum_j G'_ji f_j
        g_wh.addcmul_(ctx.w, g_t.sum(dim=0)[:, None])
        g_w = _normalize_grad(g_wh, ctx.w, ctx.w_sq, normalization)
    return g_f, g_w


class _GSPCosts(torch.autograd.Function):
    """(features (B, n, d), prototypes (m, d)) -> costs (B, m, n), backward by ``costs_backward``."""

    @staticmethod
    def forward(ctx: Any, features: torch.Tensor, prototypes: torch.Tensor, normalization: str) -> torch.Tensor:
        costs, saved = costs_forward(features, prototypes, normalization)
        ctx.save_for_backward(*saved)
        ctx.normalization = normalization
        return costs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_c: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        saved = CostsContext(*ctx.saved_tensors)
        return (*costs_backward(saved, g_c, ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.normalization), None)


def gsp_costs(features: torch.Tensor, prototypes: torch.Tensor, normalization: str = "unit_ball") -> torch.Tensor:
    """Costs ``c_ij = ||w_i/max(1,||w_i||) - f_j/max(1,||f_j||)||_2`` (Sec. 5.2.1), shape ``(B, m, n)``;
    ``normalization="l2"``: ``||w_i/||w_i|| - f_j/||f_j||||_2`` (the author's code).

    Squared distances are clamped at ``1e-12`` before the square root, so a prototype equal to a
    feature has cost ``1e-6`` and a finite (zero) gradient.  The gradient is the chain rule written
    out (``costs_backward``); under ``torch.jit.trace`` the same operations run under plain autograd.
    """
    check_inputs(features, prototypes)
    check_normalization(normalization)
    if torch.jit.is_tracing():
        return costs_forward(features, prototypes, normalization)[0]
    return _GSPCosts.apply(features, prototypes, normalization)
