"""Floor rows: raw pixels and the untrained model on a split, as rows of the protocol tables."""

from __future__ import annotations

import json

import pytest
import torch

from dmlkit.assemble import run_split
from dmlkit.cli import main
from dmlkit.config import load_config
from dmlkit.protocols.floors import floor_metrics, floor_table, pixel_features

OVERRIDES = ["data.max_classes=12", "model.embedding_dim=16", "eval.clustering=false"]


@pytest.fixture(scope="module")
def cfg():
    return load_config("configs/quickstart.yaml", OVERRIDES)


def brute_force_p_at_1(x: torch.Tensor, y: torch.Tensor) -> float:
    d = torch.cdist(x.double(), x.double())
    d.fill_diagonal_(float("inf"))
    return float((y[d.argmin(1)] == y).double().mean())


def test_raw_pixels_are_the_flattened_normalised_images(cfg):
    test = run_split(cfg, "test")
    x, y = pixel_features(test)
    assert x.shape == (len(test), 32 * 32) and torch.equal(y, test.labels)
    assert torch.allclose(x[3], test[3][0].flatten())


def test_floors_score_pixels_once_and_each_seed_of_the_untrained_model(cfg):
    floors = floor_metrics(cfg, seeds=[0, 1])
    assert list(floors) == ["raw pixels", "untrained"], "no pretrained row without model.pretrained"
    (pixels,) = floors["raw pixels"]
    x, y = pixel_features(run_split(cfg, "test"))
    assert pixels["precision_at_1"] == pytest.approx(brute_force_p_at_1(x, y))
    untrained = floors["untrained"]
    assert [m["seed"] for m in untrained] == [0, 1]
    assert untrained[0]["mean_average_precision_at_r"] != untrained[1]["mean_average_precision_at_r"], (
        "seeded weights differ"
    )
    assert floor_metrics(cfg, seeds=[0])["untrained"][0] == untrained[0], "and are the same for the same seed"
    assert floor_metrics(cfg, split="train", seeds=[0])["raw pixels"][0]["precision_at_1"] != pixels["precision_at_1"]


def test_floor_table_and_cli(cfg, tmp_path, capsys):
    table = floor_table(cfg, seeds=[0, 1], out=tmp_path / "floors.md")
    assert "| floor: raw pixels (n=1) |" in table and "| floor: untrained (n=2) |" in table and "MAP@R" in table
    assert (tmp_path / "floors.md").read_text() == table
    record = json.loads((tmp_path / "floors.json").read_text())
    assert record["split"] == "test" and len(record["floors"]["untrained"]) == 2
    args = ["floors", "configs/quickstart.yaml", "--seeds", "0", *[a for o in OVERRIDES for a in ("--set", o)]]
    assert main(args) == 0
    printed = capsys.readouterr()
    assert "floor: untrained (n=1)" in printed.out and "floors:" not in printed.out  # stdout: the table alone
    n_test = len(run_split(cfg, "test"))
    assert printed.err.splitlines() == [
        f"floors: raw pixels of {n_test} test images",
        f"floors: untrained, seed 0: embedding {n_test} test images",
    ]
    assert main([*args, "--quiet"]) == 0 and capsys.readouterr().err == ""
    assert main(["floors", "configs/quickstart.yaml", "--split", "nope"]) == 2
    assert "unknown split 'nope'" in capsys.readouterr().err


def test_a_pretrained_config_adds_the_not_fine_tuned_row(cfg, tmp_path, monkeypatch):
    weights = tmp_path / "w.pt"
    from dmlkit.models.backbones import create_backbone

    torch.save(create_backbone("resnet20", in_channels=1).state_dict(), weights)
    floors = floor_metrics(load_config("configs/quickstart.yaml", [*OVERRIDES, f"model.pretrained={weights}"]))
    assert list(floors) == ["raw pixels", "untrained", f"pretrained ({weights}), not fine-tuned"]
