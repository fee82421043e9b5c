"""evaluate_embeddings equals the retrieval_metrics (+ clustering_metrics) calls it replaces."""

from __future__ import annotations

import pytest
import torch

from dmlkit.evaluation.clustering import clustering_metrics
from dmlkit.evaluation.evaluate_embeddings import evaluate_embeddings
from dmlkit.evaluation.retrieval import retrieval_metrics


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 4
    embeddings = torch.nn.functional.normalize(torch.randn(n, 8, generator=g) + 2 * torch.eye(8)[labels], dim=1)
    return embeddings, labels


@pytest.mark.parametrize("with_refs", [False, True])
@pytest.mark.parametrize("clustering", [False, True])
def test_equals_the_two_calls_it_replaces(with_refs, clustering):
    q, ql = _data(24, 0)
    refs = _data(32, 1) if with_refs else (None, None)
    expected = retrieval_metrics(q, ql, *refs, ks=(1, 4))
    if clustering:
        expected.update(clustering_metrics(q, ql, seed=3))
    got = evaluate_embeddings(q, ql, *refs, ks=[1, 4], clustering=clustering, seed=3)
    assert got == expected
    assert ("NMI" in got) == clustering and "recall_at_4" in got and "recall_at_8" not in got


def test_defaults_are_the_papers_ks_without_clustering():
    q, ql = _data(24, 0)
    assert evaluate_embeddings(q, ql) == retrieval_metrics(q, ql, ks=(1, 2, 4, 8))
