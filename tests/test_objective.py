"""The objective of named terms: sums, logging values, and the no-positive-pair error."""

import pytest
import torch
from pytorch_metric_learning.losses import MultiSimilarityLoss, ProxyAnchorLoss
from pytorch_metric_learning.miners import MultiSimilarityMiner

from dmlkit.engine.objective import MetricLossTerm, Objective


def batch(n_classes=4, m=3, dim=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    emb = torch.nn.functional.normalize(torch.randn(n_classes * m, dim, generator=gen), dim=1)
    return emb, torch.arange(n_classes).repeat_interleave(m)


def test_metric_term_equals_the_pml_loss_with_its_miner():
    emb, labels = batch()
    loss, miner = MultiSimilarityLoss(2, 40, 0.5), MultiSimilarityMiner(0.1)
    total, terms = Objective([MetricLossTerm(loss, miner)])(emb, labels)
    expected = loss(emb, labels, miner(emb, labels))
    torch.testing.assert_close(total, expected)
    assert terms == {"metric": pytest.approx(float(expected))}


def test_terms_are_weighted_and_summed():
    emb, labels = batch()
    loss = MultiSimilarityLoss()
    objective = Objective([MetricLossTerm(loss, name="a"), MetricLossTerm(loss, weight=0.25, name="b")])
    total, terms = objective(emb, labels)
    torch.testing.assert_close(total, 1.25 * loss(emb, labels))
    assert terms["b"] == pytest.approx(0.25 * terms["a"])


def test_pair_loss_on_a_batch_without_positive_pairs_is_an_error():
    emb, _ = batch()
    labels = torch.arange(len(emb))
    with pytest.raises(ValueError, match="no positive pair.*m_per_class"):
        Objective([MetricLossTerm(MultiSimilarityLoss())])(emb, labels)


def test_proxy_loss_accepts_a_batch_without_positive_pairs():
    emb, _ = batch()
    labels = torch.arange(len(emb))
    total, _ = Objective([MetricLossTerm(ProxyAnchorLoss(len(emb), emb.shape[1]))])(emb, labels)
    assert torch.isfinite(total)


def test_term_names_must_be_unique():
    with pytest.raises(ValueError, match="unique"):
        Objective([MetricLossTerm(MultiSimilarityLoss()), MetricLossTerm(MultiSimilarityLoss())])
