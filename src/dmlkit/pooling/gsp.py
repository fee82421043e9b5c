"""Generalized Sum Pooling (GSP), Chapter 5 of the thesis (Gurbuz, METU 2022).

GSP replaces the uniform weights ``1/n`` of global average pooling by weights
chosen by an entropy-smoothed optimal-transport problem between the ``n`` local
features ``f_j`` and ``m`` learnable prototypes ``w_i``:

* costs (Sec. 5.2.1): ``c_ij = || w_i/max(1,||w_i||) - f_j/max(1,||f_j||) ||_2``;
* problem (P2): ``min_{rho, pi >= 0} <c, pi> + (1/eps) (sum pi log pi + sum rho log rho)``
  subject to ``rho_j + sum_i pi_ij = 1/n`` for every feature ``j`` and
  ``sum_ij pi_ij = mu``: a fraction ``mu`` of the uniform feature mass is moved to
  the prototypes, the rest ``rho`` is discarded;
* pooling (Eq. 5.2.1): ``g = sum_j (1/n - rho_j)/mu * f_j``.

Forward: the iteration of Proposition 5.2.1, started at ``t = 1``::

    rho <- 1/n (1 + t * K^T 1_m)^-1,   t <- mu (1_m^T K rho)^-1,   K = exp(-eps c),

with the plan ``pi = t K Diag(rho)``.  The fixed point is the solution of (P2):
stationarity of the Lagrangian gives ``rho_j = exp(-eps a_j - 1)`` and
``pi_ij = exp(-eps b) K_ij rho_j`` (``a``, ``b`` the multipliers of the two
constraints), and the two updates enforce the two constraints in turn (the
Bregman projections of Appendix B.2).  Only the column sums ``s = K^T 1_m``
enter (``1_m^T K rho = s^T rho``), so they are computed once and the iterates
are exactly those of the proposition.  The iteration runs on ``log t``:
``log t <- log t + log(mu n) - log sum_j sigmoid(log t + log s_j)`` (the ``t``
update with ``rho`` substituted), and at the end ``log rho_j = -log n -
softplus(log t + log s_j)``.  ``K`` itself is formed once (its column sums give
``log s``, and ``pi = K Diag(t rho)``); when ``eps`` times the cost spread is so
large that a whole column of ``K`` underflows, the layer computes
``log s_j = logsumexp_i(-eps c_ij)`` and the plan in the log domain instead, so
all stay finite for any ``eps * c`` (eps = 20 and far prototypes included).

(P2) does not change when a constant is added to all costs of a sample (the
plan's mass is fixed), so the smallest cost of each sample is shifted to 0 first,
which keeps float32 accurate for large costs; the iteration (started at ``t = 1``)
runs on the shifted costs, in the layer and in the unrolled reference alike.

Convergence: the iteration is a fixed-point map on the scalar ``t``; it
converges in a few tens of steps when the spread ``eps * (max c - min c)`` is
moderate -- for the layer's costs (at most 2), eps = 20, mu = 0.3 and 7x7 maps,
50 steps reach float64 precision even with the largest spread -- but the number
of steps grows with that spread and with smaller ``mu * n`` (2x2 maps: about
200; mu = 0.05 on 7x7: about 200), and raw cost matrices with huge spreads need
many more than 100.  After ``iters`` steps the returned pair is
``(rho^(k), pi^(k) = t^(k) K Diag(rho^(k)))``: the plan has total mass exactly
``mu``; the per-feature constraint holds up to the convergence error.

Backward: the closed form of Proposition 5.2.2 (proof in Appendix B.3), in a
custom ``torch.autograd.Function`` that saves only ``rho`` and ``pi`` (memory
independent of ``iters``).  The extracted formula (5.2.2) is garbled; the reading
implemented here, re-derived from the proof (``dx/dc = -eps (D - D A^T H^-1 A D)``
with the block inverse of ``H`` given there), is::

    q_j   = rho_j dL/drho_j + sum_i pi_ij dL/dpi_ij                  (a vector over features)
    eta   = sum_j rho_j dL/drho_j - n q^T rho
    k     = 1 - mu - n rho^T rho
    dL/dc_ij = -eps * pi_ij * ( dL/dpi_ij - n (q_j - (eta / k) rho_j) )

i.e. ``gamma = eps``, the ``1_n`` under ``q`` is a sum over prototypes, and the
trailing ``rho`` of (5.2.2) sits inside the ``Diag``.  At the fixed point
``1 - n rho_j = n sum_i pi_ij``; the code uses that form for ``k`` and ``eta``
(``k = sum_j rho_j (1 - n rho_j)``), which avoids cancellation when the smoothing
is weak and ``k`` is small.

``mu = 1`` (Claim 5.2.1): the constraints force ``rho = 0``, so the pooling is
exactly global average pooling; the iteration would only approach ``rho = 0``
(``t -> inf``), so this case is solved in closed form: ``rho = 0`` and
``pi_ij = K_ij / (n s_j)``, with the gradient of that column softmax (the
formula above with the ``eta/k`` term, which is ``0/0`` there, dropped).

``generalized_sum_pool_unrolled`` is the reference: autograd through the
iterations of Proposition 5.2.1 written literally (``K^T 1_m`` and ``K rho``
recomputed in every step, so each step touches the ``m x n`` costs, as a direct
implementation of the proposition does).  ``unroll="hoisted"`` unrolls the
cheaper iteration of the layer (column sums once) instead.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from dmlkit.pooling.gsp_costs import (
    CostsContext,
    check_inputs,
    check_normalization,
    costs_backward,
    costs_forward,
    gsp_costs,
    normalize_rows,
)
from dmlkit.pooling.gsp_diagnostics import gsp_pooling_weights, weight_entropy
from dmlkit.pooling.gsp_prototypes import PROTOTYPE_INITS, PrototypeMemory, kcenter_prototypes
from dmlkit.pooling.registry import register_pooling

__all__ = [
    "GSP",
    "MAX_PROTOTYPES",
    "generalized_sum_pool",
    "generalized_sum_pool_unrolled",
    "gsp_costs",
    "gsp_transport",
    "gsp_transport_unrolled",
]

MAX_PROTOTYPES = 4096
"""Largest accepted number of prototypes: the plan is (B, m, n) per batch; the thesis uses 64 or 128."""

_CYCLE_CHECK_EVERY = 2  # the layer's forward checks every this many steps whether its iterates repeat


def _min_column_sum(dtype: torch.dtype) -> float:
    """Smallest column sum of ``K = exp(-eps (c - min c))`` for which the layer forms ``K`` itself.

    The square root of the smallest normal number (1e-19 in float32: ``eps`` times a column's
    smallest cost above the sample's smallest by at most about 43; 1e-154 in float64): entries
    that underflow are then below 1e-19 of their column's sum, negligible in ``s`` and in the plan.
    Below it the layer solves in the log domain (``_solve_log``).
    """
    return torch.finfo(dtype).tiny ** 0.5


def _check_params(mu: float, eps: float, iters: int) -> None:
    if not isinstance(mu, (int, float)) or not 0.0 < float(mu) <= 1.0:
        raise ValueError(f"GSP mu (the transported mass fraction) must be in (0, 1], got {mu!r}; mu=1 is GAP")
    if not isinstance(eps, (int, float)) or not float(eps) > 0.0 or not math.isfinite(float(eps)):
        raise ValueError(f"GSP eps (inverse entropy smoothing) must be a positive finite number, got {eps!r}")
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"GSP iters (iterations of Proposition 5.2.1) must be a positive integer, got {iters!r}")


def _iterate(log_s: torch.Tensor, mu: float, iters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``iters`` steps of Proposition 5.2.1 from ``t = 1`` given ``log s = log K^T 1_m`` (B, n).

    Returns ``(log rho^(k), log t^(k))``.  The step ``t <- mu / (s^T rho)`` with
    ``rho_j = 1 / (n (1 + t s_j))`` is computed as
    ``log t <- log t + log(mu n) - log sum_j sigmoid(log t + log s_j)``
    (since ``s_j rho_j = sigmoid(log t + log s_j) / (n t)``), which is finite for
    all inputs and cheaper than a log-sum-exp; ``rho`` is formed once at the end.
    """
    n = log_s.shape[-1]
    log_mu_n = math.log(mu * n)
    log_t = torch.zeros(log_s.shape[0], dtype=log_s.dtype, device=log_s.device)  # t^(0) = 1
    log_t_prev = log_t
    for _ in range(iters):
        log_t_prev = log_t
        log_t = log_t + log_mu_n - torch.sigmoid(log_t[:, None] + log_s).sum(dim=-1).log()
    log_rho = -math.log(n) - F.softplus(log_t_prev[:, None] + log_s)  # rho^(k) comes from t^(k-1)
    return log_rho, log_t


def _iterate_nograd(log_s: torch.Tensor, mu: float, iters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``_iterate`` for the layer's forward (no autograd): the same iterates bit for bit, faster.

    The operations and their order are those of ``_iterate``, written into preallocated buffers.
    The step is a function of ``log t`` alone (``log s`` is fixed) and acts on each sample
    independently, so once the iterates repeat exactly (``t^(k) == t^(k-2)`` in every sample:
    a floating-point fixed point or 2-cycle, reached in a few tens of steps when the iteration
    converges), all later iterates are known and the loop stops: ``t^(iters)`` is ``t^(k)`` or
    ``t^(k-1)`` by the parity of ``iters - k``.  The result is identical to running all
    ``iters`` steps; an iteration that has not converged runs them all, and so does a
    forward under ``torch.export`` / ``torch.compile`` (no branching on tensor values).
    """
    b, n = log_s.shape
    log_mu_n = math.log(mu * n)
    buf = torch.empty_like(log_s)
    col = log_s.new_empty(b)
    log_t = log_s.new_zeros(b)  # t^(0) = 1
    log_t_prev = log_t
    older: torch.Tensor | None = None
    check = not torch.compiler.is_compiling()  # torch.export / compile cannot branch on tensor values
    for k in range(1, iters + 1):
        torch.add(log_t[:, None], log_s, out=buf).sigmoid_()
        torch.sum(buf, dim=-1, out=col).log_()
        older, log_t_prev, log_t = log_t_prev, log_t, torch.add(log_t, log_mu_n).sub_(col)
        if check and k >= 2 and k % _CYCLE_CHECK_EVERY == 0 and torch.equal(log_t, older):
            if (iters - k) % 2:  # t^(iters) = t^(k-1), t^(iters-1) = t^(k)
                log_t_prev, log_t = log_t, log_t_prev
            break
    log_rho = -math.log(n) - F.softplus(log_t_prev[:, None] + log_s)  # rho^(k) comes from t^(k-1)
    return log_rho, log_t


def _solve(costs: torch.Tensor, mu: float, eps: float, iters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed point of Proposition 5.2.1 (no autograd graph needed); see the module doc.

    ``K = exp(-eps (c - min c))`` is formed once: its column sums give ``s = K^T 1_m`` and the
    plan is ``pi = K Diag(t rho)``.  When a column of ``K`` underflows (``eps`` times the cost
    spread beyond about 40 in float32) the log-domain form (``_solve_log``) is used instead.
    """
    n = costs.shape[-1]
    # (P2) is invariant to adding a constant to all costs of one sample (the plan's mass is fixed to mu),
    # so the smallest cost is moved to 0: log t stays moderate and float32 keeps its precision.
    # log K = -eps (c - min c), computed as eps (min c - c) (the same numbers: a - c = -(c - a) exactly).
    log_k = torch.sub(costs.amin(dim=(1, 2), keepdim=True), costs).mul_(eps)  # (B, m, n), <= 0
    k = log_k.exp()
    s = k.sum(dim=1)  # K^T 1_m, (B, n)
    # a column (nearly) underflowed: stay in the log domain (always under export / compile: no branching on values)
    if torch.compiler.is_compiling() or not bool((s >= _min_column_sum(s.dtype)).all()):
        return _solve_log(log_k, mu, iters)
    if mu == 1.0:  # Claim 5.2.1: rho = 0, pi = column softmax / n (the limit t -> inf)
        pi = k.div_(torch.mul(s, n)[:, None, :])
        return torch.zeros_like(s), pi
    log_rho, log_t = _iterate_nograd(s.log_(), mu, iters)
    pi = k.mul_(torch.add(log_rho, log_t[:, None]).exp_()[:, None, :])  # t K Diag(rho)
    return log_rho.exp_(), pi


def _solve_log(log_k: torch.Tensor, mu: float, iters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``_solve`` with ``K`` kept in the log domain (finite for any ``eps * c``); ``log_k`` is overwritten."""
    n = log_k.shape[-1]
    log_s = torch.logsumexp(log_k, dim=1)  # log K^T 1_m, (B, n)
    if mu == 1.0:
        return torch.zeros_like(log_s), log_k.sub_(log_s[:, None, :]).sub_(math.log(n)).exp_()
    log_rho, log_t = _iterate_nograd(log_s, mu, iters)
    pi = log_k.add_(log_t[:, None, None]).add_(log_rho[:, None, :]).exp_()  # t K Diag(rho), log domain
    return log_rho.exp_(), pi


def _transport_grad(
    rho: torch.Tensor, pi: torch.Tensor, g_rho: torch.Tensor, g_pi: torch.Tensor | None, mu: float, eps: float
) -> torch.Tensor:
    """``dL/dc`` by Proposition 5.2.2 (reading documented in the module docstring).

    ``g_pi`` is ``None`` when the plan does not reach the loss (pooling alone): its terms vanish.
    """
    n = rho.shape[-1]
    pg = col_pg = None
    inner = (rho * g_rho).mul_(n)  # n q, q = rho dL/drho + sum_i pi_ij dL/dpi_ij
    if g_pi is not None:
        pg = pi * g_pi  # (B, m, n)
        col_pg = pg.sum(dim=1)  # sum_i pi_ij dL/dpi_ij, (B, n)
        inner.add_(col_pg, alpha=n)
    if mu != 1.0:
        rho_hat = pi.sum(dim=1).mul_(n)  # = 1 - n rho_j at the fixed point
        k = (rho * rho_hat).sum(dim=-1)  # = 1 - mu - n rho^T rho
        eta_terms = rho_hat * g_rho if col_pg is None else rho_hat * g_rho - n * col_pg
        eta = (rho * eta_terms).sum(dim=-1)  # = sum rho dL/drho - n q^T rho
        ratio = torch.where(k > 0, eta / k.clamp(min=torch.finfo(k.dtype).tiny), torch.zeros_like(k))
        inner = inner - n * rho * ratio[:, None]
    if pg is None:  # -eps pi (0 - inner)
        return pi * inner.mul_(eps)[:, None, :]
    out = pi * inner[:, None, :]
    return torch.sub(pg, out, out=out).mul_(-eps)


class _GSPTransport(torch.autograd.Function):
    """costs (B, m, n) -> (rho (B, n), pi (B, m, n)): forward Prop. 5.2.1, backward Prop. 5.2.2."""

    @staticmethod
    def forward(ctx: Any, costs: torch.Tensor, mu: float, eps: float, iters: int) -> tuple[torch.Tensor, torch.Tensor]:
        rho, pi = _solve(costs.detach(), mu, eps, iters)
        ctx.save_for_backward(rho, pi)
        ctx.mu, ctx.eps = mu, eps
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None instead of a tensor of zeros
        return rho, pi

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, g_rho: torch.Tensor | None, g_pi: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, None, None, None]:
        if g_rho is None and g_pi is None:
            return None, None, None, None
        rho, pi = ctx.saved_tensors
        g_rho = torch.zeros_like(rho) if g_rho is None else g_rho
        return _transport_grad(rho, pi, g_rho, g_pi, ctx.mu, ctx.eps), None, None, None


def gsp_transport(
    costs: torch.Tensor, mu: float = 0.3, eps: float = 5.0, iters: int = 100
) -> tuple[torch.Tensor, torch.Tensor]:
    """Solve (P2) for costs ``(B, m, n)``: residuals ``rho`` ``(B, n)`` and plan ``pi`` ``(B, m, n)``.

    Forward by Proposition 5.2.1, gradient w.r.t. ``costs`` by Proposition 5.2.2. Under
    ``torch.jit.trace`` (export), which cannot record a Python ``autograd.Function``, the same
    iteration runs as plain tensor operations (``gsp_transport_unrolled(..., "hoisted")``).
    """
    _check_params(mu, eps, iters)
    if costs.ndim != 3:
        raise ValueError(f"GSP costs must be (B, m, n), got shape {tuple(costs.shape)}")
    if torch.jit.is_tracing():
        return gsp_transport_unrolled(costs, mu, eps, iters, unroll="hoisted")
    return _GSPTransport.apply(costs, float(mu), float(eps), int(iters))


def gsp_transport_unrolled(
    costs: torch.Tensor, mu: float = 0.3, eps: float = 5.0, iters: int = 100, unroll: str = "literal"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: the iterations of Proposition 5.2.1 as ordinary autograd operations.

    ``unroll="literal"`` recomputes ``K^T 1_m`` and ``K rho`` (log domain) in every
    step as the proposition is written; ``"hoisted"`` runs the layer's own
    iteration (column sums once, ``_iterate``) under autograd.
    ``mu = 1`` returns the closed form of Claim 5.2.1, like ``gsp_transport``.
    """
    _check_params(mu, eps, iters)
    if unroll not in ("literal", "hoisted"):
        raise ValueError(f"unroll must be 'literal' or 'hoisted', got {unroll!r}")
    n = costs.shape[-1]
    log_n = math.log(n)
    log_k = -float(eps) * (costs - costs.detach().amin(dim=(1, 2), keepdim=True))  # the shift of ``_solve``
    if float(mu) == 1.0:
        log_s = torch.logsumexp(log_k, dim=1)
        return torch.zeros_like(log_s), torch.exp(log_k - log_s[:, None, :] - log_n)
    if unroll == "hoisted":
        log_rho, log_t = _iterate(torch.logsumexp(log_k, dim=1), float(mu), iters)
    else:
        log_mu = math.log(mu)
        log_t = torch.zeros(costs.shape[0], dtype=costs.dtype, device=costs.device)  # t^(0) = 1
        log_rho = log_t
        for _ in range(iters):
            log_rho = -log_n - F.softplus(log_t[:, None] + torch.logsumexp(log_k, dim=1))  # 1/n (1 + t K^T 1)^-1
            log_t = log_mu - torch.logsumexp(log_k + log_rho[:, None, :], dim=(1, 2))  # mu (1^T K rho)^-1
    return log_rho.exp(), torch.exp(log_t[:, None, None] + log_k + log_rho[:, None, :])


def _pool(features: torch.Tensor, rho: torch.Tensor, mu: float) -> torch.Tensor:
    """Eq. 5.2.1: ``sum_j (1/n - rho_j)/mu * f_j``."""
    n = features.shape[1]
    weights = (1.0 / n - rho) / mu  # (B, n)
    return torch.bmm(weights.unsqueeze(1), features).squeeze(1)


class _GSPPool(torch.autograd.Function):
    """(features (B, n, d), prototypes (m, d)) -> (pooled (B, d), rho (B, n), plan (B, m, n)) in one node.

    The same computation as ``_pool(f, *gsp_transport(gsp_costs(f, w)))``, with one backward:
    ``dL/drho_j = -(1/mu) f_j . dL/dg`` joins the incoming ``dL/drho``, Prop. 5.2.2 gives ``dL/dc``,
    ``costs_backward`` gives the costs' share of ``dL/df`` and ``dL/dw``, and the pooling's direct
    share ``((1/n - rho_j)/mu) dL/dg`` is added to ``dL/df_j`` in place (no separate gradient of
    the features for the pooling product and no sum of the two).
    """

    @staticmethod
    def forward(
        ctx: Any, features: torch.Tensor, prototypes: torch.Tensor, mu: float, eps: float, iters: int,
        normalization: str,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        costs, saved = costs_forward(features, prototypes, normalization)
        rho, pi = _solve(costs, mu, eps, iters)
        ctx.save_for_backward(rho, pi, *saved)
        ctx.mu, ctx.eps, ctx.normalization = mu, eps, normalization
        ctx.set_materialize_grads(False)
        return _pool(features, rho, mu), rho, pi

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, g_pooled: torch.Tensor | None, g_rho: torch.Tensor | None, g_pi: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None, None]:
        rho, pi, *rest = ctx.saved_tensors
        saved = CostsContext(*rest)
        features, mu = saved.features, ctx.mu
        if g_pooled is not None:  # pooled = sum_j (1/n - rho_j)/mu f_j
            g_rho_pool = torch.bmm(features, g_pooled.unsqueeze(2)).squeeze(2).mul_(-1.0 / mu)
            g_rho = g_rho_pool if g_rho is None else g_rho_pool.add_(g_rho)
        if g_rho is None and g_pi is None:
            return None, None, None, None, None, None
        g_rho = torch.zeros_like(rho) if g_rho is None else g_rho
        g_c = _transport_grad(rho, pi, g_rho, g_pi, mu, ctx.eps)
        g_f, g_w = costs_backward(saved, g_c, ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.normalization)
        if g_f is not None and g_pooled is not None:
            weights = (1.0 / features.shape[1] - rho).div_(mu)
            g_f.addcmul_(weights.unsqueeze(2), g_pooled.unsqueeze(1))
        return g_f, g_w, None, None, None, None


def _pool_with_transport(
    features: torch.Tensor, prototypes: torch.Tensor, mu: float, eps: float, iters: int,
    normalization: str = "unit_ball",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(pooled, rho, plan)`` by ``_GSPPool``, or under ``torch.jit.trace`` (export) by the composed functions."""
    check_inputs(features, prototypes)
    check_normalization(normalization)
    if torch.jit.is_tracing():
        rho, plan = gsp_transport(gsp_costs(features, prototypes, normalization), mu, eps, iters)
        return _pool(features, rho, mu), rho, plan
    return _GSPPool.apply(features, prototypes, float(mu), float(eps), int(iters), normalization)


def generalized_sum_pool(
    features: torch.Tensor,
    prototypes: torch.Tensor,
    mu: float = 0.3,
    eps: float = 5.0,
    iters: int = 100,
    normalization: str = "unit_ball",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized sum pooling (Eq. 5.2.1 with (P2)): ``(B, n, d), (m, d) -> (pooled (B, d), plan (B, m, n))``.

    Args:
        features: local features ``f_j``, ``(B, n, d)``.
        prototypes: prototypes ``w_i``, ``(m, d)``.
        mu: transported mass fraction in (0, 1]; 1 is exactly global average pooling (Claim 5.2.1).
        eps: inverse entropy smoothing of (P2) (5.0 for pair losses, 0.5 for proxy losses, Sec. 5.2.4).
        iters: iterations of Proposition 5.2.1 (100 in Sec. 5.2.4).
        normalization: of features and prototypes in the costs: ``"unit_ball"``, ``u / max(1, ||u||)``
            (Sec. 5.2.1), or ``"l2"``, ``u / ||u||`` (the author's code).

    The plan's rows summed and divided by ``mu`` are the pseudo-attributes of Eq. 5.2.3.
    Gradients reach ``features`` (through the weights and the costs) and ``prototypes``;
    the transport step is differentiated by Proposition 5.2.2 (no unrolled graph), the whole
    layer in one backward (``_GSPPool``).
    """
    _check_params(mu, eps, iters)
    pooled, _, plan = _pool_with_transport(features, prototypes, float(mu), float(eps), int(iters), normalization)
    return pooled, plan


def generalized_sum_pool_unrolled(
    features: torch.Tensor,
    prototypes: torch.Tensor,
    mu: float = 0.3,
    eps: float = 5.0,
    iters: int = 100,
    unroll: str = "literal",
    normalization: str = "unit_ball",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``generalized_sum_pool`` differentiated by autograd through the unrolled iterations (reference)."""
    _check_params(mu, eps, iters)
    rho, plan = gsp_transport_unrolled(gsp_costs(features, prototypes, normalization), mu, eps, iters, unroll)
    return _pool(features, rho, float(mu)), plan


def _map_to_features(x: torch.Tensor, dim: int) -> torch.Tensor:
    if x.ndim != 4:
        raise ValueError(f"pooling expects a local feature map (B, C, h, w), got shape {tuple(x.shape)}")
    if x.shape[1] != dim:
        raise ValueError(f"GSP was built for {dim} channels but the feature map has {x.shape[1]}")
    return x.flatten(2).transpose(1, 2)  # (B, h*w, C)


@register_pooling("gsp")
class GSP(nn.Module):
    """Generalized Sum Pooling layer on feature maps ``(B, dim, h, w) -> (B, dim)`` (thesis Ch. 5).

    Args:
        dim: channels of the local features (= prototype size = output size).
        num_prototypes: ``m`` learnable prototypes (64 or 128 in Sec. 5.2.4), at most ``MAX_PROTOTYPES``.
        mu: transported mass fraction in (0, 1] (0.3 in Sec. 5.2.4; 1 = GAP).
        eps: inverse entropy smoothing (5.0 for pair losses, 0.5 for proxy losses, Sec. 5.2.4).
        iters: iterations of Proposition 5.2.1 (100).
        generator: optional ``torch.Generator`` for the random prototype initialisation
            (``N(0, 1/dim)`` entries, so prototypes start near the unit sphere);
            without it torch's default generator is used, like any layer's init.
        init: ``"random"`` (the ``N(0, 1/dim)`` start above) or ``"kcenter"`` (the author's code,
            ``dmlkit.pooling.gsp_prototypes``): the layer pools with GAP while it trains, keeps the
            pooled vectors (normalised as the costs normalise, ``u / max(1, ||u||)``) of the
            training batches in a memory of ``memory_size`` rows, and when the memory is full sets
            the prototypes to its greedy k-centres and pools with GSP from then on. With batches
            of ``B`` images the GAP warm-up lasts ``warmup_steps + ceil(memory_size / B)`` steps.
        memory_size: rows of that memory (1024 in the author's code); at least ``num_prototypes``.
        warmup_steps: training batches pooled with GAP before the memory starts filling (0).
        normalization: of features and prototypes in the costs, and of the memory's rows:
            ``"unit_ball"`` (thesis Sec. 5.2.1, ``u / max(1, ||u||)``) or ``"l2"`` (the author's code).

    ``forward`` returns the pooled features; ``forward_with_plan`` also returns
    the transport plan ``(B, m, n)`` (for the zero-shot prediction loss, Eq. 5.2.3; all zeros
    while a k-centre layer still pools with GAP). Each forward records the entropy of the pooling
    weights of its batch in ``last_entropy`` and the number of local features in ``last_features``
    (``dmlkit.pooling.gsp_diagnostics``). The prototypes
    are exempt from weight decay (``no_weight_decay``): an idle prototype decayed towards 0 has
    cost about 1 to every unit feature and stops selecting.
    """

    def __init__(
        self,
        dim: int,
        num_prototypes: int = 64,
        mu: float = 0.3,
        eps: float = 5.0,
        iters: int = 100,
        generator: torch.Generator | None = None,
        init: str = "random",
        memory_size: int = 1024,
        warmup_steps: int = 0,
        normalization: str = "unit_ball",
    ) -> None:
        super().__init__()
        _check_params(mu, eps, iters)
        check_normalization(normalization)
        if init not in PROTOTYPE_INITS:
            raise ValueError(f"GSP init must be one of {', '.join(PROTOTYPE_INITS)}, got {init!r}")
        if isinstance(num_prototypes, bool) or not isinstance(num_prototypes, int) or num_prototypes < 1:
            raise ValueError(f"GSP num_prototypes must be a positive integer, got {num_prototypes!r}")
        if num_prototypes > MAX_PROTOTYPES:
            raise ValueError(
                f"GSP num_prototypes={num_prototypes} is more than {MAX_PROTOTYPES}; the thesis uses 64 or 128 "
                "(the plan has batch x prototypes x pixels entries), choose fewer"
            )
        self.dim = dim
        self.num_prototypes = num_prototypes
        self.mu = float(mu)
        self.eps = float(eps)
        self.iters = iters
        self.normalization = normalization
        self.init = init
        start = torch.randn(num_prototypes, dim, generator=generator) / math.sqrt(dim)
        self.prototypes = nn.Parameter(start)
        if init == "kcenter":
            if isinstance(memory_size, int) and not isinstance(memory_size, bool) and memory_size < num_prototypes:
                raise ValueError(
                    f"GSP memory_size={memory_size} is smaller than num_prototypes={num_prototypes}: k-centre picks the "
                    "prototypes among the memory's rows; raise memory_size"
                )
            self.memory = PrototypeMemory(memory_size, dim, warmup_steps)
            self.register_buffer("ready", torch.zeros((), dtype=torch.bool))
        self.last_entropy: torch.Tensor | None = None  # (B,) entropy of the last batch's pooling weights
        self.last_features = 0  # n, the local features of the last batch

    def output_dim(self, input_dim: int) -> int:
        return input_dim

    def no_weight_decay(self) -> list[str]:
        return ["prototypes"]

    @property
    def pools_with_gap(self) -> bool:
        """True while a ``kcenter`` layer is still in its GAP warm-up."""
        return self.init == "kcenter" and not bool(self.ready)

    def forward_with_plan(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, dim, h, w) -> (pooled (B, dim), plan (B, num_prototypes, h*w))``."""
        features = _map_to_features(x, self.dim)
        if self.pools_with_gap:
            return self._warmup(features)
        pooled, rho, plan = _pool_with_transport(
            features, self.prototypes, self.mu, self.eps, self.iters, self.normalization
        )
        self.last_entropy = weight_entropy(gsp_pooling_weights(rho.detach(), self.mu))
        self.last_features = features.shape[1]
        return pooled, plan

    def _warmup(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """GAP (and an all-zero plan) while the memory fills; the k-centre start once it is full."""
        b, n, _ = features.shape
        pooled = features.mean(dim=1)
        self.last_entropy = torch.full((b,), math.log(n), dtype=features.dtype, device=features.device)
        self.last_features = n
        if self.training:
            self.memory.add(normalize_rows(pooled.detach(), self.normalization))
            if self.memory.full:
                self._start_from_memory()
        return pooled, features.new_zeros(b, self.num_prototypes, n)

    @torch.no_grad()
    def _start_from_memory(self) -> None:
        self.prototypes.copy_(kcenter_prototypes(self.memory.rows, self.num_prototypes))
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.broadcast(self.prototypes.data, src=0)  # every process starts from rank 0's memory
        self.ready.fill_(True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_with_plan(x)[0]

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_prototypes={self.num_prototypes}, mu={self.mu}, eps={self.eps}, iters={self.iters}, "
                f"init={self.init!r}, normalization={self.normalization!r}")
