"""The triplet margin loss over all triplets, enumerated in O(P R) memory instead of PML's O(B R^2).

``[d(a, p) - d(a, n) + m]_+`` over every triplet (anchor a of the batch, positive p and negative n among the
references) is PML's ``TripletMarginLoss`` with ``triplets_per_anchor="all"``. PML enumerates the triplets by
multiplying a ``B x R`` positive mask with a ``B x R`` negative mask into a ``B x R x R`` mask and taking its
non-zero entries. That is nothing for a batch against itself (60 x 60 x 60), but against a large reference set it
dominates the step: CCP's triplet loss has 8 proxies a class as references (60 x 2,640 x 2,640 = 418 M bytes
built and scanned every step on the font testbed), as has a cross-batch memory.

``all_triplet_indices`` lists the same triplets in the same (anchor, positive, negative) order from the anchor-
positive pairs: for each pair the anchor's negatives, a ``P x R`` mask (P pairs). ``TripletMarginLoss`` is PML's
class with that enumeration; its losses, reduction and gradients are PML's bit for bit (tests/test_triplet_margin_loss.py)
and ``benchmarks/triplet.py`` (``dmlkit bench triplet``) measures the speed.
"""

from __future__ import annotations

from typing import Any

import torch
from pytorch_metric_learning import losses as pml_losses
from torch import Tensor

__all__ = ["TripletMarginLoss", "all_triplet_indices"]


def all_triplet_indices(labels: Tensor, ref_labels: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``(anchors, positives, negatives)`` of every triplet, ordered by anchor, then positive, then negative.

    A positive of anchor ``i`` is a reference ``j`` with ``ref_labels[j] == labels[i]``, a negative one with another
    label. Without ``ref_labels``, or when ``ref_labels`` *is* ``labels`` (the object: what a PML loss passes when
    there is no ``ref_emb``), the references are the batch and an anchor is not its own positive: PML's
    ``get_all_triplets_indices`` rule, whose output this equals.
    """
    batch_is_reference = ref_labels is None or ref_labels is labels
    ref_labels = labels if ref_labels is None else ref_labels
    matches = labels.unsqueeze(1) == ref_labels.unsqueeze(0)
    negatives = ~matches
    if batch_is_reference:
        matches.fill_diagonal_(False)
    pair_anchor, pair_positive = torch.nonzero(matches, as_tuple=True)
    pair, negative = torch.nonzero(negatives[pair_anchor], as_tuple=True)  # row-major: pairs in order, then negatives
    return pair_anchor[pair], pair_positive[pair], negative


class TripletMarginLoss(pml_losses.TripletMarginLoss):
    """PML's ``TripletMarginLoss`` (same arguments, losses and reducer) whose ``triplets_per_anchor="all"``
    enumerates the triplets with ``all_triplet_indices``; a miner's ``indices_tuple`` and a number of triplets per
    anchor go to PML's code unchanged."""

    def compute_loss(
        self, embeddings: Tensor, labels: Tensor, indices_tuple: Any, ref_emb: Tensor, ref_labels: Tensor
    ) -> dict[str, Any]:
        if indices_tuple is None and self.triplets_per_anchor == "all" and labels is not None:
            indices_tuple = all_triplet_indices(labels, ref_labels)
        return super().compute_loss(embeddings, labels, indices_tuple, ref_emb, ref_labels)
