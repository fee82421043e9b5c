"""GSP + zero-shot prediction loss in the training engine: (1 - lam) L_DML + lam L_ZS (Eq. 5.2.5)."""

import json

import pytest
import torch

from dmlkit.config import load_config
from dmlkit.assemble import build_model, build_trainer
from dmlkit.methods.zero_shot import PLAN_KEY, ZeroShotTerm
from tests_helpers import TINY_OVERRIDES, fake_train_set

GSP = [
    "model.pooling=gsp",
    "model.pooling_params={num_prototypes: 8, iters: 20}",
    "loss.zero_shot_weight=0.25",
]


def _cfg(*extra):
    return load_config("configs/quickstart.yaml", TINY_OVERRIDES + ["train.max_steps=4", "train.log_every=1"] + list(extra))


def test_gsp_zero_shot_run_trains_and_logs_both_terms(tmp_path):
    summary = build_trainer(_cfg(*GSP), tmp_path / "run", quiet=True).fit()
    assert summary["steps"] == 4
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert train and all("loss/metric" in r and "loss/zero_shot" in r for r in train)
    for r in train:
        assert r["loss/zero_shot"] > 0
        assert r["loss"] == pytest.approx(r["loss/metric"] + r["loss/zero_shot"], rel=1e-5)
    # the class embeddings are learned and checkpointed with the objective
    best = torch.load(tmp_path / "run" / "best.pt", weights_only=False)
    assert any(k.endswith("class_embeddings") for k in best["objective"])


def test_objective_weights_are_one_minus_lambda_and_lambda():
    cfg = _cfg(*GSP)
    built = build_model(cfg, fake_train_set(torch.arange(4).repeat(3)))
    model, objective = built.model, built.objective
    metric, zs = objective.terms
    assert isinstance(zs, ZeroShotTerm)
    assert metric.weight == pytest.approx(0.75) and zs.weight == pytest.approx(0.25)
    images = torch.randn(8, 1, 32, 32)
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    out = model.encode(images)
    assert out.plan.shape == (8, 8, 64)
    total, terms = objective(out.embedding, labels, {PLAN_KEY: out.plan, "step": 3})
    assert float(total.detach()) == pytest.approx(terms["metric"] + terms["zero_shot"], rel=1e-5)
    with pytest.raises(ValueError, match="transport_plan"):
        objective(out.embedding, labels, {"step": 3})


def test_zero_shot_needs_gsp_pooling():
    with pytest.raises(ValueError, match="gsp"):
        build_model(_cfg("loss.zero_shot_weight=0.1"), fake_train_set(torch.arange(4)))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        build_model(_cfg(*GSP[:2], "loss.zero_shot_weight=1.5"), fake_train_set(torch.arange(4)))
    with pytest.raises(ValueError, match="zero_shot_params"):
        build_model(_cfg(*GSP, "loss.zero_shot_params={bogus: 1}"), fake_train_set(torch.arange(4)))
