"""SFT as a training method: the loss on the generated batch as its own objective term (Eq. 10 of the SFT paper).

``augment:`` in the config turns it on (``augment.name``: ``sft``, ``sft_d`` or ``translation``).
The objective then has two named terms, logged apart as ``loss/real`` and ``loss/generated``:

    real:       J(X, Y)                                                  (the run's metric term, renamed)
    generated:  lam * J(X_gen, Y_gen)                                    (Eq. 10, second summand)

``(X_gen, Y_gen)`` comes from :class:`~dmlkit.augment.feature_generator.FeatureGenerator`
(Algorithm 1, lines 5-6: targets by the scheme of Sec. 3.5, the transform, the Eq. 9 centre
update). The generated term scores with the run's final metric loss (so with CCP on, against
the proxies) and, as before, without the real batch's mined tuples.

SFT-d is used before normalisation (``augment.normalize_input: true`` with
``model.normalize: none``): the real term's loss then L2-normalises its input, the centres and
the translation live in the unnormalised space, and the run is evaluated on the L2-normalised
embedding, the one the loss compared (``eval_model``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dmlkit.augment.config import AugmentConfig
from dmlkit.augment.feature_generator import FeatureGenerator
from dmlkit.engine.objective import ObjectiveTerm
from dmlkit.methods.base import BuildContext, Method

if TYPE_CHECKING:
    from dmlkit.config import ExperimentConfig

__all__ = ["GeneratedTerm", "L2Normalized", "NormalizedInputLoss", "SFT"]


class L2Normalized(nn.Module):
    """``normalize(model(x))``: the embedding of a model whose loss normalises its input."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: Tensor) -> Tensor:
        return F.normalize(self.model(images), dim=1)


class NormalizedInputLoss(nn.Module):
    """A PML-signature loss applied to L2-normalised embeddings (and references)."""

    def __init__(self, loss: nn.Module) -> None:
        super().__init__()
        self.loss = loss

    def forward(self, embeddings: Tensor, labels: Tensor, indices_tuple: Any = None,
                ref_emb: Tensor | None = None, ref_labels: Tensor | None = None) -> Tensor:
        ref = F.normalize(ref_emb, p=2.0, dim=1) if ref_emb is not None else None
        return self.loss(F.normalize(embeddings, p=2.0, dim=1), labels, indices_tuple, ref, ref_labels)


class GeneratedTerm(ObjectiveTerm):
    """``lam * J(X_gen, Y_gen)``: the loss on the batch the feature generator makes from this batch."""

    is_metric_loss = True  # part of L_DML when a method mixes it (Eq. 5.2.5)

    def __init__(self, loss: nn.Module, generator: FeatureGenerator, lam: float, name: str = "generated") -> None:
        super().__init__(name, lam)
        self._loss = (loss,)  # shared with the real term, which registers (and checkpoints) it
        self.generator = generator

    @property
    def loss(self) -> nn.Module:
        return self._loss[0]

    def value(self, embeddings: Tensor, labels: Tensor, batch: dict[str, Any]) -> Tensor:
        g = self.generator
        g.check_batch(embeddings, labels)
        x_gen, y_gen = g.step(g.transform_space(embeddings), labels, generate=self.weight != 0.0)
        if x_gen.shape[0] == 0:  # nothing generated yet: zero, with a graph so backward works
            return 0.0 * embeddings.sum()
        return self.loss(x_gen, y_gen)


class SFT(Method):
    """Feature augmentation of the SFT paper (``augment:`` section)."""

    name = "sft"

    def __init__(self, cfg: "ExperimentConfig") -> None:
        self.cfg: AugmentConfig = cfg.augment
        if self.cfg.normalize_input and cfg.model.normalize != "none":
            raise ValueError(
                "augment.normalize_input needs pre-normalisation embeddings: set model.normalize: none "
                "(the augmenter then normalises them itself for the loss)"
            )
        self.generator: FeatureGenerator | None = None

    @classmethod
    def from_config(cls, cfg: "ExperimentConfig") -> "SFT | None":
        return cls(cfg) if cfg.augment.name is not None else None

    def setup(self, ctx: BuildContext) -> None:
        c = self.cfg
        self.generator = FeatureGenerator(
            ctx.num_classes, ctx.embedding_dim, transform=c.name, scheme=c.scheme, centers=c.centers, alpha=c.alpha,
            tail_threshold=c.tail_threshold, class_counts=ctx.class_counts, seed=ctx.seed,
            normalize_input=c.normalize_input, update_centers_first=c.update_centers_first,
        )

    def terms(self, terms: list[ObjectiveTerm]) -> list[ObjectiveTerm]:
        metric = next((t for t in terms if t.name == "metric"), None)
        if metric is None or self.generator is None:
            raise ValueError("SFT needs the run's metric loss term (named 'metric') and setup() first")
        generated = GeneratedTerm(metric.loss, self.generator, self.cfg.lam)
        metric.name = "real"
        if self.cfg.normalize_input:
            metric.loss = NormalizedInputLoss(metric.loss)
        i = terms.index(metric) + 1  # right after the real term: the two summands of Eq. 10 side by side
        return [*terms[:i], generated, *terms[i:]]

    def eval_model(self, model: nn.Module) -> nn.Module:
        return L2Normalized(model) if self.cfg.normalize_input else model
