"""Exact blocked kNN (dmlkit.evaluation.knn) against a full cdist + sort."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dmlkit.evaluation import KNNResult
from dmlkit.evaluation import knn_certificate
from dmlkit.evaluation import knn_search as knn

METHODS = ("auto", "filter", "dense")


def brute_knn(query, k, reference=None, exclude_self=False):
    """Full float64 distance matrix, sorted: the obviously-correct reference."""
    q = torch.as_tensor(query, dtype=torch.float64)
    r = q if reference is None else torch.as_tensor(reference, dtype=torch.float64)
    d = torch.cdist(q, r, compute_mode="donot_use_mm_for_euclid_dist")
    if exclude_self:
        i = torch.arange(q.shape[0])
        d[i, i] = float("inf")
    dist, idx = torch.sort(d, dim=1, stable=True)
    return dist[:, :k], idx[:, :k], d


def check_exact(res: KNNResult, query, k, reference=None, exclude_self=False, atol=1e-5):
    """Tie-robust exactness: the returned neighbours are distinct, allowed, sorted, and
    their true distances are the k smallest ones."""
    ref_dist, ref_idx, full = brute_knn(query, k, reference, exclude_self)
    assert res.distances.shape == res.indices.shape == (full.shape[0], k)
    assert res.distances.dtype == torch.float32 and res.indices.dtype == torch.int64
    idx = res.indices
    assert int(idx.min()) >= 0 and int(idx.max()) < full.shape[1]
    assert all(len(set(row.tolist())) == k for row in idx)
    if exclude_self:
        assert not (idx == torch.arange(full.shape[0])[:, None]).any()
    true = full.gather(1, idx)
    torch.testing.assert_close(true, ref_dist, atol=atol, rtol=0)
    torch.testing.assert_close(res.distances.double(), ref_dist, atol=atol, rtol=0)
    assert (res.distances[:, 1:] >= res.distances[:, :-1]).all()
    # Where the reference order has clear gaps, indices must match exactly.
    gaps = torch.diff(ref_dist, dim=1, prepend=torch.full_like(ref_dist[:, :1], -1.0))
    nxt = torch.diff(ref_dist, dim=1, append=torch.full_like(ref_dist[:, :1], 1e9))
    clear = (gaps > 1e-4) & (nxt > 1e-4)
    assert (idx[clear] == ref_idx[clear]).all()


def randn(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "n,d,k,block",
    [
        (7, 3, 3, 2**20),  # fewer rows than a group
        (100, 5, 4, 2**20),  # one ragged block
        (531, 8, 9, 96 * 96 * 4),  # several blocks, ragged last block
        (400, 16, 40, 64 * 64 * 4),  # k close to the block size
    ],
)
@pytest.mark.parametrize("exclude", [True, False])
def test_self_search_matches_brute_force(method, n, d, k, block, exclude):
    x = randn(n, d, seed=n + k)
    res = knn(x, k, exclude_self=exclude, max_block_bytes=block, method=method)
    check_exact(res, x, k, exclude_self=exclude)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("nq,nr,k,block", [(50, 70, 5, 2**20), (333, 517, 12, 64 * 64 * 4), (20, 3, 3, 2**20)])
def test_cross_search_matches_brute_force(method, nq, nr, k, block):
    q, r = randn(nq, 6, seed=1), randn(nr, 6, seed=2)
    res = knn(q, k, r, max_block_bytes=block, method=method)
    check_exact(res, q, k, r)


@pytest.mark.parametrize("method", METHODS)
def test_cross_search_with_queries_first_in_reference(method):
    q = randn(150, 4, seed=3)
    r = torch.cat([q, randn(90, 4, seed=4)])
    res = knn(q, 6, r, exclude_self=True, max_block_bytes=64 * 64 * 4, method=method)
    check_exact(res, q, 6, r, exclude_self=True)


def test_reference_none_excludes_self_by_default_and_k_can_be_everything():
    x = randn(60, 3, seed=5)
    res = knn(x, 59)
    check_exact(res, x, 59, exclude_self=True)
    res = knn(x, 60, exclude_self=False)
    assert (res.indices[:, 0] == torch.arange(60)).all()
    assert (res.distances[:, 0] == 0).all()  # direct differences: self is exactly 0


def test_a_single_point():
    x = torch.ones(1, 3)
    res = knn(x, 1, exclude_self=False)
    assert res.indices.tolist() == [[0]] and res.distances.tolist() == [[0.0]]
    with pytest.raises(ValueError, match="between 1 and 0"):
        knn(x, 1)


def test_duplicates_are_found_but_own_index_is_not():
    x = torch.tensor([[0.0, 0.0], [0.0, 0.0], [5.0, 5.0], [5.0, 5.0], [9.0, 0.0]])
    res = knn(x, 1)
    assert res.indices[:, 0].tolist()[:4] == [1, 0, 3, 2]
    assert res.distances[:4, 0].tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("method", METHODS)
def test_expansion_failures_are_caught_by_the_certificate(method, monkeypatch):
    """Two tight clusters 2000 apart: centring cannot shrink the norms (~1e6), so
    the float32 expansion |q|^2 + |r|^2 - 2 q.r (rounding ~1e0) cannot rank
    neighbours ~1e-2 apart; the certificate must send the queries to float64."""
    calls = []
    real = knn_certificate.float64_nearest

    def spy(q, r, rows, *args):
        calls.append(len(rows))
        return real(q, r, rows, *args)

    monkeypatch.setattr(knn_certificate, "float64_nearest", spy)
    z = 1e-2 * randn(160, 3, seed=9)
    z[:80, 0] += 1000.0
    z[80:, 0] -= 1000.0
    res = knn(z, 5, method=method)
    assert calls and sum(calls) > 80
    check_exact(res, z, 5, exclude_self=True, atol=1e-6)
    res = knn(z[:50], 4, z, method=method)
    check_exact(res, z[:50], 4, z, atol=1e-6)


def test_large_common_offset_is_centred_away():
    x = 1000.0 + randn(400, 8, seed=10)
    check_exact(knn(x, 6), x, 6, exclude_self=True, atol=1e-4)


def test_squared_distances_and_numpy_inputs():
    x = randn(80, 5, seed=6)
    a = knn(x, 4)
    b = knn(x.numpy().astype(np.float64), 4, squared=True)
    torch.testing.assert_close(b.distances, a.distances**2, atol=1e-5, rtol=1e-5)
    assert (a.indices == b.indices).all()
    c = knn(np.arange(12).reshape(6, 2), 2)  # integer input is accepted
    assert c.indices.shape == (6, 2)


def test_memmap_input_is_streamed_and_equal(tmp_path):
    x = randn(300, 7, seed=7).numpy()
    mm = np.memmap(tmp_path / "emb.f32", dtype=np.float32, mode="w+", shape=x.shape)
    mm[:] = x
    mm.flush()
    ro = np.memmap(tmp_path / "emb.f32", dtype=np.float32, mode="r", shape=x.shape)
    for method in METHODS:
        a = knn(x, 5, max_block_bytes=64 * 64 * 4, method=method)
        b = knn(ro, 5, max_block_bytes=64 * 64 * 4, method=method)
        c = knn(x[:100], 5, ro, max_block_bytes=64 * 64 * 4, method=method)
        assert (a.indices == b.indices).all()
        torch.testing.assert_close(a.distances, b.distances)
        check_exact(c, x[:100], 5, x)


def test_tiles_stay_within_the_memory_budget(monkeypatch):
    """No full n x n matrix: every product is at most one (group-padded) tile."""
    sizes = []
    real_mm = torch.mm

    def spy(a, b, *args, **kwargs):
        sizes.append(a.shape[0] * b.shape[1])
        return real_mm(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "mm", spy)
    x = randn(1000, 4, seed=8)
    budget = 128 * 128 * 4
    knn(x, 5, max_block_bytes=budget)
    knn(x[:300], 5, x, max_block_bytes=budget)
    knn(x, 200, max_block_bytes=budget, method="dense")
    assert sizes and max(sizes) * 4 <= budget
    assert max(sizes) < 1000 * 1000 / 4


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 90),
    d=st.integers(1, 6),
    k_frac=st.floats(0.0, 1.0),
    block=st.sampled_from([32 * 32 * 4, 64 * 64 * 4, 2**20]),
    method=st.sampled_from(METHODS),
    exclude=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_property_exact(n, d, k_frac, block, method, exclude, seed):
    x = randn(n, d, seed=seed)
    available = n - int(exclude)
    k = max(1, round(k_frac * available))
    res = knn(x, k, exclude_self=exclude, max_block_bytes=block, method=method)
    check_exact(res, x, k, exclude_self=exclude)


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        ((torch.zeros(5), 1), {}, "2-D"),
        ((torch.zeros(2, 3, 4), 1), {}, "2-D"),
        ((torch.zeros(0, 3), 1), {}, "empty"),
        ((torch.zeros(4, 0), 1), {}, "empty"),
        ((torch.tensor([[0.0], [float("nan")]]), 1), {}, "NaN or infinite"),
        ((torch.tensor([[0.0], [float("inf")]]), 1, torch.zeros(3, 1)), {}, "NaN or infinite"),
        ((torch.zeros(3, 2), 1, torch.tensor([[1.0, float("-inf")]])), {}, "NaN or infinite"),
        ((torch.zeros(3, 2), 1, torch.zeros(3, 4)), {}, "different dimensions"),
        ((torch.zeros(3, 2), 0), {}, "between 1 and 2"),
        ((torch.zeros(3, 2), 3), {}, "between 1 and 2"),
        ((torch.zeros(3, 2), 4, torch.zeros(3, 2)), {}, "between 1 and 3"),
        ((torch.zeros(3, 2), True), {}, "positive integer"),
        ((torch.zeros(3, 2), 1.0), {}, "positive integer"),
        ((torch.zeros(3, 2), 1, torch.zeros(2, 2)), {"exclude_self": True}, "Put the queries first"),
        ((torch.zeros(3, 2), 1), {"method": "fast"}, "method"),
        ((torch.zeros(3, 2), 1), {"max_block_bytes": 0}, "max_block_bytes"),
        ((torch.zeros(3, 2, dtype=torch.complex64), 1), {}, "real numbers"),
    ],
)
def test_bad_input_raises_value_error(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        knn(*args, **kwargs)


def test_non_finite_memmap_rows_raise(tmp_path):
    mm = np.memmap(tmp_path / "bad.f32", dtype=np.float32, mode="w+", shape=(40, 2))
    mm[:] = 1.0
    mm[33, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        knn(mm, 2)


@pytest.mark.parametrize("method", ["filter", "dense"])
def test_exact_ties_go_to_the_smaller_reference_index(method):
    # Many exact duplicates (as in glyph classes rendered alike in some fonts): a stable
    # brute-force sort and faiss order tied distances by index, and so must we.
    gen = torch.Generator().manual_seed(5)
    base = torch.nn.functional.normalize(torch.randn(40, 8, generator=gen), dim=1)
    x = base[torch.randint(40, (600,), generator=gen)]
    result = knn(x, 6, method=method, max_block_bytes=64 * 1024)
    d = (x.double()[:, None] - x.double()[None]).pow(2).sum(-1)  # exact: duplicates are 0
    d.fill_diagonal_(float("inf"))
    expected = torch.sort(d, dim=1, stable=True).indices[:, :6]
    assert torch.equal(result.indices, expected)
