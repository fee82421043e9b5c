"""FastAP's Random / Hard / VehicleID minibatch sampling (Sec. A of the FastAP supplement)."""

from __future__ import annotations

import math
from collections import Counter
from itertools import combinations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from dmlkit.data.samplers.fastap import HardCategoryBatchSampler, RandomClassBatchSampler

# 40 classes with 2..6 images each, shuffled item order; class c belongs to category c % 5,
# except classes 35..39 which have no category (-1).
_RNG = np.random.default_rng(0)
_SIZES = [2 + c % 5 for c in range(40)]
LABELS = torch.tensor(_RNG.permutation(np.repeat(np.arange(40), _SIZES)))
CLASS_CATS = torch.tensor([c % 5 if c < 35 else -1 for c in range(40)])
ITEM_CATS = CLASS_CATS[LABELS]


def class_runs(batch: list[int]) -> list[tuple[int, int]]:
    """(class, run length) of consecutive indices of one class."""
    runs: list[tuple[int, int]] = []
    for y in LABELS[batch].tolist():
        if runs and runs[-1][0] == y:
            runs[-1] = (y, runs[-1][1] + 1)
        else:
            runs.append((y, 1))
    return runs


def check_whole_classes(part: list[int]) -> None:
    """Distinct indices, grouped by distinct classes, every class whole except possibly the last."""
    assert len(set(part)) == len(part)
    runs = class_runs(part)
    assert len({c for c, _ in runs}) == len(runs), "classes are distinct within a (half-)batch"
    for c, n in runs[:-1]:
        assert n == _SIZES[c], "a sampled class brings all its images"
    assert runs[-1][1] <= _SIZES[runs[-1][0]]


# ---------------------------------------------------------------- Random
def test_random_batches_are_whole_classes():
    s = RandomClassBatchSampler(LABELS, batch_size=16, seed=0)
    batches = list(s)
    assert len(s) == len(batches) == len(LABELS) // 16
    for b in batches:
        assert len(b) == 16
        check_whole_classes(b)


def test_random_visits_every_class_once_per_round():
    s = RandomClassBatchSampler(LABELS, batch_size=20, seed=3, batches_per_epoch=10)  # 200 > 160 images
    seq = [c for b in s for c, _ in class_runs(b)]
    # a class is consumed once per round, even when it only partly fits a batch
    first = []
    for c in seq:
        if c in first:
            break
        first.append(c)
    assert len(first) == 40, "all 40 classes are used before any repeats"


def test_random_max_images_per_class():
    s = RandomClassBatchSampler(LABELS, batch_size=12, seed=1, max_images_per_class=2)
    for b in s:
        assert len(b) == 12 and max(Counter(LABELS[b].tolist()).values()) <= 2
        assert len(set(b)) == 12


# ---------------------------------------------------------------- Hard
def test_hard_two_categories_half_each_and_pair_counts():
    k = 3
    s = HardCategoryBatchSampler(LABELS, CLASS_CATS, batch_size=12, seed=0, batches_per_pair=k)
    assert s.categories == [0, 1, 2, 3, 4] and s.skipped_categories == []
    batches = list(s)
    assert len(s) == len(batches) == math.comb(5, 2) * k
    pairs = Counter()
    for b in batches:
        assert len(b) == 12
        first, second = b[:6], b[6:]
        ca, cb = set(ITEM_CATS[first].tolist()), set(ITEM_CATS[second].tolist())
        assert len(ca) == len(cb) == 1 and ca != cb, "each half is one category, two different ones"
        assert -1 not in ca | cb, "classes without a category are excluded"
        check_whole_classes(first)
        check_whole_classes(second)
        pairs[frozenset(ca | cb)] += 1
    assert pairs == {frozenset(p): k for p in combinations(range(5), 2)}


def test_hard_schedule_matches_batches_and_is_shuffled():
    s = HardCategoryBatchSampler(LABELS, CLASS_CATS, batch_size=8, seed=5, batches_per_pair=2)
    sched = s.schedule(0)
    got = [(int(ITEM_CATS[b[0]]), int(ITEM_CATS[b[4]])) for b in s.batches(0)]
    assert got == sched
    assert sched != s.schedule(1)
    assert sorted(sched) != sched  # not in lexicographic order


def test_hard_batches_per_epoch_streams_rounds():
    s = HardCategoryBatchSampler(LABELS, CLASS_CATS, batch_size=8, seed=0, batches_per_epoch=25)
    assert len(list(s)) == 25 and len(HardCategoryBatchSampler(LABELS, CLASS_CATS, batch_size=8)) == 10  # a round
    pairs = Counter(frozenset(p) for p in s.schedule(0))
    assert sum(pairs.values()) == 25 and set(pairs.values()) <= {2, 3}  # two full rounds + 5


def test_small_categories_skip_or_replace():
    # category 0 holds classes 0,5,...,30 with 2 images each (14 images); with batch_size 32 -> halves of 16
    skip = HardCategoryBatchSampler(LABELS, CLASS_CATS, batch_size=32, seed=0)
    assert skip.skipped_categories == [0] and skip.categories == [1, 2, 3, 4]
    assert len(skip) == math.comb(4, 2)
    assert all(0 not in set(ITEM_CATS[b].tolist()) for b in skip)
    rep = HardCategoryBatchSampler(LABELS, CLASS_CATS, batch_size=32, seed=0, small_categories="replace")
    assert rep.categories == [0, 1, 2, 3, 4] and len(rep) == 10
    for b in rep:
        for part in (b[:16], b[16:]):
            assert len(part) == 16 and len(set(ITEM_CATS[part].tolist())) == 1
            if int(ITEM_CATS[part[0]]) == 0:
                assert set(part) == set(torch.nonzero(ITEM_CATS == 0).flatten().tolist())  # all 14, 2 repeat


# ---------------------------------------------------------------- VehicleID
def test_vehicleid_pairs_labelled_category_with_unlabelled_classes():
    s = HardCategoryBatchSampler(LABELS, CLASS_CATS, batch_size=8, seed=0, unlabelled="pair")
    counts = s.image_counts
    expected = {c: math.ceil(2 * counts[c] / 8) for c in range(5)}
    assert len(s) == sum(expected.values())
    per_cat = Counter()
    for b in s:
        halves = [b[:4], b[4:]]
        cats = [set(ITEM_CATS[h].tolist()) for h in halves]
        assert all(len(c) == 1 for c in cats)
        flat = [c.pop() for c in cats]
        assert sorted(flat)[0] == -1 and sorted(flat)[1] >= 0, "one labelled category, one unlabelled half"
        for h in halves:
            check_whole_classes(h)
        per_cat[max(flat)] += 1
    assert per_cat == expected


# ---------------------------------------------------------------- all
@pytest.mark.parametrize(
    "make",
    [
        lambda seed: RandomClassBatchSampler(LABELS, 16, seed=seed),
        lambda seed: HardCategoryBatchSampler(LABELS, CLASS_CATS, 12, seed=seed, batches_per_pair=2),
        lambda seed: HardCategoryBatchSampler(LABELS, CLASS_CATS, 8, seed=seed, unlabelled="pair"),
    ],
    ids=["random", "hard", "vehicleid"],
)
def test_determinism_epochs_and_resume(make):
    a, b = make(7), make(7)
    assert list(a) == list(b)
    a.set_epoch(1)
    assert list(a) != list(b)
    assert list(a) == a.batches(1) and list(a) == list(a)  # replays without set_epoch
    assert list(make(8)) != list(b)
    state = a.state_dict()
    assert state == {"seed": 7, "epoch": 1}
    c = make(0)
    c.load_state_dict(state)
    assert list(c) == list(a)
    state_before = torch.get_rng_state()
    list(c)
    assert torch.equal(state_before, torch.get_rng_state()), "no global RNG"


def test_works_as_dataloader_batch_sampler():
    ds = TensorDataset(torch.arange(len(LABELS)), LABELS)
    s = HardCategoryBatchSampler(LABELS, CLASS_CATS, 12, seed=0)
    loader = DataLoader(ds, batch_sampler=s)
    got = [idx.tolist() for idx, _ in loader]
    assert got == s.batches(0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_size=11), "even"),
        (dict(batch_size=0), "positive"),
        (dict(batch_size=8, batches_per_pair=0), "batches_per_pair"),
        (dict(batch_size=8, batches_per_epoch=-1), "batches_per_epoch"),
        (dict(batch_size=8, unlabelled="yes"), "unlabelled"),
        (dict(batch_size=8, small_categories="drop"), "small_categories"),
        (dict(batch_size=8, unlabelled="pair", batches_per_pair=2), "does not apply"),
        (dict(batch_size=200), "small_categories='replace'"),
        (dict(batch_size=8, seed=1.5), "seed"),
        (dict(batch_size=8, max_images_per_class=0), "max_images_per_class"),
    ],
)
def test_hard_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HardCategoryBatchSampler(LABELS, CLASS_CATS, **kwargs)


def test_hard_bad_categories():
    with pytest.raises(ValueError, match="no class has a category"):
        HardCategoryBatchSampler(LABELS, torch.full((40,), -1), 8)
    with pytest.raises(ValueError, match=r"RandomClassBatchSampler \(train.sampler=fastap_random in a config\)"):
        HardCategoryBatchSampler(LABELS, torch.zeros(40, dtype=torch.long), 8)
    with pytest.raises(ValueError, match=r"no class has a category.*train.sampler=fastap_random"):
        HardCategoryBatchSampler(LABELS, torch.full((40,), -1), 8)
    with pytest.raises(ValueError, match="none has -1"):
        HardCategoryBatchSampler(LABELS, CLASS_CATS.clamp(min=0), 8, unlabelled="pair")
    with pytest.raises(ValueError, match="indexing class_categories"):
        HardCategoryBatchSampler(LABELS, CLASS_CATS[:30], 8)
    with pytest.raises(ValueError, match="without a category hold"):
        HardCategoryBatchSampler(LABELS, CLASS_CATS, 60, unlabelled="pair")  # 20 unlabelled images < 30


def test_random_bad_arguments_and_states():
    with pytest.raises(ValueError, match="batch_size <= 160"):
        RandomClassBatchSampler(LABELS, 1000)
    with pytest.raises(ValueError, match="non-empty"):
        RandomClassBatchSampler([], 4)
    with pytest.raises(ValueError, match="integers"):
        RandomClassBatchSampler([0.5, 1.0], 1)
    s = RandomClassBatchSampler(LABELS, 8)
    with pytest.raises(ValueError, match="epoch"):
        s.set_epoch(-1)
    with pytest.raises(ValueError, match="seed and epoch"):
        s.load_state_dict({"seed": 1})


def test_glyphs_train_split_hard_sampling():
    from dmlkit.data import create_dataset

    ds = create_dataset("glyphs", "train")
    cats = ds.categories
    present = sorted(set(cats.tolist()) - {-1})
    assert len(present) == 13
    s = HardCategoryBatchSampler.from_dataset(ds, batch_size=64, seed=0, batches_per_pair=2)
    assert s.categories == present and s.skipped_categories == []  # smallest train category has 33 >= 32
    batches = list(s)
    assert len(batches) == math.comb(13, 2) * 2
    pairs = Counter()
    for b in batches:
        assert len(b) == 64 and len(set(b)) == 64
        a, c = set(cats[b[:32]].tolist()), set(cats[b[32:]].tolist())
        assert len(a) == len(c) == 1 and a != c
        pairs[frozenset(a | c)] += 1
    assert set(pairs.values()) == {2} and len(pairs) == math.comb(13, 2)
    images, labels = ds.get_batch(batches[0])
    assert images.shape[0] == 64 and torch.equal(labels, ds.labels[batches[0]])
    # with halves of 64 images, the two smallest categories (ARROW 33 and SYMBOL 34 images) are skipped by default
    big = HardCategoryBatchSampler.from_dataset(ds, batch_size=128)
    assert len(big.skipped_categories) == 2 and len(big) == math.comb(11, 2)
    r = RandomClassBatchSampler.from_dataset(ds, batch_size=128)
    assert len(r) == len(ds) // 128 and all(len(b) == 128 for b in r)


def test_classes_with_many_images_warn_and_name_the_cap():
    """Whole classes of 50 images fill a batch of 60 with one or two: both samplers warn, and the cap they name
    brings each batch to 20 classes (no warning); few-shot classes (4 images) never warn."""
    import warnings

    many = torch.arange(40).repeat_interleave(50)  # 40 classes x 50 images
    cats = torch.arange(40) % 4  # 4 categories of 10 classes
    for make in (
        lambda **k: RandomClassBatchSampler(many, 60, **k),
        lambda **k: HardCategoryBatchSampler(many, cats, 60, **k),
    ):
        with pytest.warns(RuntimeWarning, match=r"holds about 1\.2 classes .*max_images_per_class \(e\.g\. 3 for 20"):
            loose = make()
        assert min(len(set(many[b].tolist())) for b in loose.batches(0)) <= 2
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            capped = make(max_images_per_class=3)
        assert {len(set(many[b].tolist())) for b in capped.batches(0)} == {20}
    few = torch.arange(40).repeat_interleave(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RandomClassBatchSampler(few, 60)
        HardCategoryBatchSampler(few, cats, 60, small_categories="replace")
