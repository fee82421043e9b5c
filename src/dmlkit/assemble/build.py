"""Config -> the parts of a run: datasets, model, objective of named terms, methods, sampler, optimiser groups.

This is the one composition root of a training run. ``build_model`` is where the model and
the objective are made: the metric loss of ``loss:``, then each method's ``wrap_loss`` and
``terms`` hooks in the order of ``dmlkit.methods.METHODS``. ``build_run`` adds the datasets,
the batch sampler, the parameter groups, the stopping rule and the callbacks, and
``build_trainer`` / ``resume_trainer`` hand them to the method-agnostic ``Trainer``.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from dmlkit.assemble.eval_model import evaluation_model
from dmlkit.assemble.pretrained import resolve_pretrained_weights
from dmlkit.assemble.run_records import run_records, with_split_record
from dmlkit.config import ExperimentConfig, dump_config, load_config
from dmlkit.data import build_datasets, create_batch_sampler, create_dataset
from dmlkit.data.catalog import dataset_splits, split_options, training_set
from dmlkit.data.datasets.unreadable import check_images_open
from dmlkit.data.splits import sample_per_class
from dmlkit.engine.callbacks import Callback
from dmlkit.engine.early_stopping import EarlyStopping
from dmlkit.engine.launch import check_training_extras
from dmlkit.engine.objective import MetricLossTerm, Objective
from dmlkit.engine.optim import parameter_groups
from dmlkit.engine.parts import RunParts, Splits, plain_encode
from dmlkit.engine.run_folder import RunFolder
from dmlkit.engine.threads import pin_threads
from dmlkit.engine.trainer import Trainer
from dmlkit.losses.config import build_loss
from dmlkit.methods import BuildContext, Method, build_methods
from dmlkit.models import build_embedder

__all__ = [
    "BuiltModel",
    "Splits",
    "build_model",
    "build_run",
    "build_splits",
    "build_trainer",
    "default_run_dir",
    "reference_dataset",
    "resume_trainer",
    "run_split",
]


def build_splits(cfg: ExperimentConfig) -> Splits:
    """Train / validation (class-disjoint hold-out of the train classes) / test datasets of ``cfg.data``.

    With ``data.val_fraction: 0`` the test split monitors training (the conventional protocol).
    """
    sets = build_datasets(cfg.data, seed=cfg.seed, test_split=cfg.eval.split)
    reference = reference_dataset(cfg)
    if "val" not in sets:
        return Splits(train=sets["train"], val=sets["test"], test=sets["test"], val_is_test=True, reference=reference)
    return Splits(train=sets["train"], val=sets["val"], test=sets["test"], reference=reference)


def run_split(cfg: ExperimentConfig, split: str) -> Any:
    """Split ``split`` of the run's dataset, un-augmented. ``data.train_split`` is the run's own training set (what
    is left after its validation hold-out and its long-tail cut); ``"val"`` of a dataset without one is the run's
    own validation set (its class-disjoint hold-out, sampled as the trainer validated on it)."""
    d = cfg.data
    if split == d.train_split:
        return training_set(d, seed=cfg.seed)[0].with_augment(False)
    if split == "val" and "val" not in dataset_splits(d.name):
        return validation_sample(cfg, build_splits(cfg)).val
    return create_dataset(d.name, split, augment=False, **split_options(d, cfg.seed))


def reference_dataset(cfg: ExperimentConfig) -> Any:
    """The un-augmented ``eval.reference_split`` of the run's dataset (query -> gallery), or None."""
    return None if cfg.eval.reference_split is None else run_split(cfg, cfg.eval.reference_split)


def check_trainable(train_set: Any) -> None:
    if train_set.num_classes < 2:
        raise ValueError(
            f"the training split has {train_set.num_classes} class; metric learning needs at least 2 "
            "(raise data.max_classes, or lower data.val_fraction so that training keeps several classes)"
        )


@dataclass
class BuiltModel:
    """The model, the objective and the methods that shaped it."""

    model: nn.Module
    objective: Objective
    methods: list[Method]
    pretrained: dict[str, str] | None = None  # the weights it started from (resolve_pretrained_weights' identity)


def build_model(cfg: ExperimentConfig, train_set: Any, pretrained: bool | None = None) -> BuiltModel:
    """The embedder, the objective and the methods, initialised from the run's seed without touching global RNG state.

    ``pretrained=False`` skips loading pretrained backbone weights (a finished run loads its own); a
    pretrained *name* (``model.pretrained: glyphs-resnet20``) loads its checked cached weights
    (``dmlkit.assemble.pretrained``).
    """
    model_cfg = cfg.model if pretrained is None else _with_pretrained(cfg, pretrained)
    model_cfg, weights = resolve_pretrained_weights(model_cfg, train_set.in_channels)
    methods = build_methods(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = build_embedder(model_cfg, in_channels=train_set.in_channels)
        loss, miner = build_loss(cfg.loss, num_classes=train_set.num_classes, embedding_size=cfg.model.embedding_dim)
    counts = torch.bincount(train_set.labels, minlength=train_set.num_classes)
    ctx = BuildContext(cfg, model, train_set, train_set.num_classes, counts)
    for method in methods:
        method.setup(ctx)
    for method in methods:
        loss, miner = method.wrap_loss(loss, miner)
    terms = [MetricLossTerm(loss, miner)]
    for method in methods:
        terms = method.terms(terms)
    return BuiltModel(model, Objective(terms), methods, weights)


def _with_pretrained(cfg: ExperimentConfig, pretrained: bool) -> Any:
    return dataclasses.replace(cfg.model, pretrained=pretrained)


def _stopper(cfg: ExperimentConfig, methods: Sequence[Method]) -> EarlyStopping:
    rules = [(m.name, rule) for m in methods if (rule := m.stopper(cfg.train)) is not None]  # each asked once
    if len(rules) > 1:
        raise ValueError(f"methods {[name for name, _ in rules]} each bring a stopping rule; a run can follow only one")
    return rules[0][1] if rules else EarlyStopping(cfg.train.patience)


def _encoder(methods: Sequence[Method]) -> tuple[Any, tuple[str, ...]]:
    """The batch encoder of the one method that has one (else the model's forward) and its model methods."""
    encoders = [m for m in methods if type(m).encode is not Method.encode]
    if len(encoders) > 1:
        raise ValueError(
            f"methods {[m.name for m in encoders]} each embed the training batch their own way; combine at most one"
        )
    if not encoders:
        return plain_encode, ()
    return encoders[0].encode, encoders[0].forward_methods


def build_sampler(cfg: ExperimentConfig, train_set: Any) -> Any:
    """The batch sampler ``cfg.train`` names over ``train_set``, seeded by ``cfg.seed``."""
    t = cfg.train
    params = {"m": t.m_per_class, **t.sampler_params} if t.sampler == "m_per_class" else t.sampler_params
    return create_batch_sampler(t.sampler, train_set, t.batch_size, seed=cfg.seed, **params)


def build_run(cfg: ExperimentConfig) -> RunParts:
    """Everything the trainer needs for ``cfg``, built before any run folder is touched (config errors come first)."""
    splits = build_splits(cfg)
    check_trainable(splits.train)
    # every unreadable image of every split in one error now, not one per run nor after the training
    check_images_open(
        [
            (n, d)
            for n, d in (
                ("train", splits.train),
                ("test", splits.test),
                ("reference", splits.reference),
                ("validation", splits.val),
            )
            if d is not None
        ]
    )
    splits = validation_sample(cfg, splits)
    warn_shared_classes(cfg, splits)
    built = build_model(cfg, splits.train)
    t = cfg.train
    claimed = [group for m in built.methods for group in m.param_groups(t)]
    sampler = build_sampler(cfg, splits.train)
    encode, forward_methods = _encoder(built.methods)
    objective, methods, source = built.objective, built.methods, cfg.eval.embedding
    evaluation_model(
        built.model, objective, source, methods
    )  # an impossible eval.embedding fails here, not after training
    return RunParts(
        name=cfg.name,
        seed=cfg.seed,
        config_text=dump_config(cfg),
        splits=splits,
        model=built.model,
        objective=objective,
        batch_sampler=sampler,
        param_groups=parameter_groups(built.model, objective, t, claimed),
        stopper=_stopper(cfg, methods),
        eval_model=lambda model: evaluation_model(model, objective, source, methods),
        callbacks=[cb for m in methods for cb in m.callbacks()],
        encode=encode,
        forward_methods=forward_methods,
        plots=cfg.plots,
        num_workers=cfg.data.num_workers,
        pretrained=built.pretrained,
        records=run_records(cfg, splits),
    )


#: A validation class larger than this makes MAP@R rank that many neighbours of each of its images at every validation.
LARGE_VALIDATION_CLASS = 2000


def validation_sample(cfg: ExperimentConfig, splits: Splits) -> Splits:
    """``splits`` with the validation set cut to ``eval.val_max_per_class`` images per class; warns when it is slow."""
    largest = int(torch.bincount(splits.val.labels).max()) if len(splits.val) else 0
    cap = cfg.eval.val_max_per_class
    if cap is not None:
        return dataclasses.replace(splits, val=sample_per_class(splits.val, cap, seed=cfg.seed))
    if largest > LARGE_VALIDATION_CLASS:
        warnings.warn(
            f"the validation set has {len(splits.val)} images, up to {largest} of one class: MAP@R ranks that many "
            "neighbours of every image at every validation, which is slow (2 x 6,000 Fashion-MNIST images: about a "
            "minute per validation on one thread); eval.val_max_per_class: 500 validates on a fixed sample instead",
            RuntimeWarning,
            stacklevel=3,
        )
    return splits


def warn_shared_classes(cfg: ExperimentConfig, splits: Splits) -> None:
    """Warn when the held-out validation classes are also test classes (MNIST, Fashion-MNIST, CIFAR: one class set)."""
    if splits.val_is_test:
        return
    shared = sorted(set(splits.val.class_names) & set(splits.test.class_names))
    if shared:
        warnings.warn(
            f"data '{cfg.data.name}': the validation classes {shared[:5]}{' ...' if len(shared) > 5 else ''} are also "
            "test classes (the dataset's train and test splits share their classes), so early stopping selects on "
            "classes the test measures; set data.val_fraction: 0 to validate on the test split openly "
            "(summary: validated_on_test), or keep it knowing this",
            RuntimeWarning,
            stacklevel=3,
        )


def build_trainer(
    cfg: ExperimentConfig, run_dir: str | Path | None = None, callbacks: Sequence[Callback] = (), quiet: bool = False
) -> Trainer:
    """A trainer for a new run of ``cfg`` in ``run_dir`` (default ``output_dir/name``)."""
    run_dir = default_run_dir(cfg) if run_dir is None else run_dir
    check_training_extras(
        cfg.eval, cfg.plots, cfg.train.tensorboard
    )  # before the data are read (the trainer checks again)
    pin_threads(cfg.train.threads)  # before the parts are built: every computation of the run uses them
    return Trainer(cfg.train, cfg.eval, run_dir, build_run(cfg), list(callbacks), quiet)


def resume_trainer(run_dir: str | Path, callbacks: Sequence[Callback] = (), quiet: bool = False) -> Trainer:
    """A trainer that continues the run in ``run_dir`` from its last checkpoint, with the run's own config.

    A run that stopped before its first ``last.pt`` starts again from step 0; a finished run is left as it is.
    """
    folder = RunFolder(run_dir)
    folder.check_started()
    cfg = load_config(folder.config, stored=True)
    check_training_extras(cfg.eval, cfg.plots, cfg.train.tensorboard)
    pin_threads(cfg.train.threads)
    # the classes the run started with; its config.yaml (rewritten by a restart from step 0) stays as it was
    parts = dataclasses.replace(build_run(with_split_record(cfg, folder.path)), config_text=dump_config(cfg))
    return Trainer(cfg.train, cfg.eval, run_dir, parts, list(callbacks), quiet, resuming=True)


def default_run_dir(cfg: ExperimentConfig) -> Path:
    return Path(cfg.output_dir) / cfg.name
