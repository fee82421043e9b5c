"""MPerClassBatchSampler: batch composition, determinism, exact resume, errors."""

from __future__ import annotations

import io
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

from dmlkit.data import MPerClassBatchSampler

# 10 classes, sizes 1..10 (classes 0..2 have fewer than m=4 images), shuffled item order
_SIZES = list(range(1, 11))
LABELS = torch.tensor(np.random.default_rng(0).permutation(np.repeat(np.arange(10), _SIZES)))


def check_batch(batch: list[int], labels: torch.Tensor, batch_size: int, m: int) -> None:
    assert len(batch) == batch_size
    lab = labels[batch].tolist()
    counts = Counter(lab)
    assert len(counts) == batch_size // m and set(counts.values()) == {m}
    for k in range(0, batch_size, m):  # grouped by class, m at a time
        assert len(set(lab[k : k + m])) == 1
        group = batch[k : k + m]
        n = int((labels == lab[k]).sum())
        if n >= m:
            assert len(set(group)) == m, "a class with >= m images gives m distinct ones"


def test_batches_have_k_classes_with_m_each():
    s = MPerClassBatchSampler(LABELS, batch_size=12, m=4, seed=0)
    batches = list(s)
    assert len(s) == len(batches) == len(LABELS) // 12
    for b in batches:
        check_batch(b, LABELS, 12, 4)
        assert all(0 <= i < len(LABELS) for i in b)


def test_small_classes_sampled_with_replacement():
    s = MPerClassBatchSampler(LABELS, batch_size=40, m=4, seed=1, batches_per_epoch=5)
    for b in s:  # every batch holds all 10 classes, including the one with a single image
        lab = LABELS[b]
        single = b[int(torch.nonzero(lab == 0)[0])]
        assert [i for i, y in zip(b, lab.tolist()) if y == 0] == [single] * 4


def test_every_class_once_per_round():
    s = MPerClassBatchSampler(LABELS, batch_size=8, m=2, seed=2, batches_per_epoch=10)
    batches = list(s)
    first_round = [int(LABELS[b[k]]) for b in batches[:2] for k in range(0, 8, 2)]
    assert len(set(first_round)) == 8
    # over 10 batches (40 class slots, 4 rounds of 10 classes) each class is used exactly 4 times
    slots = Counter(int(LABELS[b[k]]) for b in batches for k in range(0, 8, 2))
    assert set(slots.values()) == {4}


def test_deterministic_given_seed_and_epoch():
    state = torch.get_rng_state()
    a = MPerClassBatchSampler(LABELS, 12, 4, seed=5)
    b = MPerClassBatchSampler(LABELS.tolist(), 12, 4, seed=5)
    assert list(a) == list(b)
    assert list(a) == list(a), "iterating again without set_epoch replays the epoch"
    a.set_epoch(1)
    assert list(a) != list(b)
    b.set_epoch(1)
    assert list(a) == list(b) == a.batches(1)
    c = MPerClassBatchSampler(LABELS, 12, 4, seed=6)
    assert list(c) != list(MPerClassBatchSampler(LABELS, 12, 4, seed=5))
    assert torch.equal(state, torch.get_rng_state()), "global RNG untouched"


def test_state_dict_resume_reproduces_remaining_batches():
    s = MPerClassBatchSampler(LABELS, 12, 4, seed=7, batches_per_epoch=9)
    s.set_epoch(3)
    it = iter(s)
    seen = [next(it) for _ in range(4)]
    buf = io.BytesIO()
    torch.save(s.state_dict(), buf)
    expected_rest = list(it)

    fresh = MPerClassBatchSampler(LABELS, 12, 4, seed=0, batches_per_epoch=9)
    buf.seek(0)
    fresh.load_state_dict(torch.load(buf))
    assert fresh.state_dict() == {"seed": 7, "epoch": 3}
    resumed = list(fresh)
    assert resumed[:4] == seen and resumed[4:] == expected_rest
    fresh.set_epoch(4)
    s.set_epoch(4)
    assert list(fresh) == list(s)


def test_works_as_dataloader_batch_sampler():
    data = TensorDataset(torch.arange(len(LABELS)), LABELS)
    s = MPerClassBatchSampler(LABELS, 12, 4, seed=0)
    loader = DataLoader(data, batch_sampler=s)
    for (idx, y), b in zip(loader, s.batches(0)):
        assert idx.tolist() == b and torch.equal(y, LABELS[b])


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 9), min_size=2, max_size=12),
    m=st.integers(1, 4),
    k=st.integers(1, 12),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 100),
)
def test_batch_invariants_hold_for_any_labels(sizes, m, k, seed, epoch):
    k = min(k, len(sizes))
    labels = torch.repeat_interleave(torch.arange(len(sizes)) * 3, torch.tensor(sizes))  # non-contiguous ids
    s = MPerClassBatchSampler(labels, k * m, m, seed=seed, batches_per_epoch=3)
    s.set_epoch(epoch)
    batches = list(s)
    assert len(batches) == 3
    for b in batches:
        check_batch(b, labels, k * m, m)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_size=10, m=4), "multiple of m"),
        (dict(batch_size=48, m=4), "classes per batch"),
        (dict(batch_size=0, m=4), "batch_size"),
        (dict(batch_size=8, m=0), "m must"),
        (dict(batch_size=8, m=4, batches_per_epoch=0), "batches_per_epoch"),
        (dict(batch_size=8, m=4, seed=1.5), "seed"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MPerClassBatchSampler(LABELS, **kwargs)


def test_bad_labels_and_states():
    with pytest.raises(ValueError, match="non-empty"):
        MPerClassBatchSampler([], 4, 2)
    with pytest.raises(ValueError, match="integers"):
        MPerClassBatchSampler([0.0, 1.0], 2, 1)
    s = MPerClassBatchSampler(LABELS, 8, 4)
    with pytest.raises(ValueError, match="epoch"):
        s.set_epoch(-1)
    with pytest.raises(ValueError, match="seed and epoch"):
        s.load_state_dict({"seed": 1})
    assert len(MPerClassBatchSampler(LABELS, 8, 4, batches_per_epoch=3)) == 3
    assert len(MPerClassBatchSampler(LABELS[:5], 4, 1)) == 1


def test_proportional_class_draw_follows_the_image_counts():
    """One class per batch: each batch's class is drawn with probability n_c / N (here sizes 1..10, N = 55)."""
    s = MPerClassBatchSampler(LABELS, batch_size=2, m=2, seed=3, batches_per_epoch=22000, class_draw="proportional")
    draws = Counter(int(LABELS[b[0]]) for b in s)
    expected = {c: len(s) * n / sum(_SIZES) for c, n in enumerate(_SIZES)}
    for c, e in expected.items():  # 5 binomial standard deviations
        assert abs(draws[c] - e) < 5 * (e * (1 - e / len(s))) ** 0.5, (c, draws[c], e)
    balanced = Counter(int(LABELS[b[0]]) for b in MPerClassBatchSampler(LABELS, 2, 2, seed=3, batches_per_epoch=1000))
    assert set(balanced.values()) == {100}, "the default draws every class equally often"


def test_proportional_batches_hold_distinct_classes_and_replay():
    s = MPerClassBatchSampler(LABELS, batch_size=12, m=3, seed=4, batches_per_epoch=50, class_draw="proportional")
    for b in s:
        check_batch(b, LABELS, 12, 3)
    assert s.batches(2) == MPerClassBatchSampler(
        LABELS, 12, 3, seed=4, batches_per_epoch=50, class_draw="proportional"
    ).batches(2)
    assert s.batches(0) != MPerClassBatchSampler(LABELS, 12, 3, seed=4, batches_per_epoch=50).batches(0)
    assert MPerClassBatchSampler(LABELS, 12, 3, seed=4, class_draw="balanced").batches(1) == MPerClassBatchSampler(
        LABELS, 12, 3, seed=4
    ).batches(1)


def test_unknown_class_draw():
    with pytest.raises(ValueError, match="class_draw must be one of"):
        MPerClassBatchSampler(LABELS, 12, 3, class_draw="uniform")
