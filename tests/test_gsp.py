"""Generalized Sum Pooling (thesis Ch. 5): forward against an independent solver of (P2),
closed-form gradient (Prop. 5.2.2) against finite differences and unrolled autograd,
Claim 5.2.1, the constraints of (P2), numerical safety, the layer and the registry."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from dmlkit.models.config import ModelConfig, build_embedder
from dmlkit.pooling import GSP, create_pooling, gap, generalized_sum_pool, generalized_sum_pool_unrolled
from dmlkit.pooling.gsp import MAX_PROTOTYPES, gsp_costs, gsp_transport, gsp_transport_unrolled

D64 = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _features(b: int, n: int, d: int, seed: int = 0, dtype: torch.dtype = D64) -> torch.Tensor:
    return torch.randn(b, n, d, generator=_gen(seed), dtype=dtype)


def _p2_scipy(c: np.ndarray, mu: float, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Solve (P2) for one cost matrix (m, n) with a generic constrained optimiser (SLSQP)."""
    m, n = c.shape

    def objective(x: np.ndarray) -> float:
        rho, pi = x[:n], x[n:]
        return float(c.ravel() @ pi + (pi @ np.log(pi) + rho @ np.log(rho)) / eps)

    cons = [
        {"type": "eq", "fun": lambda x: x[:n] + x[n:].reshape(m, n).sum(0) - 1.0 / n},
        {"type": "eq", "fun": lambda x: np.array([x[n:].sum() - mu])},
    ]
    x0 = np.concatenate([np.full(n, (1 - mu) / n), np.full(m * n, mu / (m * n))])
    res = minimize(
        objective,
        x0,
        method="SLSQP",
        bounds=[(1e-12, None)] * (n + m * n),
        constraints=cons,
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    assert res.success, res.message
    return res.x[:n], res.x[n:].reshape(m, n)


@pytest.mark.parametrize("mu,eps", [(0.3, 5.0), (0.5, 1.0), (0.2, 10.0)])
def test_forward_solves_p2(mu, eps):
    """Prop. 5.2.1's fixed point equals the minimiser of (P2) found by a generic solver."""
    c = torch.rand(1, 3, 4, generator=_gen(1), dtype=D64) * 2
    rho, pi = gsp_transport(c, mu, eps, iters=500)
    rho_ref, pi_ref = _p2_scipy(c[0].numpy(), mu, eps)
    assert np.allclose(rho[0].numpy(), rho_ref, atol=2e-6)
    assert np.allclose(pi[0].numpy(), pi_ref, atol=2e-6)


@pytest.mark.parametrize("mu,eps", [(0.3, 5.0), (0.7, 0.5), (0.3, 20.0), (1.0, 5.0)])
def test_plan_satisfies_p2_constraints(mu, eps):
    f = _features(3, 9, 6)
    w = torch.randn(5, 6, generator=_gen(2), dtype=D64)
    rho, pi = gsp_transport(gsp_costs(f, w), mu, eps, iters=100)
    n = f.shape[1]
    assert (rho >= 0).all() and (pi >= 0).all()
    assert torch.allclose(rho + pi.sum(dim=1), torch.full_like(rho, 1.0 / n), atol=1e-10)
    assert torch.allclose(pi.sum(dim=(1, 2)), torch.full((3,), mu, dtype=D64), atol=1e-12)
    pooled, plan = generalized_sum_pool(f, w, mu, eps, iters=100)
    assert torch.equal(plan, pi)
    weights = (1.0 / n - rho) / mu  # Eq. 5.2.1 weights: non-negative, sum to one
    assert (weights >= -1e-12).all() and torch.allclose(weights.sum(-1), torch.ones(3, dtype=D64))
    assert torch.allclose(pooled, torch.einsum("bn,bnd->bd", weights, f))


def test_mu_one_is_global_average_pooling():
    """Claim 5.2.1: mu = 1 gives GAP (rho = 0 exactly), for any prototypes and eps."""
    x = torch.randn(2, 6, 3, 4, generator=_gen(3), dtype=D64)
    layer = GSP(6, num_prototypes=7, mu=1.0, eps=20.0, generator=_gen(4)).double()
    pooled, plan = layer.forward_with_plan(x)
    assert torch.allclose(pooled, gap(x), rtol=1e-14, atol=1e-15)
    assert torch.allclose(plan.sum(dim=1), torch.full((2, 12), 1.0 / 12, dtype=D64))
    # GSP with mu < 1 is not GAP (the test above can fail)
    layer.mu = 0.3
    assert not torch.allclose(layer(x), gap(x), atol=1e-3)


@pytest.mark.parametrize("mu,eps,iters", [(0.3, 5.0, 100), (0.5, 0.5, 100), (0.3, 20.0, 400), (1.0, 2.0, 1)])
def test_closed_form_gradient_gradcheck(mu, eps, iters):
    """Prop. 5.2.2 against finite differences of the converged forward (float64)."""
    c = (torch.rand(2, 3, 4, generator=_gen(5), dtype=D64) * 2).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: gsp_transport(t, mu, eps, iters=iters), (c,), atol=1e-7)


@pytest.mark.parametrize("mu,eps", [(0.3, 5.0), (0.6, 1.0), (0.3, 20.0)])
def test_closed_form_gradient_matches_unrolled_autograd(mu, eps):
    """Whole layer: gradients w.r.t. features and prototypes agree with autograd through the iterations."""
    f = _features(2, 6, 5, seed=6).mul(0.6).requires_grad_()
    w = (torch.randn(4, 5, generator=_gen(7), dtype=D64) * 0.6).requires_grad_()
    g_out = torch.randn(2, 5, generator=_gen(8), dtype=D64)
    g_plan = torch.randn(2, 4, 6, generator=_gen(9), dtype=D64)
    grads = []
    for fn in (generalized_sum_pool, generalized_sum_pool_unrolled):
        pooled, plan = fn(f, w, mu, eps, 200)
        grads.append(torch.autograd.grad((pooled * g_out).sum() + (plan * g_plan).sum(), (f, w)))
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-9, rtol=1e-7)


@pytest.mark.parametrize("needs", ["both", "features", "prototypes"])
@pytest.mark.parametrize("mu", [0.4, 1.0])
def test_fused_layer_gradient_of_every_output_against_unrolled_autograd(needs, mu):
    """The layer's one-node backward (pooled, rho and plan all reaching the loss; a transposed feature
    view as the module passes it) against autograd through the hoisted iteration, float64."""
    from dmlkit.pooling.gsp import _pool, _pool_with_transport

    g = _gen(41)
    f0 = torch.randn(2, 5, 3, 3, generator=g, dtype=D64).mul(0.5).flatten(2).transpose(1, 2)  # (2, 9, 5) view
    w0 = torch.randn(4, 5, generator=g, dtype=D64) * 0.6
    g_pooled, g_rho, g_plan = (
        torch.randn(2, 5, generator=g, dtype=D64),
        torch.randn(2, 9, generator=g, dtype=D64),
        torch.randn(2, 4, 9, generator=g, dtype=D64),
    )
    grads = []
    for fused in (True, False):
        f = f0.detach().clone().requires_grad_(needs in ("both", "features"))
        w = w0.clone().requires_grad_(needs in ("both", "prototypes"))
        if fused:
            pooled, rho, plan = _pool_with_transport(f, w, mu, 5.0, 300)
        else:
            rho, plan = gsp_transport_unrolled(gsp_costs(f, w), mu, 5.0, 300, unroll="hoisted")
            pooled = _pool(f, rho, mu)
        loss = (pooled * g_pooled).sum() + (rho * g_rho).sum() + (plan * g_plan).sum()
        inputs = [t for t in (f, w) if t.requires_grad]
        grads.append(torch.autograd.grad(loss, inputs))
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-9, rtol=1e-7)


def test_layer_gradcheck():
    f = _features(1, 5, 3, seed=18).mul(0.6).requires_grad_()
    w = (torch.randn(3, 3, generator=_gen(19), dtype=D64) * 0.6).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: generalized_sum_pool(a, b, 0.4, 5.0, 200), (f, w))


def _costs_by_autograd(f: torch.Tensor, w: torch.Tensor, normalization: str = "unit_ball") -> torch.Tensor:
    """Sec. 5.2.1 written literally under autograd: ``||w_i/max(1,||w_i||) - f_j/max(1,||f_j||)||``
    (``l2``: ``torch.nn.functional.normalize``), with the layer's clamp of the squared distance at 1e-12."""
    if normalization == "l2":
        fh, wh = torch.nn.functional.normalize(f, dim=-1), torch.nn.functional.normalize(w, dim=-1)
    else:
        fh = f / f.norm(dim=-1, keepdim=True).clamp(min=1.0)
        wh = w / w.norm(dim=-1, keepdim=True).clamp(min=1.0)
    return ((wh[None, :, None, :] - fh[:, None, :, :]) ** 2).sum(-1).clamp(min=1e-12).sqrt()


@pytest.mark.parametrize("normalization", ["unit_ball", "l2"])
@pytest.mark.parametrize("case", ["inside", "outside", "mixed", "clamped", "transposed_map"])
def test_costs_and_their_gradient_against_literal_autograd(case, normalization):
    """gsp_costs (hand-written backward) against autograd through the literal formula, float64,
    with features and prototypes inside, outside and on both sides of the unit ball, a prototype
    equal to a feature (clamped distance: zero gradient there), and a non-contiguous feature view
    (the layer's ``x.flatten(2).transpose(1, 2)``); plus gradcheck."""
    g = _gen(31)
    scale = {"inside": 0.1, "outside": 3.0}.get(case, 1.0)
    if case == "transposed_map":
        f = torch.randn(3, 5, 2, 4, generator=g, dtype=D64).flatten(2).transpose(1, 2)  # (3, 8, 5) view
    else:
        f = torch.randn(3, 8, 5, generator=g, dtype=D64) * scale
        if case == "mixed":
            f = f * torch.linspace(0.1, 2.0, 8, dtype=D64)[None, :, None]
    w = torch.randn(6, 5, generator=g, dtype=D64) * scale
    if case == "mixed":
        w = w * torch.linspace(0.2, 2.5, 6, dtype=D64)[:, None]
    if case == "clamped":
        w[2] = f[1, 3] / f[1, 3].norm().clamp(min=1.0) * 0.5  # inside the ball: w~ = w, equal to f~_3 of sample 1 x 0.5
        f[1, 3] = w[2]
    f, w = f.detach().requires_grad_(), w.detach().requires_grad_()
    g_c = torch.randn(3, 6, 8, generator=g, dtype=D64)
    c = gsp_costs(f, w, normalization)
    grads = torch.autograd.grad((c * g_c).sum(), (f, w))
    ref = _costs_by_autograd(f, w, normalization)
    grads_ref = torch.autograd.grad((ref * g_c).sum(), (f, w))
    assert torch.allclose(c, ref, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads, grads_ref):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12)
    if case == "clamped":
        assert float(c.detach()[1, 2, 3]) == pytest.approx(1e-6)
    if case != "clamped":  # finite differences step across the clamp's kink there
        assert torch.autograd.gradcheck(lambda a, b: gsp_costs(a, b, normalization), (f, w))


def test_clamped_cost_passes_no_gradient_in_float32():
    """A prototype on a feature (squared distance clamped at 1e-12): the clamp passes no gradient, so
    that entry's huge ``dL/dc / c`` (about 1e6 dL/dc) must not reach the features or the prototypes; in
    float32 its rounding would otherwise show at the 0.1 level."""
    f = torch.randn(2, 6, 4, generator=_gen(51)) * 0.3
    w = torch.randn(5, 4, generator=_gen(52)) * 0.3
    w[1] = f[0, 2]
    f, w = f.requires_grad_(), w.requires_grad_()
    g_c = torch.randn(2, 5, 6, generator=_gen(53))
    grads = torch.autograd.grad((gsp_costs(f, w) * g_c).sum(), (f, w))
    f64, w64 = f.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = torch.autograd.grad((_costs_by_autograd(f64, w64) * g_c.double()).sum(), (f64, w64))
    for a, b in zip(grads, ref):
        assert torch.allclose(a.double(), b, atol=1e-4)


def test_l2_costs_make_the_plan_blind_to_feature_norms():
    """The author's l2 normalisation: scaling each local feature by its own positive factor leaves the
    costs, rho and the plan unchanged; the thesis' u / max(1, ||u||) keeps norms below 1, so there the
    plan changes (the two readings differ)."""
    f = torch.randn(2, 7, 4, generator=_gen(61), dtype=D64) * 0.4
    w = torch.randn(3, 4, generator=_gen(62), dtype=D64)
    factors = torch.rand(2, 7, 1, generator=_gen(63), dtype=D64) * 3 + 0.2
    _, plan = generalized_sum_pool(f, w, 0.3, 5.0, 200, normalization="l2")
    _, plan_scaled = generalized_sum_pool(f * factors, w, 0.3, 5.0, 200, normalization="l2")
    assert torch.allclose(plan, plan_scaled, atol=1e-12)
    _, plan_ub = generalized_sum_pool(f, w, 0.3, 5.0, 200)
    _, plan_ub_scaled = generalized_sum_pool(f * factors, w, 0.3, 5.0, 200)
    assert (plan_ub - plan_ub_scaled).abs().max() > 1e-3


def test_l2_layer_gradient_matches_unrolled_autograd_and_memory_rows_are_unit():
    f = _features(2, 6, 5, seed=64).mul(0.6).requires_grad_()
    w = (torch.randn(4, 5, generator=_gen(65), dtype=D64) * 0.6).requires_grad_()
    g_out = torch.randn(2, 5, generator=_gen(66), dtype=D64)
    grads = [
        torch.autograd.grad((fn(f, w, 0.4, 5.0, 200, normalization="l2")[0] * g_out).sum(), (f, w))
        for fn in (generalized_sum_pool, generalized_sum_pool_unrolled)
    ]
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-9, rtol=1e-7)
    layer = GSP(5, num_prototypes=3, init="kcenter", memory_size=8, normalization="l2", generator=_gen(67))
    layer(torch.rand(4, 5, 3, 3, generator=_gen(68)) * 0.1)  # GAP warm-up: pooled norms far below 1
    rows = layer.memory.rows[:4]
    assert torch.allclose(rows.norm(dim=1), torch.ones(4), atol=1e-6)


def test_unknown_normalization_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="unit_ball, l2"):
        GSP(4, normalization="l1")
    with pytest.raises(ValueError, match="unit_ball, l2"):
        gsp_costs(torch.rand(1, 2, 4), torch.rand(3, 4), "sphere")


def test_unrolled_variants_agree():
    c = torch.rand(2, 4, 5, generator=_gen(10), dtype=D64) * 2
    for iters in (1, 3, 50):
        lit = gsp_transport_unrolled(c, 0.3, 5.0, iters, unroll="literal")
        hoi = gsp_transport_unrolled(c, 0.3, 5.0, iters, unroll="hoisted")
        ours = gsp_transport(c, 0.3, 5.0, iters)
        for a, b, o in zip(lit, hoi, ours):
            assert torch.allclose(a, b) and torch.allclose(a, o)


def _graph_size(t: torch.Tensor) -> int:
    seen, stack = set(), [t.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return len(seen)


def test_closed_form_graph_does_not_grow_with_iters():
    f = _features(1, 4, 3, seed=11).requires_grad_()
    w = torch.randn(2, 3, generator=_gen(12), dtype=D64, requires_grad=True)
    sizes = [_graph_size(generalized_sum_pool(f, w, iters=k)[0]) for k in (1, 10, 100)]
    assert sizes[0] == sizes[1] == sizes[2]
    unrolled = [_graph_size(generalized_sum_pool_unrolled(f, w, iters=k)[0]) for k in (1, 10)]
    assert unrolled[1] > unrolled[0]


@pytest.mark.parametrize("kind", ["zeros", "identical"])
def test_no_nan_for_degenerate_maps(kind):
    x = torch.zeros(2, 8, 3, 3) if kind == "zeros" else torch.ones(2, 8, 1, 1).expand(2, 8, 3, 3).clone()
    x.requires_grad_()
    layer = GSP(8, num_prototypes=5, generator=_gen(13))
    with torch.no_grad():
        layer.prototypes[0] = 1.0 / 8**0.5 if kind == "identical" else 0.0  # a prototype equal to the features
    pooled, plan = layer.forward_with_plan(x)
    (pooled.sum() + plan.square().sum()).backward()
    for t in (pooled, plan, x.grad, layer.prototypes.grad):
        assert torch.isfinite(t).all()
    # identical features: every feature gets the same weight, so the pooled vector is that feature
    if kind == "identical":
        assert torch.allclose(pooled, torch.ones(2, 8), atol=1e-5)
    else:
        assert torch.equal(pooled, torch.zeros(2, 8))


@pytest.mark.parametrize("mu", [0.3, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, D64])
def test_columns_that_underflow_are_solved_in_the_log_domain(mu, dtype, monkeypatch):
    """eps times the cost spread far beyond exp's range (some columns of K = exp(-eps c) are all 0):
    the layer solves in the log domain, and its result equals the hoisted iteration written with
    log-sum-exp (an independent autograd reference), gradient included."""
    gsp_module = importlib.import_module("dmlkit.pooling.gsp_transport")  # the package's gsp_transport is the function

    calls = []
    log_solver = gsp_module._solve_log
    monkeypatch.setattr(gsp_module, "_solve_log", lambda *a: calls.append(1) or log_solver(*a))
    spread = 60.0 if dtype == torch.float32 else 900.0  # column offsets x eps 20 far past exp's range
    # columns 0-3 near the smallest cost hold the plan's mass (mu n <= 4), columns 4-9 lie far beyond exp's range
    offsets = torch.cat([torch.zeros(4, dtype=dtype), torch.linspace(spread / 6, spread, 6, dtype=dtype)])
    c = (offsets + torch.rand(3, 8, 10, generator=_gen(21), dtype=dtype)).requires_grad_()
    g_rho, g_pi = (
        torch.randn(3, 10, generator=_gen(22), dtype=dtype),
        torch.randn(3, 8, 10, generator=_gen(23), dtype=dtype),
    )
    rho, pi = gsp_transport(c, mu, 20.0, iters=1000)  # 4 columns for mass 0.3 x 10: slow to converge
    assert calls, "the log-domain solver was not used although columns of K underflow"
    ((rho * g_rho).sum() + (pi * g_pi).sum()).backward()
    c_ref = c.detach().clone().requires_grad_()
    rho_ref, pi_ref = gsp_transport_unrolled(c_ref, mu, 20.0, iters=1000, unroll="hoisted")
    ((rho_ref * g_rho).sum() + (pi_ref * g_pi).sum()).backward()
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    assert torch.allclose(rho, rho_ref, atol=tol) and torch.allclose(pi, pi_ref, atol=tol)
    assert torch.allclose(c.grad, c_ref.grad, atol=10 * tol)
    assert torch.isfinite(c.grad).all()


@pytest.mark.parametrize("mu", [0.3, 1.0])
def test_plan_from_k_equals_the_log_domain_plan(mu):
    """The layer's usual path (K formed once, pi = K Diag(t rho)) against the log-domain path on costs
    where both apply: the same fixed point to float64 rounding, and the log path is not taken."""
    gsp_module = importlib.import_module("dmlkit.pooling.gsp_transport")  # the package's gsp_transport is the function

    c = torch.rand(4, 16, 25, generator=_gen(24), dtype=D64) * 2
    rho, pi = gsp_module.solve_transport(c, mu, 5.0, 100)
    log_k = (c.amin(dim=(1, 2), keepdim=True) - c) * 5.0
    rho_log, pi_log = gsp_module._solve_log(log_k, mu, 100)
    assert torch.allclose(rho, rho_log, rtol=1e-12, atol=1e-15) and torch.allclose(pi, pi_log, rtol=1e-12, atol=1e-15)
    assert torch.allclose(pi.sum(dim=(1, 2)), torch.full((4,), mu, dtype=D64), atol=1e-12)


def test_large_eps_and_large_costs_are_finite():
    """eps = 20 with costs up to 2 (all the normalised costs can reach), and raw costs near 1000
    (exp(-eps c) underflows outside the log domain)."""
    f = _features(2, 49, 16, seed=14, dtype=torch.float32).requires_grad_()
    w = (-f.detach()[0, :8] * 10).requires_grad_()  # prototypes opposite to features: costs near 2
    pooled, plan = generalized_sum_pool(f, w, mu=0.3, eps=20.0, iters=100)
    (pooled.sum() + plan.sum(1).square().sum()).backward()
    assert torch.isfinite(pooled).all() and torch.isfinite(f.grad).all() and torch.isfinite(w.grad).all()
    assert torch.allclose(plan.sum(dim=(1, 2)), torch.full((2,), 0.3), atol=1e-5)
    c = (1000 + torch.rand(2, 8, 10, generator=_gen(15))).requires_grad_()
    rho, pi = gsp_transport(c, 0.3, 20.0, iters=100)
    (rho.sum() + (pi * torch.arange(10.0)).sum()).backward()
    assert torch.isfinite(rho).all() and torch.isfinite(pi).all() and torch.isfinite(c.grad).all()
    assert torch.allclose(rho + pi.sum(1), torch.full_like(rho, 0.1), atol=1e-5)
    # (P2) is invariant to a constant added to the costs: same solution as for costs near 0, in float32
    rho0, pi0 = gsp_transport(c.detach() - 1000, 0.3, 20.0, iters=100)
    assert torch.allclose(rho, rho0, atol=1e-6) and torch.allclose(pi, pi0, atol=1e-6)


def test_selects_features_near_prototypes():
    """With one prototype equal to half of the features, GSP pools (almost only) those features."""
    red, green = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0])
    f = torch.stack([red] * 5 + [green] * 5)[None]  # (1, 10, 3)
    pooled, plan = generalized_sum_pool(f, red[None], mu=0.5, eps=20.0)
    assert pooled[0, 0] > 0.99 and pooled[0, 1] < 0.01
    assert torch.allclose(gap(f.transpose(1, 2)[..., None]), torch.tensor([[0.5, 0.5, 0.0]]))


def test_module_registry_and_plan():
    layer = create_pooling("gsp", dim=6, num_prototypes=4, mu=0.4, eps=2.0, iters=30)
    assert isinstance(layer, GSP) and layer.output_dim(6) == 6
    assert tuple(layer.prototypes.shape) == (4, 6)
    x = torch.randn(3, 6, 2, 5, generator=_gen(16))
    pooled, plan = layer.forward_with_plan(x)
    assert pooled.shape == (3, 6) and plan.shape == (3, 4, 10)
    assert torch.equal(layer(x), pooled)
    feats = x.flatten(2).transpose(1, 2)
    ref_pooled, ref_plan = generalized_sum_pool(feats, layer.prototypes, 0.4, 2.0, 30)
    assert torch.equal(pooled, ref_pooled) and torch.equal(plan, ref_plan)
    same = GSP(6, 4, generator=_gen(3)).prototypes
    assert torch.equal(same, GSP(6, 4, generator=_gen(3)).prototypes)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"mu": 0.0}, "mu"),
        ({"mu": 1.5}, "mu"),
        ({"eps": 0.0}, "eps"),
        ({"eps": -1.0}, "eps"),
        ({"num_prototypes": 0}, "num_prototypes"),
        ({"num_prototypes": MAX_PROTOTYPES + 1}, "num_prototypes"),
        ({"iters": 0}, "iters"),
    ],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        create_pooling("gsp", dim=4, **kwargs)


def test_bad_inputs():
    layer = GSP(4, num_prototypes=3)
    with pytest.raises(ValueError, match="local feature map"):
        layer(torch.randn(2, 4, 9))
    with pytest.raises(ValueError, match="channels"):
        layer(torch.randn(2, 5, 3, 3))
    with pytest.raises(ValueError, match=r"\(B, n, d\)"):
        generalized_sum_pool(torch.randn(4, 9), torch.randn(3, 4))
    with pytest.raises(ValueError, match="prototypes"):
        generalized_sum_pool(torch.randn(2, 9, 4), torch.randn(3, 5))
    with pytest.raises(ValueError, match="mu"):
        generalized_sum_pool(torch.randn(2, 9, 4), torch.randn(3, 4), mu=-0.1)


def test_embedder_with_gsp_trains_prototypes():
    cfg = ModelConfig(
        backbone="resnet20", pooling="gsp", pooling_params={"num_prototypes": 8, "iters": 20}, embedding_dim=16
    )
    model = build_embedder(cfg, in_channels=3)
    out = model(torch.randn(4, 3, 16, 16, generator=_gen(17)))
    assert out.shape == (4, 16) and torch.isfinite(out).all()
    out.sum().backward()
    assert model.pooling.prototypes.grad is not None and model.pooling.prototypes.grad.abs().sum() > 0


def test_benchmark_smoke(capsys):
    from benchmarks.gsp import main

    assert (
        main(
            [
                "--iters",
                "3",
                "--batch",
                "2",
                "--n",
                "4",
                "--m",
                "3",
                "--d",
                "5",
                "--repeats",
                "1",
                "--no-memory",
                "--no-model",
                "--threads",
                "0",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "closed ms" in out and "unrolled ms" in out


def test_benchmark_reports_the_true_gradient_difference():
    """At 100 iterations the closed form agrees with autograd through the literal iteration (float32); at 2
    iterations the unrolled gradient is that of an unconverged solver, and the benchmark must show the gap."""
    from benchmarks.gsp import run_layer

    converged, early = run_layer((100, 2), b=2, n=9, m=4, d=6, eps=5.0, repeats=1, memory=False)
    assert converged["max_abs_grad_diff"] < 1e-4 * converged["max_abs_grad"]
    assert early["max_abs_grad_diff"] > 1e-3 * early["max_abs_grad"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("iters", [1, 2, 3, 17, 18, 25, 100, 101])
def test_fast_forward_iteration_equals_the_reference_iteration_bit_for_bit(dtype, iters):
    """The layer's loop (in place, stops at an exact cycle of the iterates) returns what every step of the
    reference loop returns, for either parity of the remaining steps."""
    from dmlkit.pooling.gsp_transport import _iterate, _iterate_nograd

    g = torch.Generator().manual_seed(iters)
    costs = torch.rand(3, 8, 12, generator=g, dtype=dtype) * 2
    for mu, eps in ((0.3, 5.0), (0.05, 0.5), (0.7, 20.0)):
        log_s = torch.logsumexp(-eps * (costs - costs.amin(dim=(1, 2), keepdim=True)), dim=1)
        reference, fast = _iterate(log_s, mu, iters), _iterate_nograd(log_s, mu, iters)
        assert torch.equal(reference[0], fast[0]) and torch.equal(reference[1], fast[1]), (mu, eps)
