"""Loss and miner registries: every entry builds and trains, defaults are the documented ones, errors are clear."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning import miners as pml_miners
from pytorch_metric_learning.distances import CosineSimilarity
from pytorch_metric_learning.reducers import SumReducer
from pytorch_metric_learning.regularizers import SparseCentersRegularizer
from dmlkit.losses.soft_triple_regularizer import MergingCentersRegularizer

from dmlkit.losses import (
    CrossBatchMemoryLoss,
    LossConfig,
    build_loss,
    create_loss,
    create_miner,
    default_miner,
    get_loss_entry,
    list_losses,
    list_miners,
    loss_defaults,
    miner_defaults,
    xbm_supported_losses,
)

NUM_CLASSES = 4
EMB = 8

REQUIRED_LOSSES = [
    "contrastive",
    "contrastive_c2",
    "triplet",
    "margin",
    "multi_similarity",
    "npair",
    "lifted_structure",
    "ranked_list",
    "proxy_nca",
    "proxy_anchor",
    "soft_triple",
    "normalized_softmax",
    "cosface",
    "arcface",
    "fastap",
    "xbm",
]

# The documented defaults (the thesis, Sec. 3.3.2.1, CUB column where per-dataset).
DOCUMENTED_DEFAULTS = {
    "ce_weak": {"output": "softmax", "eps": 1e-7},  # CE' of the classification-baseline supplement
    "ce_metric": {
        "output": "softmax",
        "a": 0.0,
        "b": 0.8,
        "p": 0.5,
        "allow_non_metric": False,
    },  # b/(1+a) <= 2^(p+1) - 2^(2p)
    "contrastive": {"pos_margin": 0.0, "neg_margin": 0.5},  # thesis C1: "0.5 margin"
    "contrastive_c2": {"pos_margin": 0.0, "neg_margin": 0.3841},  # thesis C2, CUB
    "triplet": {"margin": 0.0961, "triplets_per_anchor": "all"},  # thesis Triplet, CUB
    "multi_similarity": {"alpha": 2.0, "beta": 40.0, "base": 0.5},  # thesis MS, CUB
    "proxy_anchor": {"margin": 0.1, "alpha": 32.0},  # thesis ProxyAnchor
    "proxy_nca": {"softmax_scale": 10.0},  # thesis ProxyNCA++ temperature 0.1
    "proxy_nca_pp": {"temperature": 0.1},  # thesis ProxyNCA++ (softmax_scale = 1/temperature)
    "soft_triple": {"centers_per_class": 10, "la": 20.0, "gamma": 0.1, "margin": 0.01, "tau": 0.2},  # thesis, CUB
    "margin": {
        "margin": 0.2,
        "nu": 0.0,
        "beta": 1.2,
        "learn_beta": False,
        "class_specific_beta": False,
        "triplets_per_anchor": "all",
    },
    "npair": {},
    "lifted_structure": {"neg_margin": 1.0, "pos_margin": 0.0},
    "ranked_list": {"margin": 0.4, "Tn": 10.0, "imbalance": 0.5, "alpha": None, "Tp": 0.0},
    "normalized_softmax": {"temperature": 0.05},
    "cosface": {"margin": 0.35, "scale": 64.0},
    "arcface": {"margin": 28.6, "scale": 64.0},
    "l2_softmax": {"alpha": 16.0, "learn_alpha": False},  # Ranjan et al. 2017 (L2-Face)
    "fastap": {"num_bins": 10},
    "xbm": {
        "loss": "contrastive",
        "loss_params": None,
        "memory_size": 1024,
        "miner": "default",
        "miner_params": None,
        "start_iteration": 1000,
    },
}


def batch(seed: int = 0, n_per_class: int = 4, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(NUM_CLASSES).repeat_interleave(n_per_class)
    centres = torch.randn(NUM_CLASSES, EMB, generator=g, dtype=dtype)
    raw = centres[labels] + 0.7 * torch.randn(len(labels), EMB, generator=g, dtype=dtype)
    return F.normalize(raw, dim=1), labels


def test_required_losses_registered():
    assert set(REQUIRED_LOSSES) <= set(list_losses())


@pytest.mark.parametrize("name", list_losses())
def test_every_loss_builds_and_trains(name):
    torch.manual_seed(0)
    loss = create_loss(name, num_classes=NUM_CLASSES, embedding_size=EMB)
    emb, labels = batch()
    emb = emb.clone().requires_grad_()
    params = [p for p in loss.parameters() if p.requires_grad]
    value = loss(emb, labels)
    assert value.ndim == 0 and torch.isfinite(value)
    value.backward()
    assert emb.grad is not None and torch.isfinite(emb.grad).all()
    for p in params:
        assert p.grad is not None and torch.isfinite(p.grad).all()


@pytest.mark.parametrize("name", list_losses())
def test_every_loss_has_pml_signature(name):
    loss = create_loss(name, num_classes=NUM_CLASSES, embedding_size=EMB)
    assert isinstance(loss, torch.nn.Module)
    params = list(inspect.signature(loss.forward).parameters)
    assert params[:5] == ["embeddings", "labels", "indices_tuple", "ref_emb", "ref_labels"]


@pytest.mark.parametrize("name", list_losses())
def test_defaults_are_documented_values(name):
    assert name in DOCUMENTED_DEFAULTS, f"document the defaults of '{name}' in this test"
    assert loss_defaults(name) == DOCUMENTED_DEFAULTS[name]
    assert get_loss_entry(name).summary  # every factory says what it is


def test_instances_carry_the_defaults():
    ms = create_loss("multi_similarity")
    assert (ms.alpha, ms.beta, ms.base) == (2.0, 40.0, 0.5)
    c1, c2 = create_loss("contrastive"), create_loss("contrastive_c2")
    assert (c1.pos_margin, c1.neg_margin) == (0.0, 0.5)
    assert (c2.pos_margin, c2.neg_margin) == (0.0, 0.3841)
    assert create_loss("triplet").margin == 0.0961
    pa = create_loss("proxy_anchor", num_classes=3, embedding_size=5)
    assert (pa.margin, pa.alpha) == (0.1, 32.0) and pa.proxies.shape == (3, 5)
    assert create_loss("proxy_nca", num_classes=3, embedding_size=5).softmax_scale == 10.0
    st = create_loss("soft_triple", num_classes=3, embedding_size=5)
    assert (st.la, st.gamma, st.margin, st.centers_per_class) == (20.0, 1 / 0.1, 0.01, 10)
    assert isinstance(st.weight_regularizer, MergingCentersRegularizer) and st.weight_reg_weight == 0.2
    assert create_loss("soft_triple", num_classes=3, embedding_size=5, tau=0.0).weight_regularizer is None
    assert create_loss("ranked_list").alpha == pytest.approx(1.2)
    assert create_loss("arcface", num_classes=3, embedding_size=5).margin == pytest.approx(0.5, abs=1e-3)  # rad
    assert create_loss("xbm", embedding_size=5).start_iteration == 1000


@pytest.mark.parametrize("name", list_losses())
def test_loss_needs_sizes(name):
    entry = get_loss_entry(name)
    if entry.size_requirement("num_classes") == "required":
        with pytest.raises(ValueError, match="needs num_classes"):
            create_loss(name, embedding_size=EMB)
        loss = create_loss(name, num_classes=NUM_CLASSES, embedding_size=EMB)
        assert any(p.requires_grad for p in loss.parameters()), "proxy/classifier losses own trainable parameters"
    if entry.size_requirement("embedding_size") == "required":
        with pytest.raises(ValueError, match="needs embedding_size"):
            create_loss(name, num_classes=NUM_CLASSES)


def test_proxy_and_classifier_losses_need_num_classes():
    for name in ["proxy_nca", "proxy_anchor", "soft_triple", "normalized_softmax", "cosface", "arcface"]:
        assert get_loss_entry(name).size_requirement("num_classes") == "required"
    for name in ["contrastive", "triplet", "multi_similarity", "fastap"]:
        create_loss(name)  # no sizes needed


def test_default_miners():
    assert default_miner("multi_similarity") == "multi_similarity"
    assert all(default_miner(n) is None for n in list_losses() if n != "multi_similarity")
    assert "multi_similarity" in list_miners()
    assert miner_defaults("multi_similarity") == {"epsilon": 0.1}


@pytest.mark.parametrize("name", list_miners())
def test_every_miner_mines(name):
    emb, labels = batch()
    miner = create_miner(name)
    indices = miner(emb, labels)
    assert len(indices) in (3, 4)
    for idx in indices:
        assert idx.dtype == torch.long and (idx >= 0).all() and (idx < len(labels)).all()
    if len(indices) == 4:
        a1, p, a2, n = indices
        assert (labels[a1] == labels[p]).all() and (labels[a2] != labels[n]).all()
    else:
        a, p, n = indices
        assert (labels[a] == labels[p]).all() and (labels[a] != labels[n]).all()


def test_loss_composes_with_pml_miner_reducer_and_ref_emb():
    emb, labels = batch()
    loss = create_loss("multi_similarity", reducer=SumReducer())
    indices = create_miner("multi_similarity")(emb, labels)
    assert torch.isfinite(loss(emb, labels, indices))
    ref, ref_labels = batch(seed=1)
    assert torch.isfinite(create_loss("contrastive")(emb, labels, None, ref, ref_labels))
    cos = create_loss("contrastive", pos_margin=1.0, distance=CosineSimilarity())
    assert isinstance(cos.distance, CosineSimilarity)


def test_contrastive_against_brute_force():
    """C1 = mean of the non-zero positive terms d + mean of the non-zero negative terms [0.5 - d]_+ (PML reducer)."""
    emb, labels = batch(dtype=torch.float64)
    emb = F.normalize(torch.ones(EMB, dtype=torch.float64) + 0.4 * emb, dim=1)  # crowd: some negatives violate 0.5
    n = len(labels)
    pos, neg = [], []
    for i in range(n):
        for j in range(n):
            if i != j:
                d = float(torch.linalg.vector_norm(emb[i] - emb[j]))
                if labels[i] == labels[j]:
                    pos.append(d)
                else:
                    neg.append(max(0.0, 0.5 - d))
    pos, neg = [v for v in pos if v > 0], [v for v in neg if v > 0]
    assert neg, "the test batch must contain violating negatives"
    expected = sum(pos) / len(pos) + sum(neg) / len(neg)
    assert float(create_loss("contrastive")(emb, labels)) == pytest.approx(expected, rel=1e-9)


def test_multi_similarity_against_brute_force():
    """Eq. 12 of the MS paper with (alpha, beta, lambda) = (2, 40, 0.5), averaged over anchors."""
    emb, labels = batch(dtype=torch.float64)
    s = F.normalize(emb, dim=1) @ F.normalize(emb, dim=1).T
    a, b, lam = 2.0, 40.0, 0.5
    terms = []
    for i in range(len(labels)):
        pos = [float(s[i, k]) for k in range(len(labels)) if k != i and labels[k] == labels[i]]
        neg = [float(s[i, k]) for k in range(len(labels)) if labels[k] != labels[i]]
        terms.append(
            math.log(1 + sum(math.exp(-a * (v - lam)) for v in pos)) / a
            + math.log(1 + sum(math.exp(b * (v - lam)) for v in neg)) / b
        )
    expected = sum(terms) / len(terms)
    assert float(create_loss("multi_similarity")(emb, labels)) == pytest.approx(expected, rel=1e-9)


def test_margin_loss_class_specific_beta():
    with pytest.raises(ValueError, match="needs num_classes"):
        create_loss("margin", class_specific_beta=True, learn_beta=True)
    loss = create_loss("margin", num_classes=NUM_CLASSES, class_specific_beta=True, learn_beta=True)
    assert loss.beta.shape == (NUM_CLASSES,) and loss.beta.requires_grad
    plain = create_loss("margin", num_classes=NUM_CLASSES)  # num_classes alone does not make beta per class
    assert not isinstance(plain.beta, torch.nn.Parameter) or plain.beta.numel() == 1


def test_loss_registry_errors():
    with pytest.raises(ValueError, match="valid names are: arcface"):
        create_loss("circle_of_life")
    with pytest.raises(
        ValueError, match=r"unknown parameter\(s\) \['alpah'\].*valid parameters are: alpha, beta, base"
    ):
        create_loss("multi_similarity", alpah=3)
    with pytest.raises(ValueError, match="needs num_classes"):
        create_loss("proxy_anchor", embedding_size=EMB)
    with pytest.raises(ValueError, match="num_classes must be a positive integer"):
        create_loss("proxy_anchor", num_classes=0, embedding_size=EMB)
    with pytest.raises(ValueError, match="valid names are: batch_hard"):
        create_miner("hardest")
    with pytest.raises(ValueError, match="valid parameters are: epsilon"):
        create_miner("multi_similarity", eps=0.2)
    with pytest.raises(ValueError, match="tau=0"):
        create_loss("soft_triple", num_classes=3, embedding_size=4, weight_regularizer=SparseCentersRegularizer(3, 10))


# --------------------------------------------------------------------------- cross-batch memory


def test_xbm_matches_pml_cross_batch_memory():
    """With warm-up off, our wrapper computes what PML's CrossBatchMemory computes, batch after batch."""
    ours = create_loss("xbm", embedding_size=EMB, memory_size=40, start_iteration=0)
    oracle = pml_losses.CrossBatchMemory(pml_losses.ContrastiveLoss(neg_margin=0.5), EMB, memory_size=40)
    for seed in range(4):
        emb, labels = batch(seed)
        assert float(ours(emb, labels)) == pytest.approx(float(oracle(emb, labels)), rel=1e-6)
    assert ours.has_been_filled and ours.queue_idx == oracle.queue_idx


def test_xbm_warm_up_uses_batch_only():
    loss = create_loss("xbm", embedding_size=EMB, memory_size=64, start_iteration=2)
    plain = create_loss("contrastive")
    for step in range(3):
        emb, labels = batch(step)
        value = loss(emb, labels)
        if step < 2:
            assert float(value) == pytest.approx(float(plain(emb, labels)))
            assert loss.queue_idx == 0
    assert loss.queue_idx == 16 and loss.iteration == 3
    loss.eval()
    with torch.no_grad():
        loss(*batch(9))  # evaluation calls do not count as training iterations
    assert loss.iteration == 3


def test_xbm_state_round_trip():
    loss = create_loss("xbm", embedding_size=EMB, memory_size=20, start_iteration=0)
    for seed in range(2):
        loss(*batch(seed))
    fresh = create_loss("xbm", embedding_size=EMB, memory_size=20, start_iteration=0)
    fresh.load_state_dict(loss.state_dict())
    assert (fresh.queue_idx, fresh.has_been_filled, fresh.iteration) == (loss.queue_idx, True, 2)
    assert torch.equal(fresh.embedding_memory, loss.embedding_memory)


def test_xbm_inner_loss_and_miner():
    loss = create_loss(
        "xbm", embedding_size=EMB, loss="multi_similarity", loss_params={"beta": 50.0}, start_iteration=0
    )
    assert isinstance(loss, CrossBatchMemoryLoss)
    assert loss.loss.beta == 50.0 and isinstance(loss.miner, pml_miners.MultiSimilarityMiner)
    assert create_loss("xbm", embedding_size=EMB, loss="multi_similarity", miner=None).miner is None
    assert "contrastive" in xbm_supported_losses() and "proxy_anchor" not in xbm_supported_losses()


@pytest.mark.parametrize("inner", xbm_supported_losses())
def test_xbm_trains_with_every_supported_inner_loss(inner):
    loss = create_loss("xbm", embedding_size=EMB, loss=inner, memory_size=48, start_iteration=0)
    for seed in range(2):
        emb, labels = batch(seed)
        emb = emb.clone().requires_grad_()
        value = loss(emb, labels)
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(emb.grad).all()


def test_xbm_errors():
    with pytest.raises(ValueError, match="cannot wrap loss 'proxy_anchor'"):
        create_loss("xbm", embedding_size=EMB, loss="proxy_anchor")
    with pytest.raises(ValueError, match="unknown xbm inner loss"):
        create_loss("xbm", embedding_size=EMB, loss="nope")
    with pytest.raises(ValueError, match="needs embedding_size"):
        create_loss("xbm")
    loss = create_loss("xbm", embedding_size=EMB, memory_size=8, start_iteration=0)
    emb, labels = batch()
    with pytest.raises(ValueError, match="larger than the xbm memory"):
        loss(emb, labels)
    with pytest.raises(ValueError, match="ref_emb"):
        create_loss("xbm", embedding_size=EMB)(emb, labels, None, emb, labels)


# --------------------------------------------------------------------------- config


def test_loss_config_defaults_build_ms_with_its_miner():
    cfg = LossConfig()
    assert (cfg.name, cfg.params, cfg.miner, cfg.miner_params) == ("multi_similarity", {}, "default", {})
    loss, miner = build_loss(cfg, num_classes=NUM_CLASSES, embedding_size=EMB)
    assert isinstance(loss, pml_losses.MultiSimilarityLoss) and isinstance(miner, pml_miners.MultiSimilarityMiner)
    emb, labels = batch()
    assert torch.isfinite(loss(emb, labels, miner(emb, labels)))


def test_build_loss_variants():
    loss, miner = build_loss(LossConfig(name="multi_similarity", miner=None), NUM_CLASSES, EMB)
    assert miner is None
    loss, miner = build_loss(
        LossConfig(name="triplet", params={"margin": 0.2}, miner="triplet_margin", miner_params={"margin": 0.1}),
        NUM_CLASSES,
        EMB,
    )
    assert loss.margin == 0.2 and miner.margin == 0.1
    loss, miner = build_loss(LossConfig(name="proxy_anchor"), NUM_CLASSES, EMB)
    assert miner is None and loss.proxies.shape == (NUM_CLASSES, EMB)


def test_build_loss_xbm_routes_miner_into_memory():
    loss, miner = build_loss(
        LossConfig(name="xbm", params={"loss": "contrastive"}, miner="multi_similarity"), NUM_CLASSES, EMB
    )
    assert miner is None and isinstance(loss.miner, pml_miners.MultiSimilarityMiner)
    with pytest.raises(ValueError, match="not both"):
        build_loss(LossConfig(name="xbm", params={"miner": None}, miner="multi_similarity"), NUM_CLASSES, EMB)


def test_build_loss_errors():
    with pytest.raises(ValueError, match="no miner"):
        build_loss(LossConfig(name="contrastive", miner_params={"epsilon": 0.2}), NUM_CLASSES, EMB)
    with pytest.raises(ValueError, match="valid names are"):
        build_loss(LossConfig(name="multi_similarity", miner="nope"), NUM_CLASSES, EMB)
    with pytest.raises(ValueError, match="needs num_classes"):
        build_loss(LossConfig(name="soft_triple"), None, EMB)
