"""The dmlkit command: train/evaluate/data/bench through ``main(argv)``, and its error messages."""

import json

import pytest

from dmlkit.cli import main
from tests_helpers import TINY_OVERRIDES


def _set(overrides):
    args = []
    for o in overrides:
        args += ["--set", o]
    return args


def test_train_then_evaluate(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", "configs/quickstart.yaml", "--run-dir", str(run_dir), "--quiet", *_set(TINY_OVERRIDES)]) == 0
    out = capsys.readouterr().out
    assert "precision_at_1" in out and "mean_average_precision_at_r" in out
    assert main(["evaluate", str(run_dir)]) == 0
    printed = json.loads(capsys.readouterr().out)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert printed["precision_at_1"] == pytest.approx(summary["test"]["precision_at_1"], abs=1e-6)


def test_unknown_config_key_is_a_clear_error(tmp_path, capsys):
    code = main(["train", "configs/quickstart.yaml", "--run-dir", str(tmp_path / "r"), "--set", "train.lrate=1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "lrate" in err and "valid keys are" in err
    assert not (tmp_path / "r").exists()


def test_train_needs_a_config(capsys):
    assert main(["train"]) == 2
    assert "needs a CONFIG" in capsys.readouterr().err


def test_resume_refuses_overrides(tmp_path, capsys):
    assert main(["train", "configs/quickstart.yaml", "--resume", str(tmp_path)]) == 2
    assert "own saved config" in capsys.readouterr().err


def test_data_list(capsys):
    assert main(["data", "list"]) == 0
    assert "glyphs" in capsys.readouterr().out.split()


def test_data_prepare_unknown(capsys):
    assert main(["data", "prepare", "imagenet-21k"]) == 2
    assert "glyphs" in capsys.readouterr().err


def test_bench_retrieval_small(capsys):
    assert main(["bench", "retrieval", "--n", "3000", "--per-class", "5"]) == 0
    out = capsys.readouterr().out
    assert "speed-up" in out and "values match to 1e-06: yes" in out
