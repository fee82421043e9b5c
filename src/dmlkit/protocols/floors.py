"""Floor rows of a results table: what a split scores before any training.

A method's row means little without the scores that need no learning at all: on a split with near-identical
images in train and test an untrained ResNet-20 can reach a high P@1 (0.750 on a glyph split that kept
identical renderings). The floors:

- ``raw pixels``: the un-augmented, normalised images, flattened (area-downsampled to at most
  32 x 32 per channel, so large images stay tractable), retrieved by Euclidean distance;
- ``untrained``: the config's embedder with random weights drawn from each seed (no pretrained
  weights, even when the config names some);
- ``pretrained, not fine-tuned``: only when ``model.pretrained`` is set: the pretrained backbone
  with a random head, i.e. where fine-tuning starts.

All are scored as a run's test is (``evaluate_embeddings`` with ``eval.ks`` and ``eval.clustering``,
against ``eval.reference_split`` when the split is ``eval.split`` and the config has one).
``dmlkit floors CONFIG`` prints them as rows of the protocol tables (same columns, mean ± std over
``--seeds``).
"""

from __future__ import annotations

import math

import dataclasses
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from dmlkit.assemble import reference_dataset, run_split
from dmlkit.assemble.pretrained import resolve_pretrained
from dmlkit.config import ExperimentConfig
from dmlkit.engine.embed import embed_dataset
from dmlkit.evaluation import evaluate_embeddings
from dmlkit.io import write_json_atomic, write_text_atomic
from dmlkit.models import build_embedder
from dmlkit.protocols.table import SEED_KEY, markdown_table, summarise

__all__ = ["PIXEL_SIDE", "floor_metrics", "floor_table", "pixel_features"]

PIXEL_SIDE = 32


def pixel_features(dataset: Any, batch_size: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """``(features, labels)``: each image flattened, area-downsampled first when larger than 32 x 32."""
    chunks, labels = [], []
    for images, y in DataLoader(dataset, batch_size=batch_size, shuffle=False):
        if max(images.shape[-2:]) > PIXEL_SIDE:
            images = F.adaptive_avg_pool2d(images, PIXEL_SIDE)
        chunks.append(images.flatten(1).float())
        labels.append(y)
    if not chunks:
        raise ValueError("cannot score an empty split; check the dataset's root folder and split")
    return torch.cat(chunks), torch.cat(labels)


def _initial_embedder(cfg: ExperimentConfig, in_channels: int, pretrained: bool | str) -> torch.nn.Module:
    model_cfg = resolve_pretrained(dataclasses.replace(cfg.model, pretrained=pretrained), in_channels)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return build_embedder(model_cfg, in_channels=in_channels)


def floor_metrics(
    cfg: ExperimentConfig,
    split: str | None = None,
    seeds: Sequence[int] = (0,),
    progress: Callable[[str], None] | None = None,
) -> dict[str, list[dict[str, float]]]:
    """``{floor: [metrics of each seed]}`` on ``split`` (default ``eval.split``); see the module docstring.

    ``progress`` receives a line before each floor's embedding (``dmlkit floors`` prints them on stderr).
    """
    say = progress or (lambda line: None)
    if not seeds:
        raise ValueError("floors need at least one seed")
    split = cfg.eval.split if split is None else split
    dataset = run_split(cfg, split)
    reference = reference_dataset(cfg) if split == cfg.eval.split else None
    ev = cfg.eval

    def score(embed: Any, seed: int) -> dict[str, float]:
        x, y = embed(dataset)
        refs = embed(reference) if reference is not None else (None, None)
        metrics = evaluate_embeddings(x, y, *refs, ks=tuple(ev.ks), clustering=ev.clustering, seed=seed)
        return {SEED_KEY: seed, **metrics}

    say(f"floors: raw pixels of {len(dataset)} {split} images")
    out = {"raw pixels": [score(pixel_features, seeds[0])]}
    models = {"untrained": False}
    if cfg.model.pretrained is not False:
        models[f"pretrained ({cfg.model.pretrained}), not fine-tuned"] = cfg.model.pretrained
    for label, pretrained in models.items():
        out[label] = []
        for seed in seeds:
            say(f"floors: {label}, seed {seed}: embedding {len(dataset)} {split} images")
            model = _initial_embedder(dataclasses.replace(cfg, seed=seed), dataset.in_channels, pretrained)
            out[label].append(score(lambda d, m=model: embed_dataset(m, d, ev.batch_size), seed))
    return out


def floor_table(
    cfg: ExperimentConfig,
    split: str | None = None,
    seeds: Sequence[int] = (0,),
    columns: str = "thesis",
    out: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> str:
    """The floors as a markdown table (rows ``floor: <name> (n=...)``); with ``out``, also written there and
    as ``floors.json`` beside it. ``progress`` as in :func:`floor_metrics`."""
    split_name = cfg.eval.split if split is None else split
    floors = floor_metrics(cfg, split, seeds, progress)
    rows = [
        (f"floor: {label} (n={len(per_seed)})", summarise(per_seed, single_std=math.nan))  # raw pixels: one value
        for label, per_seed in floors.items()
    ]
    table = f"floors of {cfg.name} on split '{split_name}' (metrics in %)\n\n" + markdown_table(rows, columns)
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, table)
        write_json_atomic(out.with_name("floors.json"), {"config": cfg.name, "split": split_name, "floors": floors})
    return table
