"""N-pair loss with a reference batch (dmlkit.losses.npair_loss): PML's value without one, brute force with one,
and SFT's joint scoring of the generated batch with N-pair (which PML's N-pair refuses)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import NPairsLoss
from pytorch_metric_learning.miners import MultiSimilarityMiner

from dmlkit.augment.augmented_loss import FeatureAugmentedLoss
from dmlkit.augment.feature_generator import FeatureGenerator
from dmlkit.losses import create_loss
from dmlkit.losses.npair_loss import NPairLoss


def unit(n: int, d: int = 6, seed: int = 0) -> torch.Tensor:
    return F.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=1)


def npair_brute_force(
    x: torch.Tensor, y: torch.Tensor, ref: torch.Tensor, ref_y: torch.Tensor, excluded=()
) -> torch.Tensor:
    """Sohn's N-pair loss by loops: per anchor label (ascending), the first anchor with a positive in ``ref``
    and its first positive (pairs ``(i, j)`` in ``excluded`` are not pairs); softmax over the kept positives."""
    pairs = []
    for label in sorted(set(y.tolist())):
        for i in range(len(y)):
            js = [j for j in range(len(ref_y)) if y[i] == label and ref_y[j] == label and (i, j) not in excluded]
            if js:
                pairs.append((i, js[0]))
                break
    losses = []
    for k, (i, _) in enumerate(pairs):
        logits = torch.stack([x[i] @ ref[j] for _, j in pairs])
        losses.append(-(logits[k] - torch.logsumexp(logits, 0)))
    return torch.stack(losses).mean()


def test_without_ref_emb_it_is_pml_value_and_gradient() -> None:
    y = torch.tensor([0, 1, 2, 0, 1, 2, 3, 3, 4])
    for miner in (None, MultiSimilarityMiner(epsilon=0.5)):
        x1 = unit(9, seed=1).requires_grad_(True)
        x2 = x1.detach().clone().requires_grad_(True)
        ours_idx = miner(x1, y) if miner else None
        ours = NPairLoss()(x1, y, ours_idx)
        theirs = NPairsLoss()(x2, y, ours_idx)
        ours.backward()
        theirs.backward()
        assert torch.equal(ours, theirs)
        assert torch.equal(x1.grad, x2.grad)


def test_with_ref_emb_positives_and_negatives_come_from_the_reference() -> None:
    x, y = unit(5, seed=2), torch.tensor([2, 0, 2, 1, 3])
    ref, ref_y = unit(7, seed=3), torch.tensor([1, 0, 0, 2, 1, 2, 4])  # class 3 has no positive: not an anchor
    value = NPairLoss()(x, y, None, ref, ref_y)
    torch.testing.assert_close(value, npair_brute_force(x, y, ref, ref_y))
    assert not torch.allclose(value, NPairLoss()(x, y))


def test_registry_npair_takes_ref_emb() -> None:
    x, y = unit(4, seed=4), torch.tensor([0, 1, 0, 1])
    assert isinstance(create_loss("npair"), NPairLoss)
    torch.testing.assert_close(
        create_loss("npair")(x, y, None, x.flip(0), y.flip(0)), npair_brute_force(x, y, x.flip(0), y.flip(0))
    )


def test_sft_joint_scoring_with_npair_against_brute_force() -> None:
    """Identity transform (all centres equal): X_gen = X with labels 1 - Y; the generated anchors are scored
    against [X; X_gen] without each anchor's pair with itself (joint scoring for N-pair)."""
    n = 4
    x, y = unit(2 * n, d=8, seed=5), torch.arange(2).repeat(n)
    aug = FeatureAugmentedLoss(create_loss("npair"), FeatureGenerator(2, 8), lam=1.0, score="joint").double()
    aug.generator.centers.centers[:] = F.normalize(torch.ones(8, dtype=torch.float64), dim=0)
    aug.generator.centers.initialized[:] = True
    ref, ref_y = torch.cat([x, x]), torch.cat([y, 1 - y])
    self_pairs = {(i, 2 * n + i) for i in range(2 * n)}
    expected = npair_brute_force(x, y, x, y, {(i, i) for i in range(2 * n)}) + npair_brute_force(
        x, 1 - y, ref, ref_y, self_pairs
    )
    torch.testing.assert_close(aug(x, y), expected)
    assert aug.last_stats.anchors_with_positive == 1.0


def test_npair_needs_labels() -> None:
    with pytest.raises(ValueError, match="labels"):
        NPairLoss().compute_loss(unit(3), None, None, unit(3), None)
