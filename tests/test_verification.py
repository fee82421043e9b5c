"""Face verification metrics against brute-force definitions on small inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dmlkit.evaluation.verification import best_threshold, kfold_accuracy, pair_scores, tar_at_far, verification_metrics


def brute_best_threshold(s, y):
    """Every candidate of the definition, tried one by one."""
    d = np.unique(s)
    candidates = [d[0] - 1.0] + [(a + b) / 2 for a, b in zip(d[:-1], d[1:])] + [d[-1] + 1.0]
    best_t, best_acc = None, -1.0
    for t in candidates:  # increasing: strict '>' keeps the smallest among ties
        acc = float(((s >= t) == y).mean())
        if acc > best_acc:
            best_t, best_acc = t, acc
    return best_t, best_acc


def brute_tar(genuine, impostor, far):
    """Smallest t among all scores (and -inf) whose FAR <= far; TAR there."""
    candidates = sorted(set(np.concatenate([genuine, impostor]).tolist()) | {-np.inf})
    for t in candidates:
        if (impostor > t).mean() <= far + 1e-12:
            return float((genuine > t).mean()), t
    raise AssertionError("unreachable: t = max score has FAR 0")


scores_st = st.lists(st.integers(0, 6), min_size=4, max_size=40)  # small integers: many ties


@settings(max_examples=150, deadline=None)
@given(scores_st, st.data())
def test_best_threshold_matches_brute_force(raw, data):
    s = np.array(raw, dtype=np.float64) / 2
    y = np.array(data.draw(st.lists(st.booleans(), min_size=len(raw), max_size=len(raw))))
    assert best_threshold(s, y) == pytest.approx(brute_best_threshold(s, y))


@settings(max_examples=60, deadline=None)
@given(scores_st, st.data())
def test_kfold_accuracy_matches_brute_force(raw, data):
    s = np.array(raw, dtype=np.float64)
    y = np.array(data.draw(st.lists(st.booleans(), min_size=len(raw), max_size=len(raw))))
    k = data.draw(st.integers(2, min(5, len(raw))))
    got = kfold_accuracy(s, y, k)
    fold_of = np.arange(len(s)) * k // len(s)
    expected = []
    for f in range(k):
        t, _ = brute_best_threshold(s[fold_of != f], y[fold_of != f])
        expected.append(((s[fold_of == f] >= t) == y[fold_of == f]).mean())
    assert got["accuracy"] == pytest.approx(np.mean(expected))
    assert got["fold_accuracies"] == pytest.approx(expected)


def test_lfw_shaped_example():
    rng = np.random.default_rng(0)
    same = np.tile(np.r_[np.ones(300, bool), np.zeros(300, bool)], 10)  # LFW: 10 sets of 300 + 300
    scores = np.where(same, rng.normal(0.6, 0.1, same.size), rng.normal(0.2, 0.1, same.size))
    result = kfold_accuracy(scores, same)
    # the Bayes threshold 0.4 gives Phi(2) ~ 0.977; a learned threshold must come close
    assert 0.96 < result["accuracy"] < 0.99 and len(result["thresholds"]) == 10
    assert all(0.3 < t < 0.5 for t in result["thresholds"])
    perfect = kfold_accuracy(np.where(same, 1.0, 0.0), same)
    assert perfect["accuracy"] == 1.0 and perfect["accuracy_std"] == 0.0


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=30),
    st.lists(st.integers(0, 30), min_size=1, max_size=300),
    st.sampled_from([1e-3, 1e-2, 0.05, 0.1, 0.3]),
)
def test_tar_at_far_matches_brute_force(gen, imp, far):
    g, i = np.array(gen, float), np.array(imp, float)
    row = tar_at_far(g, i, [far])[far]
    tar, _ = brute_tar(g, i, far)
    assert row["tar"] == pytest.approx(tar)
    assert row["far"] <= far + 1e-12 and row["far"] == pytest.approx((i > row["threshold"]).mean())
    assert row["resolved"] == (1.0 if far * len(i) >= 1 else 0.0)


def test_tar_at_far_on_a_known_case():
    impostor = np.arange(1000, dtype=float)  # 0..999
    genuine = np.array([998.5, 999.5, 990.5, 500.0])
    rows = tar_at_far(genuine, impostor, (1e-3, 1e-2))
    # FAR 1e-3: one impostor may pass -> threshold 998 -> genuine above: 998.5, 999.5
    assert rows[1e-3]["threshold"] == 998.0 and rows[1e-3]["tar"] == 0.5
    # FAR 1e-2: ten may pass -> threshold 989 -> three genuine above
    assert rows[1e-2]["threshold"] == 989.0 and rows[1e-2]["tar"] == 0.75
    assert tar_at_far(genuine, impostor, (1e-5,))[1e-5]["resolved"] == 0.0


def test_pair_scores_and_summary():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    b = torch.tensor([[2.0, 0.0], [1.0, 0.0], [3.0, 4.0]])
    np.testing.assert_allclose(pair_scores(a, b), [1.0, 0.0, 1.0])
    np.testing.assert_allclose(pair_scores(a, b, "neg_euclidean"), [-1.0, -np.sqrt(5.0), 0.0])
    with pytest.raises(ValueError, match="valid metrics"):
        pair_scores(a, b, "dot")
    y = np.arange(100) % 2 == 0  # alternating, so every fold has both kinds over their whole range
    s = np.where(y, 0.5 + np.arange(100) / 200, np.arange(100) / 250)
    summary = verification_metrics(s, y, folds=5, fars=(0.01,))
    assert summary == {"accuracy": 1.0, "accuracy_std": 0.0, "tar@far=0.01": 1.0}


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: kfold_accuracy([1.0, 2.0], [1, 0, 1]), "one entry per pair"),
        (lambda: kfold_accuracy([1.0, np.nan], [1, 0]), "finite"),
        (lambda: kfold_accuracy([1.0, 2.0], [1, 2]), "booleans or 0/1"),
        (lambda: kfold_accuracy([1.0, 2.0], [1, 0], folds=3), "folds must be between"),
        (lambda: tar_at_far([1.0], [0.5], [1.5]), r"\(0, 1\)"),
        (lambda: tar_at_far([], [0.5]), "at least one"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()
