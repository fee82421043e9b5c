"""How the generated batch is scored: the second summand ``J(theta; X_gen, Y_gen)`` of Eq. 10 of the SFT paper.

``J`` is "a general target function" (Sec. 3.5); for a loss used with a miner (multi-similarity and
its pair miner, triplet with a hard-triplet miner, ...) the mining is part of ``J``, so the generated
term is mined by the same miner as the real term: without it, a pair loss scores every pair of the
generated batch, which for multi-similarity turns the term into a large, label-free repulsion. Two
readings of which batch ``J`` sees (``score``):

* ``"separate"`` (the default, Eq. 10 as written): ``J(X_gen, Y_gen)``, the generated batch alone,
  mined on itself: ``loss(X_gen, Y_gen, miner(X_gen, Y_gen))``.
* ``"joint"``: the generated features are scored against the joint batch ``[X; X_gen]`` with labels
  ``[Y; Y_gen]``, so the real features of a generated feature's target class are its positives and
  the other real features its negatives. The generated features are the anchors and the joint batch
  the references (PML's ``ref_emb``): ``loss(X_gen, Y_gen, tuples, ref_emb=[X; X_gen],
  ref_labels=[Y; Y_gen])``, with the tuples of ``miner(X_gen, Y_gen, [X; X_gen], [Y; Y_gen])`` (all
  pairs without a miner) minus each anchor's pair with itself. The loss is averaged over the
  generated anchors, as in ``"separate"``, so ``lam`` means the same in both. It needs a loss that
  takes ``ref_emb`` (PML's pair and tuple losses and dmlkit's ``npair``, whose PML original refuses
  it; classification and proxy losses refuse it) and
  cannot be combined with a caller's own ``ref_emb``.

In ``"separate"``, ``ref_emb`` / ``ref_labels`` (a cross-batch memory) are passed to the miner and the loss.
``score_generated`` returns the value and :class:`GeneratedBatchStats`: the size of the generated
batch, its positive pairs (same-label pairs within ``Y_gen``), the share of generated anchors that
have a positive in the batch they are scored in, and the positive pairs the miner kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu
from torch import Tensor, nn

__all__ = ["SCORES", "GeneratedBatchStats", "score_generated"]

SCORES = ("separate", "joint")


def check_score(score: str) -> str:
    if score not in SCORES:
        raise ValueError(f"unknown score {score!r}: choose one of {SCORES} (see dmlkit.augment.generated_score)")
    return score


@dataclass
class GeneratedBatchStats:
    """What the loss saw of the generated batch in one step."""

    num_generated: int = 0
    positive_pairs: int = 0  # unordered same-label pairs within Y_gen
    anchors_with_positive: float = 0.0  # share of generated features with a positive in their scored batch
    mined_positive_pairs: int | None = None  # (anchor, positive) pairs of the tuples the loss got; None: unmined

    def as_metrics(self, prefix: str = "sft/") -> dict[str, float]:
        out = {
            f"{prefix}generated": float(self.num_generated),
            f"{prefix}generated_positive_pairs": float(self.positive_pairs),
            f"{prefix}generated_anchors_with_positive": self.anchors_with_positive,
        }
        if self.mined_positive_pairs is not None:
            out[f"{prefix}generated_mined_positive_pairs"] = float(self.mined_positive_pairs)
        return out


def _positives(labels: Tensor) -> Tensor:
    """For each label, how many *other* entries share it."""
    return (labels.unsqueeze(0) == labels.unsqueeze(1)).sum(dim=1) - 1


def _without_self(indices_tuple: tuple[Tensor, ...], offset: int) -> tuple[Tensor, ...]:
    """Drop each anchor's positive pair with itself (anchor ``a`` is reference ``offset + a``)."""
    if len(indices_tuple) == 4:
        a1, p, a2, n = indices_tuple
        k = p != a1 + offset
        return a1[k], p[k], a2, n
    if len(indices_tuple) == 3:
        a, p, n = indices_tuple
        k = p != a + offset
        return a[k], p[k], n[k]
    raise ValueError(
        f"indices_tuple must hold pairs (a1, p, a2, n) or triplets (a, p, n), got {len(indices_tuple)} tensors"
    )


def _mined_positive_pairs(indices_tuple: Any) -> int | None:
    if indices_tuple is None:
        return None
    if len(indices_tuple) == 4:
        return int(indices_tuple[0].numel())
    a, p = indices_tuple[0], indices_tuple[1]
    return int(torch.unique(torch.stack([a, p]), dim=1).shape[1]) if a.numel() else 0


def score_generated(
    loss: nn.Module,
    x_gen: Tensor,
    y_gen: Tensor,
    miner: nn.Module | None = None,
    score: str = "separate",
    x_real: Tensor | None = None,
    y_real: Tensor | None = None,
    ref_emb: Tensor | None = None,
    ref_labels: Tensor | None = None,
) -> tuple[Tensor, GeneratedBatchStats]:
    """``J(X_gen, Y_gen)`` of Eq. 10, mined by ``miner``, scored ``"separate"`` or ``"joint"`` (module docstring).

    ``x_real`` / ``y_real`` (the real batch in the space the loss compares) are needed for ``"joint"``.
    An empty generated batch scores 0 (with a graph through ``x_gen``, so ``backward`` works).
    """
    check_score(score)
    y_gen = y_gen.long()
    if x_gen.shape[0] == 0:
        return 0.0 * x_gen.sum(), GeneratedBatchStats()
    stats = GeneratedBatchStats(num_generated=int(x_gen.shape[0]))
    own = _positives(y_gen)
    stats.positive_pairs = int(own.sum()) // 2
    if score == "separate":
        indices = miner(x_gen, y_gen, ref_emb, ref_labels) if miner is not None else None
        stats.anchors_with_positive = float((own > 0).double().mean())
    else:
        if x_real is None or y_real is None:
            raise ValueError('score="joint" needs the real batch: pass x_real and y_real')
        if ref_emb is not None:
            raise ValueError(
                'score="joint" uses ref_emb for the real batch: use score="separate" with a cross-batch memory'
            )
        n = x_real.shape[0]
        ref_emb, ref_labels = torch.cat([x_real.to(x_gen.dtype), x_gen]), torch.cat([y_real.long(), y_gen])
        if miner is not None:
            indices = miner(x_gen, y_gen, ref_emb, ref_labels)
        else:
            indices = lmu.get_all_pairs_indices(y_gen, ref_labels)
        indices = _without_self(tuple(indices), n)
        real_positives = (y_gen.unsqueeze(1) == y_real.long().unsqueeze(0)).sum(1)
        stats.anchors_with_positive = float(((own + real_positives) > 0).double().mean())
    stats.mined_positive_pairs = _mined_positive_pairs(indices)
    return loss(x_gen, y_gen, indices, ref_emb, ref_labels), stats
