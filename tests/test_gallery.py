"""Nearest-neighbour gallery: query choice, exact neighbours without the query, frame colours, a run's gallery."""

import json

import matplotlib.image as mpimg
import numpy as np
import pytest
import torch

from dmlkit.cli import main
from dmlkit.config import load_config
from dmlkit.assemble import build_trainer
from dmlkit.assemble import load_finished_run
from dmlkit.report.gallery import GALLERY_FILE
from dmlkit.viz.gallery import (
    CORRECT_COLOUR,
    QUERY_COLOUR,
    WRONG_COLOUR,
    choose_queries,
    draw_gallery,
    gallery_figure,
    nearest_neighbours,
)
from tests_helpers import TINY_OVERRIDES


def _rgb(hex_colour):
    return np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])


def _pixels_of(png, hex_colour, tol=0.08):
    image = mpimg.imread(png)[..., :3]
    return int((np.abs(image - _rgb(hex_colour)).max(axis=-1) < tol).sum())


def test_choose_queries_takes_distinct_classes_first_and_is_seeded():
    labels = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3, 3, 3])  # class 2 has a single image: never a first pick
    q = choose_queries(labels, 3, seed=5)
    assert sorted(labels[q].tolist()) == [0, 1, 3]
    assert torch.equal(q, choose_queries(labels, 3, seed=5))
    assert len(set(choose_queries(labels, 10, seed=1).tolist())) == 10
    for bad in (0, 11, 2.0):
        with pytest.raises(ValueError, match="number of queries"):
            choose_queries(labels, bad)


def test_nearest_neighbours_match_brute_force_without_the_query():
    gen = torch.Generator().manual_seed(0)
    emb = torch.randn(40, 5, generator=gen)
    queries = torch.tensor([3, 0, 39, 17])
    idx, dist = nearest_neighbours(emb, queries, k=6)
    d = torch.cdist(emb.double(), emb.double())
    d[torch.arange(40), torch.arange(40)] = float("inf")
    ref_dist, ref_idx = d[queries].sort(dim=1)
    assert torch.equal(idx, ref_idx[:, :6])
    torch.testing.assert_close(dist.double(), ref_dist[:, :6], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="k must be"):
        nearest_neighbours(emb, queries, k=40)


def test_a_duplicate_of_the_query_is_its_nearest_neighbour():
    emb = torch.randn(10, 4, generator=torch.Generator().manual_seed(1))
    emb[7] = emb[2]
    idx, dist = nearest_neighbours(emb, torch.tensor([2, 7]), k=3)
    assert idx[:, 0].tolist() == [7, 2]
    assert dist[:, 0].tolist() == [0.0, 0.0]
    assert 2 not in idx[0].tolist() and 7 not in idx[1].tolist()


def _images(n, seed=0):
    return torch.rand(n, 1, 12, 12, generator=torch.Generator().manual_seed(seed))


def test_frames_are_green_for_the_same_class_and_red_otherwise(tmp_path):
    q, k = 2, 3
    query_labels = torch.tensor([4, 9])
    neighbours = _images(q * k).reshape(q, k, 1, 12, 12)
    all_right, mixed = tmp_path / "right.png", tmp_path / "mixed.png"
    mask = gallery_figure(_images(q), query_labels, neighbours, torch.tensor([[4, 4, 4], [9, 9, 9]]), all_right)
    assert mask.all()
    assert _pixels_of(all_right, CORRECT_COLOUR) > 100 and _pixels_of(all_right, QUERY_COLOUR) > 100
    assert _pixels_of(all_right, WRONG_COLOUR) == 0
    mask = gallery_figure(_images(q), query_labels, neighbours, torch.tensor([[4, 1, 4], [2, 2, 2]]), mixed)
    assert mask.tolist() == [[True, False, True], [False, False, False]]
    green, red = _pixels_of(mixed, CORRECT_COLOUR), _pixels_of(mixed, WRONG_COLOUR)
    assert red > 100 and green > 100
    # 2 green frames vs 4 red ones, all of one size.
    assert red / green == pytest.approx(2.0, rel=0.15)


def test_gallery_figure_rejects_mismatched_shapes(tmp_path):
    with pytest.raises(ValueError, match="neighbour_images"):
        gallery_figure(
            _images(2),
            torch.tensor([0, 1]),
            _images(4).reshape(2, 2, 1, 12, 12),
            torch.zeros(2, 3, dtype=torch.long),
            tmp_path / "x.png",
        )
    with pytest.raises(ValueError, match="one row of neighbours per query"):
        gallery_figure(
            _images(3),
            torch.tensor([0, 1]),
            _images(4).reshape(2, 2, 1, 12, 12),
            torch.zeros(2, 2, dtype=torch.long),
            tmp_path / "x.png",
        )


def test_draw_gallery_on_an_indexable_dataset(tmp_path):
    labels = torch.arange(6).repeat_interleave(3)
    # Embeddings: class centres far apart, so every neighbour among the first 2 is of the query's class.
    emb = torch.eye(6)[labels] * 10 + 0.01 * torch.randn(18, 6, generator=torch.Generator().manual_seed(0))
    dataset = [(img, int(y)) for img, y in zip(_images(18), labels)]
    mask = draw_gallery(dataset, emb, labels, tmp_path / "g.png", queries=4, k=2)
    assert mask.shape == (4, 2) and mask.all()
    assert _pixels_of(tmp_path / "g.png", WRONG_COLOUR) == 0


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("gallery") / "run"
    cfg = load_config("configs/quickstart.yaml", TINY_OVERRIDES + ["eval.clustering=false", "plots=false"])
    build_trainer(cfg, run_dir, quiet=True).fit()
    return run_dir


def test_first_neighbours_of_all_test_images_give_the_runs_precision_at_1(tiny_run):
    run = load_finished_run(tiny_run)
    dataset = run.split("test")
    emb, labels = run.embed(dataset)
    assert len(labels) == len(dataset)
    idx, _ = nearest_neighbours(emb, torch.arange(len(labels)), k=1)
    p_at_1 = (labels[idx[:, 0]] == labels).double().mean().item()
    summary = json.loads((tiny_run / "summary.json").read_text())
    assert p_at_1 == pytest.approx(summary["test"]["precision_at_1"], abs=1e-9)


def test_gallery_command_writes_the_png_into_the_run(tiny_run, capsys):
    assert main(["gallery", str(tiny_run), "--queries", "3", "--k", "4"]) == 0
    out = tiny_run / "plots" / GALLERY_FILE
    assert mpimg.imread(out).shape[0] > 200
    assert _pixels_of(out, QUERY_COLOUR) > 100
    assert "neighbours share their query's class" in capsys.readouterr().out


def test_gallery_of_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["gallery", str(tmp_path)]) == 2
    assert "config.yaml" in capsys.readouterr().err
