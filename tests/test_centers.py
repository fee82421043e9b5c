"""Class centres of the SFT paper (Eq. 9, Sec. 3.5; "Random" and "Pick" of Table 6)."""

from __future__ import annotations

import pytest
import torch

from dmlkit.augment import ClassCenters, spherical_transform


def batch(seed: int = 0, b: int = 12, d: int = 4, c: int = 5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, d, generator=g), torch.randint(c, (b,), generator=g)


def test_first_update_initialises_with_class_means() -> None:
    x, y = batch()
    cc = ClassCenters(5, 4)
    cc.update(x, y)
    for j in range(5):
        if (y == j).any():
            torch.testing.assert_close(cc.centers[j], x[y == j].mean(0))
            assert cc.initialized[j]
        else:
            assert not cc.initialized[j]
            assert (cc.centers[j] == 0).all()


def test_update_equals_hand_computation_of_eq9() -> None:
    cc = ClassCenters(3, 2, alpha=0.5)
    cc.update(torch.tensor([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0]]), torch.tensor([0, 1, 2]))
    # centres now mu0 = (1, 0), mu1 = (0, 2), mu2 = (4, 4)
    x = torch.tensor([[3.0, 1.0], [5.0, -1.0], [2.0, 2.0]])
    y = torch.tensor([0, 0, 1])
    cc.update(x, y)
    # class 0: n = 2, delta = ((1,0)-(3,1) + (1,0)-(5,-1)) / 3 = (-6, 0) / 3 = (-2, 0); mu0 <- (1,0) - 0.5*(-2,0) = (2, 0)
    # class 1: n = 1, delta = ((0,2)-(2,2)) / 2 = (-1, 0); mu1 <- (0,2) - 0.5*(-1,0) = (0.5, 2)
    # class 2: absent, unchanged
    expected = torch.tensor([[2.0, 0.0], [0.5, 2.0], [4.0, 4.0]])
    torch.testing.assert_close(cc.centers, expected)


def test_default_step_is_eq9_as_written() -> None:
    """alpha = 1 (the default): mu_j <- (mu_j + sum_i x_i) / (1 + n_j), the old centre counted as one sample."""
    cc = ClassCenters(2, 2)
    assert cc.alpha == 1.0
    cc.update(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 1]))
    cc.update(torch.tensor([[3.0, 1.0], [5.0, -1.0], [2.0, 2.0]]), torch.tensor([0, 0, 1]))
    # class 0: ((1,0) + (3,1) + (5,-1)) / 3 = (3, 0); class 1: ((0,2) + (2,2)) / 2 = (1, 2)
    torch.testing.assert_close(cc.centers, torch.tensor([[3.0, 0.0], [1.0, 2.0]]))


def test_batch_cosine_measures_the_lag_before_the_update() -> None:
    cc = ClassCenters(3, 2)
    cc.update(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 1]))
    x = torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 3.0], [5.0, 5.0]])
    y = torch.tensor([0, 0, 1, 2])  # class 2 has no centre yet: left out
    # class 0: cos((1,0), (1,1)) = 1/sqrt(2); class 1: cos((0,1), (0,3)) = 1
    torch.testing.assert_close(cc.batch_cosine(x, y), torch.tensor((2**-0.5 + 1.0) / 2))
    assert torch.isnan(ClassCenters(3, 2).batch_cosine(x, y))


def test_update_matches_loop_reference() -> None:
    cc = ClassCenters(5, 4, alpha=0.3)
    x0, y0 = batch(0, b=40)
    cc.update(x0, y0)  # all 5 classes initialised (40 samples)
    assert cc.initialized.all()
    ref = cc.centers.clone()
    x, y = batch(1)
    for j in range(5):
        m = y == j
        delta = (ref[j] - x[m]).sum(0) / (1 + m.sum())
        ref[j] = ref[j] - 0.3 * delta
    cc.update(x, y)
    torch.testing.assert_close(cc.centers, ref)


def test_update_detaches_and_follows_dtype() -> None:
    x, y = batch()
    x.requires_grad_(True)
    cc = ClassCenters(5, 4).double()
    cc.update(x, y)
    assert cc.centers.dtype == torch.float64 and not cc.centers.requires_grad
    assert not cc.get(y[:3]).requires_grad


def test_random_mode_is_fixed_unit_and_seeded() -> None:
    a = ClassCenters(5, 4, mode="random", generator=torch.Generator().manual_seed(3))
    b = ClassCenters(5, 4, mode="random", generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(a.centers, b.centers)
    torch.testing.assert_close(a.centers.norm(dim=1), torch.ones(5))
    before = a.centers.clone()
    a.update(*batch())
    torch.testing.assert_close(a.centers, before)
    state = torch.get_rng_state()
    ClassCenters(5, 4, mode="random")
    assert torch.equal(state, torch.get_rng_state())  # global RNG untouched


def test_pick_mode_uses_a_sample_of_the_class_and_generator() -> None:
    x, y = batch(2, b=30)
    a = ClassCenters(5, 4, mode="pick", generator=torch.Generator().manual_seed(7))
    b = ClassCenters(5, 4, mode="pick", generator=torch.Generator().manual_seed(7))
    state = torch.get_rng_state()
    a.update(x, y)
    b.update(x, y)
    assert torch.equal(state, torch.get_rng_state())
    torch.testing.assert_close(a.centers, b.centers)
    for j in torch.unique(y).tolist():
        assert (a.centers[j] == x[y == j]).all(dim=1).any()


def test_state_dict_round_trip() -> None:
    cc = ClassCenters(5, 4)
    cc.update(*batch(0))
    cc.update(*batch(1))
    sd = cc.state_dict()
    assert set(sd) == {"centers", "initialized"}
    other = ClassCenters(5, 4)
    other.load_state_dict(sd)
    torch.testing.assert_close(other.centers, cc.centers)
    assert torch.equal(other.initialized, cc.initialized)
    x, y = batch(2)
    cc.update(x, y)
    other.update(x, y)
    torch.testing.assert_close(other.centers, cc.centers)


def test_missing_class_error_names_class_and_fix() -> None:
    cc = ClassCenters(5, 4)
    cc.update(torch.randn(2, 4), torch.tensor([0, 1]))
    cc.get(torch.tensor([1, 0]))
    with pytest.raises(ValueError, match=r"\[3\].*update\(\)"):
        cc.get(torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"no centre"):
        cc(torch.tensor([4]))


def test_input_errors() -> None:
    cc = ClassCenters(5, 4)
    x, y = batch()
    bad = x.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        cc.update(bad, y)
    assert not cc.initialized.any()  # nothing was written
    with pytest.raises(ValueError, match="shape"):
        cc.update(x[:, :3], y)
    with pytest.raises(ValueError, match="labels"):
        cc.update(x, y[:5])
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        cc.update(x, y + 5)
    with pytest.raises(ValueError, match="integer"):
        cc.update(x, y.float())
    with pytest.raises(ValueError, match="mode"):
        ClassCenters(5, 4, mode="mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="alpha"):
        ClassCenters(5, 4, alpha=0.0)
    with pytest.raises(ValueError, match="num_classes"):
        ClassCenters(0, 4)


def test_centres_feed_the_transform() -> None:
    x, y = batch(3, b=40, d=6)
    x = torch.nn.functional.normalize(x, dim=1)
    cc = ClassCenters(5, 6)
    cc.update(x, y)
    target = (y + 1) % 5
    out = spherical_transform(x, cc(y), cc(target))
    torch.testing.assert_close(out.norm(dim=1), torch.ones(40))
