"""A practitioner's own photos through the command line: bad files found all at once or skipped and listed,
``embed`` with the same choice, a resumed run that says where it continues, ``evaluate`` in percent."""

import io
import json

import pytest
from PIL import Image

from dmlkit.cli import main
from test_image_folder import write_flat

RUN = [
    "data.image_size=16",
    "model.embedding_dim=8",
    "train.batch_size=8",
    "train.m_per_class=2",
    "train.max_steps=2",
    "train.val_every=2",
    "eval.clustering=false",
    "plots=false",
]


def _sets(root, *extra):
    return [x for item in [f"data.root={root}", *RUN, *extra] for x in ("--set", item)]


def _truncated_png(path):
    buffer = io.BytesIO()
    Image.effect_noise((40, 40), 60).convert("RGB").save(buffer, "PNG")
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])


@pytest.fixture
def photos(tmp_path):
    """12 classes (6 train, 6 test by name) x 4 images, two files that are not images (a train and a test
    class) and one truncated PNG (a test class, header intact)."""
    root = write_flat(tmp_path / "photos", num_classes=12, per_class=4)
    (root / "c01" / "0.png").write_bytes(b"not a png at all")
    (root / "c09" / "2.png").write_bytes(b"GIF? no")
    _truncated_png(root / "c10" / "0.png")
    return root


def test_train_lists_every_unreadable_file_in_one_error_and_skip_lists_them_in_the_run_folder(photos, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "configs/own_images.yaml", *_sets(photos), "--run-dir", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "2 image(s) cannot be read" in err
    assert "c01/0.png (train split): not an image" in err and "c09/2.png (test split): not an image" in err
    assert "data.params.on_corrupt=skip" in err and not run.exists()

    assert (
        main(
            [
                "train",
                "configs/own_images.yaml",
                *_sets(photos, "data.params.on_corrupt=skip"),
                "--run-dir",
                str(run),
                "--quiet",
            ]
        )
        == 0
    )
    assert "skipped 2 unreadable image(s) of 24" in capsys.readouterr().err
    skipped = json.loads((run / "skipped_images.json").read_text())
    assert {k: sorted(e["path"].split("photos/")[1] for e in v) for k, v in skipped.items()} == {
        "train": ["c01/0.png"],
        "test": ["c09/2.png", "c10/0.png"],
    }
    reasons = {e["path"].split("photos/")[1]: e["reason"] for v in skipped.values() for e in v}
    assert reasons["c01/0.png"].startswith("not an image") and reasons["c10/0.png"].startswith("truncated")


def test_embed_names_all_unreadable_files_or_skips_and_lists_them_beside_the_embeddings(photos, tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "configs/own_images.yaml",
                *_sets(photos, "data.params.on_corrupt=skip"),
                "--run-dir",
                str(run),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    out = tmp_path / "e" / "all.npy"
    assert main(["embed", str(run), "--images", str(photos), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "2 of 48 image(s) cannot be read" in err and "c01/0.png" in err and "c09/2.png" in err
    assert "--on-corrupt skip" in err and not out.exists()

    truncated = tmp_path / "one.txt"
    truncated.write_text(str(photos / "c10" / "0.png") + "\n")
    assert main(["embed", str(run), "--images", str(truncated), "--out", str(tmp_path / "t.npy"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "truncated" in err and "PNG, JPEG" not in err

    assert main(["embed", str(run), "--images", str(photos), "--out", str(out), "--quiet", "--on-corrupt", "skip"]) == 0
    captured = capsys.readouterr()
    assert "3 unreadable image(s) left out" in captured.out and "skipped 3 unreadable" in captured.err
    meta = json.loads((tmp_path / "e" / "all.meta.json").read_text())
    listed = json.loads((tmp_path / "e" / "all.skipped.json").read_text())
    assert meta["count"] == 45 and meta["skipped"] == 3 and len(meta["paths"]) == 45
    assert sorted(e["path"].split("photos/")[1] for e in listed) == ["c01/0.png", "c09/2.png", "c10/0.png"]
    assert not {e["path"] for e in listed} & set(meta["paths"])

    # the run's own test split: its recorded classes, without the skipped files
    assert (
        main(
            [
                "embed",
                str(run),
                "--split",
                "test",
                "--out",
                str(tmp_path / "e" / "test.npy"),
                "--quiet",
                "--on-corrupt",
                "skip",
            ]
        )
        == 0
    )
    test = json.loads((tmp_path / "e" / "test.meta.json").read_text())
    recorded = json.loads((run / "classes.json").read_text())["test"]
    assert test["class_names"] == recorded and test["count"] == 6 * 4 - 2


def test_a_resumed_run_says_where_it_continues_and_tells_its_times_apart(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    root = write_flat(tmp_path / "photos", num_classes=12, per_class=3)
    run = tmp_path / "run"
    assert main(["train", "configs/own_images.yaml", *_sets(root), "--run-dir", str(run), "--quiet"]) == 0
    (run / "summary.json").unlink()  # stopped after its last checkpoint, before the summary
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0
    captured = capsys.readouterr()
    assert "resuming from step 2 of 2 (last.pt" in captured.err
    assert "s of it before the resume at step 2; wall time" in captured.out and "of this resume" in captured.out


def test_evaluate_prints_percent_on_stderr_and_keeps_fractions_on_stdout(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    root = write_flat(tmp_path / "photos", num_classes=12, per_class=3)
    run = tmp_path / "run"
    assert main(["train", "configs/own_images.yaml", *_sets(root), "--run-dir", str(run), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run)]) == 0
    captured = capsys.readouterr()
    metrics = json.loads(captured.out)
    assert "test metrics in %" in captured.err
    assert f"{100 * metrics['mean_average_precision_at_r']:.2f}" in captured.err


def test_a_run_restarted_from_step_0_keeps_its_classes_and_its_config(tmp_path, capsys):
    root = write_flat(tmp_path / "photos", num_classes=12, per_class=3)
    run = tmp_path / "run"
    assert main(["train", "configs/own_images.yaml", *_sets(root), "--run-dir", str(run), "--quiet"]) == 0
    record, config = (run / "classes.json").read_text(), (run / "config.yaml").read_text()
    for name in ("last.pt", "best.pt", "summary.json"):  # as a run killed before its first checkpoint leaves it
        (run / name).unlink()
    write_flat(tmp_path / "late", num_classes=1)
    (tmp_path / "late" / "c00").rename(root / "a_new_class")  # sorts first: a fresh sorted split would shift
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    assert "not in the split record" in capsys.readouterr().err
    assert (run / "classes.json").read_text() == record and (run / "config.yaml").read_text() == config
