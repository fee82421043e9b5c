"""GSP's transport costs (thesis Sec. 5.2.1) and their hand-written gradient.

``c_ij = || w_i/max(1,||w_i||) - f_j/max(1,||f_j||) ||_2`` between the ``m`` prototypes ``w_i`` and
the ``n`` local features ``f_j`` of each sample, shape ``(B, m, n)``.

Forward: with ``r_j = 1 / max(1, ||f_j||)`` and ``w~_i = w_i / max(1, ||w_i||)``, the squared
distance is ``||w~_i||^2 + ||f~_j||^2 - 2 r_j (w~_i . f_j)``: one matrix product of the raw features
with the normalised prototypes; ``f~ = r f`` is never formed.  Squared distances are clamped at
``1e-12`` before the square root, so a prototype on a feature has cost ``1e-6`` and gradient 0.
The costs are returned as a ``(B, m, n)`` view of ``(B, n, m)`` memory (the product's layout).

Backward (``costs_backward``), the chain rule of that forward.  With ``G_ji = 2 dL/dsq_ij`` (``g / c``,
0 where the distance was clamped), ``G'_ji = -r_j G_ji``, ``S_j = sum_i G_ji``, ``T_i = sum_j G_ji``:

* ``dL/dw~_i = T_i w~_i + sum_j G'_ji f_j``, then through the unit-ball normalisation
  (``(g - [||w||>=1] (g . w~) w~) / max(1, ||w||)``);
* ``dL/df_j = Q_j + r_j^2 (S_j - a_j) f_j`` with ``Q_j = sum_i G'_ji w~_i`` and the radial part
  ``a_j = [||f_j|| >= 1] (S_j ||f~_j||^2 + Q_j . f_j)`` (the same normalisation, written out).

Two matrix products of ``G'`` and work on ``(B, n)`` vectors.  ``gsp_costs`` wraps this in an
autograd Function; the GSP layer (``dmlkit.pooling.gsp``) calls ``costs_backward`` from its own
backward.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch.autograd.function import once_differentiable

__all__ = ["CostsContext", "check_inputs", "costs_backward", "costs_forward", "gsp_costs", "unit_ball"]

_MIN_SQ_DIST = 1e-12  # squared distances are clamped here so that sqrt has a finite gradient at 0


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


def unit_ball(u: torch.Tensor) -> torch.Tensor:
    """``u / max(1, ||u||_2)`` row-wise (the normalisation of Sec. 5.2.1)."""
    sq = (u * u).sum(dim=-1, keepdim=True)
    return u / sq.clamp(min=1.0).sqrt()


class CostsContext(NamedTuple):
    """What the costs' gradient needs from the forward."""

    features: torch.Tensor  # f, (B, n, d) (the input itself, not a copy)
    costs: torch.Tensor  # c, (B, m, n)
    sq: torch.Tensor | None  # the unclamped squared distances; kept only when some were clamped
    f_sq: torch.Tensor  # ||f_j||^2, (B, n)
    w: torch.Tensor  # w~, (m, d)
    w_sq: torch.Tensor  # ||w_i||^2, (m,)


def _feature_scale(f_sq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``r = 1 / max(1, ||f||)`` and ``||f~||^2 = ||f||^2 r^2`` from ``||f||^2``."""
    r_f = f_sq.clamp(min=1.0).rsqrt()
    return r_f, f_sq * r_f * r_f


def _squared_distances(features: torch.Tensor, prototypes: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(sq (B, n, m), ||f||^2, w~, ||w||^2)``: the expanded squared distance of the module docstring."""
    f_sq = torch.linalg.vecdot(features, features)  # ||f_j||^2, (B, n)
    r_f, fh_sq = _feature_scale(f_sq)
    w_sq = torch.linalg.vecdot(prototypes, prototypes)  # (m,)
    w = prototypes * w_sq.clamp(min=1.0).rsqrt()[:, None]  # w~, (m, d)
    dots = torch.matmul(features, w.t())  # f_j . w~_i, (B, n, m)
    sq = torch.add(fh_sq[:, :, None], torch.linalg.vecdot(w, w)).addcmul_(dots, r_f[:, :, None], value=-2.0)
    return sq, f_sq, w, w_sq


def costs_forward(features: torch.Tensor, prototypes: torch.Tensor) -> tuple[torch.Tensor, CostsContext]:
    """Costs ``(B, m, n)`` and the context of their gradient (no autograd graph is recorded by callers
    that use ``costs_backward``; under plain autograd the operations differentiate as usual)."""
    sq, f_sq, w, w_sq = _squared_distances(features, prototypes)
    # a prototype (numerically) on a feature; export, compile and trace cannot branch on values: they always clamp
    clamped = torch.compiler.is_compiling() or torch.jit.is_tracing() or bool(sq.amin() < _MIN_SQ_DIST)
    c = (sq.clamp(min=_MIN_SQ_DIST) if clamped else sq).sqrt()
    costs = c.transpose(1, 2)
    return costs, CostsContext(features, costs, sq.transpose(1, 2) if clamped else None, f_sq, w, w_sq)


def _unit_ball_grad(g: torch.Tensor, u_hat: torch.Tensor, u_sq: torch.Tensor) -> torch.Tensor:
    """Gradient through ``u -> u / sqrt(max(1, ||u||^2))`` given ``dL/du~``: ``(g - [||u||>=1] (g.u~) u~) / r``."""
    r = u_sq.clamp(min=1.0).sqrt()[:, None]
    radial = torch.linalg.vecdot(g, u_hat).mul_(u_sq >= 1.0)[:, None]  # the clamp passes its gradient at >= 1
    return torch.addcmul(g, radial, u_hat, value=-1.0).div_(r)


def costs_backward(
    ctx: CostsContext, g_c: torch.Tensor, need_features: bool = True, need_prototypes: bool = True
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
    r_f, fh_sq = _feature_scale(f_sq)
    g_scaled = g_t * r_f.neg()  # G'
    g_f = g_w = None
    if need_features:
        q = torch.mm(g_scaled, ctx.w).view(b, n, d)  # Q
        s = g_t.sum(dim=1, keepdim=True)  # S
        radial = torch.addcmul(torch.linalg.vecdot(q, features).reshape(b * n, 1), s, fh_sq).mul_(f_sq >= 1.0)
        g_f = q.addcmul_(features, (s - radial).mul_(r_f * r_f).view(b, n, 1))
    if need_prototypes:
        g_wh = torch.mm(g_scaled.t(), features.reshape(b * n, d))  # sum_j G'_ji f_j
        g_wh.addcmul_(ctx.w, g_t.sum(dim=0)[:, None])
        g_w = _unit_ball_grad(g_wh, ctx.w, ctx.w_sq)
    return g_f, g_w


class _GSPCosts(torch.autograd.Function):
    """(features (B, n, d), prototypes (m, d)) -> costs (B, m, n), backward by ``costs_backward``."""

    @staticmethod
    def forward(ctx: Any, features: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
        costs, saved = costs_forward(features, prototypes)
        ctx.save_for_backward(*saved)
        return costs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_c: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        saved = CostsContext(*ctx.saved_tensors)
        return costs_backward(saved, g_c, ctx.needs_input_grad[0], ctx.needs_input_grad[1])


def gsp_costs(features: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    """Costs ``c_ij = ||w_i/max(1,||w_i||) - f_j/max(1,||f_j||)||_2`` (Sec. 5.2.1), shape ``(B, m, n)``.

    Squared distances are clamped at ``1e-12`` before the square root, so a prototype equal to a
    feature has cost ``1e-6`` and a finite (zero) gradient.  The gradient is the chain rule written
    out (``costs_backward``); under ``torch.jit.trace`` the same operations run under plain autograd.
    """
    check_inputs(features, prototypes)
    if torch.jit.is_tracing():
        return costs_forward(features, prototypes)[0]
    return _GSPCosts.apply(features, prototypes)
