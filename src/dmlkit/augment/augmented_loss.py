"""A loss wrapper that adds the loss on feature-transformed embeddings: Eq. 10 of the SFT paper.

``FeatureAugmentedLoss(loss, FeatureGenerator(num_classes, dim), miner=miner)`` computes

    J(X, Y) + lam * J(X_gen, Y_gen)                                   (Eq. 10)

where ``J`` is any loss with PML's signature (pair/tuple losses such as
``MultiSimilarityLoss``, proxy/classification losses with trainable parameters such as
``ProxyAnchorLoss``) together with its miner, and ``(X_gen, Y_gen)`` is produced from the batch by
Algorithm 1 (:class:`~dmlkit.augment.feature_generator.FeatureGenerator`):

1. (line 5) for each feature ``x_i`` the scheme of Sec. 3.5 and the target policy pick a target
   class ``t_i`` (:mod:`dmlkit.augment.schemes`; by default a random other class *of the batch*);
   ``x_gen,i = T(x_i, mu_{y_i}, mu_{t_i})`` with ``T`` the spherical transform (SFT, Eq. 3-4), its
   degenerate form (SFT-d, Sec. 3.4) or the translation (Eq. 2), and ``y_gen,i = t_i``. The
   centres are constants (buffers); the gradient flows through ``x_i`` only.
2. (line 6) the class centres are updated with the batch, Eq. 9 (detached, step 1 by default).

The generated batch is scored by :func:`~dmlkit.augment.generated_score.score_generated`: mined by
the same ``miner`` as the real term, alone (``score="separate"``, Eq. 10 as written) or inside the
joint batch (``score="joint"``). The real term uses the ``indices_tuple`` passed in, or, when none
is passed, the ``miner``'s tuples. ``ref_emb``/``ref_labels`` (e.g. a cross-batch memory) are passed
to both terms.

Decisions where the paper is silent (documented choices):

* **Proxy/classification losses** are simply called on ``(X_gen, Y_gen)``; their proxies
  receive gradient from both terms.
* **Classes without a centre** (the first batches of ``"update"``/``"pick"`` modes) are
  never targets, and a feature whose own class has no centre yet is not transformed (its
  ``mu_{y_i}`` is unknown). Features without a target (``-1``) are dropped from the
  generated batch; when nothing is generated the generated term is zero (with a graph, so
  ``backward`` works). ``last_stats`` describes the last generated batch.
* **SFT-d works before normalisation** (Proposition 2: "we use Eq. 2 before feature
  normalization and then reproject them back to the hypersphere"). Feed the *unnormalised*
  embeddings (the head's output before its L2 normalisation) to a generator made with
  ``normalize_input=True`` (required for SFT-d): the module L2-normalises them for ``J(X, Y)``,
  keeps the centres in the unnormalised space, and generates ``normalize(x + mu_t - mu_y)``.
  Evaluate the model on normalised embeddings as usual.
* ``normalize_input=True`` with ``"sft"``/``"translation"``: features are normalised first
  and the centres/transforms live on the sphere (the translation result is not
  re-normalised: that is Eq. 2 as used by FTL).
* With ``lam == 0`` the wrapped loss is called once (the value is exactly ``J(X, Y)``); the
  centres are still updated, so switching ``lam`` on later starts from warm centres.

The training tool scores the generated batch as its own objective term (``dmlkit.methods.sft``),
so its log shows the real and the generated losses apart; this wrapper is for users' own loops.
"""

from __future__ import annotations

import math
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from dmlkit.augment.feature_generator import FeatureGenerator
from dmlkit.augment.generated_score import GeneratedBatchStats, check_score, score_generated
from dmlkit.validation import is_real

__all__ = ["FeatureAugmentedLoss"]


class FeatureAugmentedLoss(nn.Module):
    """``J(X, Y) + lam * J(X_gen, Y_gen)`` (Eq. 10 of the SFT paper), following Algorithm 1.

    Args:
        loss: the wrapped loss ``J`` with PML's signature
            ``(embeddings, labels, indices_tuple=None, ref_emb=None, ref_labels=None)``.
        generator: the :class:`~dmlkit.augment.feature_generator.FeatureGenerator` (centres,
            scheme, target policy, transform); its ``normalize_input`` says whether the input
            embeddings are pre-normalisation.
        lam: weight ``lambda`` of the generated term, ``>= 0`` (paper: 0.2).
        miner: the miner of ``J`` (PML signature), used for the generated term and, when no
            ``indices_tuple`` is passed, for the real term.
        score: ``"separate"`` (Eq. 10 as written) or ``"joint"``
            (:mod:`dmlkit.augment.generated_score`).
    """

    def __init__(
        self,
        loss: nn.Module,
        generator: FeatureGenerator,
        lam: float = 0.2,
        miner: nn.Module | None = None,
        score: str = "separate",
    ) -> None:
        super().__init__()
        if not callable(loss):
            raise ValueError("loss must be a callable loss module with PML's signature (embeddings, labels, ...)")
        if not isinstance(generator, FeatureGenerator):
            raise ValueError(
                f"generator must be a FeatureGenerator, got {type(generator).__name__}: "
                "FeatureAugmentedLoss(loss, FeatureGenerator(num_classes, dim, ...), lam=...)"
            )
        if not is_real(lam) or not math.isfinite(lam) or lam < 0:
            raise ValueError(f"lam must be a finite number >= 0 (the paper uses 0.2), got {lam!r}")
        self.loss = loss
        self.generator = generator
        self.lam = float(lam)
        self.miner = miner
        self.score = check_score(score)
        self.last_stats = GeneratedBatchStats()

    def extra_repr(self) -> str:
        return f"lam={self.lam}, score={self.score!r}"

    def forward(
        self,
        embeddings: Tensor,
        labels: Tensor,
        indices_tuple: Any = None,
        ref_emb: Tensor | None = None,
        ref_labels: Tensor | None = None,
    ) -> Tensor:
        """Eq. 10: ``J(X, Y) + lam * J(X_gen, Y_gen)``; updates the class centres (Eq. 9)."""
        g = self.generator
        g.check_batch(embeddings, labels)
        x = F.normalize(embeddings, p=2.0, dim=1) if g.normalize_input else embeddings
        if g.normalize_input and ref_emb is not None:
            ref_emb = F.normalize(ref_emb, p=2.0, dim=1)
        if indices_tuple is None and self.miner is not None:
            indices_tuple = self.miner(x, labels, ref_emb, ref_labels)
        real = self.loss(x, labels, indices_tuple, ref_emb, ref_labels)
        x_gen, y_gen = g.step(g.transform_space(embeddings), labels, generate=self.lam != 0.0)
        if self.lam == 0.0:
            self.last_stats = GeneratedBatchStats()
            return real
        if x_gen.shape[0] == 0:
            self.last_stats = GeneratedBatchStats()
            return real + 0.0 * embeddings.sum()
        value, self.last_stats = score_generated(
            self.loss, x_gen, y_gen, self.miner, self.score, x, labels, ref_emb, ref_labels
        )
        return real + self.lam * value
