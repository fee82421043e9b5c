"""NMI and pairwise F1 against sklearn and a brute-force pair loop; faiss k-means wrapper."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import normalized_mutual_info_score

from dmlkit.evaluation import clustering_metrics, kmeans_assign, nmi, pairwise_f1


def brute_f1(t, p):
    tp = fp = fn = 0
    for i, j in itertools.combinations(range(len(t)), 2):
        same_c, same_l = p[i] == p[j], t[i] == t[j]
        tp += same_c and same_l
        fp += same_c and not same_l
        fn += same_l and not same_c
    if tp + fp == 0 and tp + fn == 0:
        return 1.0
    if tp == 0:
        return 0.0
    prec, rec = tp / (tp + fp), tp / (tp + fn)
    return 2 * prec * rec / (prec + rec)


labelings = st.integers(1, 60).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 7), min_size=n, max_size=n),
        st.lists(st.integers(-3, 9), min_size=n, max_size=n),
    )
)


@settings(max_examples=150, deadline=None)
@given(labelings)
def test_nmi_matches_sklearn(pair):
    t, p = pair
    assert nmi(t, p) == pytest.approx(normalized_mutual_info_score(t, p), abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(labelings)
def test_pairwise_f1_matches_pair_loop(pair):
    t, p = pair
    assert pairwise_f1(t, p) == pytest.approx(brute_f1(t, p), abs=1e-12)


@pytest.mark.parametrize(
    "t,p,expected_nmi",
    [
        ([0, 0, 1, 1], [1, 1, 0, 0], 1.0),  # permuted labels
        ([0, 0, 0, 0], [5, 5, 5, 5], 1.0),  # one group each
        ([0, 0, 0, 0], [0, 1, 2, 3], 0.0),  # one side constant
        ([0, 1, 2, 3], [0, 0, 0, 0], 0.0),
        ([7], [3], 1.0),
    ],
)
def test_nmi_edge_cases_follow_sklearn(t, p, expected_nmi):
    assert nmi(t, p) == expected_nmi == normalized_mutual_info_score(t, p)


def test_pairwise_f1_hand_example_and_degenerate_cases():
    # pairs: true-positive {0,1}; predicted-positive {0,1},{0,2},{1,2}; true {0,1},{3,4}
    t, p = [0, 0, 1, 2, 2], [5, 5, 5, 6, 7]
    prec, rec = 1 / 3, 1 / 2
    assert pairwise_f1(t, p) == pytest.approx(2 * prec * rec / (prec + rec))
    assert pairwise_f1([0, 1, 2], [0, 1, 2]) == 1.0  # nothing paired anywhere
    assert pairwise_f1([0, 0], [0, 1]) == 0.0
    assert pairwise_f1(np.array(["a", "a", "b"]), torch.tensor([1, 1, 0])) == 1.0


def test_metrics_are_linear_time_on_large_labelings():
    rng = np.random.default_rng(0)
    t = rng.integers(0, 20_000, 500_000)
    p = rng.integers(0, 20_000, 500_000)  # a dense contingency table would be 400M cells
    start = time.perf_counter()
    f1, mi = pairwise_f1(t, p), nmi(t, p)
    assert time.perf_counter() - start < 5
    assert 0 <= f1 < 0.01 and 0 <= mi <= 1


@pytest.mark.parametrize(
    "fn,args,match",
    [
        (nmi, ([0, 1], [0]), "labels_true has 2 items but labels_pred has 1"),
        (pairwise_f1, ([], []), "empty"),
        (nmi, ([[0, 1]], [[0, 1]]), "1-D"),
    ],
)
def test_label_errors(fn, args, match):
    with pytest.raises(ValueError, match=match):
        fn(*args)


def blobs(n_per, num_classes, d, seed, spread=0.05):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(num_classes, d, generator=g) * 10
    labels = torch.arange(num_classes).repeat_interleave(n_per)
    x = centres[labels] + spread * torch.randn(len(labels), d, generator=g)
    return x, labels


def test_clustering_metrics_on_separated_blobs_are_perfect_and_seeded():
    x, y = blobs(40, 6, 8, 0)
    out = clustering_metrics(x, y, seed=0, nredo=10)
    assert set(out) == {"NMI", "F1"}
    assert out["NMI"] == pytest.approx(1.0) and out["F1"] == pytest.approx(1.0)
    noisy, _ = blobs(40, 6, 8, 1, spread=8.0)
    a = clustering_metrics(noisy.numpy(), y.numpy(), seed=5)
    b = clustering_metrics(noisy, y, seed=5)
    assert a == b and a["NMI"] < 1.0
    assign = kmeans_assign(noisy, 6, seed=5)
    assert a == {"NMI": nmi(y, assign), "F1": pairwise_f1(y, assign)}


def test_clustering_metrics_errors():
    x, y = blobs(5, 2, 3, 0)
    with pytest.raises(ValueError, match="10 rows but labels has 9"):
        clustering_metrics(x, y[:9])
    bad = x.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinite"):
        clustering_metrics(bad, y)
    with pytest.raises(ValueError, match="2-D"):
        clustering_metrics(x[0], y[:3])
    with pytest.raises(ValueError, match="n_clusters"):
        kmeans_assign(x, 11)
