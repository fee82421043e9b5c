"""A trained run's embedding model and eval transform, loaded from its run folder.

Loaded by ``dmlkit.assemble.load_finished_run`` with the run's input channels, so no dataset is read
(a run can embed and serve images after its training data is gone) and the embedding is the one
``dmlkit evaluate`` measures (for SFT-d, L2-normalised).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from dmlkit.assemble import load_finished_run, resolve_checkpoint
from dmlkit.config import ExperimentConfig, load_config
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
    """The evaluated model of a run folder (or of a checkpoint file inside one) with its trained weights."""
    folder, checkpoint = resolve_checkpoint(run_or_checkpoint)
    preprocess = preprocess_for_config(load_config(folder.config, stored=True))
    run = load_finished_run(checkpoint, in_channels=preprocess.channels)
    model = run.eval_model.eval()
    return RunModel(model, preprocess, run.cfg, folder.path.resolve(), checkpoint.resolve())
