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

The layer is three steps, each in its own module: the costs (``gsp_costs``: their normalisation
and hand-written gradient), the transport (``gsp_transport``: Proposition 5.2.1 forward,
Proposition 5.2.2 backward, the unrolled references), and the pooling here.  ``generalized_sum_pool``
and the ``GSP`` module run all three in one autograd node (``_GSPPool``) whose backward chains the
three gradients and adds the pooling's direct share of ``dL/df`` in place.

``generalized_sum_pool_unrolled`` is the reference: the same costs, then autograd through the
iterations of Proposition 5.2.1 (``unroll="literal"``: as written, ``K^T 1_m`` and ``K rho``
recomputed in every step; ``"hoisted"``: the layer's iteration, column sums once).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from dmlkit.half_precision import in_float32
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
from dmlkit.pooling.gsp_transport import (
    check_params,
    gsp_transport,
    gsp_transport_unrolled,
    solve_transport,
    transport_grad,
)
from dmlkit.pooling.registry import register_pooling
from dmlkit.validation import check_int

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
        ctx: Any,
        features: torch.Tensor,
        prototypes: torch.Tensor,
        mu: float,
        eps: float,
        iters: int,
        normalization: str,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        costs, saved = costs_forward(features, prototypes, normalization)
        rho, pi = solve_transport(costs, mu, eps, iters)
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
        g_c = transport_grad(rho, pi, g_rho, g_pi, mu, ctx.eps)
        g_f, g_w = costs_backward(saved, g_c, ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.normalization)
        if g_f is not None and g_pooled is not None:
            weights = (1.0 / features.shape[1] - rho).div_(mu)
            g_f.addcmul_(weights.unsqueeze(2), g_pooled.unsqueeze(1))
        return g_f, g_w, None, None, None, None


def _pool_with_transport(
    features: torch.Tensor,
    prototypes: torch.Tensor,
    mu: float,
    eps: float,
    iters: int,
    normalization: str = "unit_ball",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(pooled, rho, plan)`` by ``_GSPPool`` (in float32 under autocast: ``dmlkit.half_precision``), or under
    ``torch.jit.trace`` (export) by the composed functions."""
    check_inputs(features, prototypes)
    check_normalization(normalization)
    if torch.jit.is_tracing():
        rho, plan = gsp_transport(gsp_costs(features, prototypes, normalization), mu, eps, iters)
        return _pool(features, rho, mu), rho, plan
    return in_float32(_GSPPool.apply, features, prototypes, float(mu), float(eps), int(iters), normalization)


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
    check_params(mu, eps, iters)
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
    check_params(mu, eps, iters)
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

    #: Each forward records ``last_entropy`` and ``last_features``: ``methods.gsp_diagnostics`` logs them.
    reports_selection_entropy = True

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
        check_params(mu, eps, iters)
        check_normalization(normalization)
        if init not in PROTOTYPE_INITS:
            raise ValueError(f"GSP init must be one of {', '.join(PROTOTYPE_INITS)}, got {init!r}")
        check_int("GSP num_prototypes", num_prototypes, 1)
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
        return (
            f"dim={self.dim}, num_prototypes={self.num_prototypes}, mu={self.mu}, eps={self.eps}, iters={self.iters}, "
            f"init={self.init!r}, normalization={self.normalization!r}"
        )
