"""SFT as a training method: the loss on the generated batch as its own objective term (Eq. 10 of the SFT paper).

``augment:`` in the config turns it on (``augment.name``: ``sft``, ``sft_d`` or ``translation``).
The objective then has two named terms, logged apart as ``loss/real`` and ``loss/generated``:

    real:       J(X, Y)                                                  (the run's metric term, renamed)
    generated:  lam * J(X_gen, Y_gen)                                    (Eq. 10, second summand)

``(X_gen, Y_gen)`` comes from :class:`~dmlkit.augment.feature_generator.FeatureGenerator`, built
from the ``augment:`` section by :func:`~dmlkit.augment.config.build_feature_generator` (Algorithm 1,
lines 5-6: targets by the scheme and target policy of Sec. 3.5, the transform, the Eq. 9 centre
update). The generated term scores with the run's final metric loss (so with CCP on, against
the proxies) and is mined by the run's miner, as the real term is
(:func:`~dmlkit.augment.generated_score.score_generated`; ``augment.score``: ``separate`` or ``joint``).

Besides the two losses, every logged training step of ``metrics.jsonl`` holds what the generated
term saw (``sft/generated``: its size, ``sft/generated_positive_pairs``,
``sft/generated_anchors_with_positive``, ``sft/generated_mined_positive_pairs`` with a miner) and the
centre lag ``sft/center_cosine`` (mean cosine between the class centres before the step's update
and the batch's class means).

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

from dmlkit.augment.config import AugmentConfig, build_feature_generator
from dmlkit.augment.feature_generator import FeatureGenerator
from dmlkit.augment.generated_score import GeneratedBatchStats, score_generated
from dmlkit.engine.callbacks import Callback
from dmlkit.engine.objective import ObjectiveTerm
from dmlkit.methods.base import BuildContext, Method

if TYPE_CHECKING:
    from dmlkit.config import ExperimentConfig

__all__ = ["GeneratedTerm", "L2Normalized", "NormalizedInputLoss", "NormalizedInputMiner", "SFT", "SFTStats"]


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


class NormalizedInputMiner(nn.Module):
    """A PML-signature miner applied to L2-normalised embeddings (and references)."""

    def __init__(self, miner: nn.Module) -> None:
        super().__init__()
        self.miner = miner

    def forward(self, embeddings: Tensor, labels: Tensor, ref_emb: Tensor | None = None,
                ref_labels: Tensor | None = None) -> Any:
        ref = F.normalize(ref_emb, p=2.0, dim=1) if ref_emb is not None else None
        return self.miner(F.normalize(embeddings, p=2.0, dim=1), labels, ref, ref_labels)


class GeneratedTerm(ObjectiveTerm):
    """``lam * J(X_gen, Y_gen)``: the loss on the batch the feature generator makes from this batch, mined like the real one."""

    is_metric_loss = True  # part of L_DML when a method mixes it (Eq. 5.2.5)

    def __init__(self, loss: nn.Module, generator: FeatureGenerator, lam: float, name: str = "generated",
                 miner: nn.Module | None = None, score: str = "separate") -> None:
        super().__init__(name, lam)
        self._loss = (loss, miner)  # shared with the real term, which registers (and checkpoints) them
        self.generator = generator
        self.score = score
        self.last_stats = GeneratedBatchStats()

    @property
    def loss(self) -> nn.Module:
        return self._loss[0]

    @property
    def miner(self) -> nn.Module | None:
        return self._loss[1]

    def value(self, embeddings: Tensor, labels: Tensor, batch: dict[str, Any]) -> Tensor:
        g = self.generator
        g.check_batch(embeddings, labels)
        x_gen, y_gen = g.step(g.transform_space(embeddings), labels, generate=self.weight != 0.0)
        if x_gen.shape[0] == 0:  # nothing generated (yet): zero, with a graph so backward works
            self.last_stats = GeneratedBatchStats()
            return 0.0 * embeddings.sum()
        x_real = F.normalize(embeddings, p=2.0, dim=1) if g.normalize_input else embeddings
        value, self.last_stats = score_generated(self.loss, x_gen, y_gen, self.miner, self.score, x_real, labels)
        return value


class SFTStats(Callback):
    """Adds what the generated term saw to each training step's outputs (so to ``metrics.jsonl``)."""

    def __init__(self, term: GeneratedTerm) -> None:
        self.term = term

    def on_batch_end(self, trainer: Any, batch: dict[str, Any], outputs: dict[str, Any]) -> None:
        outputs.update(self.term.last_stats.as_metrics("sft/"))
        cosine = self.term.generator.last_center_cosine
        if cosine is not None and not bool(torch.isnan(cosine)):
            outputs["sft/center_cosine"] = float(cosine)


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
        self.generated: GeneratedTerm | None = None

    @classmethod
    def from_config(cls, cfg: "ExperimentConfig") -> "SFT | None":
        return cls(cfg) if cfg.augment.name is not None else None

    def setup(self, ctx: BuildContext) -> None:
        self.generator = build_feature_generator(self.cfg, ctx.num_classes, ctx.embedding_dim, ctx.class_counts, ctx.seed)

    def terms(self, terms: list[ObjectiveTerm]) -> list[ObjectiveTerm]:
        metric = next((t for t in terms if t.name == "metric"), None)
        if metric is None or self.generator is None:
            raise ValueError("SFT needs the run's metric loss term (named 'metric') and setup() first")
        generated = GeneratedTerm(metric.loss, self.generator, self.cfg.lam, miner=metric.miner, score=self.cfg.score)
        metric.name = "real"
        if self.cfg.normalize_input:
            metric.loss = NormalizedInputLoss(metric.loss)
            if metric.miner is not None:
                metric.miner = NormalizedInputMiner(metric.miner)
        self.generated = generated
        i = terms.index(metric) + 1  # right after the real term: the two summands of Eq. 10 side by side
        return [*terms[:i], generated, *terms[i:]]

    def callbacks(self) -> list[Callback]:
        return [SFTStats(self.generated)] if self.generated is not None else []

    def eval_model(self, model: nn.Module) -> nn.Module:
        return L2Normalized(model) if self.cfg.normalize_input else model
