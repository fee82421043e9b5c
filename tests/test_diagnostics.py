"""Run diagnostics: classifier outputs as embeddings, Lemma 3-4 bounds on a trained CE'' model, geometry plots."""

import json

import pytest

from dmlkit.cli import main
from dmlkit.config import load_config
from dmlkit_lab.evaluation.geometry import r_w
from dmlkit.report.diagnostics import run_diagnostics
from dmlkit.assemble import embed_run, evaluate_run
from dmlkit.assemble import build_trainer
from tests_helpers import TINY_OVERRIDES

CE = TINY_OVERRIDES + ["loss.name=ce_metric", "plots=false", "data.max_classes=12"]


@pytest.fixture(scope="module")
def ce_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "ce"
    build_trainer(load_config("configs/quickstart.yaml", CE + ["eval.embedding=classifier"]), run_dir, quiet=True).fit()
    return run_dir


def test_classifier_outputs_are_the_evaluated_embedding(ce_run):
    embeddings, _ = embed_run(ce_run)
    train_classes = 9  # 12 classes, a quarter held out for validation
    assert embeddings.shape[1] == train_classes
    assert float(embeddings.min()) >= 0.0 and float(embeddings.sum(1).sub(1).abs().max()) < 1e-5  # softmax outputs
    summary = json.loads((ce_run / "summary.json").read_text())
    assert evaluate_run(ce_run)["precision_at_1"] == pytest.approx(summary["test"]["precision_at_1"])


def test_metric_bounds_are_those_of_the_trained_model(ce_run):
    """The Lemma 3-4 quantities recomputed by hand: eps over the training images, the largest same-class distance."""
    import torch

    from dmlkit.assemble import build_splits, find_classifier, load_finished_run
    from dmlkit.engine.embed import embed_dataset

    report = run_diagnostics(ce_run)
    bounds = report["metric_bounds"]
    assert bounds["same_class_guaranteed"] and bounds["different_class_guaranteed"]  # CE'' is a metric
    run = load_finished_run(ce_run)
    classifier = find_classifier(run.objective)
    features, labels = embed_dataset(run.features, build_splits(run.cfg).train.with_augment(False), 128)
    with torch.no_grad():
        out = classifier.outputs(features).double()
    d = classifier.criterion.d  # the per-class distance; L(a, b) = sum_i d(a_i, b_i)
    onehot = torch.eye(out.shape[1], dtype=torch.float64)[labels]
    to_label = torch.stack([d(out[i], onehot[i]).sum() for i in range(len(out))])
    assert bounds["eps_all_train"] == pytest.approx(float(to_label.max()))
    pick = torch.randperm(len(labels), generator=torch.Generator().manual_seed(run.cfg.seed))[:1000]
    o, y = out[pick], labels[pick]
    same = [float(d(o[i], o[j]).sum()) for i in range(len(y)) for j in range(i + 1, len(y)) if y[i] == y[j]]
    assert bounds["eps"] == pytest.approx(float(to_label[pick].max()))
    assert bounds["max_same_class"] == pytest.approx(max(same))
    two_m = float(d(torch.zeros(2, dtype=torch.float64), torch.tensor([0.0, 1.0], dtype=torch.float64)).sum()) * 2
    assert bounds["label_distance"] == pytest.approx(two_m)
    assert bounds["same_class_bound"] == pytest.approx(2 * bounds["eps"])
    assert bounds["different_class_bound"] == pytest.approx(two_m - 2 * bounds["eps"])
    test_features, test_labels = embed_dataset(
        run.features, run.split("test"), 128
    )  # the features, not the class outputs
    assert report["geometry"]["r_w"] == pytest.approx(r_w(test_features, test_labels), rel=1e-6)
    for figure in report["figures"]:
        assert (ce_run / "plots" / "geometry_test" / figure.split("/")[-1]).stat().st_size > 0
    assert json.loads((ce_run / "diagnostics_test.json").read_text())["metric_bounds"]["eps"] == bounds["eps"]


def test_cli_evaluate_diagnostics(ce_run, capsys):
    assert main(["evaluate", str(ce_run), "--diagnostics"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "metric_bounds" in out["diagnostics"] and "precision_at_1" in out["metrics"]


def test_classifier_embedding_needs_a_classifier_loss(tmp_path):
    cfg = load_config("configs/quickstart.yaml", TINY_OVERRIDES + ["eval.embedding=classifier", "plots=false"])
    with pytest.raises(ValueError, match="ce_weak or ce_metric"):
        build_trainer(cfg, tmp_path / "ms", quiet=True).fit()


def test_bad_embedding_source_is_rejected():
    with pytest.raises(ValueError, match="eval.embedding"):
        load_config("configs/quickstart.yaml", ["eval.embedding=logits"])


def test_geometry_of_an_sft_d_run_is_measured_on_the_embedding_the_loss_compared(tmp_path):
    """SFT-d trains on raw head outputs and normalises them in the loss: the divergences must be those of unit vectors."""
    import torch

    from dmlkit.assemble import load_finished_run
    from dmlkit.engine.embed import embed_dataset

    sft_d = [
        "methods.sft.name=sft_d",
        "methods.sft.normalize_input=true",
        "model.normalize=none",
        "plots=false",
        "eval.clustering=false",
        "train.max_steps=2",
        "train.val_every=2",
    ]
    run_dir = tmp_path / "sftd"
    build_trainer(load_config("configs/quickstart.yaml", TINY_OVERRIDES + sft_d), run_dir, quiet=True).fit()
    report = run_diagnostics(run_dir, plots=False)
    run = load_finished_run(run_dir)
    raw, labels = embed_dataset(run.model, run.split("test"), 128)
    assert float(raw.norm(dim=1).sub(1).abs().max()) > 1e-2  # the raw outputs are not unit vectors
    unit = torch.nn.functional.normalize(raw, dim=1)
    per_class = [((unit[labels == c] - unit[labels == c].mean(0)) ** 2).sum(1).mean() for c in labels.unique()]
    assert report["geometry"]["divergence_mean"] == pytest.approx(float(torch.stack(per_class).mean()), rel=1e-4)
