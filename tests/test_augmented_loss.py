"""SFT training schemes (Sec. 3.5) and the augmented loss J(X, Y) + lam J(X_gen, Y_gen) (Eq. 10)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import MultiSimilarityLoss, ProxyAnchorLoss

from dmlkit.augment.augmented_loss import FeatureAugmentedLoss
from dmlkit.augment.config import AugmentConfig, build_augmented_loss
from dmlkit.augment.schemes import NO_TARGET, balanced_targets, split_head_tail, unbalanced_targets

C, D = 6, 8


def batch(seed: int = 0, b: int = 12, d: int = D, c: int = C, normalize: bool = True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, d, generator=g, dtype=torch.float64)
    y = torch.arange(b) % c
    return (F.normalize(x, dim=1) if normalize else x), y


def warm(module: FeatureAugmentedLoss, seeds=(10, 11)) -> None:
    """Give every class a centre."""
    for s in seeds:
        x, y = batch(s)
        module.centers.update(x.float() if module.centers.centers.dtype == torch.float32 else x, y)


def copy_gen(g: torch.Generator) -> torch.Generator:
    h = torch.Generator()
    h.set_state(g.get_state())
    return h


# ---------------------------------------------------------------- schemes
def test_balanced_targets_never_equal_source_and_are_available() -> None:
    g = torch.Generator().manual_seed(0)
    for trial in range(50):
        avail = torch.rand(10, generator=g) < 0.6
        y = torch.randint(10, (30,), generator=g)
        t = balanced_targets(y, avail, g)
        for yi, ti in zip(y.tolist(), t.tolist()):
            others = [j for j in range(10) if avail[j] and j != yi]
            if others:
                assert ti != yi and ti in others
            else:
                assert ti == NO_TARGET


def test_balanced_targets_uniform_over_other_classes() -> None:
    g = torch.Generator().manual_seed(1)
    y = torch.zeros(30000, dtype=torch.long)
    t = balanced_targets(y, torch.tensor([0, 2, 3, 5]), g)
    freq = torch.bincount(t, minlength=6).double() / t.numel()
    assert freq[0] == 0 and freq[1] == 0 and freq[4] == 0
    torch.testing.assert_close(freq[[2, 3, 5]], torch.full((3,), 1 / 3, dtype=torch.float64), atol=0.02, rtol=0)


def test_unbalanced_targets_only_head_to_tail() -> None:
    counts = torch.tensor([50, 3, 20, 14, 15, 0])  # threshold 15: head {0,2,4}, tail {1,3}, 5 neither
    head, tail = split_head_tail(counts, 15)
    assert head.tolist() == [True, False, True, False, True, False]
    assert tail.tolist() == [False, True, False, True, False, False]
    g = torch.Generator().manual_seed(0)
    y = torch.arange(6).repeat(20)
    t = unbalanced_targets(y, counts, 15, g)
    assert (t[head[y]] != NO_TARGET).all() and set(t[head[y]].tolist()) == {1, 3}
    assert (t[~head[y]] == NO_TARGET).all()
    t = unbalanced_targets(y, counts, 15, g, available_classes=torch.tensor([0, 3]))
    assert set(t[head[y]].tolist()) == {3}


@pytest.mark.parametrize("threshold, word", [(2, "no tail"), (100, "no head")])
def test_threshold_without_tail_or_head_raises(threshold: int, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        split_head_tail([50, 3, 20], threshold)
    with pytest.raises(ValueError, match=word):
        FeatureAugmentedLoss(MultiSimilarityLoss(), 3, D, scheme="unbalanced", class_counts=[50, 3, 20], tail_threshold=threshold)


def test_schemes_deterministic_given_generator() -> None:
    y = torch.randint(10, (40,), generator=torch.Generator().manual_seed(3))
    a = balanced_targets(y, torch.ones(10, dtype=torch.bool), torch.Generator().manual_seed(7))
    b = balanced_targets(y, torch.ones(10, dtype=torch.bool), torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


# ---------------------------------------------------------------- the augmented loss
def test_lam_zero_equals_plain_loss() -> None:
    x, y = batch()
    plain = MultiSimilarityLoss()(x, y)
    aug = FeatureAugmentedLoss(MultiSimilarityLoss(), C, D, lam=0.0)
    warm(aug)
    torch.testing.assert_close(aug(x, y), plain)


@pytest.mark.parametrize("transform", ["sft", "translation"])
def test_identity_transform_gives_loss_on_relabelled_features(transform: str) -> None:
    x, y = batch()
    aug = FeatureAugmentedLoss(MultiSimilarityLoss(), C, D, transform=transform, lam=0.3).double()
    v = F.normalize(torch.ones(D, dtype=torch.float64), dim=0)
    aug.centers.centers[:] = v  # all centres equal: SFT and the translation are the identity
    aug.centers.initialized[:] = True
    t = balanced_targets(y, aug.centers.initialized, copy_gen(aug.generator))
    expected = MultiSimilarityLoss()(x, y) + 0.3 * MultiSimilarityLoss()(x, t)
    torch.testing.assert_close(aug(x, y), expected)
    assert aug.last_num_generated == len(y)


def test_generated_features_match_transform() -> None:
    from dmlkit.augment.sft import spherical_transform

    x, y = batch()
    seen = {}

    def recording_loss(emb, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        seen.setdefault("calls", []).append((emb, labels))
        return emb.sum() * 0 + 1.0

    aug = FeatureAugmentedLoss(recording_loss, C, D, lam=0.5).double()  # type: ignore[arg-type]
    warm(aug)
    mu = aug.centers.centers.clone()
    t = balanced_targets(y, aug.centers.initialized, copy_gen(aug.generator))
    aug(x, y)
    (x0, y0), (xg, yg) = seen["calls"]
    assert torch.equal(x0, x) and torch.equal(y0, y) and torch.equal(yg, t)
    torch.testing.assert_close(xg, spherical_transform(x, mu[y], mu[t]))
    torch.testing.assert_close(xg.norm(dim=1), torch.ones(len(y), dtype=torch.float64))


def test_gradient_flows_to_inputs_through_generated_features() -> None:
    x, y = batch()
    aug = FeatureAugmentedLoss(MultiSimilarityLoss(), C, D, lam=1.0).double()
    warm(aug)
    xr = x.clone().requires_grad_(True)
    aug(xr, y).backward()
    xp = x.clone().requires_grad_(True)
    MultiSimilarityLoss()(xp, y).backward()
    assert xr.grad is not None and torch.isfinite(xr.grad).all()
    assert not torch.allclose(xr.grad, xp.grad)  # the generated term contributes
    assert not aug.centers.centers.requires_grad


def test_unbalanced_transforms_only_head_features_into_tail_classes() -> None:
    calls = []

    def recording_loss(emb, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        calls.append(labels.clone())
        return emb.sum() * 0

    counts = [40, 40, 40, 5, 5, 5]
    aug = FeatureAugmentedLoss(
        recording_loss, C, D, scheme="unbalanced", class_counts=counts, tail_threshold=15  # type: ignore[arg-type]
    ).double()
    warm(aug)
    x, y = batch()
    aug(x, y)
    assert aug.last_num_generated == int((y < 3).sum())  # only the head features
    assert set(calls[-1].tolist()) <= {3, 4, 5}


def test_first_batch_without_centres_generates_nothing() -> None:
    x, y = batch()
    aug = FeatureAugmentedLoss(MultiSimilarityLoss(), C, D).double()
    xr = x.clone().requires_grad_(True)
    value = aug(xr, y)
    assert aug.last_num_generated == 0
    torch.testing.assert_close(value, MultiSimilarityLoss()(x, y))
    value.backward()  # still differentiable
    assert aug.centers.initialized.all()  # line 6 of Algorithm 1 ran
    aug(x, y)
    assert aug.last_num_generated == len(y)
    # Centres updated before generating (lines 5-6 swapped): only classes seen so far are targets.
    calls = []

    def recording_loss(emb, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        calls.append(labels.clone())
        return emb.sum() * 0

    first = FeatureAugmentedLoss(recording_loss, C, D, update_centers_first=True).double()  # type: ignore[arg-type]
    first(x[:4], y[:4])
    assert first.last_num_generated == 4
    assert set(calls[-1].tolist()) <= {0, 1, 2, 3}
    assert (calls[-1] != y[:4]).all()


def test_determinism_given_seed_and_state_dict_round_trip() -> None:
    def run(module: FeatureAugmentedLoss, seeds) -> list[torch.Tensor]:
        return [module(*batch(s)) for s in seeds]

    a = FeatureAugmentedLoss(MultiSimilarityLoss(), C, D, seed=5).double()
    b = FeatureAugmentedLoss(MultiSimilarityLoss(), C, D, seed=5).double()
    for va, vb in zip(run(a, range(4)), run(b, range(4))):
        assert torch.equal(va, vb)
    state = a.state_dict()
    assert "centers.centers" in state and "centers.initialized" in state
    c = FeatureAugmentedLoss(MultiSimilarityLoss(), C, D, seed=99).double()
    c.load_state_dict(state)
    assert torch.equal(c.centers.centers, a.centers.centers)
    assert torch.equal(c.centers.initialized, a.centers.initialized)
    for va, vc in zip(run(a, range(4, 8)), run(c, range(4, 8))):  # same random stream after the restore
        assert torch.equal(va, vc)


def test_sft_d_with_pre_normalisation_input() -> None:
    raw, y = batch(normalize=False)
    raw = 3.0 * raw
    plain = MultiSimilarityLoss()(F.normalize(raw, dim=1), y)
    zero = FeatureAugmentedLoss(MultiSimilarityLoss(), C, D, transform="sft_d", lam=0.0, normalize_input=True).double()
    torch.testing.assert_close(zero(raw, y), plain)
    assert zero.centers.centers.norm(dim=1).max() > 1.5  # centres live in the unnormalised space

    seen = []

    def recording_loss(emb, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        seen.append(emb)
        return emb.sum() * 0

    aug = FeatureAugmentedLoss(recording_loss, C, D, transform="sft-d", normalize_input=True).double()  # type: ignore[arg-type]
    aug(raw, y)
    raw2 = raw.clone().requires_grad_(True)
    aug(raw2, y)
    torch.testing.assert_close(seen[-2].norm(dim=1), torch.ones(len(y), dtype=torch.float64))  # J(X, Y) on unit vectors
    torch.testing.assert_close(seen[-1].norm(dim=1), torch.ones(len(y), dtype=torch.float64))  # reprojected
    seen[-1].sum().backward()
    assert raw2.grad is not None and raw2.grad.abs().sum() > 0


def test_proxy_loss_receives_generated_batch_and_trains_proxies() -> None:
    x, y = batch()
    x = x.float()
    proxy = ProxyAnchorLoss(num_classes=C, embedding_size=D)
    aug = FeatureAugmentedLoss(proxy, C, D, lam=0.2)
    warm(aug)
    assert any(p is proxy.proxies for p in aug.parameters())
    value = aug(x.requires_grad_(True), y)
    assert torch.isfinite(value)
    value.backward()
    assert proxy.proxies.grad is not None and proxy.proxies.grad.abs().sum() > 0
    ref = ProxyAnchorLoss(num_classes=C, embedding_size=D)
    ref.proxies.data.copy_(proxy.proxies.data)
    assert not torch.allclose(value.detach(), ref(x.detach(), y))


def test_pair_loss_with_ref_emb() -> None:
    x, y = batch()
    aug = FeatureAugmentedLoss(MultiSimilarityLoss(), C, D).double()
    warm(aug)
    ref, ref_y = batch(20)
    value = aug(x, y, ref_emb=ref, ref_labels=ref_y)
    assert torch.isfinite(value) and value > 0


def test_errors() -> None:
    ms = MultiSimilarityLoss()
    with pytest.raises(ValueError, match="lam"):
        FeatureAugmentedLoss(ms, C, D, lam=-0.1)
    with pytest.raises(ValueError, match="transform"):
        FeatureAugmentedLoss(ms, C, D, transform="rotate")
    with pytest.raises(ValueError, match="scheme"):
        FeatureAugmentedLoss(ms, C, D, scheme="both")
    with pytest.raises(ValueError, match="class_counts"):
        FeatureAugmentedLoss(ms, C, D, scheme="unbalanced")
    with pytest.raises(ValueError, match="one entry per class"):
        FeatureAugmentedLoss(ms, C, D, scheme="unbalanced", class_counts=[20, 3])
    aug = FeatureAugmentedLoss(ms, C, D)
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
def test_config_validation_and_builder() -> None:
    ms = MultiSimilarityLoss()
    assert build_augmented_loss(AugmentConfig(), ms, C, D, None, 0) is ms
    wrapped = build_augmented_loss(AugmentConfig(name="sft", lam=0.5), ms, C, D, None, 0)
    assert isinstance(wrapped, FeatureAugmentedLoss) and wrapped.lam == 0.5 and wrapped.loss is ms
    unb = build_augmented_loss(
        AugmentConfig(name="sft_d", scheme="unbalanced", tail_threshold=10), ms, C, D, [20, 20, 20, 5, 5, 5], 1
    )
    assert unb.is_tail.tolist() == [False, False, False, True, True, True]  # type: ignore[union-attr]
    bad = [
        dict(name="foo"),
        dict(lam=-1.0),
        dict(lam=float("nan")),
        dict(scheme="x"),
        dict(tail_threshold=0),
        dict(centers="mean"),
        dict(alpha=0.0),
        dict(alpha=1.5),
        dict(normalize_input="yes"),
    ]
    for kwargs in bad:
        with pytest.raises(ValueError, match="augment"):
            AugmentConfig(**kwargs)  # type: ignore[arg-type]
