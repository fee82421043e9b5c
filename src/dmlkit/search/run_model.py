"""A trained run's embedding model and eval transform, loaded from its run folder.

Only the embedder is rebuilt (from the run's ``config.yaml``) and its weights read from ``best.pt``
(else ``last.pt``, or the checkpoint file given): no dataset is loaded, so a run can embed and serve
images after its training data is gone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from dmlkit.config import ExperimentConfig, load_config
from dmlkit.engine.checkpoint import load_checkpoint, load_model_state
from dmlkit.engine.evaluate import resolve_checkpoint
from dmlkit.models import build_embedder
from dmlkit.search.preprocess import ImagePreprocess, preprocess_for_config

__all__ = ["RunModel", "load_run_model"]


@dataclass
class RunModel:
    """The pieces needed to embed image files the way a run does."""

    model: nn.Module  # in eval mode, on CPU
    preprocess: ImagePreprocess
    config: ExperimentConfig
    run_dir: Path
    checkpoint: Path

    @property
    def embedding_dim(self) -> int:
        return int(self.config.model.embedding_dim)

    @torch.no_grad()
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """Embeddings ``(B, d)`` (float32, CPU) of a batch of preprocessed images ``(B, C, H, W)``."""
        return self.model(images).float().cpu()

    def example_input(self, batch: int = 2, seed: int = 0) -> torch.Tensor:
        """A random input batch of the model's shape (for tracing and parity checks)."""
        p = self.preprocess
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(batch, p.channels, p.size, p.size, generator=gen)


def load_run_model(run_or_checkpoint: str | Path) -> RunModel:
    """Rebuild the embedder of a run folder (or of a checkpoint file inside one) with its trained weights."""
    folder, checkpoint = resolve_checkpoint(run_or_checkpoint)
    cfg = load_config(folder.config)
    preprocess = preprocess_for_config(cfg)
    model_cfg = dataclasses.replace(cfg.model, pretrained=False)  # weights come from the checkpoint
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = build_embedder(model_cfg, in_channels=preprocess.channels)
    load_model_state(model, load_checkpoint(checkpoint)["model"], str(checkpoint))
    model.eval()
    return RunModel(model, preprocess, cfg, folder.path.resolve(), checkpoint.resolve())
