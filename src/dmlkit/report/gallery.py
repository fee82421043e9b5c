"""The nearest-neighbour gallery of a trained run: rebuild its model and split, embed, draw.

``run_gallery(RUN_DIR, out)`` is what ``dmlkit gallery`` runs: the run's model
is rebuilt from its ``config.yaml`` and best checkpoint (as ``dmlkit evaluate``
does), the split (``test`` by default, un-augmented) is embedded, and
``dmlkit.viz.gallery.draw_gallery`` draws seeded queries with their ``k``
nearest images of the same split.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import torch

from dmlkit.config import ExperimentConfig, load_config
from dmlkit.data import create_dataset
from dmlkit.engine.checkpoint import load_checkpoint, load_model_state
from dmlkit.engine.embed import embed_dataset
from dmlkit.engine.evaluate import resolve_checkpoint
from dmlkit.engine.trainer import build_model, build_splits
from dmlkit.viz.gallery import draw_gallery

__all__ = ["GALLERY_FILE", "embed_run", "run_gallery"]

#: File name of a run's gallery inside its ``plots/`` folder (picked up by ``dmlkit report``).
GALLERY_FILE = "nearest_neighbours.png"


def embed_run(run_dir: str | Path, split: str = "test") -> tuple[ExperimentConfig, Any, torch.Tensor, torch.Tensor]:
    """``(config, dataset, embeddings, labels)`` of the run's best weights on its un-augmented ``split``.

    The model is rebuilt from ``config.yaml`` and ``best.pt`` (``last.pt`` if there is no best), as
    ``dmlkit evaluate`` does; a folder that is not a run or holds no weights is a ``ValueError``.
    """
    folder, checkpoint = resolve_checkpoint(run_dir)
    if not checkpoint.is_file():
        raise ValueError(f"'{folder.path}' has no best.pt or last.pt: the run saved no weights to embed with")
    cfg = load_config(folder.config)
    d = cfg.data
    dataset = create_dataset(
        d.name, split, root=d.root, seed=cfg.seed, augment=False, image_size=d.image_size, max_classes=d.max_classes, **d.params
    )
    train = build_splits(cfg).train
    model, _ = build_model(cfg, dataset.in_channels, train.labels, train.num_classes)
    load_model_state(model, load_checkpoint(checkpoint)["model"], str(checkpoint))
    embeddings, labels = embed_dataset(model, dataset, cfg.eval.batch_size)
    return cfg, dataset, embeddings, labels


def run_gallery(
    run_dir: str | Path,
    out: str | Path | IO[bytes] | None = None,
    queries: int = 8,
    k: int = 5,
    seed: int = 0,
    split: str = "test",
) -> torch.Tensor:
    """Draw the gallery of the run in ``run_dir`` to ``out`` (default ``RUN_DIR/plots/nearest_neighbours.png``).

    Returns the ``(queries, k)`` boolean mask of neighbours that share their query's class.
    """
    cfg, dataset, embeddings, labels = embed_run(run_dir, split)
    if out is None:
        plots = resolve_checkpoint(run_dir)[0].plots
        plots.mkdir(exist_ok=True)
        out = plots / GALLERY_FILE
    title = f"{cfg.name}: {queries} {split} queries and their {k} nearest {split} images (green: same class)"
    return draw_gallery(dataset, embeddings, labels, out, queries=queries, k=k, seed=seed, title=title)
