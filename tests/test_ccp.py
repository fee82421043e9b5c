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
from dmlkit.engine.optim import parameter_groups
from dmlkit.engine.weight_decay import exclude_from_weight_decay
from dmlkit.assemble import build_model, build_trainer, resume_trainer
from dmlkit.proxies import CCPConfig, ProjectionRegularizer, ProxyBank, ProxyPairLoss, greedy_k_center
from tests_helpers import TINY_OVERRIDES, fake_train_set, stop_after_validation

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


def _triplets(d: torch.Tensor, same: torch.Tensor, margin: float) -> float:
    """Brute force: mean of the positive ``d[a, p] - d[a, n] + margin`` over rows ``a`` (anchors) of ``d``."""
    terms = [
        float(d[a, p] - d[a, n] + margin)
        for a in range(d.shape[0])
        for p in range(d.shape[1])
        for n in range(d.shape[1])
        if same[a, p] and not same[a, n]
    ]
    positive = [t for t in terms if t > 0]
    return sum(positive) / len(positive) if positive else 0.0


def test_proxy_anchor_swaps_the_roles_of_proxies_and_samples():
    angles = torch.tensor([0.0, 0.9273, 0.6435])  # x0 = (1, 0); x1 = (0.6, 0.8); x2 = (0.8, 0.6)
    x, y = torch.stack([angles.cos(), angles.sin()], 1), torch.tensor([0, 1, 1])
    bank = ProxyBank(2, 1, 2)
    with torch.no_grad():
        bank.proxies.copy_(torch.eye(2))
    d = torch.cdist(x, bank.proxies.detach())
    same = y[:, None] == bank.labels[None, :]
    sample_anchor = _triplets(d, same, 0.1)  # x2 is nearer the other class's proxy: one active triplet
    proxy_anchor = _triplets(d.T, same.T, 0.1)  # every proxy is nearer its own samples: none
    assert sample_anchor == pytest.approx(0.3620, abs=1e-3) and proxy_anchor == 0.0
    triplet = pml_losses.TripletMarginLoss(margin=0.1)
    assert float(ProxyPairLoss(triplet, bank)(x, y).detach()) == pytest.approx(sample_anchor, rel=1e-4)
    assert float(ProxyPairLoss(triplet, bank, proxy_anchor=True)(x, y).detach()) == pytest.approx(
        proxy_anchor, abs=1e-6
    )
    cfg = load_config(
        "configs/ccp_contrastive.yaml",
        TINY_OVERRIDES
        + ["methods.ccp.proxies_per_class=2", "methods.ccp.pool_size=3", "methods.ccp.proxy_anchor=true"],
    )
    assert build_model(cfg, fake_train_set(torch.arange(4).repeat(4))).objective.terms[0].loss.proxy_anchor is True
    for key in ("proxy_anchor", "restore_best"):
        with pytest.raises(ValueError, match=f"methods.ccp.{key} must be true or false"):
            CCPConfig(**{key: "yes"})


def test_batch_term_adds_the_weighted_batch_pair_loss():
    labels = torch.arange(4).repeat(4)
    cfg = load_config(
        "configs/ccp_contrastive.yaml", TINY_OVERRIDES + ["methods.ccp.proxies_per_class=2", "methods.ccp.pool_size=3"]
    )
    assert cfg.methods.ccp.batch_loss_weight == 0.1  # the official default (ccp.loss_weight)
    terms = build_model(cfg, fake_train_set(labels)).objective.terms
    assert [t.name for t in terms] == ["metric", "batch", "projection"]
    x = F.normalize(torch.randn(16, 16, generator=torch.Generator().manual_seed(3)), dim=1)
    c1 = pml_losses.ContrastiveLoss(pos_margin=0.0, neg_margin=0.5)  # the config's loss, sample pairs only
    assert float(terms[1](x, labels, {}).detach()) == pytest.approx(0.1 * float(c1(x, labels)), rel=1e-5)
    off = load_config(
        "configs/ccp_contrastive.yaml",
        TINY_OVERRIDES
        + ["methods.ccp.proxies_per_class=2", "methods.ccp.pool_size=3", "methods.ccp.batch_loss_weight=0"],
    )
    assert [t.name for t in build_model(off, fake_train_set(labels)).objective.terms] == ["metric", "projection"]
    with pytest.raises(ValueError, match="methods.ccp.batch_loss_weight"):
        CCPConfig(batch_loss_weight=-0.1)


def _brute_force_k_center(pool: torch.Tensor, k: int, initial: torch.Tensor) -> list[int]:
    """Algorithm 2 written out: repeatedly the pool row farthest from ``initial`` and the picks so far."""
    picks: list[int] = []
    for _ in range(k):
        centres = torch.cat([initial, pool[picks]]) if picks else initial
        far = [(min(float((pool[i] - c).norm()) for c in centres), -i) for i in range(len(pool)) if i not in picks]
        picks.append(-max(far)[1])
    return picks


def test_k_center_measures_proxies_and_pool_in_one_space():
    """Raw proxies that shrank off the sphere are measured after the pool's normalisation (l2), not raw."""
    g = torch.Generator().manual_seed(7)
    classes, per_class, k, pool_size = 40, 2, 2, 5
    bank = ProxyBank(classes, per_class, 3, seed=1, pool_normalize="l2")
    shrink = 0.2 + 0.7 * torch.rand(classes * per_class, 1, generator=g)  # norms 0.2-0.9, as measured under Adam
    with torch.no_grad():
        bank.proxies.copy_(F.normalize(torch.randn(classes * per_class, 3, generator=g), dim=1) * shrink)
    raw = bank.proxies.detach().clone()
    pool = F.normalize(torch.randn(classes * pool_size, 3, generator=g), dim=1)  # the model's l2 output
    labels = torch.arange(classes).repeat_interleave(pool_size)
    picked = bank.reinitialize(pool, labels)
    same_space = differs = 0
    for c in range(classes):
        rows = pool[c * pool_size : (c + 1) * pool_size]
        expected = _brute_force_k_center(rows, k, F.normalize(raw[c * per_class : (c + 1) * per_class], dim=1))
        in_raw_space = _brute_force_k_center(rows, k, raw[c * per_class : (c + 1) * per_class])
        same_space += (picked[c] - c * pool_size).tolist() == expected
        differs += in_raw_space != expected
    assert same_space == classes
    assert differs > 0  # the data tells the two spaces apart: measuring raw proxies would fail above
    cfg = load_config(
        "configs/ccp_contrastive.yaml", TINY_OVERRIDES + ["methods.ccp.proxies_per_class=2", "methods.ccp.pool_size=3"]
    )
    assert (
        build_model(cfg, fake_train_set(torch.arange(4).repeat(4))).objective.terms[0].loss.bank.pool_normalize == "l2"
    )


def test_ccp_method_wraps_the_loss_and_bad_input():
    assert CCP.from_config(load_config("configs/quickstart.yaml")) is None
    cfg = load_config(
        "configs/ccp_contrastive.yaml", TINY_OVERRIDES + ["methods.ccp.proxies_per_class=2", "methods.ccp.pool_size=3"]
    )
    metric = build_model(cfg, fake_train_set(torch.arange(4).repeat(4))).objective.terms[0]
    assert isinstance(metric.loss, ProxyPairLoss) and metric.miner is None and metric.loss.bank.proxies.shape == (8, 16)
    proxy_loss = load_config(
        "configs/ccp_contrastive.yaml", TINY_OVERRIDES + ["loss.name=proxy_anchor", "loss.miner=null"]
    )
    with pytest.raises(ValueError, match="pair or tuple loss"):
        build_model(proxy_loss, fake_train_set(torch.arange(4).repeat(8)))
    with pytest.raises(ValueError, match="pool_size"):
        CCPConfig(proxies_per_class=8, pool_size=4)
    with pytest.raises(ValueError, match="lam"):
        CCPConfig(lam=-1e-4)
    with pytest.raises(ValueError, match="methods.ccp.lam"):
        load_config("configs/ccp_contrastive.yaml", ["methods.ccp.lam=-0.1"])
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
    assert len(state) == 2 * len(list(model.parameters()))  # theta* and the running projection's best theta
    reg.remember()
    kept = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    reg.snapshot(from_best=True)  # theta* <- the remembered state, not the current one
    for star, k in zip(reg._snapshots(), kept):
        torch.testing.assert_close(star, k)
    assert float(reg().detach()) == pytest.approx(0.5 * lam * sum(p.numel() for p in model.parameters()))
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
    cfg = load_config(
        "configs/ccp_contrastive.yaml", TINY_OVERRIDES + ["methods.ccp.proxy_lr_mult=10", "train.loss_lr=0.002"]
    )
    built = build_model(cfg, fake_train_set(torch.arange(4).repeat(cfg.methods.ccp.pool_size)))
    claimed = [g for m in built.methods for g in m.param_groups(cfg.train)]
    objective = built.objective
    groups = {g["name"]: g for g in parameter_groups(built.model, objective, cfg.train, claimed)}
    assert groups["loss_x10"]["lr"] == pytest.approx(0.02)
    assert groups["loss_x10"]["params"][0].shape == (4 * cfg.methods.ccp.proxies_per_class, 16)
    assert "loss" not in groups  # no other objective parameter
    assert [t.name for t in objective.terms] == ["metric", "batch", "projection"]
    trained = {g["name"]: g for g in exclude_from_weight_decay(list(groups.values()), built.model, objective)}
    assert trained["loss_x10_no_decay"]["weight_decay"] == 0.0 and "loss_x10" not in trained  # proxies: no decay
    assert "weight_decay" not in trained["body"]  # the network keeps train.weight_decay


# ----------------------------------------------------------------------------- stopping rules of Algorithm 1


def test_a_projection_ends_on_its_own_patience_and_the_run_goes_on():
    s = ProjectionStopping(patience=7, projection_patience=2)
    s.begin_projection(0)
    assert [s.update(v, i) for i, v in enumerate([0.1, 0.3, 0.2, 0.25], start=1)] == [True, True, False, False]
    assert s.pending and not s.should_stop  # 2 validations below the projection's best 0.3 end it
    assert s.projections[-1] == {
        "projection": 0,
        "start_step": 0,
        "end_step": 4,
        "steps": 4,
        "best_step": 2,
        "steps_to_best": 2,
        "best": 0.3,
        "improved": True,
        "ended_by": "patience",
    }
    s.begin_projection(4)
    assert [s.update(v, i) for i, v in enumerate([0.2, 0.25, 0.1], start=5)] == [False, False, False]
    assert not s.pending  # 0.1 is the projection's first bad validation (its best is 0.25)
    s.update(0.2, 8)
    assert s.pending and s.projections[-1]["improved"] is False and s.projections[-1]["best"] == 0.25
    assert not s.should_stop  # a projection that did not beat the run's best does not end the run ...
    s.begin_projection(8)
    assert s.update(0.35, 9) and (s.best_score, s.best_step, s.bad_validations) == (0.35, 9, 0)  # ... which goes on
    assert [s.update(v, i) for i, v in enumerate([0.3, 0.34], start=10)] == [False, False]
    assert s.pending and not s.should_stop
    s.begin_projection(11)
    for i, v in enumerate([0.2, 0.3, 0.29, 0.28], start=12):
        s.update(v, i)
    assert s.pending and not s.should_stop and s.bad_validations == 6
    s.begin_projection(15)
    s.update(0.1, 16)
    assert s.should_stop and not s.pending  # 7 validations since the run's best (step 9), across projections
    assert [p["ended_by"] for p in s.projections] == ["patience"] * 4
    restored = ProjectionStopping(patience=1)
    restored.load_state_dict(s.state_dict())
    assert restored == s


def test_the_last_projection_is_ended_by_the_run_alone():
    single = ProjectionStopping(patience=3, projection_patience=1, max_projections=1)  # Loss-Proxy
    single.begin_projection(0)
    single.update(0.5, 1), single.update(0.4, 2)
    assert not single.pending and not single.should_stop  # the only projection: methods.ccp.patience does not end it
    single.update(0.45, 3), single.update(0.3, 4)
    assert single.should_stop  # train.patience = 3 validations since the best, as its baseline
    single.close(4)
    assert single.projections == [
        {
            "projection": 0,
            "start_step": 0,
            "end_step": 4,
            "steps": 4,
            "best_step": 1,
            "steps_to_best": 1,
            "best": 0.5,
            "improved": True,
            "ended_by": "run",
        }
    ]
    both = ProjectionStopping(patience=2, projection_patience=2)
    both.begin_projection(0)
    for i, v in enumerate([0.5, 0.4, 0.4], start=1):
        both.update(v, i)
    assert both.should_stop and not both.pending  # the run ends at the same validation: no next projection
    with pytest.raises(ValueError, match="projection patience"):
        ProjectionStopping(patience=2, projection_patience=0)


# ----------------------------------------------------------------------------- Algorithm 1 on a tiny run

CCP_TINY = TINY_OVERRIDES + [
    "plots=false",
    "eval.clustering=false",
    "train.val_every=1",
    "train.max_steps=12",
    "train.patience=5",
    "methods.ccp.patience=1",
    "methods.ccp.proxies_per_class=2",
    "methods.ccp.pool_size=4",
    "methods.ccp.lam=0.5",
]


def ccp_config(*extra):
    return load_config("configs/ccp_contrastive.yaml", CCP_TINY + list(extra))


def _params(model):
    return [p.detach().clone() for p in model.parameters() if p.requires_grad]


class WatchProjections(Callback):
    """Runs after the CCP callback: keeps the weights and proxies of every step; at each new projection,
    checks the state the CCP callback set up against them."""

    def __init__(self):
        self.seen, self.checks, self.params, self.proxies = 0, [], {}, {}

    def on_batch_end(self, trainer, batch, outputs):
        bank = next(t for t in trainer.objective.terms if t.name == "metric").loss.bank
        self.params[trainer.state.step] = _params(trainer.model)
        self.proxies[trainer.state.step] = bank.proxies.detach().clone()

    def on_validation_end(self, trainer, metrics):
        stopper = trainer.stopper
        if stopper.projection == self.seen or not stopper.started:
            return
        self.seen = stopper.projection
        ended, step = stopper.projections[-1], trainer.state.step
        best = load_checkpoint(trainer.folder.best_checkpoint)
        model_state = trainer.model.state_dict()
        reg = next(t for t in trainer.objective.terms if t.name == "projection").regularizer
        bank = next(t for t in trainer.objective.terms if t.name == "metric").loss.bank
        now = _params(trainer.model)
        ccp = _ccp_callback(trainer)
        pool, pool_labels = ccp.last_pool
        expected = []  # Algorithm 2 by brute force, from rho* mapped into the pool's (l2) space
        for c in range(bank.num_classes):
            rows = torch.nonzero(pool_labels == c).flatten()
            rho = F.normalize(bank.rho_star[c * 2 : c * 2 + 2], dim=1)
            expected.append(pool[rows[_brute_force_k_center(pool[rows], 2, rho)]])
        self.checks.append(
            {
                "step": step,
                "same_as_best": all(torch.equal(model_state[k], v) for k, v in best["model"].items()),
                "kept_weights": all(torch.equal(a, b) for a, b in zip(now, self.params[step])),
                "theta_star_is_projection_best": all(
                    torch.equal(s, p) for s, p in zip(reg._snapshots(), self.params[ended["best_step"]])
                ),
                "theta_star_is_model": all(torch.equal(s, p) for s, p in zip(reg._snapshots(), now)),
                "rho_star_is_projection_best": torch.equal(bank.rho_star, self.proxies[ended["best_step"]]),
                "k_center_from_rho_star": torch.allclose(bank.proxies.detach(), torch.cat(expected), atol=1e-6),
                "lam": reg.lam,
            }
        )


def _run(tmp_path_factory, name, *extra):
    run_dir = tmp_path_factory.mktemp("ccp") / name
    watch = WatchProjections()
    summary = build_trainer(ccp_config(*extra), run_dir, callbacks=[watch], quiet=True).fit()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return run_dir, summary, records, watch


@pytest.fixture(scope="module")
def ccp_run(tmp_path_factory):
    return _run(tmp_path_factory, "full")


def test_projections_end_on_ccp_patience_and_the_run_on_train_patience(ccp_run):
    run_dir, summary, records, watch = ccp_run
    val = [(r["step"], r["mean_average_precision_at_r"]) for r in records if r["split"] == "val"]
    ccp = [r for r in records if r["split"] == "ccp"]
    best, bad, stop = -math.inf, 0, None  # the run-level rule, replayed on the logged scores: train.patience = 5
    for step, score in val:
        best, bad = (score, 0) if score > best else (best, bad + 1)
        if bad >= 5:
            stop = step
            break
    assert summary["steps"] == (stop or 12) and summary["stopped_early"] == (stop is not None)
    assert summary["best_val"]["value"] == max(v for _, v in val)
    scores = dict(val)
    for i, r in enumerate(ccp):
        window = {s: v for s, v in scores.items() if r["start_step"] < s <= r["end_step"]}
        assert r["best"] == max(window.values()) and scores[r["best_step"]] == r["best"]
        if r["ended_by"] == "patience":
            assert r["end_step"] - r["best_step"] == 1  # methods.ccp.patience 1 validation, one validation per step
        if i:
            assert r["start_step"] == ccp[i - 1]["end_step"]
    assert ccp[-1]["ended_by"] == "run" and ccp[-1]["end_step"] == summary["steps"]
    assert summary["ccp"]["steps_per_projection"] == [r["steps"] for r in ccp] and len(ccp) >= 3
    assert summary["facts"]["projections"] == len(ccp)  # the protocol tables' column
    # the former rule ended the run at the first projection that did not beat the run's best:
    assert any(not r["improved"] for r in ccp[:-1]), "the tiny run should see a projection end below the run's best"
    assert "pool_covering_radius" in ccp[0] and ccp[0]["pool_covering_radius"] > 0


def test_a_projection_end_moves_the_anchors_and_the_network_trains_on(ccp_run):
    _, _, records, watch = ccp_run
    assert len(watch.checks) == len([r for r in records if r["split"] == "ccp"]) - 1 >= 2
    for check in watch.checks:
        assert check["kept_weights"] and not check["theta_star_is_model"]  # no roll-back: theta is where it was
        assert check["theta_star_is_projection_best"] and check["rho_star_is_projection_best"]
        assert check["k_center_from_rho_star"]  # Algorithm 2 from rho*, in the pool's space
        assert check["lam"] == 0.5
    assert any(not c["same_as_best"] for c in watch.checks)


def test_lambda_is_zero_in_the_first_projection(ccp_run):
    _, _, records, _ = ccp_run
    first_end = next(r for r in records if r["split"] == "ccp")["end_step"]
    train = [r for r in records if r["split"] == "train"]
    assert all(r["loss/projection"] == 0.0 for r in train if r["step"] <= first_end)
    assert all(r["loss/projection"] > 0.0 for r in train if r["step"] > first_end)
    assert all(r["loss/batch"] > 0.0 for r in train)


def test_restore_best_rolls_the_network_back_as_before(tmp_path_factory):
    _, _, records, watch = _run(tmp_path_factory, "restore", "methods.ccp.restore_best=true")
    assert watch.checks
    for check in watch.checks:
        assert check["same_as_best"] and check["theta_star_is_model"]


def test_more_proxies_than_samples_of_a_class_is_reported_before_training(tmp_path):
    with pytest.raises(ValueError, match="methods.ccp.proxies_per_class=17 but training class"):
        build_trainer(
            ccp_config("methods.ccp.proxies_per_class=17", "methods.ccp.pool_size=17"), tmp_path / "run", quiet=True
        ).fit()


@pytest.mark.parametrize("where", ["first_end", "later_best"])
def test_resume_with_ccp_reaches_the_same_state(ccp_run, tmp_path, where):
    run_dir, summary, records, _ = ccp_run
    ccp = [r for r in records if r["split"] == "ccp"]
    # a pending projection end, or a validation that is a projection's best (kept before last.pt could hold it)
    crash_at = ccp[0]["end_step"] if where == "first_end" else ccp[1]["best_step"]

    class Crash(Callback):
        def on_validation_end(self, trainer, metrics):
            if trainer.state.step == crash_at:
                raise KeyboardInterrupt

    interrupted = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        build_trainer(ccp_config(), interrupted, callbacks=[Crash()], quiet=True).fit()
    state = load_checkpoint(interrupted / "last.pt")["early_stopping"]
    assert state["pending"] is (where == "first_end")
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


def _ccp_callback(trainer):
    return next(cb for cb in trainer.callbacks if type(cb).__name__ == "CCPCallback")


def test_the_2d_figure_has_a_panel_per_finished_projection(tmp_path):
    """methods.ccp.plot: one panel per projection end (its rho* and the next k-centre picks) and the final state."""
    run_dir = tmp_path / "plot"
    trainer = build_trainer(ccp_config("methods.ccp.plot=true", "plots=true", "train.max_steps=5"), run_dir, quiet=True)
    summary = trainer.fit()
    ccp = _ccp_callback(trainer)
    started = summary["ccp"]["projections"] - 1  # projection ends that started a next projection
    assert len(ccp.panels) == started >= 1 and (run_dir / "plots" / "ccp_proxies.png").stat().st_size > 0
    first = ccp.panels[0]
    assert first["converged"].shape == first["next"].shape == (first["converged_labels"].numel(), 16)
    assert not torch.equal(first["converged"], first["next"])  # the next proxies are new samples, not rho*


def test_a_resumed_run_keeps_the_figure_panels_of_the_projections_before_the_crash(tmp_path):
    """The panels live in memory: last.pt carries them, so the figure of a resumed run has every projection."""
    plotted = ("methods.ccp.plot=true", "plots=true")
    full = build_trainer(ccp_config(*plotted), tmp_path / "full", quiet=True)
    summary = full.fit()
    ends = [sum(summary["ccp"]["steps_per_projection"][: i + 1]) for i in range(2)]
    assert summary["ccp"]["projections"] >= 3 and ends[1] + 1 < summary["steps"]  # two ends before the last step
    crashed = tmp_path / "crashed"
    with pytest.raises(KeyboardInterrupt):  # after the second end: its panel is in memory, the first's in last.pt
        build_trainer(ccp_config(*plotted), crashed, callbacks=[stop_after_validation(ends[1] + 1)], quiet=True).fit()
    resumed = resume_trainer(crashed, quiet=True)
    resumed.fit()
    again_panels, full_panels = _ccp_callback(resumed).panels, _ccp_callback(full).panels
    assert [p["title"] for p in again_panels] == [p["title"] for p in full_panels]
    for again, first in zip(again_panels, full_panels):
        torch.testing.assert_close(again["converged"], first["converged"])
