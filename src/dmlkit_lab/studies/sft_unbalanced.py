"""The unbalanced-training study of the SFT paper (Sec. 4 "Effect on Unbalanced Datasets", Table 5) on glyphs.

Paper set-up (MS-Celeb-1M mini-dataset): closed-set classification; 1,500 head classes
with 50 training samples each, 945 tail classes with 5 each; all other samples of those
classes are the test set; classification accuracy on head and tail test samples for
the baseline, SFT with the *balanced* train scheme (each feature to a random other
class) and SFT with the *unbalanced* train scheme (Sec. 3.5: head features into a
random tail class, tail features untouched). Paper result: tail 73.9 -> 78.4
(balanced) -> 82.3 (unbalanced), head about unchanged (95.6 / 95.8 / 95.5).

Miniature on the ``glyphs`` dataset (choices are *ours*, glyph classes have 8-16 images,
one per font):

* classes: those of the glyphs split ``split`` with at least ``min_images`` images
  (default 16, i.e. rendered in all 16 fonts); ``num_head`` head and ``num_tail`` tail
  classes drawn with a seeded generator (default 20 : 12, like the paper's 1500 : 945 =
  61 : 39; few classes so that a CPU run of a few hundred steps fits the head classes);
* training images per class: ``head_train`` = 12 (head), ``tail_train`` = 2 (tail), a
  6 : 1 ratio (the paper's is 10 : 1). With 16 images per class, 10 : 1 would mean one
  training image per tail class (no intra-class variation at all) or at most one
  test image per head class; 12 : 2 keeps two tail samples and four head test images.
  The remaining images of the chosen classes (4 per head class, 14 per tail class)
  are the test set; train and test images are disjoint, classes are shared (closed set);
* the unbalanced scheme's ``tail_threshold`` defaults to ``(head_train + tail_train + 1) // 2``
  (any value in ``(tail_train, head_train]`` gives the same head/tail split);
* model: ``resnet20`` (CIFAR-style) + GAP + linear head to ``embedding_dim`` = 64,
  L2-normalised; images at ``image_size`` = 16 px for CPU speed, with the dataset's
  ``GlyphAugment`` on training images (augmentation draw = f(seed, step, image));
* objective: a softmax-family classifier loss of the loss registry (``l2_softmax`` by
  default; also ``normalized_softmax``, ``cosface``), wrapped for SFT in
  :class:`~dmlkit.augment.augmented_loss.FeatureAugmentedLoss` (Eq. 10,
  ``lam = 0.2`` as in the paper, spherical transform Eq. 3-4, centres by Eq. 9);
* optimisation: Adam, ``lr`` = 3e-3 with cosine decay to 0 over ``steps`` = 250 steps
  (about 30 epochs of the 264 training images; ``docs/results/sft_unbalanced.md`` says why
  that is enough), batches of
  ``batch_size`` = 32 images drawn uniformly without replacement per epoch (the
  natural, unbalanced class frequencies, as in plain classification training);
* prediction: argmax of the classifier's class scores (``logits`` / ``get_logits`` of
  the loss) on the test images.

The three methods of one seed start from the same initial weights (model and
classifier) and see the same batches and augmentations; only the objective differs.
``run_study`` writes ``table.md`` (rows Head / Tail, columns Baseline / Balanced Train /
Unbalanced Train, mean +- sample std over seeds, in %) and ``results.json``.

The study's parts: ``sft_unbalanced_config`` (the hyper-parameters), ``sft_unbalanced_split`` (the split and
the batches), ``loop`` (the bare training loop it shares with ``gsp_synthetic``), ``tables`` (``table.md``)
and ``sft_unbalanced_cli`` (the command line).

Run: ``dmlkit study sft-unbalanced --out DIR`` or
``python -m dmlkit_lab.studies.sft_unbalanced_cli --out DIR --seeds 0 1 2 --steps N``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from dmlkit.augment.augmented_loss import FeatureAugmentedLoss
from dmlkit.augment.feature_generator import FeatureGenerator
from dmlkit.data import create_dataset
from dmlkit.data.seeding import derive_seed
from dmlkit.engine.config import TrainConfig
from dmlkit.engine.optim import parameter_groups
from dmlkit.losses import create_loss
from dmlkit.models import ModelConfig, build_embedder
from dmlkit_lab.studies.loop import cosine_to_zero, train_steps
from dmlkit_lab.studies.sft_unbalanced_config import UnbalancedStudyConfig
from dmlkit_lab.studies.sft_unbalanced_split import (
    AUGMENTER_TAG,
    INIT_TAG,
    UnbalancedSplit,
    make_unbalanced_split,
    training_batches,
)
from dmlkit_lab.studies.tables import sft_unbalanced_table

__all__ = [
    "METHODS",
    "UnbalancedSplit",
    "UnbalancedStudyConfig",
    "build_objective",
    "class_scores",
    "make_unbalanced_split",
    "run_study",
    "train_method",
]

METHODS = ("baseline", "balanced", "unbalanced")


# ------------------------------------------------------------------------------ objective
def class_scores(classifier: nn.Module, embeddings: Tensor) -> Tensor:
    """``(B, C)`` class scores of a classifier loss: its ``logits`` (ours) or ``get_logits`` (PML)."""
    for name in ("logits", "get_logits"):
        f = getattr(classifier, name, None)
        if callable(f):
            return f(embeddings)
    raise ValueError(
        f"{type(classifier).__name__} has no class scores (no logits / get_logits method): use a classifier "
        "loss such as l2_softmax, normalized_softmax or cosface"
    )


def build_objective(
    method: str, classifier: nn.Module, split: UnbalancedSplit, cfg: UnbalancedStudyConfig, seed: int
) -> nn.Module:
    """The training loss of ``method``: the classifier loss, or it wrapped by Eq. 10 with the balanced / unbalanced scheme."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: choose from {METHODS}")
    if method == "baseline":
        return classifier
    generator = FeatureGenerator(
        split.num_classes,
        cfg.embedding_dim,
        transform=cfg.transform,
        scheme=method,
        target="all",  # a classifier loss needs no in-batch positives; the study's tables were measured so
        alpha=cfg.alpha,
        tail_threshold=cfg.threshold,
        class_counts=split.class_counts,
        seed=derive_seed(seed, AUGMENTER_TAG),
    )
    return FeatureAugmentedLoss(classifier, generator, lam=cfg.lam)


# ------------------------------------------------------------------------------ model
def _model_config(cfg: UnbalancedStudyConfig, in_channels: int) -> ModelConfig:
    """ResNet-20 + GAP + linear head; with ``cfg.pretrained``, its checked cached weights (built on first use)."""
    model_cfg = ModelConfig(embedding_dim=cfg.embedding_dim, freeze_bn=cfg.freeze_bn)
    if cfg.pretrained is None:
        return model_cfg
    from dmlkit.assemble.pretrained import is_pretrained_name, resolve_pretrained
    from dmlkit.pretrain import ensure_pretrained

    if is_pretrained_name(cfg.pretrained):
        ensure_pretrained(cfg.pretrained, quiet=True)
    return resolve_pretrained(dataclasses.replace(model_cfg, pretrained=cfg.pretrained), in_channels)


def _initial_model(
    cfg: UnbalancedStudyConfig, seed: int, in_channels: int, num_classes: int
) -> tuple[nn.Module, nn.Module]:
    """The embedder and the classifier loss at the seed's initial weights, the same for every method of a seed.

    The layers draw their initial weights from the global generator, so they are built inside a fork of it,
    seeded with the seed's ``INIT_TAG`` stream: the global state after the call is the one before it.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, INIT_TAG))
        model = build_embedder(_model_config(cfg, in_channels), in_channels)
        classifier = create_loss(cfg.loss, num_classes=num_classes, embedding_size=cfg.embedding_dim)
    return model, classifier


def _parameter_groups(model: nn.Module, classifier: nn.Module, cfg: UnbalancedStudyConfig) -> list[dict[str, Any]]:
    """The backbone at ``backbone_lr``, the new layers (head) at ``lr``, the classifier at ``classifier_lr``
    (each ``lr`` when unset): the trainer's groups (``train.lr`` / ``head_lr`` / ``loss_lr``)."""
    rates = TrainConfig(lr=cfg.backbone_lr or cfg.lr, head_lr=cfg.lr, loss_lr=cfg.classifier_lr or cfg.lr)
    return parameter_groups(model, classifier, rates)


# ------------------------------------------------------------------------------ training
@torch.no_grad()
def _accuracy(model: nn.Module, classifier: nn.Module, dataset: Any, split: UnbalancedSplit) -> dict[str, float]:
    model.eval()
    classifier.eval()
    preds = []
    for chunk in split.test_indices.split(256):
        x, _ = dataset.get_batch(chunk)
        preds.append(class_scores(classifier, model(x)).argmax(dim=1))
    correct = (torch.cat(preds) == split.test_labels).float()
    head = split.is_head[split.test_labels]
    return {"head": float(correct[head].mean()), "tail": float(correct[~head].mean()), "all": float(correct.mean())}


def train_method(
    method: str, cfg: UnbalancedStudyConfig, seed: int, train_ds: Any, test_ds: Any, split: UnbalancedSplit
) -> dict[str, Any]:
    """Train one method for ``cfg.steps`` steps (the studies' bare loop) and measure head / tail test accuracy."""
    started = time.perf_counter()
    model, classifier = _initial_model(cfg, seed, train_ds.in_channels, split.num_classes)
    objective = build_objective(method, classifier, split, cfg, seed)
    optimizer = torch.optim.Adam(_parameter_groups(model, classifier, cfg), lr=cfg.lr, weight_decay=cfg.weight_decay)
    generated = 0

    def step_loss(pos: Tensor, step: int) -> Tensor:
        nonlocal generated
        train_ds.set_epoch(step)  # augmentation draw = f(seed, step, image)
        x, _ = train_ds.get_batch(split.train_indices[pos])
        loss = objective(model(x), split.train_labels[pos])
        generated += objective.last_stats.num_generated if isinstance(objective, FeatureAugmentedLoss) else 0
        return loss

    model.train()
    classifier.train()
    batches = training_batches(split, cfg.sampling, cfg.batch_size, cfg.steps, seed)
    done = train_steps(step_loss, batches, optimizer, schedule=cosine_to_zero(optimizer, cfg.steps), name=method)
    acc = _accuracy(model, classifier, test_ds, split)
    return {
        "method": method,
        "seed": seed,
        **acc,
        "generated_features": generated,
        "final_loss": float(done.last_loss.detach()),
        "seconds": round(time.perf_counter() - started, 1),
    }


# ------------------------------------------------------------------------------ study
def run_study(
    cfg: UnbalancedStudyConfig,
    out_dir: str | Path,
    seeds: Sequence[int] = (0, 1, 2),
    methods: Sequence[str] = METHODS,
    quiet: bool = False,
) -> list[dict[str, Any]]:
    """Train every method for every seed; write ``table.md`` and ``results.json`` into ``out_dir``."""
    if not seeds:
        raise ValueError("give at least one seed")
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}: choose from {METHODS}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    first_split: UnbalancedSplit | None = None
    for seed in seeds:
        train_ds = create_dataset(cfg.dataset, cfg.split, image_size=cfg.image_size, augment=cfg.augment, seed=seed)
        test_ds = train_ds.with_augment(False)
        split = make_unbalanced_split(
            train_ds.labels, cfg.num_head, cfg.num_tail, cfg.head_train, cfg.tail_train, cfg.min_images, seed
        )
        first_split = first_split or split
        for m in methods:
            r = train_method(m, cfg, seed, train_ds, test_ds, split)
            results.append(r)
            if not quiet:
                print(
                    f"seed {seed} {m:10s} head {100 * r['head']:.2f} tail {100 * r['tail']:.2f} ({r['seconds']} s)",
                    flush=True,
                )
    (out / "table.md").write_text(sft_unbalanced_table(results, cfg, seeds, methods, first_split))  # type: ignore[arg-type]
    (out / "results.json").write_text(
        json.dumps({"config": asdict(cfg), "seeds": list(seeds), "results": results}, indent=2)
    )
    return results
