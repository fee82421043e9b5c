"""CE' / CE'' (classification-baseline paper): (weak) metric properties, parameter checks, training module, Lemma 3-4 bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dmlkit.losses import (
    MetricCrossEntropy,
    MetricCrossEntropyLoss,
    create_loss,
    get_loss_entry,
    list_losses,
    loss_defaults,
    metric_bounds,
    metric_condition_bound,
)

C = 4
unit = st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False)
vec = arrays(np.float64, (C,), elements=unit)
binary = arrays(np.float64, (C,), elements=st.sampled_from([0.0, 1.0]))
# (a, b, p) inside the metric condition, including the boundary b / (1 + a) = 2^(p+1) - 2^(2p)
VALID = [(0.0, 0.8, 0.5), (1.0, 1.0, 0.5), (0.0, metric_condition_bound(0.3), 0.3), (2.0, 0.5, 0.8), (0.0, 0.1, 0.95)]
TOL = 1e-9


def t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a), dtype=torch.float64)


def brute_ce_metric(x, y, a, b, p):
    return sum(-math.log(1 + a - b * abs(xi - yi) ** p) + math.log(1 + a) for xi, yi in zip(x, y))


# --------------------------------------------------------------------------- values


def test_values_match_the_formulas():
    x, y = [0.1, 0.7, 0.2], [0.0, 1.0, 0.0]
    weak = MetricCrossEntropy("weak").distance(t(x), t(y))
    assert weak.item() == pytest.approx(sum(-math.log(1 - abs(a - b)) for a, b in zip(x, y)))
    for a, b, p in VALID:
        got = MetricCrossEntropy("metric", a=a, b=b, p=p).distance(t(x), t(y)).item()
        assert got == pytest.approx(brute_ce_metric(x, y, a, b, p))


def test_batch_shapes_and_mean_loss():
    g = torch.Generator().manual_seed(0)
    out = torch.softmax(torch.randn(6, C, generator=g), dim=1)
    labels = torch.tensor([0, 1, 2, 3, 0, 1])
    onehot = torch.nn.functional.one_hot(labels, C).float()
    for crit in (MetricCrossEntropy("weak"), MetricCrossEntropy("metric")):
        rows = crit.distance(out, onehot)
        assert rows.shape == (6,)
        assert crit(out, labels).item() == pytest.approx(rows.mean().item())
        assert torch.allclose(crit.one_hot_loss(out, onehot), rows)


def test_ce_weak_is_binary_cross_entropy_on_one_hot():
    g = torch.Generator().manual_seed(1)
    out = torch.sigmoid(torch.randn(5, C, generator=g, dtype=torch.float64))
    labels = torch.tensor([0, 1, 2, 3, 1])
    onehot = torch.nn.functional.one_hot(labels, C).double()
    bce = torch.nn.functional.binary_cross_entropy(out, onehot, reduction="none").sum(1)
    assert torch.allclose(MetricCrossEntropy("weak").distance(out, onehot), bce)


def test_lemma1_label_distance():
    ce2 = MetricCrossEntropy("metric", a=0.0, b=0.8, p=0.5)
    assert ce2.M == pytest.approx(math.log(5))
    la, lb = t([1.0, 0, 0, 0]), t([0.0, 0, 1, 0])
    assert ce2.distance(la, lb).item() == pytest.approx(ce2.label_distance) == pytest.approx(2 * math.log(5))
    ce1 = MetricCrossEntropy("weak", eps=1e-6)
    assert ce1.M == pytest.approx(-math.log(1e-6))
    assert torch.isfinite(ce1.distance(la, lb))  # clamped instead of +inf
    assert ce1.distance(la, lb).item() == pytest.approx(ce1.label_distance) == pytest.approx(-2 * math.log(1e-6))


# --------------------------------------------------------------------------- metric properties


@settings(max_examples=150, deadline=None)
@given(x=vec, y=vec, z=vec, which=st.integers(0, len(VALID) - 1))
def test_ce_metric_is_a_metric(x, y, z, which):
    crit = MetricCrossEntropy("metric", *VALID[which])
    x, y, z = t(x), t(y), t(z)
    dxy, dyx, dxz, dyz = crit.distance(x, y), crit.distance(y, x), crit.distance(x, z), crit.distance(y, z)
    assert dxy >= 0 and crit.distance(x, x) == 0
    assert torch.equal(dxy, dyx)
    assert dxz <= dxy + dyz + TOL
    if not torch.equal(x, y):
        assert dxy > 0


def test_ce_metric_triangle_on_many_random_triples():
    g = torch.Generator().manual_seed(0)
    n = 20000
    # half uniform, half near the worst case {0, 1/2, 1}
    pts = torch.rand(3, n, C, generator=g, dtype=torch.float64)
    corners = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)[torch.randint(0, 3, (3, n // 2, C), generator=g)]
    pts[:, n // 2 :] = (corners + 1e-3 * torch.randn(3, n // 2, C, generator=g, dtype=torch.float64)).clamp(0, 1)
    x, y, z = pts
    for a, b, p in VALID:
        crit = MetricCrossEntropy("metric", a=a, b=b, p=p)
        assert (crit.distance(x, z) <= crit.distance(x, y) + crit.distance(y, z) + TOL).all()


def test_metric_condition_worst_case_is_the_midpoint():
    # (u^p + v^p - (u+v)^p) / (u^p v^p) on u + v = 1 is smallest at u = v = 1/2 (the Example's extremum)
    u = np.linspace(1e-4, 1 - 1e-4, 20001)
    for p in (0.1, 0.3, 0.5, 0.7, 0.9):
        phi = (u**p + (1 - u) ** p - 1) / (u**p * (1 - u) ** p)
        assert phi.min() == pytest.approx(metric_condition_bound(p), rel=1e-6)
        assert u[phi.argmin()] == pytest.approx(0.5, abs=1e-3)


@pytest.mark.parametrize("a,b,p", [(0.0, 0.5, 1.0), (0.0, 0.9, 0.5), (1.0, 1.8, 0.5), (0.0, 0.3, 0.9)])
def test_invalid_parameters_break_the_triangle(a, b, p):
    assert b / (1 + a) > metric_condition_bound(p)
    crit = MetricCrossEntropy("metric", a=a, b=b, p=p, allow_non_metric=True)
    assert not crit.is_metric
    x, y, z = t([0.0]), t([0.5]), t([1.0])
    assert crit.distance(x, z) > crit.distance(x, y) + crit.distance(y, z)


# --------------------------------------------------------------------------- CE' is a weak metric


@settings(max_examples=200, deadline=None)
@given(x=vec, z=vec, label=binary)
def test_ce_weak_triangle_through_the_label(x, z, label):
    crit = MetricCrossEntropy("weak")
    x, z, label = t(x), t(z), t(label)
    assert crit.distance(x, z) <= crit.distance(x, label) + crit.distance(label, z) + TOL
    assert crit.distance(x, z) >= 0 and crit.distance(x, x) == 0
    assert torch.equal(crit.distance(x, z), crit.distance(z, x))


def test_ce_weak_is_not_a_metric():
    crit = MetricCrossEntropy("weak")
    assert crit.is_weak_metric and not crit.is_metric
    x, y, z = t([0.0]), t([0.5]), t([1.0])  # the supplement's counterexample
    assert crit.distance(x, z) > crit.distance(x, y) + crit.distance(y, z)


# --------------------------------------------------------------------------- errors


def test_constructor_errors():
    with pytest.raises(ValueError, match=r"2\^\(p\+1\) - 2\^\(2p\)"):
        MetricCrossEntropy("metric", a=0.0, b=0.5, p=1.0)
    with pytest.raises(ValueError, match=r"1 \+ a - b > 0"):
        MetricCrossEntropy("metric", a=0.0, b=1.0, p=0.5, allow_non_metric=True)
    with pytest.raises(ValueError, match="a > -1"):
        MetricCrossEntropy("metric", a=-1.0, b=0.0, p=0.5)
    with pytest.raises(ValueError, match="b > 0"):
        MetricCrossEntropy("metric", b=0.0)
    with pytest.raises(ValueError, match="p > 0"):
        MetricCrossEntropy("metric", p=0.0)
    with pytest.raises(ValueError, match="kind"):
        MetricCrossEntropy("hinge")
    with pytest.raises(ValueError, match="eps"):
        MetricCrossEntropy("weak", eps=0.0)
    with pytest.raises(ValueError, match=r"2\^\(p\+1\)"):
        create_loss("ce_metric", num_classes=3, embedding_size=4, b=0.9)
    with pytest.raises(ValueError, match="output"):
        create_loss("ce_weak", num_classes=3, embedding_size=4, output="tanh")
    # the registered losses fix the kind and build their criterion: neither is a parameter
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['kind'\]"):
        create_loss("ce_weak", num_classes=3, embedding_size=4, kind="metric")
    with pytest.raises(ValueError, match="builds its criterion"):
        create_loss("ce_metric", num_classes=3, embedding_size=4, criterion=MetricCrossEntropy("weak"))
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['eps'\]"):
        create_loss("ce_metric", num_classes=3, embedding_size=4, eps=1e-3)  # CE'' has no eps
    with pytest.raises(ValueError, match="criterion must be a MetricCrossEntropy"):
        MetricCrossEntropyLoss(3, 4, criterion="metric")


def test_input_errors():
    crit = MetricCrossEntropy("metric")
    out = torch.full((2, 3), 1 / 3)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        crit(out * 4, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        crit(out - 1, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="integer"):
        crit(out, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="lie in"):
        crit(out, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="lie in"):
        crit(out, torch.tensor([-1, 0]))
    with pytest.raises(ValueError, match="one-hot"):
        crit.one_hot_loss(out, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
    with pytest.raises(ValueError, match="one-hot"):
        crit.one_hot_loss(out, torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]))
    loss = create_loss("ce_weak", num_classes=3, embedding_size=4)
    with pytest.raises(ValueError, match="ref_emb"):
        loss(torch.randn(2, 4), torch.tensor([0, 1]), None, torch.randn(2, 4), torch.tensor([0, 1]))


# --------------------------------------------------------------------------- training module + registry


def test_registry_entries():
    assert {"ce_weak", "ce_metric"} <= set(list_losses())
    assert loss_defaults("ce_weak") == {"output": "softmax", "eps": 1e-7}
    assert loss_defaults("ce_metric") == {
        "output": "softmax", "a": 0.0, "b": 0.8, "p": 0.5, "allow_non_metric": False
    }  # fmt: skip
    for name in ("ce_weak", "ce_metric"):
        entry = get_loss_entry(name)
        assert entry.summary and entry.builds is MetricCrossEntropyLoss
        assert entry.size_requirement("num_classes") == entry.size_requirement("embedding_size") == "required"


@pytest.mark.parametrize("name", ["ce_weak", "ce_metric"])
@pytest.mark.parametrize("output", ["softmax", "sigmoid"])
def test_forward_backward_finite(name, output):
    torch.manual_seed(0)
    loss = create_loss(name, num_classes=5, embedding_size=8, output=output)
    emb = torch.nn.functional.normalize(torch.randn(10, 8), dim=1).requires_grad_()
    labels = torch.arange(10) % 5
    value = loss(emb, labels)
    assert value.ndim == 0 and torch.isfinite(value)
    value.backward()
    assert torch.isfinite(emb.grad).all()
    assert loss.W.grad is not None and torch.isfinite(loss.W.grad).all() and torch.isfinite(loss.bias.grad).all()
    # the value is the criterion on the head's outputs
    crit = loss.criterion
    assert value.item() == pytest.approx(crit(loss.outputs(emb.detach()), labels).item(), rel=1e-5)


def test_confident_outputs_stay_finite():
    for name in ("ce_weak", "ce_metric"):
        loss = create_loss(name, num_classes=3, embedding_size=2)
        with torch.no_grad():
            loss.W.copy_(torch.tensor([[200.0, -200.0, 0.0], [0.0, 0.0, 0.0]]))
        emb = torch.tensor([[1.0, 0.0], [1.0, 0.0]], requires_grad=True)
        value = loss(emb, torch.tensor([0, 1]))  # one right, one confidently wrong
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(emb.grad).all() and torch.isfinite(loss.W.grad).all()
        if name == "ce_weak":  # log-space path keeps a gradient for the wrong sample
            assert loss.W.grad.abs().sum() > 0


def test_training_reduces_the_loss():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(4).repeat_interleave(8)
    emb = torch.nn.functional.normalize(torch.randn(4, 8, generator=g)[labels] + 0.3 * torch.randn(32, 8, generator=g))
    for name in ("ce_weak", "ce_metric"):
        loss = create_loss(name, num_classes=4, embedding_size=8)
        opt = torch.optim.SGD(loss.parameters(), lr=2.0)
        first = loss(emb, labels).item()
        for _ in range(25):
            opt.zero_grad()
            value = loss(emb, labels)
            value.backward()
            opt.step()
        assert value.item() < 0.5 * first


def test_the_class_takes_its_hyper_parameters_from_the_criterion():
    torch.manual_seed(0)
    emb, labels = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    registered = create_loss("ce_metric", num_classes=3, embedding_size=4, b=0.5, p=0.7)
    direct = MetricCrossEntropyLoss(3, 4, MetricCrossEntropy("metric", b=0.5, p=0.7))
    direct.load_state_dict(registered.state_dict())
    assert direct.kind == registered.kind == "metric" and (direct.criterion.d.b, direct.criterion.d.p) == (0.5, 0.7)
    assert direct(emb, labels).item() == pytest.approx(registered(emb, labels).item())
    default = MetricCrossEntropyLoss(3, 4)  # CE' with eps = 1e-7, as ce_weak
    assert default.kind == "weak" and default.criterion.d.eps == 1e-7
    assert sorted(default.state_dict()) == ["W", "bias"]


def test_miner_weights_apply():
    loss = create_loss("ce_metric", num_classes=3, embedding_size=4)
    emb, labels = torch.randn(4, 4), torch.tensor([0, 0, 1, 2])
    per = loss.per_sample(emb, labels)
    a, p, n = torch.tensor([0]), torch.tensor([1]), torch.tensor([2])
    assert loss(emb, labels, (a, p, n)).item() == pytest.approx(per[:3].sum().item() / 4, rel=1e-5)


# --------------------------------------------------------------------------- Lemmas 3-4


def test_bounds_on_a_perfect_classifier():
    labels = torch.tensor([0, 0, 1, 1, 2, 3])
    outputs = torch.nn.functional.one_hot(labels, C).float()
    res = metric_bounds(outputs, labels, MetricCrossEntropy("metric"))
    assert res["eps"] == 0 and res["max_same_class"] == 0
    assert res["min_different_class"] == pytest.approx(2 * math.log(5)) == pytest.approx(res["different_class_bound"])
    assert res["same_class_holds"] and res["different_class_holds"]
    assert res["same_class_guaranteed"] and res["different_class_guaranteed"]
    weak = metric_bounds(outputs, labels, MetricCrossEntropy("weak"))
    assert weak["same_class_holds"] and weak["same_class_guaranteed"] and not weak["different_class_guaranteed"]


@pytest.mark.parametrize("kind", ["weak", "metric"])
def test_bounds_hold_on_noisy_outputs(kind):
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(C).repeat_interleave(5)
    logits = 4 * torch.nn.functional.one_hot(labels, C).double() + 0.5 * torch.randn(len(labels), C, generator=g)
    outputs = torch.softmax(logits.double(), dim=1)
    crit = MetricCrossEntropy(kind)
    res = metric_bounds(outputs, labels, crit)
    assert res["same_class_holds"]  # Lemma 3 holds for both kinds
    if kind == "metric":
        assert res["different_class_holds"]  # Lemma 4
    dist = crit.distance(outputs[:, None], outputs[None])
    same = labels[:, None] == labels[None]
    assert res["max_same_class"] == pytest.approx(dist[same].max().item())
    assert res["min_different_class"] == pytest.approx(dist[~same].min().item())
    eps = crit.distance(outputs, torch.nn.functional.one_hot(labels, C).double()).max().item()
    assert res["eps"] == pytest.approx(eps)


def test_bounds_reject_other_losses():
    with pytest.raises(ValueError, match="MetricCrossEntropy"):
        metric_bounds(
            torch.full((2, 3), 1 / 3), torch.tensor([0, 1]), create_loss("l2_softmax", num_classes=3, embedding_size=4)
        )


def test_bounds_accept_the_training_module():
    loss = create_loss("ce_metric", num_classes=3, embedding_size=4)
    emb, labels = torch.randn(9, 4), torch.arange(9) % 3
    res = metric_bounds(loss.outputs(emb).detach(), labels, loss)
    assert res["same_class_holds"] and res["different_class_holds"]
