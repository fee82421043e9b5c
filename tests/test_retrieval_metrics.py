"""Retrieval metrics against a brute-force reference and against PML's AccuracyCalculator."""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

from dmlkit.evaluation import metric_names, retrieval_metrics

PML_KEYS = ("precision_at_1", "r_precision", "mean_average_precision_at_r")
logging.getLogger("PML").setLevel(logging.ERROR)


def brute_force(query, query_labels, reference=None, reference_labels=None, ks=(1, 2, 4, 8), ref_includes_query=False):
    """Slow, obviously-correct metrics: loops over queries, float64 distances."""
    q = np.asarray(query, dtype=np.float64)
    ql = list(np.asarray(query_labels))
    self_mode = reference is None
    r = q if self_mode else np.asarray(reference, dtype=np.float64)
    rl = ql if self_mode else list(np.asarray(reference_labels))
    skip_own = self_mode or ref_includes_query
    per = {name: [] for name in metric_names(ks)}
    for i in range(len(q)):
        cands = [j for j in range(len(r)) if not (skip_own and j == i)]
        relevant = sum(1 for j in cands if rl[j] == ql[i])
        if relevant == 0:
            continue  # lone query: left out of every metric
        dist = {j: float(np.sqrt(((q[i] - r[j]) ** 2).sum())) for j in cands}
        order = sorted(cands, key=lambda j: (dist[j], j))
        same = [rl[j] == ql[i] for j in order]
        per["precision_at_1"].append(float(same[0]))
        for k in ks:
            per[f"recall_at_{k}"].append(float(any(same[:k])))
        per["r_precision"].append(sum(same[:relevant]) / relevant)
        ap, hits = 0.0, 0
        for rank, s in enumerate(same[:relevant], start=1):
            if s:
                hits += 1
                ap += hits / rank
        per["mean_average_precision_at_r"].append(ap / relevant)
    return {name: (sum(v) / len(v) if v else math.nan) for name, v in per.items()}


def pml(query, query_labels, reference=None, reference_labels=None, ref_includes_query=False):
    calc = AccuracyCalculator(include=PML_KEYS, k="max_bin_count", device=torch.device("cpu"))
    return calc.get_accuracy(query, query_labels, reference, reference_labels, ref_includes_query=ref_includes_query)


def assert_same(ours, ref, keys=None, tol=1e-6):
    for key in keys or ref:
        a, b = ours[key], ref[key]
        if math.isnan(b):
            assert math.isnan(a), key
        else:
            assert abs(a - b) <= tol, (key, a, b)


def clustered(n, d, num_classes, seed, spread=1.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, n)
    centres = rng.standard_normal((num_classes, d))
    x = centres[labels] + spread * rng.standard_normal((n, d))
    return x.astype(np.float32), labels


# --------------------------------------------------------------------------- #
# Hand-made example
# --------------------------------------------------------------------------- #


def test_hand_computed_example():
    # 1-D points; labels: a a b a b c
    x = np.array([[0.0], [1.0], [1.5], [3.0], [10.0], [20.0]], dtype=np.float32)
    y = np.array([0, 0, 1, 0, 1, 2])
    out = retrieval_metrics(x, y, ks=(1, 2))
    # Neighbour orders (self excluded):
    #   0: 1(a) 2(b) 3(a)   R=2 -> P@1 1, RP 1/2, AP (1/1)/2 = 1/2, R@1 1, R@2 1
    #   1: 2(b) 0(a) 3(a)   R=2 -> P@1 0, RP 1/2, AP (1/2)/2 = 1/4, R@1 0, R@2 1
    #   2: 1(a) 0(a) 3(a) 4(b) R=1 -> P@1 0, RP 0, AP 0, R@1 0, R@2 0
    #   3: 2(b) 1(a) 0(a)   R=2 -> P@1 0, RP 1/2, AP (1/2)/2 = 1/4, R@1 0, R@2 1
    #   4: 3(a) 2(b) ...    R=1 -> P@1 0, RP 0, AP 0, R@1 0, R@2 1
    #   5: lone (only label c) -> excluded
    assert out["precision_at_1"] == pytest.approx(1 / 5)
    assert out["recall_at_1"] == pytest.approx(1 / 5)
    assert out["recall_at_2"] == pytest.approx(4 / 5)
    assert out["r_precision"] == pytest.approx((0.5 + 0.5 + 0 + 0.5 + 0) / 5)
    assert out["mean_average_precision_at_r"] == pytest.approx((0.5 + 0.25 + 0 + 0.25 + 0) / 5)
    assert list(out) == metric_names((1, 2))
    assert_same(out, brute_force(x, y, ks=(1, 2)), tol=1e-12)


# --------------------------------------------------------------------------- #
# Against the brute-force reference
# --------------------------------------------------------------------------- #


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 40),
    d=st.integers(1, 5),
    num_classes=st.integers(1, 12),
    seed=st.integers(0, 100_000),
    mode=st.sampled_from(["self", "separate", "includes"]),
    ks=st.lists(st.integers(1, 50), min_size=0, max_size=4),
)
def test_property_matches_brute_force(n, d, num_classes, seed, mode, ks):
    x, y = clustered(n, d, num_classes, seed)
    ks = tuple(ks)
    if mode == "self":
        args, kwargs = (x, y), {}
    else:
        m = n // 2 + 1
        xr, yr = clustered(m, d, num_classes + 2, seed + 1)
        if mode == "includes":
            xr, yr = np.concatenate([x, xr]), np.concatenate([y, yr])
        args, kwargs = (x, y, xr, yr), {"ref_includes_query": mode == "includes"}
    ref = brute_force(*args, ks=ks, **kwargs)
    if all(math.isnan(v) for v in ref.values()):
        with pytest.warns(RuntimeWarning, match="undefined"):
            out = retrieval_metrics(*args, ks=ks, **kwargs)
    else:
        out = retrieval_metrics(*args, ks=ks, **kwargs)
    assert_same(out, ref, tol=1e-9)


# --------------------------------------------------------------------------- #
# Against PML's AccuracyCalculator
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("seed", range(6))
def test_matches_pml_self_retrieval_uneven_classes_and_singletons(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(200, 900))
    # Class sizes from 1 to ~30, many singletons.
    sizes = np.concatenate([np.ones(25, int), rng.integers(2, 30, n // 10)])
    y = np.repeat(np.arange(len(sizes)), sizes)[:n]
    y = rng.permutation(y)
    x, _ = clustered(len(y), 16, 1, seed)
    x += rng.standard_normal((len(sizes), 16)).astype(np.float32)[y] * 0.8
    ours = retrieval_metrics(x, y)
    assert_same(ours, pml(x, y), PML_KEYS)
    assert_same(ours, pml(torch.from_numpy(x), torch.from_numpy(y)), PML_KEYS)


@pytest.mark.parametrize("seed", range(4))
def test_matches_pml_separate_reference(seed):
    xq, yq = clustered(300, 12, 40, seed)
    xr, yr = clustered(700, 12, 45, seed + 100)  # some query labels absent: lone queries
    ours = retrieval_metrics(xq, yq, xr, yr)
    assert_same(ours, pml(xq, yq, xr, yr), PML_KEYS)


@pytest.mark.parametrize("seed", range(3))
def test_matches_pml_when_reference_includes_queries(seed):
    xq, yq = clustered(250, 10, 60, seed)
    xe, ye = clustered(400, 10, 70, seed + 7)
    xr, yr = np.concatenate([xq, xe]), np.concatenate([yq, ye])
    ours = retrieval_metrics(xq, yq, xr, yr, ref_includes_query=True)
    assert_same(ours, pml(xq, yq, xr, yr, ref_includes_query=True), PML_KEYS)


def test_matches_pml_on_a_few_thousand_points_with_many_blocks():
    x, y = clustered(3000, 32, 600, 11, spread=2.0)
    ours = retrieval_metrics(x, y, max_block_bytes=256 * 256 * 4)
    assert_same(ours, pml(x, y), PML_KEYS)


def test_large_class_uses_the_dense_search_and_still_matches_pml():
    rng = np.random.default_rng(3)
    y = np.concatenate([np.zeros(300, int), rng.integers(1, 30, 200)])
    x = rng.standard_normal((500, 6)).astype(np.float32) + y[:, None] * 0.05
    ours = retrieval_metrics(x, y)  # K = 299: far above the filter's range
    assert_same(ours, pml(x, y), PML_KEYS)


# --------------------------------------------------------------------------- #
# Conventions
# --------------------------------------------------------------------------- #


def test_all_lone_queries_give_nan_with_a_warning():
    x = np.eye(4, dtype=np.float32)
    with pytest.warns(RuntimeWarning, match="undefined"):
        out = retrieval_metrics(x, np.arange(4))
    assert all(math.isnan(v) for v in out.values())
    assert list(out) == metric_names()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same(out, pml(x, np.arange(4)), PML_KEYS)


def test_lone_queries_are_left_out_of_every_metric():
    x = np.array([[0.0], [0.1], [0.25], [5.0]], dtype=np.float32)
    y = np.array([0, 0, 1, 2])  # queries 2 and 3 are lone
    out = retrieval_metrics(x, y, ks=(1,))
    assert out == {
        "precision_at_1": 1.0,
        "recall_at_1": 1.0,
        "r_precision": 1.0,
        "mean_average_precision_at_r": 1.0,
    }


def test_recall_k_beyond_the_reference_set_uses_all_references():
    x = np.array([[0.0], [1.0], [2.0]], dtype=np.float32)
    y = np.array([0, 1, 0])
    out = retrieval_metrics(x, y, ks=(1, 100))
    assert out["recall_at_1"] == 0.0 and out["recall_at_100"] == 1.0


def test_labels_are_compared_exactly_and_may_be_any_numbers():
    x, y = clustered(120, 4, 10, 5)
    big = y.astype(np.int64) * 1_000_003 + 2**40  # distinct even where float32 would merge them
    assert retrieval_metrics(x, big) == retrieval_metrics(x, y)
    assert retrieval_metrics(x, y.astype(np.float64) + 0.5) == retrieval_metrics(x, y)


def test_torch_numpy_and_memmap_inputs_agree(tmp_path):
    x, y = clustered(300, 8, 30, 9)
    mm = np.memmap(tmp_path / "x.f32", dtype=np.float32, mode="w+", shape=x.shape)
    mm[:] = x
    a = retrieval_metrics(x, y)
    b = retrieval_metrics(torch.from_numpy(x).double(), torch.from_numpy(y))
    c = retrieval_metrics(mm, y, max_block_bytes=64 * 64 * 4)
    assert a == b == c


# --------------------------------------------------------------------------- #
# Bad input
# --------------------------------------------------------------------------- #

X = np.zeros((4, 3), dtype=np.float32)
Y = np.array([0, 0, 1, 1])


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        ((X, Y[:3]), {}, "has 4 rows but query_labels has 3"),
        ((X, Y, X, Y[:2]), {}, "reference has 4 rows but reference_labels has 2"),
        ((X, Y, np.zeros((4, 2)), Y), {}, "different dimensions"),
        ((np.zeros((0, 3)), np.zeros(0)), {}, "empty"),
        ((X, Y, np.zeros((0, 3)), np.zeros(0)), {}, "empty"),
        ((np.array([[0.0], [np.nan]]), [0, 0]), {}, "NaN or infinite"),
        ((X, Y, np.full((2, 3), np.inf), [0, 1]), {}, "NaN or infinite"),
        ((np.zeros(4), Y), {}, "2-D"),
        ((np.zeros((4, 3, 1)), Y), {}, "2-D"),
        ((X, Y[:, None]), {}, "1-D"),
        ((X, Y, X), {}, "reference_labels is missing"),
        ((X, Y, None, Y), {}, "without reference"),
        ((X, Y), {"ks": (0,)}, "positive integers"),
        ((X, Y), {"ks": 3}, "sequence"),
        ((X, np.array([0.0, np.nan, 1, 1])), {}, "NaN"),
        ((X, np.array(["a", "a", "b", "b"])), {}, "numeric"),
        ((X, Y, X[:2], Y[:2]), {"ref_includes_query": True}, "queries first"),
        ((X, Y, X, Y[::-1].copy()), {"ref_includes_query": True}, "reference_labels"),
        ((X, Y), {"max_block_bytes": -1}, "max_block_bytes"),
    ],
)
def test_bad_input_raises_value_error(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        retrieval_metrics(*args, **kwargs)
