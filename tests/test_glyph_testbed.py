"""glyphs_testbed: pretraining classes apart from DML classes; DML train / val / test share a domain."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dmlkit.config import load_config
from dmlkit.data import build_datasets, check_dataset, create_dataset
from dmlkit.data.config import DataConfig
from dmlkit.data.datasets import glyphs as G
from dmlkit_lab.datasets.glyph_testbed import testbed_classes as classes_of  # (not collected as a test)

SPLITS = ("pretrain", "train", "val", "test")


@pytest.fixture(scope="module")
def table() -> G.GlyphTable:
    return G.load_glyph_table()


@pytest.fixture(scope="module")
def splits() -> dict:
    return {s: create_dataset("glyphs_testbed", s) for s in SPLITS}


def test_the_splits_cut_every_class_once(table):
    ids = {s: classes_of(table.codepoints, s) for s in SPLITS}
    every = np.concatenate(list(ids.values()))
    assert np.array_equal(np.sort(every), np.arange(table.num_classes)), "each class in exactly one split"
    half = (table.num_classes + 1) // 2
    assert np.array_equal(ids["pretrain"], np.arange(half)), "pretraining = the first half by code point"
    for s in ("train", "val", "test"):
        assert ids[s].min() >= half and np.all(np.diff(ids[s]) > 0)
    sizes = {s: ids[s].size / (table.num_classes - half) for s in ("train", "val", "test")}
    assert abs(sizes["train"] - 0.4) < 0.05 and abs(sizes["val"] - 0.1) < 0.03 and abs(sizes["test"] - 0.5) < 0.05, (
        sizes
    )
    # dealt by code point alone: a DML class lands in the same split whatever the other classes are
    dml = table.codepoints[half::2]  # every other DML class, behind as many (lower) pretraining ones
    other = np.concatenate([np.arange(dml.size), dml])
    for s in ("train", "val", "test"):
        assert set(other[classes_of(other, s)].tolist()) == set(dml.tolist()) & set(table.codepoints[ids[s]].tolist())


def test_dml_splits_share_a_domain_not_a_class(splits):
    cats = {s: set(splits[s].class_categories.tolist()) for s in ("train", "val", "test")}
    assert len(cats["train"] & cats["test"]) >= 10, "train and test classes come from the same blocks"
    chars = {s: set(splits[s].class_chars) for s in SPLITS}
    for a in SPLITS:
        for b in SPLITS:
            if a < b:
                assert chars[a].isdisjoint(chars[b]), (a, b)
    for s in SPLITS:
        check_dataset(splits[s])
        assert torch.equal(torch.unique(splits[s].labels), torch.arange(splits[s].num_classes))
        assert int(torch.bincount(splits[s].labels).min()) >= G.MIN_IMAGES


def test_unknown_split_lists_the_valid_ones():
    with pytest.raises(ValueError, match="pretrain, train, val, test"):
        create_dataset("glyphs_testbed", "holdout")


def test_val_split_validates_and_train_split_trains():
    sets = build_datasets(DataConfig(name="glyphs_testbed", val_fraction=0, val_split="val", max_classes=5))
    assert [sets[s].class_chars for s in ("train", "val")] == [
        create_dataset("glyphs_testbed", s, max_classes=5).class_chars for s in ("train", "val")
    ]
    assert sets["train"].augment and not sets["val"].augment
    pre = build_datasets(DataConfig(name="glyphs_testbed", train_split="pretrain", val_fraction=0.2, max_classes=10))
    assert pre["train"].num_classes == 8 and pre["val"].num_classes == 2
    assert set(pre["train"].class_names) <= set(create_dataset("glyphs_testbed", "pretrain").class_names)


def test_val_split_with_a_holdout_is_refused():
    with pytest.raises(ValueError, match="set data.val_fraction: 0"):
        DataConfig(name="glyphs_testbed", val_split="val")  # val_fraction defaults to 0.2
    with pytest.raises(ValueError, match="data.val_split"):
        DataConfig(val_split="", val_fraction=0)


@pytest.mark.parametrize("path", ["configs/testbed/testbed.yaml", "configs/testbed/testbed_contrastive.yaml"])
def test_testbed_configs_hold_the_fine_tuning_regime(path):
    cfg = load_config(path)
    t = cfg.train
    assert (
        cfg.model.pretrained == "glyphs-resnet20" and cfg.data.name == "glyphs_testbed" and cfg.data.val_split == "val"
    )
    assert t.head_lr == pytest.approx(10 * t.lr), "new layers learn 10x faster than the backbone"
    assert (t.batch_size, t.m_per_class, cfg.model.embedding_dim) == (60, 3, 128)
    assert t.schedule in ("step", "plateau") and t.val_every == t.max_steps, (
        "a fixed budget for every method, final weights tested"
    )
    # the conventional protocol validates on the test split instead
    from dmlkit.protocols.conventional import PROTOCOL_OVERRIDES

    assert load_config(path, PROTOCOL_OVERRIDES["conventional"]).data.val_split is None


def test_dml_split_is_the_union_of_train_val_and_test(table):
    """``dml`` (closed-set studies on the pretrained backbone) = every class after the pretraining half, once."""
    dml = classes_of(table.codepoints, "dml")
    half = (table.num_classes + 1) // 2
    assert np.array_equal(dml, np.arange(half, table.num_classes))
    union = np.sort(np.concatenate([classes_of(table.codepoints, s) for s in ("train", "val", "test")]))
    assert np.array_equal(dml, union)
    first = create_dataset("glyphs_testbed", "dml", max_classes=40)
    assert first.class_chars == [chr(int(cp)) for cp in table.codepoints[half : half + 40]]
