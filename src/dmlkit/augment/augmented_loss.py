"""A loss wrapper that adds the loss on feature-transformed embeddings: Eq. 10 of the SFT paper.

``FeatureAugmentedLoss(loss)`` computes

    J(X, Y) + lam * J(X_gen, Y_gen)                                   (Eq. 10)

where ``J`` is any loss with PML's signature (pair/tuple losses such as
``MultiSimilarityLoss``, proxy/classification losses with trainable parameters such as
``ProxyAnchorLoss``) and ``(X_gen, Y_gen)`` is produced from the batch by Algorithm 1:

1. (line 5) for each feature ``x_i`` the scheme of Sec. 3.5 picks a target class ``t_i``
   (:mod:`dmlkit.augment.schemes`: ``"balanced"`` -- a random other class;
   ``"unbalanced"`` -- head features to a random tail class, tail features untouched);
   ``x_gen,i = T(x_i, mu_{y_i}, mu_{t_i})`` with ``T`` the spherical transform (SFT,
   Eq. 3-4), its degenerate form (SFT-d, Sec. 3.4) or the translation (Eq. 2), and
   ``y_gen,i = t_i``. The centres are constants (buffers); the gradient flows through
   ``x_i`` only.
2. (line 6) the class centres are updated with the batch, Eq. 9 (detached, see
   :class:`~dmlkit.augment.centers.ClassCenters`). As in Algorithm 1 the step uses the
   centres *before* this batch's update; ``update_centers_first=True`` swaps lines 5 and 6
   (the batch's own classes then have a centre already in the first step).

Decisions where the paper is silent (documented choices):

* **Pair losses see the generated batch alone.** Eq. 10 writes a separate
  ``J(theta; X_gen, Y_gen)``, so the generated features are scored among themselves, not
  together with the originals (pairs real-vs-generated are not formed). ``indices_tuple``
  (mined on the real batch) is used only for the real term; the generated term is
  unmined. ``ref_emb``/``ref_labels`` (e.g. a cross-batch memory) are passed to both terms.
* **Proxy/classification losses** are simply called on ``(X_gen, Y_gen)``; their proxies
  receive gradient from both terms.
* **Classes without a centre** (the first batches of ``"update"``/``"pick"`` modes) are
  never targets, and a feature whose own class has no centre yet is not transformed (its
  ``mu_{y_i}`` is unknown). Features without a target (``-1``) are dropped from the
  generated batch; when nothing is generated the generated term is zero (with a graph, so
  ``backward`` works). ``last_num_generated`` holds the size of the last generated batch.
* **SFT-d works before normalisation** (Proposition 2: "we use Eq. 2 before feature
  normalization and then reproject them back to the hypersphere"). To use it, feed the
  *unnormalised* embeddings (the head's output before its L2 normalisation) and set
  ``normalize_input=True``: the module L2-normalises them for ``J(X, Y)``, keeps the centres
  in the unnormalised space, and generates ``normalize(x + mu_t - mu_y)``. Evaluate the
  model on normalised embeddings as usual. With ``normalize_input=False`` SFT-d translates
  whatever it is given and re-normalises.
* ``normalize_input=True`` with ``"sft"``/``"translation"``: features are normalised first
  and the centres/transforms live on the sphere (the translation result is not
  re-normalised: that is Eq. 2 as used by FTL).
* With ``lam == 0`` the wrapped loss is called once (the value is exactly ``J(X, Y)``); the
  centres are still updated, so switching ``lam`` on later starts from warm centres.

The centres, targets and transforms are those of
:class:`~dmlkit.augment.feature_generator.FeatureGenerator`, which this class extends with the
loss; its state (centres, head/tail split, RNG stream) is saved with ``state_dict``. The
training tool scores the generated batch as its own objective term (``dmlkit.methods.sft``),
so its log shows the real and the generated losses apart; this wrapper is for users' own loops.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from dmlkit.augment.feature_generator import AUGMENT_TRANSFORMS, FeatureGenerator, canonical_transform_name

__all__ = ["FeatureAugmentedLoss", "AUGMENT_TRANSFORMS", "canonical_transform_name"]


class FeatureAugmentedLoss(FeatureGenerator):
    """``J(X, Y) + lam * J(X_gen, Y_gen)`` (Eq. 10 of the SFT paper), following Algorithm 1.

    Args:
        loss: the wrapped loss ``J`` with PML's signature
            ``(embeddings, labels, indices_tuple=None, ref_emb=None, ref_labels=None)``.
        lam: weight ``lambda`` of the generated term, ``>= 0`` (paper: 0.2).
        normalize_input: the input embeddings are *pre-normalisation*; L2-normalise them
            here (required to use SFT-d as in the paper, see the module docstring).
        The other arguments are those of :class:`~dmlkit.augment.feature_generator.FeatureGenerator`.
    """

    def __init__(
        self,
        loss: nn.Module,
        num_classes: int,
        dim: int,
        transform: str = "sft",
        lam: float = 0.2,
        scheme: str = "balanced",
        centers: str = "update",
        alpha: float = 0.5,
        tail_threshold: int = 15,
        class_counts: Tensor | Sequence[int] | None = None,
        seed: int = 0,
        normalize_input: bool = False,
        update_centers_first: bool = False,
    ) -> None:
        if not callable(loss):
            raise ValueError("loss must be a callable loss module with PML's signature (embeddings, labels, ...)")
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam) or lam < 0:
            raise ValueError(f"lam must be a finite number >= 0 (the paper uses 0.2), got {lam!r}")
        super().__init__(num_classes, dim, transform=transform, scheme=scheme, centers=centers, alpha=alpha,
                         tail_threshold=tail_threshold, class_counts=class_counts, seed=seed,
                         normalize_input=normalize_input, update_centers_first=update_centers_first)
        self.loss = loss
        self.lam = float(lam)

    def extra_repr(self) -> str:
        return f"lam={self.lam}, " + super().extra_repr()

    def forward(
        self,
        embeddings: Tensor,
        labels: Tensor,
        indices_tuple: Any = None,
        ref_emb: Tensor | None = None,
        ref_labels: Tensor | None = None,
    ) -> Tensor:
        """Eq. 10: ``J(X, Y) + lam * J(X_gen, Y_gen)``; updates the class centres (Eq. 9)."""
        self.check_batch(embeddings, labels)
        x = F.normalize(embeddings, p=2.0, dim=1) if self.normalize_input else embeddings
        if self.normalize_input and ref_emb is not None:
            ref_emb = F.normalize(ref_emb, p=2.0, dim=1)
        real = self.loss(x, labels, indices_tuple, ref_emb, ref_labels)
        x_gen, y_gen = self.step(self.transform_space(embeddings), labels, generate=self.lam != 0.0)
        if self.lam == 0.0:
            return real
        if x_gen.shape[0] == 0:
            return real + 0.0 * embeddings.sum()
        return real + self.lam * self.loss(x_gen, y_gen, None, ref_emb, ref_labels)
