"""The transport step of GSP (thesis Sec. 5.2.2-5.2.3): problem (P2), its solution by Proposition 5.2.1
and its gradient by Proposition 5.2.2.

Given costs ``c`` ``(B, m, n)`` (``dmlkit.pooling.gsp_costs``), (P2) is
``min_{rho, pi >= 0} <c, pi> + (1/eps) (sum pi log pi + sum rho log rho)`` subject to
``rho_j + sum_i pi_ij = 1/n`` for every feature ``j`` and ``sum_ij pi_ij = mu``: a fraction ``mu`` of
the uniform feature mass is moved to the prototypes, the rest ``rho`` is discarded.  The GSP layer
(``dmlkit.pooling.gsp``) pools with ``(1/n - rho_j)/mu``.

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

``gsp_transport_unrolled`` is the reference: autograd through the
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
from torch.autograd.function import once_differentiable
from dmlkit.validation import check_int, check_real

__all__ = ["gsp_transport", "gsp_transport_unrolled"]  # the layer uses the rest (solve_transport, transport_grad, ...)

_CYCLE_CHECK_EVERY = 2  # the layer's forward checks every this many steps whether its iterates repeat


def _min_column_sum(dtype: torch.dtype) -> float:
    """Smallest column sum of ``K = exp(-eps (c - min c))`` for which the layer forms ``K`` itself.

    The square root of the smallest normal number (1e-19 in float32: ``eps`` times a column's
    smallest cost above the sample's smallest by at most about 43; 1e-154 in float64): entries
    that underflow are then below 1e-19 of their column's sum, negligible in ``s`` and in the plan.
    Below it the layer solves in the log domain (``_solve_log``).
    """
    return torch.finfo(dtype).tiny ** 0.5


def check_params(mu: float, eps: float, iters: int) -> None:
    check_real("GSP mu", mu, 0, 1, low_open=True, hint="the transported mass fraction; mu=1 is GAP")
    check_real("GSP eps", eps, 0, low_open=True, hint="inverse entropy smoothing")
    check_int("GSP iters", iters, 1, hint="iterations of Proposition 5.2.1")


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


def solve_transport(costs: torch.Tensor, mu: float, eps: float, iters: int) -> tuple[torch.Tensor, torch.Tensor]:
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
    if torch.compiler.is_compiling():  # export / compile cannot branch on values: always the log domain
        return _solve_log(log_k, mu, iters)
    k = log_k.exp()
    s = k.sum(dim=1)  # K^T 1_m, (B, n)
    if not bool((s >= _min_column_sum(s.dtype)).all()):  # a column (nearly) underflowed: stay in the log domain
        return _solve_log(log_k, mu, iters)
    if mu == 1.0:  # Claim 5.2.1: rho = 0, pi = column softmax / n (the limit t -> inf)
        pi = k.div_(torch.mul(s, n)[:, None, :])
        return torch.zeros_like(s), pi
    log_rho, log_t = _iterate_nograd(s.log_(), mu, iters)
    pi = k.mul_(torch.add(log_rho, log_t[:, None]).exp_()[:, None, :])  # t K Diag(rho)
    return log_rho.exp_(), pi


def _solve_log(log_k: torch.Tensor, mu: float, iters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``solve_transport`` with ``K`` kept in the log domain (finite for any ``eps * c``); ``log_k`` is overwritten."""
    n = log_k.shape[-1]
    log_s = torch.logsumexp(log_k, dim=1)  # log K^T 1_m, (B, n)
    if mu == 1.0:
        return torch.zeros_like(log_s), log_k.sub_(log_s[:, None, :]).sub_(math.log(n)).exp_()
    log_rho, log_t = _iterate_nograd(log_s, mu, iters)
    pi = log_k.add_(log_t[:, None, None]).add_(log_rho[:, None, :]).exp_()  # t K Diag(rho), log domain
    return log_rho.exp_(), pi


def transport_grad(
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
        rho, pi = solve_transport(costs.detach(), mu, eps, iters)
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
        return transport_grad(rho, pi, g_rho, g_pi, ctx.mu, ctx.eps), None, None, None


def gsp_transport(
    costs: torch.Tensor, mu: float = 0.3, eps: float = 5.0, iters: int = 100
) -> tuple[torch.Tensor, torch.Tensor]:
    """Solve (P2) for costs ``(B, m, n)``: residuals ``rho`` ``(B, n)`` and plan ``pi`` ``(B, m, n)``.

    Forward by Proposition 5.2.1, gradient w.r.t. ``costs`` by Proposition 5.2.2. Under
    ``torch.jit.trace`` (export), which cannot record a Python ``autograd.Function``, the same
    iteration runs as plain tensor operations (``gsp_transport_unrolled(..., "hoisted")``).
    """
    check_params(mu, eps, iters)
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
    check_params(mu, eps, iters)
    if unroll not in ("literal", "hoisted"):
        raise ValueError(f"unroll must be 'literal' or 'hoisted', got {unroll!r}")
    n = costs.shape[-1]
    log_n = math.log(n)
    log_k = -float(eps) * (costs - costs.detach().amin(dim=(1, 2), keepdim=True))  # the shift of ``solve_transport``
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
