"""``category_draws``: the images a sampler draws per category, against the category's share of the data."""

import subprocess
import sys

import pytest
import torch

from dmlkit.data.samplers.draws import category_draws, count_draws, format_category_draws
from dmlkit.data.samplers.fastap import HardCategoryBatchSampler, RandomClassBatchSampler
from tests.tests_helpers import TINY_OVERRIDES


class ListSampler:
    """A sampler with fixed batches per epoch; epoch e adds 10 * e to nothing, but records set_epoch calls."""

    def __init__(self, batches):
        self.batches_list, self.epoch, self.epochs_seen = batches, 7, []

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.epochs_seen.append(epoch)

    def __iter__(self):
        return iter(self.batches_list)


def test_counts_run_over_epoch_boundaries_and_restore_the_epoch():
    sampler = ListSampler([[0], [2, 2, 2]])
    counts = count_draws(sampler, 3)  # epoch 0: both batches, epoch 1: the first
    assert counts.tolist() == [2, 0, 3]
    assert sampler.epochs_seen == [0, 1, 7] and sampler.epoch == 7


def test_shares_and_ratio_by_hand():
    labels = torch.tensor([0, 0, 1])  # class 0 -> category 1, class 1 -> category 0
    rows = {r.category: r for r in category_draws(ListSampler([[0], [2, 2, 2]]), labels, [1, 0], 2, ["a", "b"])}
    assert rows[1].name == "b" and rows[1].images == 2 and rows[1].draws == 1
    assert rows[1].image_share == pytest.approx(2 / 3) and rows[1].draw_share == pytest.approx(1 / 4)
    assert rows[1].ratio == pytest.approx((1 / 4) / (2 / 3))
    assert rows[0].name == "a" and rows[0].draws == 3 and rows[0].ratio == pytest.approx((3 / 4) / (1 / 3))
    table = format_category_draws(list(rows.values()))
    assert table.splitlines()[2].startswith("| b | 1 | 2 | 66.7% | 1 | 25.0% | 0.38 |")


def _unbalanced():
    # three categories of 12, 24 and 48 images (classes of 4 images), a class without category
    class_categories = torch.tensor([0] * 3 + [1] * 6 + [2] * 12 + [-1])
    labels = torch.arange(class_categories.numel()).repeat_interleave(4)
    return labels, class_categories


def test_hard_batches_give_every_category_the_same_share_whatever_its_size():
    labels, cats = _unbalanced()
    sampler = HardCategoryBatchSampler(labels, cats, batch_size=8, seed=3, batches_per_pair=2)
    rows = {r.category: r for r in category_draws(sampler, labels, cats, 5 * len(sampler))}  # whole epochs
    for c in (0, 1, 2):
        assert rows[c].draw_share == pytest.approx(1 / 3)
    assert rows[-1].draws == 0 and rows[-1].name == "(none)"
    assert rows[0].ratio > 2 > 1 > rows[2].ratio


def test_random_batches_draw_categories_in_proportion_to_their_images():
    labels, cats = _unbalanced()
    sampler = RandomClassBatchSampler(labels, batch_size=8, seed=3)
    rows = category_draws(sampler, labels, cats, 2000)
    for r in rows:
        assert r.ratio == pytest.approx(1.0, abs=0.05), r


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="num_batches"):
        count_draws(ListSampler([[0]]), 0)
    with pytest.raises(ValueError, match="no batch"):
        count_draws(ListSampler([]), 1)
    with pytest.raises(ValueError, match="class_categories"):
        category_draws(ListSampler([[0]]), torch.tensor([0, 5]), [0, 1], 1)


def test_cli_prints_the_table_for_a_config():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dmlkit",
            "data",
            "draws",
            "configs/quickstart.yaml",
            "--batches",
            "20",
            *[a for o in TINY_OVERRIDES for a in ("--set", o)],
            "--set",
            "train.sampler=fastap_random",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "sampler fastap_random, 20 batches of 16" in out
    header, rule, *rows = out.splitlines()[1:]
    assert header.startswith("| category |") and rows
    assert sum(int(r.split("|")[5]) for r in rows) == 20 * 16
