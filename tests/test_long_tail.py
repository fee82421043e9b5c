"""The long-tailed training split (``dmlkit.data.long_tail``, ``data.tail_fraction`` / ``data.tail_images``).

References are independent of the module: the cut classes and kept images are recomputed here from the rule its
docstring states (SHA-256 of ``"dmlkit-long-tail:" + name``), and counts are compared with ``round(f * C)``.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
import torch

from dmlkit.config import load_config
from dmlkit.data import (
    DATASETS,
    DMLDataset,
    DataConfig,
    MPerClassBatchSampler,
    build_datasets,
    create_batch_sampler,
    no_categories,
)
from dmlkit.data.long_tail import cut_long_tail, long_tail_cut

SIZES = [5, 9, 6, 12, 7, 16, 8, 10, 11, 13, 14, 15]  # 12 classes, all larger than 3 images
NAME = "long_tail_toy"


def _labels(sizes: list[int]) -> torch.Tensor:
    """Class ids of the items, interleaved (item order is not class order)."""
    labels = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return labels[torch.randperm(labels.numel(), generator=torch.Generator().manual_seed(3))]


class Toy(DMLDataset):
    """A split of 12 classes (``train``) or 4 (``test``); the image of item ``i`` is the constant ``i``."""

    SPLITS = ("train", "test")

    def __init__(
        self,
        split: str = "train",
        root=None,
        seed: int = 0,
        augment: bool = False,
        image_size: int = 4,
        names: tuple[str, ...] | None = None,
    ):
        sizes = SIZES if split == "train" else [6, 7, 8, 9]
        self.labels = _labels(sizes)
        self.class_names = list(names) if names else [f"{split}-class-{c}" for c in range(len(sizes))]
        self.class_categories = no_categories(len(sizes))
        self.category_names = []
        self.augment = augment

    def __getitem__(self, i):
        return torch.full((1, 4, 4), float(i)), int(self.labels[i])


@pytest.fixture
def toy_registered():
    DATASETS.register(NAME, Toy)
    try:
        yield NAME
    finally:
        DATASETS.unregister(NAME)


def _rank(text: str) -> int:
    return int.from_bytes(hashlib.sha256(("dmlkit-long-tail:" + text).encode()).digest()[:8], "big")


def reference_cut(labels: torch.Tensor, names: list[str], fraction: float, images: int) -> dict[int, list[int]]:
    """Class id -> the item indices it keeps, for every class, by the documented rule."""
    count = round(fraction * len(names))
    cut = set(sorted(range(len(names)), key=lambda c: (_rank(names[c]), c))[:count])
    out = {}
    for c in range(len(names)):
        items = [i for i in range(labels.numel()) if int(labels[i]) == c]
        if c in cut and len(items) > images:
            positions = sorted(range(len(items)), key=lambda p: (_rank(f"{names[c]}:{p}"), p))[:images]
            items = sorted(items[p] for p in positions)
        out[c] = items
    return out


def _kept_by_class(dataset) -> dict[int, list[int]]:
    """Class id -> parent item indices ``dataset`` (a cut) keeps."""
    out: dict[int, list[int]] = {}
    for parent_index, label in zip(dataset.indices.tolist(), dataset.labels.tolist()):
        out.setdefault(int(dataset.parent_classes[label]), []).append(parent_index)
    return out


@pytest.mark.parametrize("fraction, images", [(0.5, 3), (0.25, 2), (0.3, 4), (0.9, 3)])
def test_round_fraction_classes_are_cut_to_exactly_tail_images_and_the_rest_untouched(fraction, images):
    toy = Toy()
    cut = cut_long_tail(toy, fraction, images)
    sizes = Counter(cut.labels.tolist())
    parent = Counter(toy.labels.tolist())
    short = [c for c in range(toy.num_classes) if sizes[c] < parent[c]]
    assert len(short) == round(fraction * len(SIZES))
    assert all(sizes[c] == images for c in short)
    assert cut.num_classes == toy.num_classes and cut.class_names == toy.class_names  # class ids unchanged
    assert torch.equal(cut.parent_classes, torch.arange(toy.num_classes))
    kept = _kept_by_class(cut)
    for c in set(range(toy.num_classes)) - set(short):
        assert kept[c] == torch.nonzero(toy.labels == c).flatten().tolist()
    assert cut.indices.tolist() == sorted(cut.indices.tolist())  # the parent's item order


@pytest.mark.parametrize("fraction, images", [(0.5, 3), (0.25, 2), (0.75, 5)])
def test_the_cut_is_the_documented_hash_rule(fraction, images):
    toy = Toy()
    assert _kept_by_class(cut_long_tail(toy, fraction, images)) == reference_cut(
        toy.labels, toy.class_names, fraction, images
    )


def test_the_cut_changes_only_when_its_inputs_change():
    toy = Toy()
    base = long_tail_cut(toy.labels, toy.class_names, 0.5, 3)
    assert torch.equal(base.indices, long_tail_cut(toy.labels, toy.class_names, 0.5, 3).indices)
    renamed = [f"other-{n}" for n in toy.class_names]
    assert not torch.equal(long_tail_cut(toy.labels, renamed, 0.5, 3).cut, base.cut)  # names decide the classes
    assert not torch.equal(long_tail_cut(toy.labels, toy.class_names, 0.5, 4).indices, base.indices)
    wider = long_tail_cut(toy.labels, toy.class_names, 0.75, 3).cut
    assert set(base.cut.tolist()) < set(wider.tolist())  # nested: a larger fraction cuts the same classes and more
    # A class keeps its rank whatever other classes the split holds: the 6 classes of the names sorted by
    # digest lose to the cut in the same order when the last 4 classes are gone.
    names8 = toy.class_names[:8]
    first8 = long_tail_cut(toy.labels[toy.labels < 8], names8, 0.5, 3).cut.tolist()
    assert first8 == sorted(sorted(range(8), key=lambda c: _rank(names8[c]))[:4])


def test_small_classes_keep_every_image_and_nothing_cut_returns_the_dataset():
    labels = torch.tensor([0, 0, 1, 1, 1, 1, 1, 2, 2, 2])
    names = ["a", "b", "c"]
    plan = long_tail_cut(labels, names, 0.99, 3)  # every class cut: the 2- and 3-image classes keep theirs
    assert Counter(labels[plan.indices].tolist()) == {0: 2, 1: 3, 2: 3}
    toy = Toy()
    assert cut_long_tail(toy, 0.0, 3) is toy
    assert cut_long_tail(Toy(), 0.04, 3).__class__ is Toy  # round(0.04 * 12) = 0 classes


def test_build_datasets_cuts_train_after_the_holdout_and_never_val_or_test(toy_registered):
    plain = build_datasets(DataConfig(name=NAME, val_fraction=0.25), seed=0)
    long = build_datasets(DataConfig(name=NAME, val_fraction=0.25, tail_fraction=0.5, tail_images=3), seed=0)
    for split in ("val", "test"):
        assert torch.equal(plain[split].labels, long[split].labels)
        assert plain[split].class_names == long[split].class_names
        assert [float(long[split][i][0].flatten()[0]) for i in range(len(long[split]))] == [
            float(plain[split][i][0].flatten()[0]) for i in range(len(plain[split]))
        ]
    train = plain["train"]  # 9 of the 12 classes after the hold-out: round(0.5 * 9) = 4 cut
    assert train.num_classes == 9
    expected = reference_cut(train.labels, train.class_names, 0.5, 3)
    got = Counter(long["train"].labels.tolist())
    assert {c: len(v) for c, v in expected.items()} == dict(got)
    assert sum(1 for c in range(9) if got[c] == 3) == 4
    assert long["train"].augment


def test_the_same_cut_for_every_run_seed(toy_registered):
    cfg = DataConfig(name=NAME, val_fraction=0, tail_fraction=0.5, tail_images=3)
    state = torch.get_rng_state()
    cuts = [build_datasets(cfg, seed=seed)["train"].indices for seed in (0, 1, 17, 2**31)]
    assert all(torch.equal(cuts[0], c) for c in cuts[1:])
    assert torch.equal(state, torch.get_rng_state()), "global RNG untouched"


@pytest.mark.parametrize("draw", ["balanced", "proportional"])
def test_two_image_classes_train_with_m_per_class(draw):
    cut = cut_long_tail(Toy(), 0.5, 2)
    sampler = create_batch_sampler("m_per_class", cut, 12, seed=0, m=3, batches_per_epoch=30, class_draw=draw)
    two = {c for c, n in Counter(cut.labels.tolist()).items() if n == 2}
    seen = set()
    for batch in sampler:
        labels = cut.labels[batch].tolist()
        assert len(batch) == 12 and set(Counter(labels).values()) == {3}
        for k in range(0, 12, 3):
            c = labels[k]
            if c in two:  # 3 draws from 2 images: with replacement, all of the class
                assert set(batch[k : k + 3]) <= set(torch.nonzero(cut.labels == c).flatten().tolist())
                seen.add(c)
    assert seen, "some 2-image class was drawn"


@pytest.mark.parametrize(
    "key, value",
    [
        ("tail_fraction", 1.0),
        ("tail_fraction", -0.1),
        ("tail_fraction", "half"),
        ("tail_fraction", True),
        ("tail_images", 1),
        ("tail_images", 2.5),
        ("tail_images", True),
        ("tail_images", 0),
    ],
)
def test_bad_values_raise_naming_the_key(key, value):
    with pytest.raises(ValueError, match=f"data.{key}"):
        DataConfig(**{key: value})


def test_a_bad_override_names_the_key():
    with pytest.raises(ValueError, match="data.tail_images"):
        load_config(None, ["data.tail_fraction=0.5", "data.tail_images=1"])
    cfg = load_config(None, ["data.tail_fraction=0.5", "data.tail_images=2"])
    assert (cfg.data.tail_fraction, cfg.data.tail_images) == (0.5, 2)


def test_the_longtail_configs_build_their_samplers():
    """The plain run draws classes in proportion to their images, the balanced run equally often (config -> sampler)."""
    from dmlkit.assemble.build import build_sampler

    toy = cut_long_tail(Toy(), 0.5, 3)
    for stem, draw in (
        ("font_testbed_longtail", "proportional"),
        ("font_testbed_longtail_balanced", "balanced"),
        ("font_testbed_longtail_sft_unbalanced", "proportional"),
    ):
        cfg = load_config(f"configs/font_testbed/{stem}.yaml", ["train.batch_size=12"])
        assert (cfg.data.tail_fraction, cfg.data.tail_images) == (0.5, 3)
        sampler = build_sampler(cfg, toy)
        assert sampler.class_draw == draw
        direct = MPerClassBatchSampler(toy.labels, 12, 3, seed=cfg.seed, class_draw=draw)
        assert sampler.batches(0) == direct.batches(0)


def test_the_runs_train_split_is_what_it_trained_on_unaugmented(toy_registered):
    from dmlkit.assemble import run_split

    cfg = load_config(
        None,
        [
            f"data.name={NAME}",
            "data.val_fraction=0.25",
            "data.tail_fraction=0.5",
            "data.tail_images=3",
            "data.augment=true",
        ],
    )
    trained = build_datasets(cfg.data, seed=cfg.seed)["train"]
    train = run_split(cfg, "train")  # after the hold-out (9 of 12 classes) and the cut (4 of them to 3 images)
    assert torch.equal(train.labels, trained.labels) and train.class_names == trained.class_names
    assert len(train) < len(
        build_datasets(load_config(None, [f"data.name={NAME}", "data.val_fraction=0.25"]).data)["train"]
    )
    assert not train.augment and trained.augment
    assert [float(train[i][0].flatten()[0]) for i in range(len(train))] == [
        float(trained.with_augment(False)[i][0].flatten()[0]) for i in range(len(train))
    ]
