"""Property-based tests (hypothesis) of the retrieval metrics, the streamed metrics, the losses and the sharding.

Properties, not values: metrics are invariant to relabelling and to similarity transforms of the
embeddings, ordered (Recall@K grows with K, MAP@R <= R-precision), equal to 1 on one class; the
streamed metrics equal the in-memory ones for any block size; losses are finite, non-negative,
invariant to the order of the batch and to relabelling; shards of a batch put together are the batch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from dmlkit.distributed import ShardedBatchSampler
from dmlkit.evaluation import retrieval_metrics
from dmlkit.evaluation.streaming import retrieval_metrics_from_file
from dmlkit.losses import create_loss

SETTINGS = settings(max_examples=25, deadline=None)


@st.composite
def labelled_points(draw, min_n: int = 3, max_n: int = 30):
    """Integer-coordinate points (exact float32 distances, many ties) with labels from a few classes."""
    n = draw(st.integers(min_n, max_n))
    d = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, size=(n, d)).astype(np.float32)
    y = rng.integers(0, draw(st.integers(1, max(1, n // 2))), size=n)
    y[:2] = y[0]  # at least one query has a positive
    return x, y


@SETTINGS
@given(labelled_points(), st.integers(0, 2**31 - 1))
def test_metrics_are_invariant_to_relabelling_and_similarity_transforms(data, seed):
    x, y = data
    ref = retrieval_metrics(x, y)
    rng = np.random.default_rng(seed)
    codes = rng.permutation(1000)[: y.max() + 1] * 7 - 3000  # an injective relabelling, negatives included
    assert retrieval_metrics(x, codes[y]) == ref
    shift = rng.integers(-8, 9, size=x.shape[1]).astype(np.float32)
    assert retrieval_metrics(4 * x + shift, y) == ref  # distances scale exactly: same order, same ties


@SETTINGS
@given(labelled_points())
def test_metrics_are_ordered_and_bounded(data):
    x, y = data
    m = retrieval_metrics(x, y, ks=(1, 2, 4, 8, 16))
    recalls = [m[f"recall_at_{k}"] for k in (1, 2, 4, 8, 16)]
    assert recalls == sorted(recalls)
    assert m["precision_at_1"] == m["recall_at_1"]
    assert 0 <= m["mean_average_precision_at_r"] <= m["r_precision"] + 1e-12 <= 1 + 1e-12


@SETTINGS
@given(st.integers(2, 30), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_one_class_scores_one(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    assert all(v == 1.0 for v in retrieval_metrics(x, np.full(n, 7)).values())


@SETTINGS
@given(labelled_points(min_n=70, max_n=160))
def test_streamed_metrics_equal_in_memory_metrics(data):
    x, y = data
    x = x + np.random.default_rng(0).standard_normal(x.shape).astype(np.float32) * 0.01  # no cross-block ties
    k = max(8, int(np.bincount(y).max()) - 1)
    per_row = 24 * x.shape[1] + 72 * (k + 1)  # the block size rule of streaming.py
    got = retrieval_metrics_from_file(x, y, budget_mb=70 * per_row / 0.75 / 2**20)  # blocks of ~70 rows
    assert got == pytest.approx(retrieval_metrics(x, y), abs=1e-12)


LOSSES = ["contrastive", "multi_similarity", "triplet", "lifted_structure", "proxy_anchor"]


@st.composite
def batches(draw):
    b = draw(st.integers(4, 24))
    d = draw(st.integers(2, 8))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    emb = F.normalize(torch.randn(b, d, generator=g, dtype=torch.float64), dim=1)
    labels = torch.randint(0, draw(st.integers(2, 6)), (b,), generator=g)
    labels[1] = labels[0]
    labels[2] = (labels[0] + 1) % 6  # a positive pair and a negative
    return emb, labels, seed


def _loss(name: str, d: int):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return create_loss(name, num_classes=6, embedding_size=d).double()


@pytest.mark.parametrize("name", LOSSES)
@SETTINGS
@given(data=batches())
def test_losses_are_finite_non_negative_and_order_invariant(name, data):
    emb, labels, seed = data
    loss = _loss(name, emb.shape[1])
    emb = emb.clone().requires_grad_()
    value = loss(emb, labels)
    value.backward()
    assert torch.isfinite(value) and value >= 0
    assert torch.isfinite(emb.grad).all()
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(loss(emb.detach()[perm], labels[perm]), value.detach(), rtol=1e-9, atol=1e-12)
    if name != "proxy_anchor":  # pair losses see only equal / different labels
        torch.testing.assert_close(loss(emb.detach(), labels * 3 + 11), value.detach(), rtol=1e-9, atol=1e-12)


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 6), st.integers(1, 5))
def test_shards_put_together_are_the_global_batches(world, per_rank, num_batches):
    batches_ = [list(range(i * world * per_rank, (i + 1) * world * per_rank)) for i in range(num_batches)]
    shards = [list(ShardedBatchSampler(batches_, r, world)) for r in range(world)]
    for i, batch in enumerate(batches_):
        assert sum((shards[r][i] for r in range(world)), []) == batch
        assert all(len(shards[r][i]) == per_rank for r in range(world))
