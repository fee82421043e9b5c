"""Batch samplers by name, as the trainer builds them from ``train.sampler``."""

import pytest

from dmlkit.data import create_batch_sampler, create_dataset, list_batch_samplers
from dmlkit.assemble import build_trainer
from test_engine import tiny_config


@pytest.fixture(scope="module")
def glyphs_train():
    return create_dataset("glyphs", "train")


def test_registry_names():
    assert list_batch_samplers() == ["fastap_hard", "fastap_random", "m_per_class"]


@pytest.mark.parametrize(
    "name,params", [("m_per_class", {"m": 4}), ("fastap_random", {}), ("fastap_hard", {"batches_per_pair": 2})]
)
def test_every_sampler_yields_full_batches_of_dataset_indices(glyphs_train, name, params):
    sampler = create_batch_sampler(name, glyphs_train, 64, seed=1, **params)
    sampler.set_epoch(0)
    batches = list(sampler)
    assert len(batches) == len(sampler) > 0
    assert all(len(b) == 64 and 0 <= min(b) and max(b) < len(glyphs_train) for b in batches)


def test_hard_batches_have_two_categories(glyphs_train):
    sampler = create_batch_sampler("fastap_hard", glyphs_train, 64, seed=0)
    cats = glyphs_train.categories
    for batch in list(sampler)[:20]:
        assert len(set(cats[batch].tolist())) == 2


def test_unknown_sampler_parameter(glyphs_train):
    with pytest.raises(ValueError, match="batches_per_pair"):
        create_batch_sampler("fastap_hard", glyphs_train, 64, pairs=3)
    with pytest.raises(ValueError, match="m_per_class"):
        create_batch_sampler("m_per_klass", glyphs_train, 64)


def test_trainer_runs_fastap_with_random_class_batches(tmp_path):
    cfg = tiny_config("loss.name=fastap", "loss.miner=null", "train.sampler=fastap_random", "train.max_steps=4")
    summary = build_trainer(cfg, tmp_path / "fastap", quiet=True).fit()
    assert 0 <= summary["test"]["precision_at_1"] <= 1
