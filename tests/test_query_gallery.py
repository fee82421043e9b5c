"""Query -> gallery evaluation (In-shop): eval.split holds the queries, eval.reference_split the gallery."""

import json

import pytest

import dataset_miniatures as M
from dmlkit.config import load_config
from dmlkit.assemble import embed_run, evaluate_run
from dmlkit.assemble import build_trainer
from dmlkit.evaluation import retrieval_metrics
from tests_helpers import TINY_OVERRIDES


def test_test_metrics_are_queries_against_the_gallery(tmp_path):
    root = M.write_inshop(tmp_path / "data", train_items=24, test_items=6)
    overrides = TINY_OVERRIDES + [
        "data.name=inshop",
        f"data.root={root}",
        "data.max_classes=null",
        "data.val_fraction=0",
        "eval.split=query",
        "eval.reference_split=gallery",
        "eval.clustering=false",
        "plots=false",
        "train.max_steps=2",
        "train.val_every=2",
        "train.batch_size=12",
    ]
    run_dir = tmp_path / "run"
    summary = build_trainer(load_config("configs/quickstart.yaml", overrides), run_dir, quiet=True).fit()
    queries, gallery = embed_run(run_dir, "query"), embed_run(run_dir, "gallery")
    expected = retrieval_metrics(queries[0], queries[1], gallery[0], gallery[1])
    for key, value in expected.items():
        assert summary["test"][key] == pytest.approx(value)
    assert evaluate_run(run_dir, "query")["precision_at_1"] == pytest.approx(expected["precision_at_1"])
    within = retrieval_metrics(*queries)
    assert json.loads((run_dir / "summary.json").read_text())["validated_on_test"]
    assert within != expected  # self-retrieval among the queries is a different measurement


def test_an_unknown_reference_split_names_the_valid_ones(tmp_path):
    root = M.write_inshop(tmp_path / "data", train_items=8, test_items=4)
    cfg = load_config(
        "configs/quickstart.yaml",
        TINY_OVERRIDES
        + [
            "data.name=inshop",
            f"data.root={root}",
            "data.max_classes=null",
            "eval.split=query",
            "eval.reference_split=galery",
        ],
    )
    with pytest.raises(ValueError, match="gallery"):
        build_trainer(cfg, tmp_path / "run", quiet=True).fit()
