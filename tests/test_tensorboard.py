"""TensorBoard: ``train.tensorboard`` writes the scalars ``metrics.jsonl`` holds (same steps, same values, also
across a resume), and ``dmlkit tensorboard RUN`` writes a finished run's embeddings for the projector."""

import json
from collections import defaultdict

import numpy as np
import pytest
import torch

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dmlkit.assemble import build_trainer, embed_run, load_finished_run, resume_trainer
from dmlkit.cli import main
from dmlkit.config import load_config
from dmlkit.engine.callbacks import Callback
from tests_helpers import TINY_OVERRIDES, stop_after_validation

# SFT makes the objective two named terms (train/loss/real, train/loss/generated) and its callback adds outputs
TB = [*TINY_OVERRIDES, "plots=false", "train.tensorboard=true", "methods.sft.name=sft", "methods.sft.lam=0.5"]
NOT_CURVES = {"split", "step", "epoch", "elapsed", "best"}


def tiny_config(*extra):
    return load_config("configs/quickstart.yaml", TB + list(extra))


def event_scalars(run_dir):
    """Every scalar of ``RUN/tensorboard`` as TensorBoard shows it: ``{tag: [(step, value), ...]}``."""
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})  # 0: keep every event
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def logged_scalars(run_dir):
    """The same read from ``metrics.jsonl``; values as float32, as TensorBoard stores them."""
    out = defaultdict(list)
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key, value in record.items():
            if key not in NOT_CURVES and not isinstance(value, bool):
                out[f"{record['split']}/{key}"].append((record["step"], float(np.float32(value))))
    return dict(out)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "tb"
    summary = build_trainer(tiny_config(), run_dir, quiet=True).fit()
    return run_dir, summary


def test_the_scalars_are_those_of_metrics_jsonl(finished_run):
    run_dir, summary = finished_run
    written, logged = event_scalars(run_dir), logged_scalars(run_dir)
    assert written == logged
    assert {
        "train/loss",
        "train/lr",
        "train/loss/real",
        "train/loss/generated",
        "train/sft/generated",
        "val/mean_average_precision_at_r",
        "test/precision_at_1",
        "test/NMI",
    } <= set(written), sorted(written)
    assert [s for s, _ in written["train/loss"]] == [2, 4, 6, 8]
    assert [s for s, _ in written["val/precision_at_1"]] == [4, 8]
    assert written["test/precision_at_1"] == [(8, float(np.float32(summary["test"]["precision_at_1"])))]


class StopAtStep(Callback):
    """Raises after the training step ``step`` (before its validation): the steps since ``last.pt`` are logged."""

    def __init__(self, step):
        self.step = step

    def on_batch_end(self, trainer, batch, outputs):
        if trainer.state.step == self.step:
            raise KeyboardInterrupt


@pytest.mark.parametrize("stop", [StopAtStep(7), stop_after_validation(4)], ids=["after-step-7", "after-validation-4"])
def test_a_resumed_run_keeps_one_value_per_step(finished_run, tmp_path, stop):
    """after-step-7: step 6 was logged after last.pt (step 4) and is trained again; after-validation-4: the process
    stopped between the log line of step 4 and its scalars."""
    run_dir = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        build_trainer(tiny_config(), run_dir, callbacks=[stop], quiet=True).fit()
    resume_trainer(run_dir, quiet=True).fit()
    written = event_scalars(run_dir)
    assert written == logged_scalars(run_dir)
    for tag, points in written.items():
        steps = [s for s, _ in points]
        assert steps == sorted(set(steps)), tag
    full = event_scalars(finished_run[0])  # the uninterrupted run: the same curves at the same steps
    assert {tag: [s for s, _ in points] for tag, points in written.items()} == {
        tag: [s for s, _ in points] for tag, points in full.items()
    }


def test_the_scalars_are_off_by_default(tmp_path):
    cfg = load_config(
        "configs/quickstart.yaml",
        [*TINY_OVERRIDES, "plots=false", "train.max_steps=2", "train.val_every=2", "eval.test=false"],
    )
    assert cfg.train.tensorboard is False
    build_trainer(cfg, tmp_path / "plain", quiet=True).fit()
    assert not (tmp_path / "plain" / "tensorboard").exists()


def read_tsv(path):
    return [line.split("\t") for line in path.read_text().splitlines()]


def test_the_projector_holds_the_run_embeddings_labels_and_images(finished_run, capsys):
    run_dir, _ = finished_run
    assert main(["tensorboard", str(run_dir)]) == 0
    printed = capsys.readouterr().out
    assert f"tensorboard --logdir {run_dir / 'tensorboard'}" in printed
    out = run_dir / "tensorboard" / "projector_test"
    config = (out / "projector_config.pbtxt").read_text()
    assert 'tensor_path: "00000/test/tensors.tsv"' in config and 'metadata_path: "00000/test/metadata.tsv"' in config
    embeddings, labels = embed_run(run_dir, "test")
    tensors = torch.tensor([[float(x) for x in row] for row in read_tsv(out / "00000" / "test" / "tensors.tsv")])
    assert tensors.shape == embeddings.shape and torch.equal(tensors, embeddings.float())
    header, *rows = read_tsv(out / "00000" / "test" / "metadata.tsv")
    assert header == ["index", "label", "class"]
    assert [int(r[0]) for r in rows] == list(range(len(labels)))
    assert [int(r[1]) for r in rows] == labels.tolist()
    names = load_finished_run(run_dir).split("test").class_names
    assert [r[2] for r in rows] == [names[c] for c in labels.tolist()]
    sprite = out / "00000" / "test" / "sprite.png"
    assert sprite.stat().st_size > 1000 and f"{len(labels)}" in printed


def test_the_projector_samples_max_images(finished_run, capsys):
    run_dir, _ = finished_run
    assert main(["tensorboard", str(run_dir), "--max-images", "10"]) == 0
    folder = run_dir / "tensorboard" / "projector_test" / "00000" / "test"
    _, *rows = read_tsv(folder / "metadata.tsv")
    index = [int(r[0]) for r in rows]
    assert len(index) == 10 and index == sorted(set(index))
    embeddings, labels = embed_run(run_dir, "test")
    tensors = torch.tensor([[float(x) for x in row] for row in read_tsv(folder / "tensors.tsv")])
    torch.testing.assert_close(tensors, embeddings[index].float(), rtol=0, atol=1e-6)
    assert [int(r[1]) for r in rows] == labels[index].tolist()
    assert main(["tensorboard", str(run_dir), "--max-images", "0"]) == 2
    assert "max_images must be a positive integer" in capsys.readouterr().err


def test_without_the_package_both_name_the_extra(finished_run, tmp_path, monkeypatch, capsys):
    import sys

    from dmlkit.extras import MissingExtra

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    with pytest.raises(
        MissingExtra, match=r"the 'tensorboard' extra: pip install 'dmlkit\[tensorboard\]' .*train.tensorboard=false"
    ):
        build_trainer(tiny_config(), tmp_path / "never", quiet=True)
    assert not (tmp_path / "never").exists()
    assert main(["tensorboard", str(finished_run[0]), "--split", "val"]) == 2
    assert (
        "dmlkit tensorboard needs the 'tensorboard' extra: pip install 'dmlkit[tensorboard]'" in capsys.readouterr().err
    )
    assert not (finished_run[0] / "tensorboard" / "projector_val").exists()


def test_the_sprite_fits_the_projector():
    from dmlkit.report.projector import MAX_SPRITE_PIXELS, thumbnail_side, thumbnails

    assert thumbnail_side(100, 28, 28) == 28  # small images keep their size
    assert thumbnail_side(2000, 224, 224) == 64
    for count in (2000, 40_000, 1_000_000):
        assert thumbnail_side(count, 224, 300) * -(-(count**0.5) // 1) <= MAX_SPRITE_PIXELS
    wide = torch.randn(2, 3, 40, 80) * 5 + 3  # normalised images: any range
    small = thumbnails(wide, 16)
    assert small.shape == (2, 3, 16, 16) and small.min() >= 0 and small.max() <= 1
    assert small[:, :, :4].abs().sum() == 0 and small[:, :, 12:].abs().sum() == 0  # 16 x 8 centred on black
    assert small[:, :, 4:12].std() > 0.01
    same = thumbnails(wide[:, :, :8, :16], 16)  # no resize: exactly min-max scaled, each image by itself
    for image in same[:, :, 4:12]:
        assert image.amin() == 0 and image.amax() == 1
    assert thumbnails(torch.randn(1, 5, 8, 8), 8).shape == (1, 3, 8, 8)  # more channels than a picture: the first 3


def test_a_run_stopped_before_its_first_checkpoint_starts_again_without_its_events(tmp_path):
    from dmlkit.engine.run_folder import RunFolder

    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    (folder.path / "config.yaml").write_text("name: a\n")
    (folder.path / "metrics.jsonl").write_text('{"split": "train", "step": 2, "loss": 1.0}\n')
    (folder.tensorboard).mkdir()
    (folder.tensorboard / "events.out.tfevents.1.host.1.0").write_bytes(b"old steps")
    with pytest.warns(RuntimeWarning, match="starting it again"):
        folder.start_new("name: a\n")
    folder.release()
    assert sorted(p.name for p in folder.path.iterdir()) == ["config.yaml"]
