"""dmlkit's batched distance-weighted sampling against the paper's weights (brute force) and PML's miner.

The negatives' frequencies over many draws are compared with Wu et al.'s Eq. 4 evaluated pair by pair in float64;
the triplets each anchor gets (and the anchors skipped) with PML's ``DistanceWeightedMiner`` on the same batch.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from pytorch_metric_learning.miners import DistanceWeightedMiner as PMLDistanceWeightedMiner

from dmlkit.losses import create_miner
from dmlkit.losses.distance_weighted_miner import DistanceWeightedMiner


def _sphere(n: int, dim: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(n, dim, generator=g, dtype=torch.float64), dim=1).float()


def _paper_probabilities(x: torch.Tensor, labels: torch.Tensor, cutoff: float = 0.5, far: float = 1.4) -> dict:
    """``{anchor: {negative: probability}}`` from Eq. 4, one pair at a time in float64."""
    d = x.shape[1]
    out = {}
    for a in range(len(x)):
        weights = {}
        for n in range(len(x)):
            s = float(torch.dist(x[a].double(), x[n].double()))
            if labels[n] == labels[a] or s >= far:
                continue
            s = max(s, cutoff)
            weights[n] = s ** (2 - d) * (1 - s * s / 4) ** ((3 - d) / 2)
        total = sum(weights.values())
        if total > 0:
            out[a] = {n: w / total for n, w in weights.items()}
    return out


def _frequencies(draws: list[tuple[torch.Tensor, ...]]) -> dict:
    counts: dict[int, Counter] = {}
    for a, _, n in draws:
        for ai, ni in zip(a.tolist(), n.tolist()):
            counts.setdefault(ai, Counter())[ni] += 1
    return {a: {n: c / sum(cnt.values()) for n, c in cnt.items()} for a, cnt in counts.items()}


def _max_gap(freq: dict, expected: dict) -> float:
    assert set(freq) == set(expected)
    return max(abs(freq[a].get(n, 0.0) - p) for a in expected for n, p in expected[a].items())


def test_negatives_are_drawn_with_the_papers_weights_as_pml_draws_them():
    x, labels = _sphere(12, 4, seed=3), torch.arange(4).repeat_interleave(3)  # d = 4: the weights differ a lot
    expected = _paper_probabilities(x, labels)
    assert max(max(row.values()) for row in expected.values()) > 0.3  # far from uniform over ~9 negatives
    ours = DistanceWeightedMiner(seed=0)
    freq = _frequencies([ours(x, labels) for _ in range(2000)])  # 6,000 draws an anchor
    assert _max_gap(freq, expected) < 0.03
    pml = PMLDistanceWeightedMiner()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        pml_freq = _frequencies([pml(x, labels) for _ in range(2000)])
    assert _max_gap(pml_freq, expected) < 0.03  # the same reading of Eq. 4 as PML's


def test_each_anchor_gets_the_triplets_pmls_miner_gives_it():
    g = torch.Generator().manual_seed(5)
    near, far = torch.tensor([1.0, 0, 0, 0]), torch.tensor([-1.0, 0, 0, 0])
    # class 0: 4 members near +e1; classes 1, 2: near -e1 (class 0's negatives are all farther than 1.4: skipped);
    # class 3: one member (no positive: skipped)
    x = torch.stack(
        [near + 0.05 * torch.randn(4, generator=g) for _ in range(4)]
        + [far + 0.3 * torch.randn(4, generator=g) for _ in range(7)]
    )
    x = torch.nn.functional.normalize(x, dim=1)
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3])
    a, p, n = DistanceWeightedMiner(seed=1)(x, labels)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        a_pml, _, _ = PMLDistanceWeightedMiner()(x, labels)
    assert Counter(a.tolist()) == Counter(a_pml.tolist()) == {i: 3 for i in range(4, 10)}
    assert (labels[a] == labels[p]).all() and (a != p).all() and (labels[a] != labels[n]).all()
    # against a separate reference set: an anchor's positives may be any reference member of its class
    ref, ref_labels = _sphere(9, 4, seed=7), torch.arange(3).repeat_interleave(3)
    queries, query_labels = _sphere(6, 4, seed=8), torch.tensor([0, 0, 1, 1, 2, 2])
    a, p, n = DistanceWeightedMiner(seed=2)(queries, query_labels, ref, ref_labels)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        a_pml, _, _ = PMLDistanceWeightedMiner()(queries, query_labels, ref, ref_labels)
    assert Counter(a.tolist()) == Counter(a_pml.tolist())
    assert (query_labels[a] == ref_labels[p]).all() and (query_labels[a] != ref_labels[n]).all()


def test_a_seed_reproduces_the_triplets_and_the_global_generator_is_left_alone():
    x, labels = _sphere(60, 16, seed=0), torch.arange(20).repeat_interleave(3)
    state = torch.get_rng_state()
    first = DistanceWeightedMiner(seed=4)(x, labels)
    assert torch.equal(torch.get_rng_state(), state)
    again = DistanceWeightedMiner(seed=4)(x, labels)
    other = DistanceWeightedMiner(seed=5)(x, labels)
    assert all(torch.equal(u, v) for u, v in zip(first, again))
    assert not all(torch.equal(u, v) for u, v in zip(first, other))
    with torch.random.fork_rng(devices=[]):  # the default seed: the one the model builder sets for the run
        torch.manual_seed(4)
        by_default = create_miner("distance_weighted")(x, labels)
    assert all(torch.equal(u, v) for u, v in zip(first, by_default))


def test_no_anchor_with_a_negative_in_reach_gives_empty_triplets_and_bad_cutoffs_are_named():
    x = torch.nn.functional.normalize(torch.tensor([[1.0, 0, 0], [1, 0.01, 0], [-1, 0, 0], [-1, 0.01, 0]]), dim=1)
    a, p, n = DistanceWeightedMiner(seed=0)(x, torch.tensor([0, 0, 1, 1]))  # every negative at distance ~2
    assert a.numel() == p.numel() == n.numel() == 0 and a.dtype == torch.long
    with pytest.raises(ValueError, match="cutoff < nonzero_loss_cutoff.*0.5 and 1.4"):
        DistanceWeightedMiner(cutoff=1.5, nonzero_loss_cutoff=1.4)


def test_the_weights_do_not_overflow_in_high_dimension():
    x, labels = _sphere(60, 512, seed=1), torch.arange(20).repeat_interleave(3)
    a, p, n = DistanceWeightedMiner(seed=0)(x, labels)
    assert len(a) == 180 and (labels[a] != labels[n]).all()
    assert math.isfinite(float(x[a].sub(x[n]).norm(dim=1).mean()))
