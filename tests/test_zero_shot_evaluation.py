"""The zero-shot evaluation of the thesis' Sec. 5.3.3 on cases with a known answer."""

import json

import pytest
import torch

from dmlkit.evaluation.zero_shot import per_class_means, zero_shot_attribute_eval


def _case(linear: bool, seed: int = 0, classes: int = 12, per_class: int = 5, m: int = 6, d: int = 4):
    """Attributes per image around a class histogram; embeddings a linear map of the histogram (or unrelated)."""
    g = torch.Generator().manual_seed(seed)
    hist = torch.rand(classes, m, generator=g, dtype=torch.float64)
    hist = hist / hist.sum(1, keepdim=True)
    w = torch.randn(m, d, generator=g, dtype=torch.float64)
    means = hist @ w if linear else torch.randn(classes, d, generator=g, dtype=torch.float64)
    labels = torch.arange(classes).repeat_interleave(per_class)
    noise = 0.01 * torch.randn(labels.numel(), m, generator=g, dtype=torch.float64)
    noise = noise - noise.view(classes, per_class, m).mean(1).repeat_interleave(per_class, 0)  # class means exact
    return hist[labels] + noise, means[labels], labels


def test_class_means_by_hand():
    classes, means = per_class_means(torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 5.0]]), torch.tensor([7, 7, 2]))
    assert classes.tolist() == [2, 7]
    torch.testing.assert_close(means, torch.tensor([[5.0, 5.0], [2.0, 1.0]]))


def test_embeddings_linear_in_the_attributes_are_predicted_exactly():
    """e_c = W^T a_c: with a tiny ridge the fitted map recovers the held-out means (6 fit classes >= m = 6)."""
    a, e, y = _case(linear=True)
    out = zero_shot_attribute_eval(
        a, e, y, repeats=50, classes_per_repeat=12, ridge=1e-8, generator=torch.Generator().manual_seed(0)
    )
    assert out["l2"] == 1.0 and out["cosine"] == 1.0 and out["chance"] == pytest.approx(1 / 6)


def test_unrelated_embeddings_are_at_chance():
    a, e, y = _case(linear=False)
    out = zero_shot_attribute_eval(
        a, e, y, repeats=400, classes_per_repeat=10, generator=torch.Generator().manual_seed(1)
    )
    assert out["chance"] == pytest.approx(0.2)
    assert abs(out["l2"] - 0.2) < 0.06 and abs(out["cosine"] - 0.2) < 0.06


def test_bad_input():
    a, e, y = _case(linear=True)
    with pytest.raises(ValueError, match="classes_per_repeat"):
        zero_shot_attribute_eval(a, e, y, classes_per_repeat=3)
    with pytest.raises(ValueError, match="share N"):
        zero_shot_attribute_eval(a[:-1], e, y)


def test_the_study_evaluates_a_finished_gsp_run(tmp_path):
    from dmlkit.assemble import build_trainer, load_finished_run
    from dmlkit.config import load_config
    from dmlkit_lab.studies.gsp_zero_shot import attributes_and_embeddings, main
    from tests_helpers import TINY_OVERRIDES

    cfg = load_config(
        "configs/quickstart.yaml",
        TINY_OVERRIDES
        + [
            "train.max_steps=2",
            "train.val_every=2",
            "model.pooling=gsp",
            "model.pooling_params={num_prototypes: 4, iters: 20}",
            "methods.zero_shot.weight=0.1",
        ],
    )
    build_trainer(cfg, tmp_path / "run", quiet=True).fit()
    assert (
        main(["--run", str(tmp_path / "run"), "--out", str(tmp_path / "study"), "--repeats", "20", "--classes", "4"])
        == 0
    )
    (row,) = json.loads((tmp_path / "study" / "results.json").read_text())["rows"]
    # the same numbers from the run's test split embedded here, and the same draws
    loaded = load_finished_run(tmp_path / "run")
    test = loaded.split(cfg.eval.split)
    z, emb, labels = attributes_and_embeddings(loaded.model, test)
    with torch.no_grad():
        out = loaded.model.encode(test.get_batch(torch.arange(len(test)))[0])
    torch.testing.assert_close(z, out.plan.sum(-1) / 0.3)
    torch.testing.assert_close(emb, out.embedding)
    torch.testing.assert_close(z.sum(1), torch.ones(len(test)), atol=1e-4, rtol=0)  # a distribution over prototypes
    expected = zero_shot_attribute_eval(z, out.embedding, labels, 20, 4, generator=torch.Generator().manual_seed(0))
    assert row["l2"] == pytest.approx(expected["l2"]) and row["cosine"] == pytest.approx(expected["cosine"])
    assert row["zero_shot_weight"] == 0.1 and "| run |" in (tmp_path / "study" / "table.md").read_text()
