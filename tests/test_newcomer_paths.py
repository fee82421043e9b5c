"""What a newcomer runs first: re-running a saved config, scoring the validation split again,
naming a run folder that is not there."""

from __future__ import annotations

import json

import pytest

from dmlkit.cli import main
from tests_helpers import TINY_OVERRIDES

QUICK = [*TINY_OVERRIDES, "plots=false", "eval.clustering=false"]


def _set(overrides):
    return [arg for o in overrides for arg in ("--set", o)]


@pytest.fixture(scope="module")
def seed1_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("newcomer")
    run = base / "qs-seed1"
    assert (
        main(
            [
                "train",
                "configs/quickstart.yaml",
                "--run-dir",
                str(run),
                "--quiet",
                *_set([*QUICK, "seed=1", f"output_dir={base / 'runs'}"]),
            ]
        )
        == 0
    )
    return run


def test_a_saved_config_re_runs_into_its_own_folder_not_output_dir_name(seed1_run, capsys):
    capsys.readouterr()
    assert main(["train", str(seed1_run / "config.yaml"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"run folder '{seed1_run}' already holds a run that finished" in err and "--run-dir" in err
    assert not (seed1_run.parent / "runs").exists(), "nothing may be written under the saved output_dir/name"


def test_a_saved_config_trains_again_where_run_dir_says(seed1_run, tmp_path, capsys):
    again = tmp_path / "again"
    assert main(["train", str(seed1_run / "config.yaml"), "--run-dir", str(again), "--quiet"]) == 0
    first, second = (json.loads((r / "summary.json").read_text()) for r in (seed1_run, again))
    assert second["test"] == first["test"], "the saved config reproduces its run"


def test_the_validation_split_is_scored_again_as_early_stopping_saw_it(seed1_run, capsys):
    capsys.readouterr()
    assert main(["evaluate", str(seed1_run), "--split", "val"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    summary = json.loads((seed1_run / "summary.json").read_text())
    best = summary["best_val"]
    assert metrics[best["metric"]] == pytest.approx(best["value"], abs=1e-6)


def test_a_missing_run_folder_is_named_as_missing(tmp_path, capsys):
    for command in (["gallery", str(tmp_path / "nonexistent")], ["evaluate", str(tmp_path / "nonexistent")]):
        assert main(command) == 2
        assert f"no such run folder or checkpoint: '{tmp_path / 'nonexistent'}'" in capsys.readouterr().err


def test_the_printed_summary_is_in_percent_like_every_printed_table(tmp_path, capsys, monkeypatch):
    from dmlkit.cli import print_summary

    monkeypatch.setenv("COLUMNS", "120")  # rich wraps the table to the terminal; other tests may leave it narrow
    summary = {
        "name": "qs",
        "steps": 30,
        "best_step": 30,
        "train_seconds": 1.0,
        "test": {"precision_at_1": 0.80984, "mean_average_precision_at_r": 0.3139},
    }
    print_summary(summary, tmp_path, wall_seconds=75.4)
    out = capsys.readouterr().out
    assert "80.98" in out and "31.39" in out and "0.3139" not in out
    assert "train time 1 s; wall time 75 s" in out


def test_the_validation_line_is_in_percent_too():
    import io

    from rich.console import Console

    from dmlkit.engine.progress import TrainingProgress

    out = io.StringIO()
    progress = TrainingProgress(total=4, console=Console(file=out, force_terminal=False, width=120))
    with progress:
        progress.advance(0.93)
        progress.show_validation("mean_average_precision_at_r", 0.27)
    assert "val mean_average_precision_at_r 27.00%" in out.getvalue() and "0.27" not in out.getvalue()


def test_gallery_reuses_the_test_embeddings_evaluate_kept_until_the_weights_change(seed1_run, monkeypatch, tmp_path):
    import os

    import torch

    from dmlkit.assemble import finished_run
    from dmlkit.report.gallery import run_gallery

    assert main(["evaluate", str(seed1_run)]) == 0
    kept = torch.load(seed1_run / "embeddings_test.pt", weights_only=True)

    def no_embedding(self, dataset):
        raise AssertionError("the kept embeddings should have been used")

    monkeypatch.setattr(finished_run.LoadedRun, "embed", no_embedding)
    run_gallery(seed1_run, tmp_path / "g.png")
    best = seed1_run / "best.pt"
    os.utime(best, ns=(best.stat().st_atime_ns, best.stat().st_mtime_ns + 10**9))  # new weights written
    with pytest.raises(AssertionError, match="kept embeddings"):
        run_gallery(seed1_run, tmp_path / "g2.png")
    monkeypatch.undo()
    run_gallery(seed1_run, tmp_path / "g3.png")
    assert torch.equal(
        torch.load(seed1_run / "embeddings_test.pt", weights_only=True)["embeddings"], kept["embeddings"]
    )


def test_a_validation_split_with_one_image_a_class_says_so_instead_of_divergence(tmp_path):
    from benchmarks.data import make_jpegs
    from dmlkit.assemble import build_trainer
    from dmlkit.config import load_config

    root = make_jpegs(tmp_path / "cub", 64, 60, 50, per_class=8, test_per_class=1)  # test classes: 1 image each
    cfg = load_config(
        "configs/paper/sft_t1_multi_similarity_base_cub.yaml",
        [
            f"data.root={root}",
            "data.image_size=32",
            "model.backbone=resnet20",
            "model.pretrained=false",
            "train.batch_size=8",
            "train.m_per_class=2",
            "train.max_steps=2",
            "train.val_every=2",
            "plots=false",
            "eval.clustering=false",
            "train.accelerator=cpu",
        ],
    )
    with pytest.raises(
        ValueError,
        match=r"is undefined \(nan\): no validation query has another image of its class.*"
        r"8 images of 8 classes",
    ):
        build_trainer(cfg, tmp_path / "run", quiet=True).fit()


def test_train_says_what_it_does_in_its_long_silent_parts(tmp_path, capsys):
    from tests_helpers import TINY_OVERRIDES

    sets = [a for o in TINY_OVERRIDES for a in ("--set", o)]
    assert main(["train", "configs/quickstart.yaml", *sets, "--run-dir", str(tmp_path / "run")]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dmlkit train: ")]
    assert said[0] == "dmlkit train: loading glyphs and building the model (resnet20)"
    assert said[1].startswith("dmlkit train: testing the best weights (step ") and said[1].endswith(" test images")
    assert said[2] == f"dmlkit train: drawing the plots into {tmp_path / 'run' / 'plots'}"


def test_a_long_run_on_a_pipe_prints_a_heartbeat_line_between_validations():
    import io

    from rich.console import Console

    from dmlkit.engine.progress import HEARTBEAT_SECONDS, TrainingProgress

    now = [0.0]
    out = io.StringIO()
    progress = TrainingProgress(
        total=100, console=Console(file=out, force_terminal=False, width=120), clock=lambda: now[0]
    )
    with progress:
        for step in range(1, 41):
            now[0] = step * HEARTBEAT_SECONDS / 10  # ten steps per heartbeat period
            progress.advance(1.0 / step)
            if step == 25:
                progress.show_validation("precision_at_1", 0.5)
    lines = out.getvalue().splitlines()
    assert lines == [
        "step 10/100: loss 0.1000, 0.33 step/s, val -",
        "step 20/100: loss 0.0500, 0.33 step/s, val -",
        "step 25: loss 0.0400, val precision_at_1 50.00%",
        "step 35/100: loss 0.0286, 0.33 step/s, val precision_at_1 50.00%",
    ]
    quiet_out = io.StringIO()
    quiet = TrainingProgress(
        total=100, quiet=True, console=Console(file=quiet_out, force_terminal=False), clock=lambda: now[0]
    )
    with quiet:
        now[0] += 10 * HEARTBEAT_SECONDS
        quiet.advance(0.5)
    assert quiet_out.getvalue() == ""


def test_evaluate_says_what_it_embeds_before_the_long_part_and_nothing_when_it_reuses_the_embeddings(seed1_run, capsys):
    import json

    (seed1_run / "embeddings_test.pt").unlink(missing_ok=True)
    capsys.readouterr()
    assert main(["evaluate", str(seed1_run)]) == 0
    first = capsys.readouterr()
    import torch

    kept = torch.load(seed1_run / "embeddings_test.pt", weights_only=True)
    assert f"embedding {len(kept['labels'])} test images with best.pt" in first.err
    assert json.loads(first.out)["precision_at_1"] > 0  # stdout stays the JSON alone
    assert main(["evaluate", str(seed1_run)]) == 0
    assert "embedding" not in capsys.readouterr().err  # kept from the first call
