"""Greedy k-centre (Algorithm 2 of the thesis) against a brute-force greedy; per-class pools; CCP diagnostics."""

import itertools
import math

import pytest
import torch

from dmlkit.proxies import (
    batched_greedy_k_center,
    covering_radius,
    greedy_k_center,
    inter_class_distance,
    k_center_radii,
    sample_class_pool,
    select_per_class,
)


def brute_greedy(points, k, initial=None, first=0):
    """Algorithm 2 written out: each pick maximises the distance to the nearest chosen centre (smallest index on ties)."""
    pts = points.double().tolist()
    centres = [] if initial is None else initial.double().tolist()
    chosen = []

    def dist(u, v):
        return math.sqrt(sum((a - b) ** 2 for a, b in zip(u, v)))

    for _ in range(k):
        if not centres:
            q = first
        else:
            best, q = -1.0, None
            for i, u in enumerate(pts):
                if i in chosen:
                    continue
                d = min(dist(u, v) for v in centres)
                if d > best:
                    best, q = d, i
        chosen.append(q)
        centres.append(pts[q])
    return chosen


@pytest.mark.parametrize("seed", range(8))
def test_matches_brute_force_on_random_sets(seed):
    g = torch.Generator().manual_seed(seed)
    n, d = 5 + seed, 1 + seed % 3
    points = torch.randn(n, d, generator=g, dtype=torch.float64)
    for k in (1, 3, n):
        assert greedy_k_center(points, k).tolist() == brute_greedy(points, k)
        initial = torch.randn(2, d, generator=g, dtype=torch.float64)
        assert greedy_k_center(points, k, initial=initial).tolist() == brute_greedy(points, k, initial)


def test_ties_go_to_the_smallest_index():
    # integer grid with duplicates: many exactly equal distances
    points = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [1.0, 0.0], [0.0, 0.0]])
    picks = greedy_k_center(points, 5)
    assert picks.tolist() == brute_greedy(points, 5)
    assert picks.tolist()[:2] == [0, 1]  # all four unit points tie after picking the origin: index 1 wins
    for k in range(1, 8):
        assert greedy_k_center(points, k).tolist() == brute_greedy(points, k)


def test_initial_centres_count_and_first_pick_is_farthest_from_them():
    points = torch.tensor([[0.0], [1.0], [5.0], [9.0]])
    initial = torch.tensor([[9.5], [0.2]])
    # distances to initial: 0.2, 0.8, 4.5, 0.5 -> 5.0 first; then 1.0 (0.8 from 0.2) ...
    assert greedy_k_center(points, 2, initial=initial).tolist() == [2, 1]
    assert greedy_k_center(points, 2).tolist() == [0, 3]
    assert greedy_k_center(points, 2, first=2).tolist() == brute_greedy(points, 2, first=2) == [2, 0]


def test_picks_are_distinct_even_when_all_points_coincide_with_initial():
    points = torch.zeros(4, 3)
    picks = greedy_k_center(points, 4, initial=torch.zeros(1, 3))
    assert sorted(picks.tolist()) == [0, 1, 2, 3]


def test_batched_equals_one_pool_at_a_time_with_padding():
    g = torch.Generator().manual_seed(3)
    pools = torch.randn(4, 6, 3, generator=g)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[2, 4:] = False  # pool 2 has 4 real points
    initial = torch.randn(4, 2, 3, generator=g)
    picks = batched_greedy_k_center(pools, 3, initial, mask=mask)
    for c in range(4):
        real = pools[c][mask[c]]
        assert picks[c].tolist() == greedy_k_center(real, 3, initial=initial[c]).tolist()
    assert bool(mask[2, picks[2]].all())


def test_pool_equal_to_k_selects_the_whole_pool():
    """b == k: every pool sample becomes a proxy, i.e. the selection is the random pool itself."""
    g = torch.Generator().manual_seed(0)
    pools = torch.randn(5, 4, 2, generator=g)
    picks = select_per_class(pools, torch.ones(5, 4, dtype=torch.bool), 4, torch.randn(5, 3, 2, generator=g))
    assert all(sorted(row) == [0, 1, 2, 3] for row in picks.tolist())


def test_bad_input():
    points = torch.randn(3, 2)
    with pytest.raises(ValueError, match="cannot pick 4"):
        greedy_k_center(points, 4)
    with pytest.raises(ValueError, match="initial must have shape"):
        greedy_k_center(points, 2, initial=torch.randn(2, 5))
    with pytest.raises(ValueError, match="pool 1"):
        batched_greedy_k_center(torch.randn(2, 3, 2), 2, mask=torch.tensor([[1, 1, 1], [1, 0, 0]]).bool())
    with pytest.raises(ValueError, match="points must have shape"):
        greedy_k_center(torch.randn(3), 1)


def test_sample_class_pool_draws_without_replacement_and_pads():
    labels = torch.tensor([0] * 5 + [1] * 2 + [2] * 9)
    pool = sample_class_pool(labels, 3, 4, generator=torch.Generator().manual_seed(0))
    assert pool.shape == (3, 4)
    assert (pool[1, 2:] == -1).all() and (pool[1, :2] >= 0).all()
    for c in range(3):
        real = pool[c][pool[c] >= 0]
        assert (labels[real] == c).all() and real.unique().numel() == real.numel()
    again = sample_class_pool(labels, 3, 4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(pool, again)
    with pytest.raises(ValueError, match="pool_size"):
        sample_class_pool(labels, 3, 0)


# ----------------------------------------------------------------------------- diagnostics (Sec. 3.3.1)


def brute_radii(points):
    """Covering radius after each greedy pick, brute force."""
    order = brute_greedy(points, len(points))
    out = []
    for k in range(1, len(points) + 1):
        centres = points[order[:k]]
        out.append(max(min(float((p - c).norm()) for c in centres) for p in points))
    return out


def test_k_center_radii_and_covering_radius():
    points = torch.tensor([[0.0], [1.0], [3.0], [7.0]])
    # greedy from 0: picks 7 (radius 3 then), then 3 (radius 1), then 1 (radius 0)
    assert k_center_radii(points).tolist() == pytest.approx([7.0, 3.0, 1.0, 0.0])
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 3, generator=g, dtype=torch.float64)
    assert k_center_radii(x).tolist() == pytest.approx(brute_radii(x))
    labels = torch.tensor([0] * 4 + [1] * 3)
    emb = torch.cat([points, torch.tensor([[0.0], [0.0], [2.0]])])
    # class 1: radii [2, 0, 0] -> mean 2/3 ; class 0: mean 11/4
    assert covering_radius(emb, labels) == pytest.approx((11 / 4 + 2 / 3) / 2)


def test_inter_class_distance_brute_force():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(9, 4, generator=g)
    y = torch.tensor([0, 0, 1, 1, 1, 2, 2, 0, 2])
    pairs = [(i, j) for i, j in itertools.product(range(9), range(9)) if y[i] != y[j]]
    expected = sum(float((x[i] - x[j]).double().norm()) for i, j in pairs) / len(pairs)
    assert inter_class_distance(x, y, chunk=4) == pytest.approx(expected)
    with pytest.raises(ValueError, match="two classes"):
        inter_class_distance(x, torch.zeros(9, dtype=torch.long))
