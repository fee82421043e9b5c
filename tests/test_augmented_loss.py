"""SFT training schemes and target policies (Sec. 3.5), and the augmented loss J(X, Y) + lam J(X_gen, Y_gen) (Eq. 10).

The references are independent of the implementation: target structure is checked by counting
labels, the generated term against PML's loss and miner called by hand on a batch whose targets are
forced (two classes in the batch: the ``batch`` policy has one choice), the rotation against the
matrix exponential of the plane's generator, the joint score against a brute-force multi-similarity.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import MultiSimilarityLoss, ProxyAnchorLoss
from pytorch_metric_learning.miners import MultiSimilarityMiner

from dmlkit.augment.augmented_loss import FeatureAugmentedLoss
from dmlkit.augment.config import SFTConfig, build_augmented_loss
from dmlkit.augment.feature_generator import FeatureGenerator
from dmlkit.augment.schemes import NO_TARGET, balanced_targets, split_head_tail, unbalanced_targets

C, D = 6, 8


def batch(seed: int = 0, b: int = 12, d: int = D, c: int = C, normalize: bool = True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, d, generator=g, dtype=torch.float64)
    y = torch.arange(b) % c
    return (F.normalize(x, dim=1) if normalize else x), y


def augmented(
    loss, c: int = C, d: int = D, lam: float = 0.2, miner=None, score: str = "separate", **kwargs
) -> FeatureAugmentedLoss:
    return FeatureAugmentedLoss(loss, FeatureGenerator(c, d, **kwargs), lam=lam, miner=miner, score=score)


def warm(module: FeatureAugmentedLoss | FeatureGenerator, c: int = C, d: int = D, seed: int = 10) -> None:
    """Give every class a centre (random unit vectors, one batch holding every class)."""
    gen = module.generator if isinstance(module, FeatureAugmentedLoss) else module
    centers = gen.centers
    x = F.normalize(torch.randn(c, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=1)
    centers.update(x.to(centers.centers.dtype), torch.arange(c))


def rotation_reference(x: torch.Tensor, mu_from: torch.Tensor, mu_to: torch.Tensor) -> torch.Tensor:
    """Eq. 3-4 built independently: exp(a K) with K = n2 n1^T - n1 n2^T the generator of the rotation plane."""
    out = []
    for xi, a, b in zip(x, mu_from, mu_to):
        n1 = a / a.norm()
        u = b / b.norm()
        w = u - (u @ n1) * n1
        n2 = w / w.norm()
        angle = torch.arccos((n1 @ u).clamp(-1, 1))
        k = torch.outer(n2, n1) - torch.outer(n1, n2)
        out.append(torch.linalg.matrix_exp(angle * k) @ xi)
    return torch.stack(out)


def ms_reference(
    sim: torch.Tensor, labels: torch.Tensor, anchors: list[int], alpha=2.0, beta=50.0, base=0.5
) -> torch.Tensor:
    """Multi-similarity (Wang et al. 2019) over all pairs of the given anchors, averaged over those anchors."""
    losses = []
    for a in anchors:
        others = torch.arange(len(labels)) != a
        pos = others & (labels == labels[a])
        neg = labels != labels[a]
        lp = torch.log1p(torch.exp(-alpha * (sim[a, pos] - base)).sum()) / alpha if pos.any() else sim.new_zeros(())
        ln = torch.log1p(torch.exp(beta * (sim[a, neg] - base)).sum()) / beta if neg.any() else sim.new_zeros(())
        losses.append(lp + ln)
    return torch.stack(losses).mean()


def pk_batches(num_classes: int, p: int, k: int, steps: int, seed: int):
    """P classes x K samples per batch, classes drawn without replacement (an m-per-class sampler)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        classes = torch.randperm(num_classes, generator=g)[:p]
        yield classes.repeat_interleave(k)


def positive_anchor_share(y_gen: torch.Tensor) -> float:
    same = (y_gen.unsqueeze(0) == y_gen.unsqueeze(1)).sum(1) - 1
    return float((same > 0).double().mean())


# ---------------------------------------------------------------- schemes: the "all" policy
def test_all_policy_targets_never_equal_source_and_are_available() -> None:
    g = torch.Generator().manual_seed(0)
    for trial in range(50):
        avail = torch.rand(10, generator=g) < 0.6
        y = torch.randint(10, (30,), generator=g)
        t = balanced_targets(y, avail, g, policy="all")
        for yi, ti in zip(y.tolist(), t.tolist()):
            others = [j for j in range(10) if avail[j] and j != yi]
            if others:
                assert ti != yi and ti in others
            else:
                assert ti == NO_TARGET


def test_all_policy_is_uniform_over_other_classes() -> None:
    g = torch.Generator().manual_seed(1)
    y = torch.zeros(30000, dtype=torch.long)
    t = balanced_targets(y, torch.tensor([0, 2, 3, 5]), g, policy="all")
    freq = torch.bincount(t, minlength=6).double() / t.numel()
    assert freq[0] == 0 and freq[1] == 0 and freq[4] == 0
    torch.testing.assert_close(freq[[2, 3, 5]], torch.full((3,), 1 / 3, dtype=torch.float64), atol=0.02, rtol=0)


# ---------------------------------------------------------------- schemes: the "batch" and "shared" policies
def test_batch_policy_draws_uniformly_among_the_other_classes_of_the_batch() -> None:
    g = torch.Generator().manual_seed(2)
    avail = torch.ones(50, dtype=torch.bool)
    avail[7] = False  # in the batch but without a centre: never a target
    y = torch.tensor([3, 3, 7, 7, 11, 11, 40, 40]).repeat(3000)
    t = balanced_targets(y, avail, g)  # the default policy is "batch"
    assert set(t[y == 3].tolist()) == {11, 40} and set(t[y == 7].tolist()) == {3, 11, 40}
    freq = torch.bincount(t[y == 40], minlength=50).double() / int((y == 40).sum())
    torch.testing.assert_close(freq[[3, 11]], torch.full((2,), 0.5, dtype=torch.float64), atol=0.02, rtol=0)
    # per feature: the two features of a class do not always share their target
    pairs = t.view(-1, 2)
    assert (pairs[:, 0] != pairs[:, 1]).any()


def test_shared_policy_sends_a_whole_class_to_one_target_of_the_batch() -> None:
    g = torch.Generator().manual_seed(3)
    for _ in range(30):
        y = next(pk_batches(200, 20, 3, 1, int(torch.randint(10**6, (1,), generator=g))))
        t = balanced_targets(y, torch.ones(200, dtype=torch.bool), g, policy="shared")
        for c in y.unique().tolist():
            targets = t[y == c].unique()
            assert targets.numel() == 1 and int(targets) != c and int(targets) in y.tolist()
        assert positive_anchor_share(t) == 1.0  # the P x K structure survives


@pytest.mark.parametrize("policy", ["batch", "shared"])
def test_a_generated_batch_keeps_its_positives_with_many_classes(policy: str) -> None:
    """120 classes, batches of 20 x 3 (the SFT paper's): at least 90% of generated anchors have a positive."""
    num_classes = 120
    gen = FeatureGenerator(num_classes, D, target=policy, seed=0)
    warm(gen, num_classes)
    shares, all_shares = [], []
    other = FeatureGenerator(num_classes, D, target="all", seed=0)
    warm(other, num_classes)
    for y in pk_batches(num_classes, 20, 3, 40, seed=1):
        x = F.normalize(
            torch.randn(60, D, generator=torch.Generator().manual_seed(int(y.sum())), dtype=torch.float64), dim=1
        )
        _, y_gen = gen.step(x.float(), y)
        assert y_gen.numel() == 60 and set(y_gen.tolist()) <= set(y.tolist())
        shares.append(positive_anchor_share(y_gen))
        all_shares.append(positive_anchor_share(other.step(x.float(), y)[1]))
    assert sum(shares) / len(shares) >= 0.9
    assert sum(all_shares) / len(all_shares) < 0.5  # the reading the policies replace: few positives


def test_unbalanced_policies_choose_among_tail_classes() -> None:
    counts = torch.tensor([50, 3, 20, 14, 15, 0, 4, 2])  # threshold 15: head {0, 2, 4}, tail {1, 3, 6, 7}
    head, tail = split_head_tail(counts, 15)
    assert head.tolist() == [True, False, True, False, True, False, False, False]
    assert tail.tolist() == [False, True, False, True, False, False, True, True]
    g = torch.Generator().manual_seed(0)
    y = torch.tensor([0, 0, 2, 2, 4, 1, 3]).repeat(50)  # tail classes 1 and 3 in the batch, 6 and 7 not
    t_all = unbalanced_targets(y, counts, 15, g, policy="all")
    assert set(t_all[head[y]].tolist()) == {1, 3, 6, 7} and (t_all[~head[y]] == NO_TARGET).all()
    t_batch = unbalanced_targets(y, counts, 15, g)  # "batch" by default
    assert set(t_batch[head[y]].tolist()) == {1, 3} and (t_batch[~head[y]] == NO_TARGET).all()
    t_shared = unbalanced_targets(y[:7], counts, 15, g, policy="shared")
    assert t_shared[0] == t_shared[1] and t_shared[2] == t_shared[3] and set(t_shared[:5].tolist()) <= {1, 3}
    no_tail = torch.tensor([0, 0, 2, 2])
    assert (unbalanced_targets(no_tail, counts, 15, g) == NO_TARGET).all()  # no tail class in the batch
    t = unbalanced_targets(y, counts, 15, g, available_classes=torch.tensor([0, 3]))
    assert set(t[head[y]].tolist()) == {3}


@pytest.mark.parametrize("threshold, word", [(2, "no tail"), (100, "no head")])
def test_threshold_without_tail_or_head_raises(threshold: int, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        split_head_tail([50, 3, 20], threshold)
    with pytest.raises(ValueError, match=word):
        FeatureGenerator(3, D, scheme="unbalanced", class_counts=[50, 3, 20], tail_threshold=threshold)


def test_schemes_deterministic_given_generator() -> None:
    y = torch.randint(10, (40,), generator=torch.Generator().manual_seed(3))
    for policy in ("batch", "shared", "all"):
        a = balanced_targets(y, torch.ones(10, dtype=torch.bool), torch.Generator().manual_seed(7), policy=policy)
        b = balanced_targets(y, torch.ones(10, dtype=torch.bool), torch.Generator().manual_seed(7), policy=policy)
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="policy"):
        balanced_targets(y, torch.ones(10, dtype=torch.bool), torch.Generator(), policy="any")


# ---------------------------------------------------------------- the augmented loss
def two_class_batch(seed: int = 0, n: int = 6):
    """Classes 0 and 1 only (so under the "batch" policy every target is forced: the other class)."""
    x, _ = batch(seed, b=2 * n)
    return x, torch.arange(2).repeat(n)


def test_lam_zero_equals_plain_loss() -> None:
    x, y = batch()
    plain = MultiSimilarityLoss()(x, y)
    aug = augmented(MultiSimilarityLoss(), lam=0.0)
    warm(aug)
    torch.testing.assert_close(aug(x, y), plain)


def test_generated_term_is_mined_by_the_miner_of_the_real_term() -> None:
    """Identity transform (equal centres), forced targets 1 - y: Eq. 10 with both terms mined, by hand."""
    x, y = two_class_batch()
    miner = MultiSimilarityMiner(epsilon=0.1)
    aug = augmented(MultiSimilarityLoss(), c=10, lam=0.3, miner=miner).double()
    aug.generator.centers.centers[:] = F.normalize(torch.ones(D, dtype=torch.float64), dim=0)
    aug.generator.centers.initialized[:] = True
    ms, t = MultiSimilarityLoss(), 1 - y
    mined = ms(x, t, miner(x, t))
    unmined = ms(x, t)
    assert not torch.allclose(mined, unmined)  # the test can tell the two apart
    torch.testing.assert_close(aug(x, y), ms(x, y, miner(x, y)) + 0.3 * mined)
    stats = aug.last_stats
    assert stats.num_generated == 12 and stats.positive_pairs == 2 * math.comb(6, 2)
    assert stats.mined_positive_pairs == int(miner(x, t)[0].numel())


def test_generated_features_are_the_rotation_into_the_target_class() -> None:
    x, y = two_class_batch(1)
    seen = []

    def recording_loss(emb, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        seen.append((emb, labels))
        return emb.sum() * 0 + 1.0

    aug = augmented(recording_loss, lam=0.5).double()  # type: ignore[arg-type]
    warm(aug)
    aug.generator.centers.centers.mul_(2.5)  # centres off the sphere: only their directions may matter (Eq. 4)
    mu = aug.generator.centers.centers.clone()
    aug(x, y)
    (x0, y0), (xg, yg) = seen
    assert torch.equal(x0, x) and torch.equal(y0, y) and torch.equal(yg, 1 - y)
    torch.testing.assert_close(xg, rotation_reference(x, mu[y], mu[1 - y]))


def test_joint_score_puts_the_real_batch_beside_the_generated_one() -> None:
    """Joint, no miner: MS of the generated anchors against [X; X_gen], against a brute-force MS."""
    x, y = two_class_batch(2)
    aug = augmented(MultiSimilarityLoss(), c=4, lam=1.0, score="joint").double()
    aug.generator.centers.centers[:] = F.normalize(torch.ones(D, dtype=torch.float64), dim=0)  # identity transform
    aug.generator.centers.initialized[:] = True
    joint_x, joint_y = torch.cat([x, x]), torch.cat([y, 1 - y])
    n = len(y)
    expected = MultiSimilarityLoss()(x, y) + ms_reference(joint_x @ joint_x.T, joint_y, list(range(n, 2 * n)))
    torch.testing.assert_close(aug(x, y), expected)
    assert aug.last_stats.anchors_with_positive == 1.0
    separate = augmented(MultiSimilarityLoss(), c=4, lam=1.0).double()
    separate.generator.centers.load_state_dict(aug.generator.centers.state_dict())
    assert not torch.allclose(separate(x, y), expected)


def test_joint_counts_the_real_positives_of_generated_anchors() -> None:
    """Two classes, one image each: targets 1 and 0, no positive among X_gen, each a real one."""
    x, y = batch(5, b=2, c=2)
    share = {}
    for score in ("separate", "joint"):
        aug = augmented(MultiSimilarityLoss(), c=2, lam=1.0, score=score).double()
        warm(aug, c=2)
        aug(x, y)
        share[score] = aug.last_stats.anchors_with_positive
    assert share == {"separate": 0.0, "joint": 1.0}


def test_ref_emb_reaches_the_miner_and_the_loss_of_both_terms() -> None:
    x, y = two_class_batch(3)
    ref, ref_y = batch(20, b=8)
    calls = {"loss": [], "miner": []}

    def loss(emb, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        calls["loss"].append((labels, indices_tuple, ref_emb, ref_labels))
        return emb.sum() * 0

    def miner(emb, labels, ref_emb=None, ref_labels=None):
        calls["miner"].append((labels, ref_emb, ref_labels))
        n = len(calls["miner"])  # the n-th call returns n (empty-looking) pairs: which term got which tuple
        return tuple(torch.zeros(n, dtype=torch.long) for _ in range(4))

    aug = augmented(loss, lam=0.5, miner=miner)  # type: ignore[arg-type]
    warm(aug)
    aug(x, y, ref_emb=ref, ref_labels=ref_y)
    assert len(calls["miner"]) == 2 and len(calls["loss"]) == 2
    (real_l, real_t, *real_ref), (gen_l, gen_t, *gen_ref) = calls["loss"]
    assert real_t[0].numel() == 1 and gen_t[0].numel() == 2 and torch.equal(gen_l, 1 - y)
    assert torch.equal(calls["miner"][1][0], 1 - y)
    for r, r_y in (real_ref, gen_ref, calls["miner"][0][1:], calls["miner"][1][1:]):
        assert r is ref and r_y is ref_y


def test_unbalanced_transforms_only_head_features_into_tail_classes() -> None:
    calls = []

    def recording_loss(emb, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        calls.append(labels.clone())
        return emb.sum() * 0

    counts = [40, 40, 40, 5, 5, 5]
    aug = augmented(recording_loss, scheme="unbalanced", class_counts=counts, tail_threshold=15).double()  # type: ignore[arg-type]
    warm(aug)
    x, y = batch()
    aug(x, y)
    assert aug.last_stats.num_generated == int((y < 3).sum())  # only the head features
    assert set(calls[-1].tolist()) <= {3, 4, 5}


def test_first_batch_without_centres_generates_nothing() -> None:
    x, y = batch()
    aug = augmented(MultiSimilarityLoss()).double()
    xr = x.clone().requires_grad_(True)
    value = aug(xr, y)
    assert aug.generator.last_num_generated == 0
    torch.testing.assert_close(value, MultiSimilarityLoss()(x, y))
    value.backward()  # still differentiable
    assert aug.generator.centers.initialized.all()  # line 6 of Algorithm 1 ran
    aug(x, y)
    assert aug.generator.last_num_generated == len(y)
    # Centres updated before generating (lines 5-6 swapped): only classes seen so far are targets.
    calls = []

    def recording_loss(emb, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        calls.append(labels.clone())
        return emb.sum() * 0

    first = augmented(recording_loss, update_centers_first=True).double()  # type: ignore[arg-type]
    first(x[:4], y[:4])
    assert first.generator.last_num_generated == 4
    assert set(calls[-1].tolist()) <= {0, 1, 2, 3}
    assert (calls[-1] != y[:4]).all()


def test_start_step_delays_the_generated_term_and_warms_the_centres() -> None:
    x, y = batch()
    aug = augmented(MultiSimilarityLoss(), lam=0.5, start_step=3).double()
    plain = MultiSimilarityLoss()(x, y)
    for _ in range(3):
        torch.testing.assert_close(aug(x, y), plain)
        assert aug.generator.last_num_generated == 0
    assert aug.generator.centers.initialized.all()
    assert not torch.allclose(aug(x, y), plain) and aug.generator.last_num_generated == len(y)
    state = aug.generator.state_dict()
    fresh = FeatureGenerator(C, D, start_step=3).double()
    fresh.load_state_dict(state)
    assert fresh.steps == 4 and fresh.active  # the warm-up is not repeated after a resume


def test_centre_lag_is_the_cosine_to_the_batch_class_means() -> None:
    x, y = batch(4)
    gen = FeatureGenerator(C, D).double()
    warm(gen)
    mu = gen.centers.centers.clone()
    gen.step(x, y)
    means = torch.stack([x[y == c].mean(0) for c in range(C)])
    expected = F.cosine_similarity(mu, means, dim=1).mean()
    torch.testing.assert_close(gen.last_center_cosine, expected)
    first = FeatureGenerator(C, D, update_centers_first=True).double()  # measured before the update in this order too
    warm(first)
    first.step(x, y)
    torch.testing.assert_close(first.last_center_cosine, expected)


def test_determinism_given_seed_and_state_dict_round_trip() -> None:
    def run(module: FeatureAugmentedLoss, seeds) -> list[torch.Tensor]:
        return [module(*batch(s)) for s in seeds]

    a = augmented(MultiSimilarityLoss(), seed=5).double()
    b = augmented(MultiSimilarityLoss(), seed=5).double()
    for va, vb in zip(run(a, range(4)), run(b, range(4))):
        assert torch.equal(va, vb)
    state = a.state_dict()
    assert "generator.centers.centers" in state and "generator.centers.initialized" in state
    c = augmented(MultiSimilarityLoss(), seed=99).double()
    c.load_state_dict(state)
    assert torch.equal(c.generator.centers.centers, a.generator.centers.centers)
    for va, vc in zip(run(a, range(4, 8)), run(c, range(4, 8))):  # same random stream after the restore
        assert torch.equal(va, vc)


def test_sft_d_with_pre_normalisation_input() -> None:
    raw, y = batch(normalize=False)
    raw = 3.0 * raw
    plain = MultiSimilarityLoss()(F.normalize(raw, dim=1), y)
    zero = augmented(MultiSimilarityLoss(), lam=0.0, transform="sft_d", normalize_input=True).double()
    torch.testing.assert_close(zero(raw, y), plain)
    assert zero.generator.centers.centers.norm(dim=1).max() > 1.5  # centres live in the unnormalised space

    seen = []

    def recording_loss(emb, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        seen.append(emb)
        return emb.sum() * 0

    aug = augmented(recording_loss, transform="sft-d", normalize_input=True).double()  # type: ignore[arg-type]
    aug(raw, y)
    raw2 = raw.clone().requires_grad_(True)
    aug(raw2, y)
    torch.testing.assert_close(seen[-2].norm(dim=1), torch.ones(len(y), dtype=torch.float64))  # J(X, Y) on unit vectors
    torch.testing.assert_close(seen[-1].norm(dim=1), torch.ones(len(y), dtype=torch.float64))  # reprojected
    seen[-1].sum().backward()
    assert raw2.grad is not None and raw2.grad.abs().sum() > 0


def test_sft_d_without_pre_normalised_input_is_refused() -> None:
    with pytest.raises(ValueError, match="normalize_input=True"):
        FeatureGenerator(C, D, transform="sft_d")
    with pytest.raises(ValueError, match="methods.sft.normalize_input: true and model.normalize: none"):
        SFTConfig(name="sft_d")


def test_proxy_loss_receives_generated_batch_and_trains_proxies() -> None:
    x, y = batch()
    x = x.float()
    proxy = ProxyAnchorLoss(num_classes=C, embedding_size=D)
    aug = augmented(proxy, lam=0.2)
    warm(aug)
    assert any(p is proxy.proxies for p in aug.parameters())
    value = aug(x.requires_grad_(True), y)
    value.backward()
    assert proxy.proxies.grad is not None and proxy.proxies.grad.abs().sum() > 0
    ref = ProxyAnchorLoss(num_classes=C, embedding_size=D)
    ref.proxies.data.copy_(proxy.proxies.data)
    assert not torch.allclose(value.detach(), ref(x.detach(), y))


def test_errors() -> None:
    ms = MultiSimilarityLoss()
    with pytest.raises(ValueError, match="lam"):
        augmented(ms, lam=-0.1)
    with pytest.raises(ValueError, match="transform"):
        FeatureGenerator(C, D, transform="rotate")
    with pytest.raises(ValueError, match="scheme"):
        FeatureGenerator(C, D, scheme="both")
    with pytest.raises(ValueError, match="target"):
        FeatureGenerator(C, D, target="random")  # checked by SFTConfig's rules, as a config's methods.sft.target
    with pytest.raises(ValueError, match="score"):
        augmented(ms, score="mixed")
    with pytest.raises(ValueError, match="start_step"):
        FeatureGenerator(C, D, start_step=-1)
    with pytest.raises(ValueError, match="FeatureGenerator"):
        FeatureAugmentedLoss(ms, C, D)  # type: ignore[arg-type]  # the old signature says what to pass
    with pytest.raises(ValueError, match="class_counts"):
        FeatureGenerator(C, D, scheme="unbalanced")
    with pytest.raises(ValueError, match="one entry per class"):
        FeatureGenerator(C, D, scheme="unbalanced", class_counts=[20, 3])
    aug = augmented(ms)
    x, y = batch()
    x = x.float()
    x[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        aug(x, y)
    with pytest.raises(ValueError, match="shape"):
        aug(torch.zeros(4, D + 1), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="labels"):
        aug(torch.zeros(4, D), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="labels must lie"):
        aug(torch.zeros(4, D), torch.tensor([0, 1, 2, C]))


# ---------------------------------------------------------------- config
def test_config_defaults_are_the_faithful_reading() -> None:
    cfg = SFTConfig(name="sft")
    assert (cfg.target, cfg.score, cfg.alpha, cfg.lam, cfg.start_step) == ("batch", "separate", 1.0, 0.2, 0)


def test_config_validation_and_builder() -> None:
    ms = MultiSimilarityLoss()
    miner = MultiSimilarityMiner()
    assert build_augmented_loss(SFTConfig(), ms, C, D, None, 0) is ms
    cfg = SFTConfig(name="sft", lam=0.5, target="shared", score="joint", alpha=0.5, start_step=7)
    wrapped = build_augmented_loss(cfg, ms, C, D, None, 0, miner=miner)
    assert (
        isinstance(wrapped, FeatureAugmentedLoss)
        and wrapped.lam == 0.5
        and wrapped.loss is ms
        and wrapped.miner is miner
    )
    assert wrapped.score == "joint"
    g = wrapped.generator
    assert (g.target, g.centers.alpha, g.start_step, g.transform) == ("shared", 0.5, 7, "sft")
    unb = FeatureGenerator.from_config(
        SFTConfig(name="sft_d", scheme="unbalanced", tail_threshold=10, normalize_input=True),
        C,
        D,
        [20, 20, 20, 5, 5, 5],
        1,
    )
    assert unb.is_tail.tolist() == [False, False, False, True, True, True] and unb.normalize_input
    with pytest.raises(ValueError, match="methods.sft.name"):
        FeatureGenerator.from_config(SFTConfig(), C, D)
    bad = [
        dict(name="foo"),
        dict(lam=-1.0),
        dict(lam=float("nan")),
        dict(scheme="x"),
        dict(target="x"),
        dict(score="x"),
        dict(start_step=-1),
        dict(tail_threshold=0),
        dict(centers="mean"),
        dict(alpha=0.0),
        dict(alpha=1.5),
        dict(normalize_input="yes"),
    ]
    for kwargs in bad:
        with pytest.raises(ValueError, match="methods.sft"):
            SFTConfig(**kwargs)  # type: ignore[arg-type]
