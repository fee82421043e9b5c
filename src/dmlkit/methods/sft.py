"""SFT as a training method: the loss on the generated batch as its own objective term (Eq. 10 of the SFT paper).

``methods.sft`` in the config turns it on (``methods.sft.name``: ``sft``, ``sft_d`` or ``translation``;
the section is ``SFTConfig``, ``dmlkit.augment.sft_config``).
The objective then has two named terms, logged apart as ``loss/real`` and ``loss/generated``:

    real:       J(X, Y)                                                  (the run's metric term, renamed)
    generated:  lam * J(X_gen, Y_gen)                                    (Eq. 10, second summand)

``(X_gen, Y_gen)`` comes from :class:`~dmlkit.augment.feature_generator.FeatureGenerator`, built
from the ``methods.sft`` section by :meth:`FeatureGenerator.from_config` (Algorithm 1,
lines 5-6: targets by the scheme and target policy of Sec. 3.5, the transform, the Eq. 9 centre
update). The generated term scores with the run's final metric loss (so with CCP on, against
the proxies) and is mined by the run's miner, as the real term is
(:func:`~dmlkit.augment.generated_score.score_generated`; ``methods.sft.score``: ``separate`` or ``joint``).

Besides the two losses, every logged training step of ``metrics.jsonl`` holds what the generated
term saw (``sft/generated``: its size, ``sft/generated_positive_pairs``,
``sft/generated_anchors_with_positive``, ``sft/generated_mined_positive_pairs`` with a miner) and the
centre lag ``sft/center_cosine`` (mean cosine between the class centres before the step's update
and the batch's class means).

``methods.sft.init_centers: data`` (:class:`CenterInit`, the method's ``on_train_start`` callback): before
the first training step, every class centre is set to the mean of its training images (the training
split without its augmentation) under the initial network, in eval mode and without gradient, in
the space the centres live in (``FeatureGenerator.transform_space`` of the network's output: the
loss's embedding for SFT and translation, the pre-normalisation features for SFT-d). Without it a
class has no centre until its first batch, so on many classes the generated batch stays small for
tens of steps. Each process embeds its shard of the split; the per-class sums and counts are
all-reduced, so every process ends with the same centres. A resumed run keeps the checkpoint's
centres. The pass is logged as a ``{"split": "sft", "step": 0, "sft/center_init_seconds": ...}``
record of ``metrics.jsonl``.

SFT-d is used before normalisation (``methods.sft.normalize_input: true`` with
``model.normalize: none``): the real term's loss then L2-normalises its input, the centres and
the translation live in the unnormalised space, and the run is evaluated on the L2-normalised
embedding, the one the loss compared (``eval_model``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Subset

from dmlkit.augment.centers import class_sums
from dmlkit.augment.feature_generator import FeatureGenerator
from dmlkit.augment.generated_score import GeneratedBatchStats, score_generated
from dmlkit.augment.sft_config import SFTConfig
from dmlkit.distributed import shard_indices
from dmlkit.engine.callbacks import Callback, TrainerView
from dmlkit.engine.objective import ObjectiveTerm
from dmlkit.methods.base import BuildContext, Method
from dmlkit.methods.registry import register_method
from dmlkit.validation import is_int

if TYPE_CHECKING:
    from dmlkit.config import ExperimentConfig

__all__ = [
    "CenterInit",
    "GeneratedTerm",
    "L2Normalized",
    "NormalizedInputLoss",
    "NormalizedInputMiner",
    "SFT",
    "SFTStats",
]


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

    def forward(
        self,
        embeddings: Tensor,
        labels: Tensor,
        indices_tuple: Any = None,
        ref_emb: Tensor | None = None,
        ref_labels: Tensor | None = None,
    ) -> Tensor:
        ref = F.normalize(ref_emb, p=2.0, dim=1) if ref_emb is not None else None
        return self.loss(F.normalize(embeddings, p=2.0, dim=1), labels, indices_tuple, ref, ref_labels)


class NormalizedInputMiner(nn.Module):
    """A PML-signature miner applied to L2-normalised embeddings (and references)."""

    def __init__(self, miner: nn.Module) -> None:
        super().__init__()
        self.miner = miner

    def forward(
        self, embeddings: Tensor, labels: Tensor, ref_emb: Tensor | None = None, ref_labels: Tensor | None = None
    ) -> Any:
        ref = F.normalize(ref_emb, p=2.0, dim=1) if ref_emb is not None else None
        return self.miner(F.normalize(embeddings, p=2.0, dim=1), labels, ref, ref_labels)


class GeneratedTerm(ObjectiveTerm):
    """``lam * J(X_gen, Y_gen)``: the loss on the batch the feature generator makes from this batch, mined like the real one."""

    is_metric_loss = True  # part of L_DML when a method mixes it (Eq. 5.2.5)

    def __init__(
        self,
        loss: nn.Module,
        generator: FeatureGenerator,
        lam: float,
        name: str = "generated",
        miner: nn.Module | None = None,
        score: str = "separate",
    ) -> None:
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


class CenterInit(Callback):
    """``methods.sft.init_centers: data``: before the first step, each class centre <- the mean of its training images.

    The means are taken under the network as training starts (eval mode, no gradient, batches of
    ``batch_size``), in the centres' space (``generator.transform_space`` of the network's output),
    over ``train_set`` without its augmentation. With several processes each embeds its shard
    (``shard_indices``) with the bare module (no DDP collectives in the forward) and the per-class
    sums and counts are all-reduced, so every process sets the same centres. A resumed run
    (``trainer.state.step > 0``: ``last.pt`` was loaded) keeps the checkpoint's centres.
    ``last_seconds`` is the time the pass took (also logged to ``metrics.jsonl``).
    """

    def __init__(self, generator: FeatureGenerator, train_set: Any, batch_size: int, num_workers: int = 0) -> None:
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int (eval.batch_size in a config), got {batch_size!r}")
        self.generator = generator
        self.train_set = train_set.with_augment(False) if hasattr(train_set, "with_augment") else train_set
        self.batch_size, self.num_workers = batch_size, num_workers
        self.last_seconds: float | None = None

    def on_train_start(self, trainer: TrainerView) -> None:
        if trainer.state.step > 0:  # resumed from last.pt: the centres are the checkpoint's
            return
        started = time.perf_counter()
        fabric = trainer.fabric
        model = trainer.model if fabric.world_size == 1 else trainer.model.module  # the bare module: no DDP collectives
        idx = shard_indices(len(self.train_set), fabric.global_rank, fabric.world_size)
        sums, counts = self.class_sums(model, Subset(self.train_set, idx.tolist()), fabric.device)
        if fabric.world_size > 1:  # every process gets the same sums, so the same centres
            dist.all_reduce(sums)
            dist.all_reduce(counts)
        present = self.generator.centers.set_means(sums, counts)
        self.last_seconds = time.perf_counter() - started
        trainer.log.append(
            {
                "split": "sft",
                "step": 0,
                "sft/center_init_seconds": round(self.last_seconds, 3),
                "sft/center_init_images": int(counts.sum()),
                "sft/center_init_classes": int(present.sum()),
            }
        )

    @torch.no_grad()
    def class_sums(self, model: nn.Module, dataset: Any, device: torch.device | str) -> tuple[Tensor, Tensor]:
        """Per-class sums and counts (float64, on ``device``) of ``dataset``'s features in the centres' space."""
        c, d = self.generator.centers.num_classes, self.generator.centers.dim
        sums = torch.zeros(c, d, dtype=torch.float64, device=device)
        counts = torch.zeros(c, dtype=torch.float64, device=device)
        was_training = model.training
        model.eval()
        try:
            loader = DataLoader(dataset, batch_size=self.batch_size, shuffle=False, num_workers=self.num_workers)
            for images, labels in loader:
                features = self.generator.transform_space(model(images.to(device)).float())
                s, n = class_sums(features, labels.to(device), c)
                sums += s
                counts += n
        finally:
            model.train(was_training)
        return sums, counts


@register_method("sft", settings=SFTConfig)
class SFT(Method):
    """Feature augmentation of the SFT paper (``methods.sft`` section)."""

    name = "sft"

    def __init__(self, cfg: "ExperimentConfig") -> None:
        self.cfg: SFTConfig = cfg.methods.sft
        if self.cfg.normalize_input and cfg.model.normalize != "none":
            raise ValueError(
                "methods.sft.normalize_input needs pre-normalisation embeddings: set model.normalize: none "
                "(the augmenter then normalises them itself for the loss)"
            )
        self.generator: FeatureGenerator | None = None
        self.generated: GeneratedTerm | None = None
        self.center_init: CenterInit | None = None
        self.eval_batch_size, self.num_workers = cfg.eval.batch_size, cfg.data.num_workers

    @classmethod
    def from_config(cls, cfg: "ExperimentConfig") -> "SFT | None":
        return cls(cfg) if cfg.methods.sft.active else None

    def setup(self, ctx: BuildContext) -> None:
        self.generator = FeatureGenerator.from_config(
            self.cfg, ctx.num_classes, ctx.embedding_dim, ctx.class_counts, ctx.seed
        )
        if self.cfg.init_centers == "data":
            self.center_init = CenterInit(self.generator, ctx.train_set, self.eval_batch_size, self.num_workers)

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
        init = [self.center_init] if self.center_init is not None else []
        return [*init, SFTStats(self.generated)] if self.generated is not None else init

    def eval_model(self, model: nn.Module) -> nn.Module:
        return L2Normalized(model) if self.cfg.normalize_input else model
