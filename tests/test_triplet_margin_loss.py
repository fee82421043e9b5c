"""dmlkit's triplet margin loss enumerates PML's triplets, in PML's order, and gives PML's losses and gradients.

References: PML 2.9's ``get_all_triplets_indices`` (the B x R x R mask) and ``TripletMarginLoss``; a brute-force
loop over (anchor, positive, negative) for the triplets' definition.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning.distances import CosineSimilarity
from pytorch_metric_learning.miners import TripletMarginMiner
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from dmlkit.losses import TripletMarginLoss, all_triplet_indices, create_loss


def labels_of(n: int, classes: int, seed: int) -> torch.Tensor:
    return torch.randint(classes, (n,), generator=torch.Generator().manual_seed(seed))


def brute_force_triplets(labels, ref_labels, batch_is_reference):
    return [
        (a, p, n)
        for a, p, n in itertools.product(range(len(labels)), range(len(ref_labels)), range(len(ref_labels)))
        if labels[a] == ref_labels[p] and labels[a] != ref_labels[n] and not (batch_is_reference and a == p)
    ]


@pytest.mark.parametrize(
    "n, refs, classes, seed", [(12, None, 3, 0), (9, 17, 4, 1), (20, 40, 7, 2), (5, 6, 1, 3), (6, None, 6, 4)]
)
def test_the_triplets_are_pmls_in_pmls_order_and_the_definitions(n, refs, classes, seed):
    labels = labels_of(n, classes, seed)
    ref_labels = labels if refs is None else labels_of(refs, classes, seed + 100)
    ours = all_triplet_indices(labels, ref_labels)
    theirs = lmu.get_all_triplets_indices(labels, ref_labels)
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(ours, theirs))
    listed = list(zip(*(t.tolist() for t in ours)))
    assert listed == brute_force_triplets(labels.tolist(), ref_labels.tolist(), refs is None)


def test_equal_reference_labels_that_are_another_tensor_keep_the_anchor_as_its_own_positive():
    labels = labels_of(10, 3, 5)
    copy = labels.clone()  # a reference set whose labels equal the batch's: PML pairs i with i then
    ours, theirs = all_triplet_indices(labels, copy), lmu.get_all_triplets_indices(labels, copy)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert bool((ours[0] == ours[1]).any()) and not bool(
        (all_triplet_indices(labels)[0] == all_triplet_indices(labels)[1]).any()
    )


def _pml_and_ours(**kwargs):
    return pml_losses.TripletMarginLoss(**kwargs), TripletMarginLoss(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"margin": 0.0961}, {"margin": 0.2, "smooth_loss": True}, {"margin": 0.1, "distance": CosineSimilarity()}],
)
@pytest.mark.parametrize("with_ref", [False, True])
def test_losses_and_gradients_equal_pmls_bit_for_bit(kwargs, with_ref):
    g = torch.Generator().manual_seed(7)
    emb = torch.randn(24, 16, generator=g, dtype=torch.float64)
    labels = labels_of(24, 5, 8)
    ref = torch.randn(40, 16, generator=g, dtype=torch.float64) if with_ref else None
    ref_labels = labels_of(40, 5, 9) if with_ref else None
    values, grads = [], []
    for loss in _pml_and_ours(**kwargs):
        x = emb.clone().requires_grad_(True)
        r = ref.clone().requires_grad_(True) if with_ref else None
        value = loss(x, labels, ref_emb=r, ref_labels=ref_labels)
        value.backward()
        values.append(value.detach())
        grads.append((x.grad, r.grad if with_ref else None))
    assert values[0] > 0 and torch.equal(values[0], values[1])
    assert torch.equal(grads[0][0], grads[1][0])
    if with_ref:
        assert torch.equal(grads[0][1], grads[1][1])


def test_a_miners_triplets_and_a_number_per_anchor_are_pmls_path():
    g = torch.Generator().manual_seed(3)
    emb, labels = torch.randn(30, 8, generator=g), labels_of(30, 4, 11)
    mined = TripletMarginMiner(margin=0.2)(emb, labels)
    pml, ours = _pml_and_ours(margin=0.1)
    assert torch.equal(pml(emb, labels, mined), ours(emb, labels, mined))
    torch.manual_seed(0)  # PML draws its random triplets from the global generator
    few_pml = pml_losses.TripletMarginLoss(margin=0.1, triplets_per_anchor=2)(emb, labels)
    torch.manual_seed(0)
    few_ours = TripletMarginLoss(margin=0.1, triplets_per_anchor=2)(emb, labels)
    assert torch.equal(few_pml, few_ours)


def test_no_triplet_gives_a_zero_loss_connected_to_the_embeddings():
    emb = torch.randn(6, 4, requires_grad=True)
    value = TripletMarginLoss()(emb, torch.zeros(6, dtype=torch.long))  # one class: no negative
    value.backward()
    assert (
        value.item() == 0
        and emb.grad is not None
        and all(len(t) == 0 for t in all_triplet_indices(torch.zeros(6, dtype=torch.long)))
    )


def test_the_registered_triplet_loss_is_this_class():
    loss = create_loss("triplet")
    assert type(loss) is TripletMarginLoss and loss.margin == pytest.approx(0.0961)
