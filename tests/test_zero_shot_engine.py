"""GSP + zero-shot prediction loss in the training engine: (1 - lam) L_DML + lam L_ZS (Eq. 5.2.5)."""

import json

import pytest
import torch

from dmlkit.config import load_config
from dmlkit.assemble import build_model, build_splits, build_trainer
from dmlkit.data.seeding import make_generator
from dmlkit.losses.zero_shot_prediction_loss import class_disjoint_halves, pseudo_attributes, zero_shot_prediction_loss
from dmlkit.methods.zero_shot import PLAN_KEY, ZeroShotTerm
from tests_helpers import TINY_OVERRIDES, fake_train_set

GSP = [
    "model.pooling=gsp",
    "model.pooling_params={num_prototypes: 8, iters: 20}",
    "methods.zero_shot.weight=0.25",
]


def _cfg(*extra):
    return load_config(
        "configs/quickstart.yaml", TINY_OVERRIDES + ["train.max_steps=4", "train.log_every=1"] + list(extra)
    )


def test_gsp_zero_shot_run_learns_the_class_embeddings_and_prototypes(tmp_path):
    cfg = _cfg(*GSP)
    initial = build_model(cfg, build_splits(cfg).train)  # the run builds the same model from the same seed
    summary = build_trainer(cfg, tmp_path / "run", quiet=True).fit()
    assert summary["steps"] == 4
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert len(train) == 4 and all(r["loss/zero_shot"] > 0 and r["loss/metric"] >= 0 for r in train)
    last = torch.load(tmp_path / "run" / "last.pt", weights_only=False)
    (key,) = [k for k in last["objective"] if k.endswith("class_embeddings")]
    start = dict(initial.objective.named_parameters())[key]
    assert last["objective"][key].shape == (start.shape[0], 16)  # the embedding's size (author's code)
    assert not torch.allclose(last["objective"][key], start.detach())  # learned
    assert not torch.allclose(last["model"]["pooling.prototypes"], initial.model.pooling.prototypes.detach())


def test_objective_total_is_the_weighted_sum_of_independently_computed_terms():
    cfg = _cfg(*GSP)
    built = build_model(cfg, fake_train_set(torch.arange(4).repeat(3)))
    model, objective = built.model, built.objective
    metric, zs = objective.terms
    assert isinstance(zs, ZeroShotTerm)
    images = torch.randn(8, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    out = model.encode(images)
    assert out.plan.shape == (8, 8, 64)
    total, terms = objective(out.embedding, labels, {PLAN_KEY: out.plan, "step": 3})
    # each term computed here from its parts, not through the objective's weights
    with torch.no_grad():
        raw_metric = metric.loss(out.embedding, labels, metric.miner(out.embedding, labels))
        halves = class_disjoint_halves(labels, make_generator(cfg.seed, 3))  # the halves of step 3
        z = pseudo_attributes(out.plan, 0.3)
        raw_zs = zero_shot_prediction_loss(z, labels, zs.loss.class_embeddings, 0.05, halves, 9.5)
    assert float(raw_zs) > 0.1 and float(raw_metric) > 0.1
    assert float(total) == pytest.approx(0.75 * float(raw_metric) + 0.25 * float(raw_zs), rel=1e-5)
    assert terms["metric"] == pytest.approx(0.75 * float(raw_metric), rel=1e-5)
    assert terms["zero_shot"] == pytest.approx(0.25 * float(raw_zs), rel=1e-5)
    with pytest.raises(ValueError, match="transport_plan"):
        objective(out.embedding, labels, {"step": 3})


def test_zero_shot_needs_gsp_pooling():
    with pytest.raises(ValueError, match="gsp"):
        build_model(_cfg("methods.zero_shot.weight=0.1"), fake_train_set(torch.arange(4)))
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\)"):
        build_model(_cfg(*GSP[:2], "methods.zero_shot.weight=1.5"), fake_train_set(torch.arange(4)))
    with pytest.raises(ValueError, match="unknown methods.zero_shot.params"):
        build_model(_cfg(*GSP, "methods.zero_shot.params={bogus: 1}"), fake_train_set(torch.arange(4)))
