"""CCP (thesis Ch. 3): proxy loss, projection term, proxy re-initialisation, Algorithm 1 in the Trainer, resume."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning import miners as pml_miners

from dmlkit.config import load_config
from dmlkit.engine.callbacks import Callback
from dmlkit.methods.ccp import CCP, ProjectionStopping
from dmlkit.engine.checkpoint import load_checkpoint
from dmlkit.engine.embed import embed_dataset
from dmlkit.engine.optim import parameter_groups
from dmlkit.assemble import build_model, build_trainer, resume_trainer
from dmlkit.losses import create_loss
from dmlkit.proxies import CCPConfig, ProjectionRegularizer, ProxyBank, ProxyPairLoss, greedy_k_center
from tests_helpers import TINY_OVERRIDES, fake_train_set

# ----------------------------------------------------------------------------- proxy-based loss (Eq. 3.2.11)


def test_proxy_contrastive_equals_hand_computed_pairs_against_the_proxies():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, generator=g)
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    bank = ProxyBank(3, 2, 5, seed=1)
    loss = ProxyPairLoss(pml_losses.ContrastiveLoss(pos_margin=0.0, neg_margin=0.5), bank)
    value = loss(x, y)
    d = torch.cdist(F.normalize(x, dim=1), F.normalize(bank.proxies.detach(), dim=1))
    same = y[:, None] == bank.labels[None, :]
    pos = d[same]
    neg = F.relu(0.5 - d[~same])
    expected = pos[pos > 0].mean() + (neg[neg > 0].mean() if (neg > 0).any() else 0.0)
    assert float(value.detach()) == pytest.approx(float(expected), rel=1e-5)
    value.backward()
    assert bank.proxies.grad is not None and bank.proxies.grad.abs().sum() > 0


def test_proxy_triplet_uses_only_sample_proxy_tuples():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 1])
    bank = ProxyBank(2, 1, 2)
    with torch.no_grad():
        bank.proxies.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))  # each sample sits on the *other* class's proxy
    loss = ProxyPairLoss(pml_losses.TripletMarginLoss(margin=0.1), bank)
    # anchor x_i, positive its proxy (distance sqrt 2), negative the other proxy (distance 0): sqrt(2) + 0.1
    assert float(loss(x, y).detach()) == pytest.approx(math.sqrt(2) + 0.1, rel=1e-5)


def test_miner_mines_against_the_proxies():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 4, generator=g), torch.arange(4).repeat(2)
    bank = ProxyBank(4, 3, 4, seed=2)
    miner = pml_miners.MultiSimilarityMiner(epsilon=0.1)
    ms = pml_losses.MultiSimilarityLoss()
    wrapped = ProxyPairLoss(ms, bank, miner)
    ref = bank.proxies.detach()
    expected = ms(x, y, miner(x, y, ref, bank.labels), ref_emb=ref, ref_labels=bank.labels)
    assert float(wrapped(x, y).detach()) == pytest.approx(float(expected), rel=1e-6)


def test_ccp_method_wraps_the_loss_and_bad_input():
    assert CCP.from_config(load_config("configs/quickstart.yaml")) is None
    cfg = load_config("configs/ccp_contrastive.yaml", TINY_OVERRIDES + ["ccp.proxies_per_class=2", "ccp.pool_size=3"])
    metric = build_model(cfg, fake_train_set(torch.arange(4).repeat(4))).objective.terms[0]
    assert isinstance(metric.loss, ProxyPairLoss) and metric.miner is None and metric.loss.bank.proxies.shape == (8, 16)
    proxy_loss = load_config("configs/ccp_contrastive.yaml", TINY_OVERRIDES + ["loss.name=proxy_anchor", "loss.miner=null"])
    with pytest.raises(ValueError, match="pair or tuple loss"):
        build_model(proxy_loss, fake_train_set(torch.arange(4).repeat(8)))
    with pytest.raises(ValueError, match="pool_size"):
        CCPConfig(proxies_per_class=8, pool_size=4)
    with pytest.raises(ValueError, match="lam"):
        CCPConfig(lam=-1e-4)
    with pytest.raises(ValueError, match="ccp.lam"):
        load_config("configs/ccp_contrastive.yaml", ["ccp.lam=-0.1"])
    with pytest.raises(ValueError, match="max_projections"):
        CCPConfig(max_projections=0)
    with pytest.raises(ValueError, match="ref_emb"):
        metric.loss(torch.randn(2, 16), torch.tensor([0, 1]), ref_emb=torch.randn(2, 16))


# ----------------------------------------------------------------------------- projection term (Eq. 3.2.10-3.2.11)


def test_projection_term_value_and_gradient():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).double()
    lam = 0.3
    reg = ProjectionRegularizer(model, lam)
    star = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    value = reg()
    expected = 0.5 * lam * sum(float((p.detach() - s).pow(2).sum()) for p, s in zip(model.parameters(), star))
    assert float(value.detach()) == pytest.approx(expected)
    value.backward()
    for p, s in zip(model.parameters(), star):
        torch.testing.assert_close(p.grad, lam * (p.detach() - s))
    assert not list(reg.parameters())  # the model keeps its parameters
    reg.snapshot()
    assert float(reg().detach()) == 0.0
    state = reg.state_dict()
    assert len(state) == len(list(model.parameters()))
    with pytest.raises(ValueError, match="lam"):
        ProjectionRegularizer(model, -1.0)
    assert float(ProjectionRegularizer(model, 0.0)()) == 0.0


# ----------------------------------------------------------------------------- proxy re-initialisation (Algorithm 2)


def test_reinitialize_takes_k_center_samples_of_each_class():
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(20, 3, generator=g)
    labels = torch.arange(4).repeat_interleave(5)[torch.randperm(20, generator=g)]
    bank = ProxyBank(4, 2, 3, seed=0)
    before = bank.per_class().clone()
    picked = bank.reinitialize(emb, labels)
    assert picked.shape == (4, 2)
    for c in range(4):
        rows = torch.nonzero(labels == c).flatten()
        local = greedy_k_center(emb[rows], 2, initial=before[c])
        assert picked[c].tolist() == rows[local].tolist()
        torch.testing.assert_close(bank.proxies.detach()[2 * c : 2 * c + 2], emb[picked[c]])
    shuffled = bank.reinitialize(emb, labels, generator=torch.Generator().manual_seed(5), from_current=False)
    assert (labels[shuffled] == torch.arange(4)[:, None]).all()
    torch.testing.assert_close(bank.proxies.detach(), emb[shuffled.flatten()])
    with pytest.raises(ValueError, match="class 3 has 1 samples"):
        bank.reinitialize(emb[:7], torch.tensor([0, 0, 1, 1, 2, 2, 3]))


def test_proxies_get_their_own_learning_rate():
    cfg = load_config("configs/ccp_contrastive.yaml", TINY_OVERRIDES + ["ccp.proxy_lr_mult=10", "train.loss_lr=0.002"])
    built = build_model(cfg, fake_train_set(torch.arange(4).repeat(cfg.ccp.pool_size)))
    claimed = [g for m in built.methods for g in m.param_groups(cfg.train)]
    objective = built.objective
    groups = {g["name"]: g for g in parameter_groups(built.model, objective, cfg.train, claimed)}
    assert groups["loss_x10"]["lr"] == pytest.approx(0.02)
    assert groups["loss_x10"]["params"][0].shape == (4 * cfg.ccp.proxies_per_class, 16)
    assert "loss" not in groups  # no other objective parameter
    assert [t.name for t in objective.terms] == ["metric", "projection"]


# ----------------------------------------------------------------------------- stopping rules of Algorithm 1


def test_projection_stopping_rules():
    s = ProjectionStopping(patience=2)
    s.begin_projection(0)
    assert [s.update(v, i) for i, v in enumerate([0.1, 0.3, 0.2, 0.25], start=1)] == [True, True, False, False]
    assert s.pending and not s.should_stop  # projection 0 improved on -inf: roll forward
    assert s.projections[-1] == {"projection": 0, "start_step": 0, "end_step": 4, "steps": 4, "best_step": 2,
                                 "steps_to_best": 2, "best": 0.3, "improved": True}
    s.begin_projection(4)
    assert s.projection == 1 and not s.pending and s.bad_validations == 0
    assert [s.update(v, i) for i, v in enumerate([0.2, 0.35, 0.1, 0.1], start=5)] == [False, True, False, False]
    assert s.pending  # 0.35 > 0.3
    s.begin_projection(8)
    for i, v in enumerate([0.34, 0.3, 0.2], start=9):
        s.update(v, i)
    assert s.should_stop and not s.pending and s.projections[-1]["improved"] is False
    assert (s.best_score, s.best_step) == (0.35, 6)
    single = ProjectionStopping(patience=1, max_projections=1)
    single.begin_projection(0)
    single.update(0.5, 1), single.update(0.4, 2)
    assert single.should_stop  # Loss-Proxy: one projection only
    restored = ProjectionStopping(patience=1)
    restored.load_state_dict(s.state_dict())
    assert restored == s


# ----------------------------------------------------------------------------- Algorithm 1 on a tiny run

CCP_TINY = TINY_OVERRIDES + [
    "plots=false", "eval.clustering=false", "train.val_every=1", "train.max_steps=12",
    "ccp.patience=1", "ccp.proxies_per_class=2", "ccp.pool_size=4",
]


def ccp_config(*extra):
    return load_config("configs/ccp_contrastive.yaml", CCP_TINY + list(extra))


class WatchProjections(Callback):
    """Runs after the CCP callback: at each new projection, checks the state it set up."""

    def __init__(self):
        self.seen, self.checks = 0, []

    def on_validation_end(self, trainer, metrics):
        stopper = trainer.stopper
        if stopper.projection == self.seen or not stopper.started:
            return
        self.seen = stopper.projection
        best = load_checkpoint(trainer.folder.best_checkpoint)
        model_state = trainer.model.state_dict()
        same_as_best = all(torch.equal(model_state[k], v) for k, v in best["model"].items())
        reg = next(t for t in trainer.objective.terms if t.name == "projection").regularizer
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        snapshot_is_model = all(torch.equal(s, p.detach()) for s, p in zip(reg._snapshots(), params))
        train = trainer.splits.train.with_augment(False)
        emb, labels = embed_dataset(trainer.model, train, 256)
        bank = next(t for t in trainer.objective.terms if t.name == "metric").loss.bank
        d = (bank.proxies.detach()[:, None] - emb[None]).norm(dim=-1)
        nearest = d.argmin(dim=1)
        self.checks.append({
            "step": trainer.state.step,
            "same_as_best": same_as_best,
            "snapshot_is_model": snapshot_is_model,
            "proxy_is_sample": float(d.min(dim=1).values.max()),
            "proxy_class_ok": bool((labels[nearest] == bank.labels).all()),
            "distinct": int(torch.unique(nearest).numel()) == bank.proxies.shape[0],
        })


@pytest.fixture(scope="module")
def ccp_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ccp") / "full"
    watch = WatchProjections()
    summary = build_trainer(ccp_config(), run_dir, callbacks=[watch], quiet=True).fit()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return run_dir, summary, records, watch


def test_projections_end_by_their_own_early_stopping_and_roll_forward(ccp_run):
    run_dir, summary, records, watch = ccp_run
    val = {r["step"]: r["mean_average_precision_at_r"] for r in records if r["split"] == "val"}
    ccp = [r for r in records if r["split"] == "ccp"]
    assert len(ccp) >= 2, "the tiny run should roll forward at least once"
    assert summary["ccp"]["steps_per_projection"] == [r["steps"] for r in ccp]
    best_so_far = -math.inf
    for i, r in enumerate(ccp):
        window = {s: v for s, v in val.items() if r["start_step"] < s <= r["end_step"]}
        assert r["best"] == max(window.values()) and val[r["best_step"]] == r["best"]
        assert r["end_step"] - r["best_step"] == 1  # patience 1 validation, one validation per step
        assert r["improved"] == (r["best"] > best_so_far)
        assert r["improved"] == (i < len(ccp) - 1)  # alternation continues while projections improve
        if i:
            assert r["start_step"] == ccp[i - 1]["end_step"]
        best_so_far = max(best_so_far, r["best"])
    assert summary["stopped_early"] and summary["steps"] == ccp[-1]["end_step"]
    assert summary["best_val"]["value"] == max(val.values())
    assert "pool_covering_radius" in ccp[0] and ccp[0]["pool_covering_radius"] > 0


def test_roll_forward_restores_best_weights_and_reinitialises_proxies_from_samples(ccp_run):
    _, _, records, watch = ccp_run
    assert len(watch.checks) == len([r for r in records if r["split"] == "ccp"]) - 1
    for check in watch.checks:
        assert check["same_as_best"] and check["snapshot_is_model"]
        assert check["proxy_is_sample"] < 1e-5  # every proxy is a training sample's embedding ...
        assert check["proxy_class_ok"] and check["distinct"]  # ... of its own class, no sample used twice


def test_more_proxies_than_samples_of_a_class_is_reported_before_training(tmp_path):
    with pytest.raises(ValueError, match="ccp.proxies_per_class=17 but training class"):
        build_trainer(ccp_config("ccp.proxies_per_class=17", "ccp.pool_size=17"), tmp_path / "run", quiet=True).fit()


def test_resume_with_ccp_reaches_the_same_state(ccp_run, tmp_path):
    run_dir, summary, records, _ = ccp_run
    first_end = next(r for r in records if r["split"] == "ccp")["end_step"]

    class Crash(Callback):
        def on_validation_end(self, trainer, metrics):
            if trainer.state.step == first_end:
                raise KeyboardInterrupt

    interrupted = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        build_trainer(ccp_config(), interrupted, callbacks=[Crash()], quiet=True).fit()
    assert load_checkpoint(interrupted / "last.pt")["early_stopping"]["pending"] is True
    resumed = resume_trainer(interrupted, quiet=True).fit()
    assert resumed["ccp"] == summary["ccp"]
    assert resumed["test"] == pytest.approx(summary["test"], abs=1e-6)
    full, again = load_checkpoint(run_dir / "last.pt"), load_checkpoint(interrupted / "last.pt")
    for part in ("model", "objective"):
        for key in full[part]:
            torch.testing.assert_close(again[part][key], full[part][key], rtol=0, atol=1e-6)
    strip = lambda rs: [(r["split"], r["step"], r.get("mean_average_precision_at_r")) for r in rs]  # noqa: E731
    resumed_records = [json.loads(line) for line in (interrupted / "metrics.jsonl").read_text().splitlines()]
    assert strip(resumed_records) == strip(records)
