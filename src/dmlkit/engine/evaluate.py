"""Evaluate a finished run: rebuild its model from the run's config, load a checkpoint, embed a split."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dmlkit.config import ExperimentConfig, load_config
from dmlkit.engine.checkpoint import load_checkpoint, load_model_state
from dmlkit.engine.embed import embed_dataset
from dmlkit.engine.eval_model import evaluation_model
from dmlkit.engine.run_folder import RunFolder, write_json_atomic
from dmlkit.engine.trainer import build_model, build_splits, run_split
from dmlkit.evaluation import clustering_metrics, retrieval_metrics


def resolve_checkpoint(run_or_checkpoint: str | Path) -> tuple[RunFolder, Path]:
    """Accept a run folder (uses its best.pt) or a checkpoint file inside a run folder."""
    path = Path(run_or_checkpoint)
    if path.is_dir():
        folder = RunFolder(path)
        checkpoint = folder.best_checkpoint if folder.best_checkpoint.is_file() else folder.last_checkpoint
    else:
        folder, checkpoint = RunFolder(path.parent), path
    if not folder.config.is_file():
        raise ValueError(f"'{folder.path}' has no config.yaml; pass a run folder written by dmlkit train")
    return folder, checkpoint


@dataclass
class LoadedRun:
    """A finished run rebuilt from its folder: config, model and objective with the checkpoint's weights."""

    cfg: ExperimentConfig
    model: nn.Module
    objective: nn.Module
    folder: RunFolder
    checkpoint: Path

    @property
    def eval_model(self) -> nn.Module:
        """The module evaluated (``eval.embedding``: the features or a classifier's outputs)."""
        return evaluation_model(self.model, self.objective, self.cfg.eval.embedding, self.cfg.augment.normalize_input)


def load_finished_run(run_or_checkpoint: str | Path) -> LoadedRun:
    """The run's config, model and objective with the weights of ``run_or_checkpoint`` (best.pt of a run folder)."""
    folder, checkpoint = resolve_checkpoint(run_or_checkpoint)
    cfg = load_config(folder.config)
    train = build_splits(cfg).train
    model, objective = build_model(cfg, train.in_channels, train.labels, train.num_classes)
    state = load_checkpoint(checkpoint)
    load_model_state(model, state["model"], str(checkpoint))
    if "objective" in state:
        objective.load_state_dict(state["objective"])
    return LoadedRun(cfg, model, objective, folder, checkpoint)


def embed_run(run_or_checkpoint: str | Path, split: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
    """``(embeddings, labels)`` of ``split`` under the run's model."""
    run = load_finished_run(run_or_checkpoint)
    return embed_dataset(run.eval_model, run_split(run.cfg, split), run.cfg.eval.batch_size)


def evaluate_run(run_or_checkpoint: str | Path, split: str = "test") -> dict[str, Any]:
    """Retrieval and clustering metrics of the run's model on ``split``; also written to ``eval_<split>.json``."""
    run = load_finished_run(run_or_checkpoint)
    cfg, folder, checkpoint = run.cfg, run.folder, run.checkpoint
    embeddings, labels = embed_dataset(run.eval_model, run_split(cfg, split), cfg.eval.batch_size)
    refs: tuple = (None, None)
    if cfg.eval.reference_split is not None and split == cfg.eval.split:  # queries against the gallery
        refs = embed_dataset(run.eval_model, run_split(cfg, cfg.eval.reference_split), cfg.eval.batch_size)
    metrics = retrieval_metrics(embeddings, labels, *refs, ks=tuple(cfg.eval.ks))
    if cfg.eval.clustering:
        metrics.update(clustering_metrics(embeddings, labels, seed=cfg.seed))
    write_json_atomic(folder.path / f"eval_{split}.json", {"checkpoint": str(checkpoint), "split": split, **metrics})
    return metrics
