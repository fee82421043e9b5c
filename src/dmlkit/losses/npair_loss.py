"""N-pair loss (Sohn, NeurIPS 2016) that also scores anchors against a reference batch (PML's ``ref_emb``).

For pairs ``(a_k, p_k)``, one per distinct anchor label, the loss of anchor ``k`` is the
cross-entropy of the softmax over ``s(a_k, p_j)`` (j over all kept pairs) with target ``k``:

    L_k = -log( exp(s(a_k, p_k)) / sum_j exp(s(a_k, p_j)) ),   s = dot product,

so each anchor's positive competes with the positives of the other classes. PML's
``NPairsLoss`` computes this with anchors and positives both taken from ``embeddings``
and refuses ``ref_emb``. ``NPairLoss`` takes the anchors from ``embeddings`` and the
positives from ``ref_emb`` (``embeddings`` when none is given, which is PML's loss value
for value): the pairs are the positive pairs ``(anchor in embeddings, positive in
ref_emb)`` of ``indices_tuple`` (all positive pairs when ``None``), the first pair of each
anchor label kept, in PML's order. This is what SFT's joint scoring needs
(``methods.sft.score: joint``): the generated features are the anchors and the joint batch of
real and generated features holds their positives and the other classes' positives.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu
from torch import Tensor

__all__ = ["NPairLoss"]


def first_positive_pair_per_anchor_label(
    indices_tuple: Any, labels: Tensor, ref_labels: Tensor
) -> tuple[Tensor, Tensor]:
    """``(anchors, positives)``: of the positive pairs of ``indices_tuple``, the first one of each anchor label."""
    a, p, _, _ = lmu.convert_to_pairs(indices_tuple, labels, ref_labels)
    _, first = np.unique(labels[a].cpu().numpy(), return_index=True)
    first_t = torch.as_tensor(first, dtype=torch.long, device=a.device)
    return a[first_t], p[first_t]


class NPairLoss(pml_losses.NPairsLoss):
    """N-pair loss whose positives (and so its negatives) may come from ``ref_emb`` (module docstring)."""

    def compute_loss(
        self, embeddings: Tensor, labels: Tensor, indices_tuple: Any, ref_emb: Tensor, ref_labels: Tensor
    ) -> dict[str, Any]:
        if labels is None:
            raise ValueError("the N-pair loss needs labels: pass labels with the embeddings")
        anchor_idx, positive_idx = first_positive_pair_per_anchor_label(indices_tuple, labels, ref_labels)
        self.num_pairs = len(anchor_idx)
        if self.num_pairs == 0:
            return self.zero_losses()
        sim_mat = self.distance(embeddings[anchor_idx], ref_emb[positive_idx])
        if not self.distance.is_inverted:
            sim_mat = -sim_mat
        targets = torch.arange(self.num_pairs, device=embeddings.device)
        return {
            "loss": {"losses": self.cross_entropy(sim_mat, targets), "indices": anchor_idx, "reduction_type": "element"}
        }
