"""Methods as plug-ins: one registration line adds a method; the composition order of the hooks; SFT's named terms."""

import json

import pytest
import torch

from dmlkit.assemble import build_model, build_trainer
from dmlkit.config import load_config
from dmlkit.engine.callbacks import Callback
from dmlkit.engine.objective import ObjectiveTerm
from dmlkit.methods import METHODS, Method, build_methods, register_method
from dmlkit.methods.ccp import ProjectionTerm
from dmlkit.methods.sft import GeneratedTerm, NormalizedInputLoss, NormalizedInputMiner
from dmlkit.methods.zero_shot import ZeroShotTerm
from dmlkit.proxies import ProxyPairLoss
from tests_helpers import TINY_OVERRIDES, fake_train_set

QUICK = TINY_OVERRIDES + [
    "plots=false",
    "eval.clustering=false",
    "train.max_steps=4",
    "train.val_every=4",
    "train.log_every=1",
]
LABELS = torch.arange(6).repeat(12)


class SpreadTerm(ObjectiveTerm):
    def value(self, embeddings, labels, batch):
        return embeddings.mean(dim=0).pow(2).sum()


class CountBatches(Callback):
    def __init__(self):
        self.batches = 0

    def on_batch_end(self, trainer, batch, outputs):
        self.batches += 1


class Spread(Method):
    """A toy method: one term and one callback, registered from outside the package."""

    name = "spread"

    def __init__(self, cfg):
        self.counter = CountBatches()

    def terms(self, terms):
        return [*terms, SpreadTerm("spread", weight=0.5)]

    def callbacks(self):
        return [self.counter]


def test_a_method_plugs_in_with_one_registration_line(tmp_path):
    made = []

    class Registered(Spread):
        @classmethod
        def from_config(cls, cfg):
            made.append(cls(cfg))
            return made[-1]

    register_method("spread")(Registered)
    try:
        build_trainer(load_config("configs/quickstart.yaml", QUICK), tmp_path / "run", quiet=True).fit()
    finally:
        METHODS.unregister("spread")
    train = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in train if r["split"] == "train"]
    assert len(train) == 4 and all(r["loss/spread"] > 0 for r in train)
    assert all(r["loss"] == pytest.approx(r["loss/metric"] + r["loss/spread"], rel=1e-6) for r in train)
    assert made[0].counter.batches == 4


def test_sft_logs_its_real_and_generated_losses(tmp_path):
    sft = [
        "methods.sft.name=sft",
        "methods.sft.lam=0.5",
        "methods.sft.update_centers_first=true",
        "methods.sft.start_step=2",
        "data.max_classes=8",
    ]  # 6 training classes: a batch of 4 meets classes of the step before
    build_trainer(load_config("configs/quickstart.yaml", QUICK + sft), tmp_path / "run", quiet=True).fit()
    train = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in train if r["split"] == "train"]
    assert len(train) == 4 and all(
        r["loss"] == pytest.approx(r["loss/real"] + r["loss/generated"], rel=1e-6) for r in train
    )
    # the warm-up: nothing generated in the first 2 steps, then a whole batch of 16 (4 classes x 4, targets in the batch)
    assert [r["sft/generated"] for r in train] == [0, 0, 16, 16]
    assert [r["loss/generated"] for r in train[:2]] == [0.0, 0.0] and all(r["loss/generated"] > 0 for r in train[2:])
    for r in train[2:]:
        assert r["sft/generated_anchors_with_positive"] >= 0.75 and r["sft/generated_positive_pairs"] >= 8
        assert "sft/generated_mined_positive_pairs" in r  # multi-similarity: the generated term is mined
    assert "sft/center_cosine" not in train[0]  # no class has a centre before the first update
    assert all(-1.0 <= r["sft/center_cosine"] <= 1.0 for r in train[1:])


def test_the_generated_term_is_mined_by_the_run_miner():
    cfg = load_config("configs/quickstart.yaml", TINY_OVERRIDES + ["methods.sft.name=sft", "methods.sft.score=joint"])
    real, generated = build_model(cfg, fake_train_set(LABELS)).objective.terms
    assert real.miner is not None and generated.miner is real.miner and generated.score == "joint"
    sft_d = ["methods.sft.name=sft_d", "methods.sft.normalize_input=true", "model.normalize=none"]
    real, generated = build_model(
        load_config("configs/quickstart.yaml", TINY_OVERRIDES + sft_d), fake_train_set(LABELS)
    ).objective.terms
    assert isinstance(real.miner, NormalizedInputMiner) and real.miner.miner is generated.miner


def test_ccp_wraps_first_so_the_generated_term_scores_against_the_proxies():
    cfg = load_config(
        "configs/ccp_contrastive.yaml",
        TINY_OVERRIDES + ["methods.sft.name=sft", "methods.ccp.proxies_per_class=2", "methods.ccp.pool_size=3"],
    )
    assert [m.name for m in build_methods(cfg)] == ["ccp", "sft"]
    real, generated, batch, projection = build_model(cfg, fake_train_set(LABELS)).objective.terms
    assert (real.name, generated.name, batch.name, projection.name) == ("real", "generated", "batch", "projection")
    assert isinstance(generated, GeneratedTerm) and isinstance(projection, ProjectionTerm)
    assert isinstance(real.loss, ProxyPairLoss) and generated.loss is real.loss


def test_zero_shot_mixes_every_metric_loss_term_and_not_the_regulariser():
    gsp = [
        "model.pooling=gsp",
        "methods.zero_shot.weight=0.25",
        "methods.sft.name=sft_d",
        "methods.sft.normalize_input=true",
        "model.normalize=none",
        "methods.sft.lam=0.2",
    ]
    terms = build_model(
        load_config("configs/quickstart.yaml", TINY_OVERRIDES + gsp), fake_train_set(LABELS)
    ).objective.terms
    weights = {t.name: t.weight for t in terms}
    assert weights == pytest.approx({"real": 0.75, "generated": 0.75 * 0.2, "zero_shot": 0.25})
    assert isinstance(terms[0].loss, NormalizedInputLoss) and isinstance(terms[2], ZeroShotTerm)
    assert not isinstance(terms[1].loss, NormalizedInputLoss)  # SFT-d translates before normalising


def test_methods_that_would_fight_over_the_loop_are_refused(monkeypatch):
    class Encoder(Method):
        name = "encoder"

        def encode(self, model, images):
            return model(images), {}

        @classmethod
        def from_config(cls, cfg):
            return cls()

    monkeypatch.setitem(METHODS._factories, "a", Encoder)
    monkeypatch.setitem(METHODS._factories, "b", Encoder)
    with pytest.raises(ValueError, match="embed the training batch"):
        build_trainer(load_config("configs/quickstart.yaml", QUICK), "unused", quiet=True)


@pytest.mark.parametrize(
    "name, baseline, transform",
    [
        ("testbed_sft", "testbed", "sft"),
        ("testbed_sft_d", "testbed", "sft_d"),
        ("testbed_translation", "testbed", "translation"),
        ("testbed_npair_sft", "testbed_npair", "sft"),
    ],
)
def test_testbed_sft_configs_change_only_the_augmentation(name, baseline, transform):
    """The testbed's SFT measurement: each variant is its baseline plus the faithful methods.sft section (lam 0.2 as the paper)."""
    import dataclasses

    cfg = load_config(f"configs/testbed/{name}.yaml")
    base = load_config(f"configs/testbed/{baseline}.yaml")
    a = cfg.methods.sft
    assert cfg.name == name and name.startswith(baseline)  # paired seed by seed with --baseline <baseline>
    assert (a.name, a.lam, a.scheme, a.target, a.score, a.centers, a.alpha, a.start_step) == (
        transform,
        0.2,
        "balanced",
        "batch",
        "separate",
        "update",
        1.0,
        0,
    )
    assert a.normalize_input == (transform == "sft_d") and cfg.model.normalize == (
        "none" if transform == "sft_d" else "l2"
    )
    for section in ("data", "loss", "train", "eval"):
        assert getattr(cfg, section) == getattr(base, section), section
    assert dataclasses.replace(cfg.model, normalize=base.model.normalize) == base.model
