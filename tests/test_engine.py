"""The training engine end to end on a few glyph classes: run folder, early stopping, exact resume, faults."""

import json

import pytest
import torch

from dmlkit.config import load_config
from dmlkit.engine.callbacks import Callback
from dmlkit.engine.checkpoint import CheckpointError, load_checkpoint
from dmlkit.assemble import evaluate_run
from dmlkit.assemble import build_trainer, resume_trainer
from dmlkit.engine.trainer import NonFiniteLossError
from tests_helpers import TINY_OVERRIDES, stop_after_validation

TINY = TINY_OVERRIDES


def tiny_config(*extra):
    return load_config("configs/quickstart.yaml", TINY + list(extra))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "full"
    summary = build_trainer(tiny_config(), run_dir, quiet=True).fit()
    return run_dir, summary


def test_run_folder_contents(finished_run):
    run_dir, summary = finished_run
    for name in ["config.yaml", "metrics.jsonl", "best.pt", "last.pt", "summary.json"]:
        assert (run_dir / name).is_file(), name
    for name in ["training_curves.png", "test_embeddings_pca.png", "test_distances.png"]:
        assert (run_dir / "plots" / name).stat().st_size > 1000
    assert json.loads((run_dir / "summary.json").read_text()) == json.loads(json.dumps(summary))
    test = summary["test"]
    for key in [
        "precision_at_1",
        "recall_at_1",
        "recall_at_8",
        "r_precision",
        "mean_average_precision_at_r",
        "NMI",
        "F1",
    ]:
        assert 0.0 <= test[key] <= 1.0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "val"] == [4, 8]
    assert [r["step"] for r in records if r["split"] == "train"] == [2, 4, 6, 8]
    assert records[-1]["split"] == "test"


def test_best_weights_are_restored_and_evaluate_matches(finished_run):
    run_dir, summary = finished_run
    best = load_checkpoint(run_dir / "best.pt")
    assert best["step"] == summary["best_step"]
    metrics = evaluate_run(run_dir, split="test")
    for key, value in summary["test"].items():
        assert metrics[key] == pytest.approx(value, abs=1e-6), key
    assert (run_dir / "eval_test.json").is_file()


def test_resume_reaches_the_same_weights_and_metrics(finished_run, tmp_path):
    run_dir, summary = finished_run
    interrupted = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        build_trainer(tiny_config(), interrupted, callbacks=[stop_after_validation(4)], quiet=True).fit()
    assert load_checkpoint(interrupted / "last.pt")["loop"]["step"] == 4
    resumed = resume_trainer(interrupted, quiet=True).fit()
    assert resumed["test"] == pytest.approx(summary["test"], abs=1e-6)
    full_last = load_checkpoint(run_dir / "last.pt")["model"]
    resumed_last = load_checkpoint(interrupted / "last.pt")["model"]
    for key in full_last:
        torch.testing.assert_close(resumed_last[key], full_last[key], rtol=0, atol=1e-6)
    steps = [json.loads(line)["step"] for line in (interrupted / "metrics.jsonl").read_text().splitlines()]
    assert steps == [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_run_folder_records_its_environment_and_a_resume_needs_the_same_world_size(finished_run, tmp_path):
    env = json.loads((finished_run[0] / "environment.json").read_text())
    assert env["world_size"] == 1 and env["device"]["type"] == "cpu" and env["versions"]["torch"] == torch.__version__
    assert env["device"]["capability"] == torch.backends.cpu.get_cpu_capability()  # the kernels' instruction set
    assert {"dmlkit", "lightning", "pytorch-metric-learning", "python"} <= set(env["versions"])
    run_dir = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        build_trainer(tiny_config(), run_dir, callbacks=[stop_after_validation(4)], quiet=True).fit()
    before = (run_dir / "last.pt").read_bytes()
    (run_dir / "environment.json").write_text(json.dumps({**env, "world_size": 2}))
    with pytest.raises(
        ValueError, match=r"trained by 2 process\(es\) and this resume has 1.*torchrun --nproc_per_node=2"
    ):
        resume_trainer(run_dir, quiet=True).fit()
    assert (run_dir / "last.pt").read_bytes() == before
    (run_dir / "environment.json").write_text(json.dumps({**env, "threads": env["threads"] + 7}))
    with pytest.warns(RuntimeWarning, match=r"another environment \(threads: \d+ -> \d+\)"):
        resume_trainer(run_dir, quiet=True).fit()
    assert json.loads((run_dir / "environment.json").read_text())["resumes"] == [{"step": 4, "threads": env["threads"]}]


def test_existing_run_folder_is_not_overwritten(finished_run):
    run_dir, _ = finished_run
    before = (run_dir / "best.pt").read_bytes()
    with pytest.raises(ValueError, match="already holds a run"):
        build_trainer(tiny_config(), run_dir, quiet=True).fit()
    assert (run_dir / "best.pt").read_bytes() == before


class PoisonLoss(Callback):
    """Makes the objective return NaN from ``step`` on."""

    def __init__(self, step):
        self.step = step

    def on_batch_end(self, trainer, batch, outputs):
        if trainer.state.step == self.step - 1:
            objective = trainer.objective

            def nan_objective(embeddings, labels, batch=None):
                total, terms = objective(embeddings, labels, batch)
                return total * float("nan"), terms

            trainer.objective = nan_objective


@pytest.mark.faults
def test_nan_loss_stops_and_keeps_last_checkpoint(tmp_path):
    run_dir = tmp_path / "nan"
    with pytest.raises(NonFiniteLossError, match="step 6"):
        build_trainer(tiny_config(), run_dir, callbacks=[PoisonLoss(6)], quiet=True).fit()
    assert load_checkpoint(run_dir / "last.pt")["loop"]["step"] == 4
    assert (run_dir / "best.pt").is_file()


class PoisonBuffer(Callback):
    """Puts a NaN into a batch-norm running variance after ``step``: training (batch statistics) goes on unharmed."""

    def __init__(self, step):
        self.step = step

    def on_batch_end(self, trainer, batch, outputs):
        if trainer.state.step == self.step:
            name, buffer = next((k, v) for k, v in trainer.model.named_buffers() if k.endswith("running_var"))
            buffer[0] = float("nan")
            self.name = name


@pytest.mark.faults
def test_non_finite_weights_stop_training_before_any_checkpoint_holds_them(tmp_path):
    from dmlkit.engine.checkpoint import non_finite_entries
    from dmlkit.engine.trainer import NonFiniteWeightsError

    run_dir, poison = tmp_path / "nan-weights", PoisonBuffer(6)
    with pytest.raises(NonFiniteWeightsError, match=r"by step 8 \(NaN or Inf in .*running_var.*last.pt"):
        build_trainer(tiny_config(), run_dir, callbacks=[poison], quiet=True).fit()
    last = load_checkpoint(run_dir / "last.pt")
    assert last["loop"]["step"] == 4 and non_finite_entries(last["model"]) == []
    assert non_finite_entries(load_checkpoint(run_dir / "best.pt")["model"]) == []


def test_checkpoint_of_another_model_is_rejected(finished_run, tmp_path):
    run_dir, _ = finished_run
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.yaml").write_text(
        (run_dir / "config.yaml").read_text().replace("embedding_dim: 16", "embedding_dim: 32")
    )
    (other / "best.pt").write_bytes((run_dir / "best.pt").read_bytes())
    with pytest.raises(CheckpointError, match="another model"):
        evaluate_run(other)


def test_resume_needs_a_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="cannot resume"):
        resume_trainer(tmp_path)


def test_unwritable_run_folder_is_reported_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ValueError, match="not writable"):
        build_trainer(tiny_config(), blocker / "run", quiet=True).fit()


def test_proxy_loss_trains_its_proxies_at_their_own_rate(tmp_path):
    cfg = tiny_config(
        "loss.name=proxy_anchor", "loss.miner=null", "train.loss_lr=0.05", "train.head_lr=0.002", "train.max_steps=4"
    )
    trainer = build_trainer(cfg, tmp_path / "proxy", quiet=True)
    trainer.fit()
    groups = {g["name"]: g["lr"] for g in trainer.optimizer.param_groups}
    assert groups == {"body": cfg.train.lr, "head": 0.002, "loss": 0.05}
    objective_state = load_checkpoint(tmp_path / "proxy" / "last.pt")["objective"]
    proxies = [v for k, v in objective_state.items() if "proxies" in k]
    assert proxies and proxies[0].shape == (trainer.splits.train.num_classes, cfg.model.embedding_dim)


def test_plateau_schedule_lowers_the_rate_without_improvement(tmp_path):
    # A learning rate of 1e-12 leaves the scores flat (ReduceLROnPlateau's relative threshold is 1e-4),
    # so after the first validation every further one counts as "no improvement".
    cfg = tiny_config(
        "train.schedule=plateau",
        "train.plateau_patience=0",
        "train.plateau_factor=0.1",
        "train.max_steps=12",
        "train.patience=10",
        "train.lr=1e-12",
    )
    trainer = build_trainer(cfg, tmp_path / "plateau", quiet=True)
    trainer.fit()
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-14)


@pytest.mark.parametrize(
    "overrides",
    [
        ["methods.sft.name=sft", "methods.sft.lam=0.5"],
        ["methods.sft.name=sft_d", "methods.sft.normalize_input=true", "model.normalize=none"],
    ],
)
def test_sft_augmented_training_checkpoints_its_centres(tmp_path, overrides):
    cfg = tiny_config(*overrides, "train.max_steps=4")
    trainer = build_trainer(cfg, tmp_path / "sft", quiet=True)
    summary = trainer.fit()
    assert 0 <= summary["test"]["precision_at_1"] <= 1
    state = load_checkpoint(tmp_path / "sft" / "last.pt")["objective"]
    initialized = [v for k, v in state.items() if k.endswith("centers.initialized")]
    assert initialized and initialized[0].any()


def test_sft_d_needs_unnormalised_embeddings(tmp_path):
    cfg = tiny_config("methods.sft.name=sft_d", "methods.sft.normalize_input=true")
    with pytest.raises(ValueError, match="model.normalize: none"):
        build_trainer(cfg, tmp_path / "bad", quiet=True).fit()


def test_sft_run_resumes_to_the_same_result(tmp_path):
    sft = ["methods.sft.name=sft", "methods.sft.lam=0.5"]
    full = build_trainer(tiny_config(*sft), tmp_path / "full", quiet=True).fit()
    with pytest.raises(KeyboardInterrupt):
        build_trainer(tiny_config(*sft), tmp_path / "cut", callbacks=[stop_after_validation(4)], quiet=True).fit()
    resumed = resume_trainer(tmp_path / "cut", quiet=True).fit()
    assert resumed["test"] == pytest.approx(full["test"], abs=1e-6)
    a = load_checkpoint(tmp_path / "full" / "last.pt")["objective"]
    b = load_checkpoint(tmp_path / "cut" / "last.pt")["objective"]
    for key in a:
        if isinstance(a[key], torch.Tensor):
            torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-6)


def test_validation_can_be_capped_per_class_and_a_slow_validation_is_announced(monkeypatch):
    from dmlkit.assemble import build
    from dmlkit.assemble.build import build_run

    full = build_run(tiny_config()).splits.val
    capped = build_run(tiny_config("eval.val_max_per_class=3")).splits.val
    assert torch.bincount(capped.labels).tolist() == [3] * full.num_classes
    assert capped.class_names == full.class_names
    again = build_run(tiny_config("eval.val_max_per_class=3")).splits.val
    torch.testing.assert_close(again.get_batch(range(len(again)))[0], capped.get_batch(range(len(capped)))[0])
    monkeypatch.setattr(build, "LARGE_VALIDATION_CLASS", 3)
    with pytest.warns(RuntimeWarning, match=r"up to \d+ of one class.*eval.val_max_per_class"):
        build_run(tiny_config())
    with pytest.raises(ValueError, match="val_max_per_class"):
        tiny_config("eval.val_max_per_class=1")


def test_validation_classes_that_are_also_test_classes_are_announced(tmp_path):
    from PIL import Image

    from dmlkit.assemble.build import build_run

    for split in ("train", "test"):  # one class set in both splits, as MNIST, Fashion-MNIST and CIFAR have
        for c, name in enumerate("abcdefgh"):
            (tmp_path / split / name).mkdir(parents=True)
            for i in range(4):
                Image.new("RGB", (8, 8), (30 * c, 20 * i, 9)).save(tmp_path / split / name / f"{i}.png")
    common = [
        f"data.root={tmp_path}",
        "data.name=image_folder",
        "data.image_size=8",
        "train.batch_size=8",
        "train.m_per_class=2",
    ]
    with pytest.warns(RuntimeWarning, match=r"validation classes \['g', 'h'\] are also test classes"):
        build_run(tiny_config(*common, "data.val_fraction=0.25"))
