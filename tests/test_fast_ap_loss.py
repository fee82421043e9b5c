"""Tests of dmlkit.losses.fast_ap_loss: PML's value, closed-form gradient vs autograd, gradcheck."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pytorch_metric_learning.losses import FastAPLoss as PMLFastAPLoss
from pytorch_metric_learning.miners import MultiSimilarityMiner

from dmlkit.losses.fast_ap_loss import FastAPLoss, fast_ap_masks, fast_ap_per_query


def reference_fast_ap_loss(embeddings: torch.Tensor, labels: torch.Tensor, num_bins: int) -> torch.Tensor:
    """Straightforward differentiable FastAP (Eq. 6-7, 21): dense (L, M, M) pulses, autograd backward."""
    x = torch.nn.functional.normalize(embeddings, dim=1)
    d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    m = x.shape[0]
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(m, dtype=torch.bool)
    pos = (same & ~eye).to(x.dtype)
    neg = (~same).to(x.dtype)
    delta = 4.0 / num_bins
    centres = torch.arange(num_bins + 1, dtype=x.dtype)[:, None, None] * delta
    pulse = torch.relu(1 - (d[None] - centres).abs() / delta)  # (L, M, M)
    hp = (pulse * pos).sum(2).t()  # (M, L)
    hn = (pulse * neg).sum(2).t()
    cum_p, cum = hp.cumsum(1), (hp + hn).cumsum(1)
    safe = cum > 0
    terms = torch.where(safe, hp * cum_p / torch.where(safe, cum, torch.ones_like(cum)), torch.zeros_like(cum))
    n_pos = pos.sum(1)
    keep = n_pos > 0
    fastap = terms.sum(1)[keep] / n_pos[keep]
    return (1 - fastap).mean()


def uneven_labels(m: int, gen: torch.Generator) -> torch.Tensor:
    """Labels with skewed class sizes, including (usually) some singletons."""
    probs = torch.linspace(1.0, 6.0, max(2, m // 3)) ** 2
    return torch.multinomial(probs, m, replacement=True, generator=gen)


@pytest.mark.parametrize("num_bins", [2, 5, 10, 20])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_value_matches_pml(num_bins: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    m = 30 + 7 * seed
    x = torch.randn(m, 16, generator=g)
    y = uneven_labels(m, g)
    ours = FastAPLoss(num_bins)(x, y)
    theirs = PMLFastAPLoss(num_bins)(x, y)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    x64 = x.double()
    torch.testing.assert_close(FastAPLoss(num_bins)(x64, y), PMLFastAPLoss(num_bins)(x64, y), rtol=0, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    labels=st.lists(st.integers(0, 4), min_size=2, max_size=14),
    num_bins=st.integers(2, 12),
    seed=st.integers(0, 2**16),
)
def test_value_and_grad_match_pml_hypothesis(labels: list[int], num_bins: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    y = torch.tensor(labels)
    x = torch.randn(len(labels), 5, generator=g, dtype=torch.float64)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ours, theirs = FastAPLoss(num_bins)(xa, y), PMLFastAPLoss(num_bins)(xb, y)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    if ours.requires_grad and theirs.requires_grad:
        ours.backward()
        theirs.backward()
        torch.testing.assert_close(xa.grad, xb.grad, rtol=0, atol=1e-10)


def test_queries_without_positives_are_skipped_and_without_negatives_count_as_zero() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 4, generator=g)
    # One class only: every query has positives and no negatives -> FastAP 1, loss 0 (PML's rule).
    y_one = torch.zeros(6, dtype=torch.long)
    assert FastAPLoss()(x, y_one).item() == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(FastAPLoss()(x, y_one), PMLFastAPLoss()(x, y_one))
    # All singletons: no query has positives -> zero loss, like PML.
    y_none = torch.arange(6)
    assert FastAPLoss()(x, y_none).item() == 0.0
    assert PMLFastAPLoss()(x, y_none).item() == 0.0
    # A singleton query is skipped: the mean is over the queries with positives only.
    y = torch.tensor([0, 0, 1, 1, 1, 2])
    per_query = fast_ap_per_query(torch.nn.functional.normalize(x.double()), *fast_ap_masks(y), 10)
    expected = (1 - per_query[:5]).mean()
    torch.testing.assert_close(FastAPLoss()(x.double(), y), expected)
    assert per_query[5].item() == 0.0


def test_miner_weights_match_pml() -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(40, 8, generator=g, dtype=torch.float64)
    y = uneven_labels(40, g)
    tuples = MultiSimilarityMiner(epsilon=0.1)(x, y)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ours, theirs = FastAPLoss()(xa, y, tuples), PMLFastAPLoss()(xb, y, tuples)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(xa.grad, xb.grad, rtol=0, atol=1e-10)


@pytest.mark.parametrize("num_bins", [2, 3, 10])
def test_gradient_matches_autograd_reference(num_bins: int) -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(25, 6, generator=g, dtype=torch.float64)
    y = uneven_labels(25, g)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ours = FastAPLoss(num_bins)(xa, y)
    ref = reference_fast_ap_loss(xb, y, num_bins)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    ours.backward()
    ref.backward()
    assert xb.grad.abs().max() > 1e-4  # the comparison is not vacuous
    torch.testing.assert_close(xa.grad, xb.grad, rtol=0, atol=1e-10)


def test_gradcheck_function_and_loss() -> None:
    g = torch.Generator().manual_seed(6)
    y = torch.tensor([0, 0, 1, 1, 1, 2, 0, 3])
    pos, neg = fast_ap_masks(y)
    # Unnormalised inputs: distances also fall outside [0, 4], exercising the edge bins.
    for scale, num_bins in ((0.4, 3), (1.0, 4), (2.0, 5)):
        x = (scale * torch.randn(8, 3, generator=g, dtype=torch.float64)).requires_grad_(True)
        assert torch.autograd.gradcheck(lambda z: fast_ap_per_query(z, pos, neg, num_bins), (x,))
    x = torch.randn(8, 3, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z: FastAPLoss(4)(z, y), (x,))


def test_no_cubic_tensor_is_saved_for_backward() -> None:
    m, dim, num_bins = 64, 8, 10
    g = torch.Generator().manual_seed(7)
    x = torch.randn(m, dim, generator=g, requires_grad=True)
    y = uneven_labels(m, g)
    sizes: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = FastAPLoss(num_bins)(x, y)
    loss.backward()
    assert sizes and max(sizes) <= m * m


@pytest.mark.parametrize("bad", [0, 1, -3, 2.5, True])
def test_num_bins_below_two_raises(bad: object) -> None:
    with pytest.raises(ValueError, match="num_bins"):
        FastAPLoss(bad)  # type: ignore[arg-type]
    x = torch.randn(4, 3)
    pos, neg = fast_ap_masks(torch.tensor([0, 0, 1, 1]))
    if isinstance(bad, int) and not isinstance(bad, bool):
        with pytest.raises(ValueError, match="num_bins"):
            fast_ap_per_query(x, pos, neg, bad)


def test_ref_emb_not_supported_and_module_auto_imported() -> None:
    import dmlkit.losses

    assert dmlkit.losses.fast_ap_loss.FastAPLoss is FastAPLoss
    x = torch.randn(4, 3)
    y = torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError):
        FastAPLoss()(x, y, ref_emb=x.clone(), ref_labels=y)


def test_benchmark_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import fastap

    assert fastap.main(["--sizes", "16", "24", "--dim", "8", "--repeats", "1", "--no-memory"]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and "24" in out
    res = fastap._worker("dmlkit", 16, 8, 10, 0)
    assert res["peak_extra_bytes"] >= 0 and 0.0 <= res["loss"] <= 1.0
