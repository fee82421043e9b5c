"""Diagnostics of a finished run: the metric bounds of classifier losses, and the diagnostics plug-ins register.

``run_diagnostics(run_dir)`` (``dmlkit evaluate RUN --diagnostics``) writes
``diagnostics_<split>.json`` (and figures under ``plots/``):

* every diagnostic of ``RUN_DIAGNOSTICS`` (``register_run_diagnostic``), on the split's embeddings in
  the space the loss compared (``LoadedRun.features``: for SFT-d, ``model.normalize: none`` with
  ``methods.sft.normalize_input``, the L2-normalised embedding, not the raw head output). The lab registers
  ``geometry`` (``dmlkit_lab.report.diagnostics``: the SFT paper's r_w of Eq. 8, divergences of Eq. 11,
  ``||A sigma - sigma||``, spectra, and their figures under ``plots/geometry_<split>/``);
* ``metric_bounds`` (only for a classifier loss with a metric criterion, ce_weak /
  ce_metric): Lemmas 3-4 of the classification-baseline paper on the *training* images (un-augmented), where
  ``eps`` is the sup of the training loss, with the classifier applied to the features the loss
  received (``LoadedRun.features`` again). ``eps`` is taken over every training image;
  the pairwise bounds are checked on ``max_pairs_samples`` images drawn with the run's seed
  (all ``N^2`` pairs of the whole train split would cost ``O(N^2 c)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from dmlkit.assemble import build_splits, find_classifier, load_finished_run
from dmlkit.engine.embed import embed_dataset
from dmlkit.io import write_json_atomic
from dmlkit.losses import MetricCrossEntropyLoss, metric_bounds, one_hot_labels as _one_hot
from dmlkit.registry import Registry

__all__ = ["RUN_DIAGNOSTICS", "classifier_bounds", "register_run_diagnostic", "run_diagnostics"]

#: name -> ``diagnostic(embeddings, labels, plots_dir or None, seed) -> dict``: its keys join the report (a key
#: ``figures``, the paths it drew, is listed last).
RUN_DIAGNOSTICS: Registry[dict[str, Any]] = Registry("run diagnostic", plugins=True)


def register_run_diagnostic(name: str, diagnostic: Callable[..., dict[str, Any]]) -> None:
    """Add ``diagnostic`` to what ``dmlkit evaluate --diagnostics`` computes (see ``RUN_DIAGNOSTICS``)."""
    RUN_DIAGNOSTICS.register(name, diagnostic)


def classifier_bounds(run: Any, max_pairs_samples: int = 1000) -> dict[str, Any] | None:
    """Lemma 3-4 bounds of the run's classifier loss on its training images, or None without one."""
    classifier = find_classifier(run.objective)
    if not isinstance(classifier, MetricCrossEntropyLoss):
        return None
    train = build_splits(run.cfg).train.with_augment(False)
    features, labels = embed_dataset(run.features, train, run.cfg.eval.batch_size)  # what the classifier loss received
    with torch.no_grad():
        outputs = classifier.outputs(features).double()
        eps_all = float(classifier.criterion.distance(outputs, _one_hot(labels, outputs.shape[1], outputs.dtype)).max())
    g = torch.Generator().manual_seed(run.cfg.seed)
    pick = torch.randperm(len(labels), generator=g)[:max_pairs_samples]
    bounds = metric_bounds(outputs[pick], labels[pick], classifier)
    bounds.update(eps_all_train=eps_all, pairs_samples=int(pick.numel()), train_images=int(len(labels)))
    return bounds


def run_diagnostics(run_or_checkpoint: str | Path, split: str = "test", plots: bool = True) -> dict[str, Any]:
    """Compute, write and return the diagnostics of a run (see the module docstring)."""
    run = load_finished_run(run_or_checkpoint)
    # the embedding the loss compared (for SFT-d: after L2 normalisation)
    embeddings, labels = embed_dataset(run.features, run.split(split), run.cfg.eval.batch_size)
    report: dict[str, Any] = {"split": split, "checkpoint": str(run.checkpoint)}
    figures: list[str] = []
    for name in RUN_DIAGNOSTICS.names():
        plots_dir = run.folder.plots / f"{name}_{split}" if plots else None
        found = dict(RUN_DIAGNOSTICS.get(name)(embeddings, labels, plots_dir, run.cfg.seed))
        figures += [str(p) for p in found.pop("figures", [])]
        report.update(found)
    bounds = classifier_bounds(run)
    if bounds is not None:
        report["metric_bounds"] = bounds
    if plots:
        report["figures"] = figures
    write_json_atomic(run.folder.path / f"diagnostics_{split}.json", report)
    return report
