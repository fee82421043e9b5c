"""The nearest-neighbour gallery of a trained run: rebuild its model and split, embed, draw.

``run_gallery(RUN_DIR, out)`` is what ``dmlkit gallery`` runs: the run's model
is loaded by ``dmlkit.assemble.load_finished_run`` and embeds with the module the run
evaluates (as ``dmlkit evaluate`` does), the split (``test`` by default, un-augmented) is embedded, and
``dmlkit.viz.gallery.draw_gallery`` draws seeded queries with their ``k``
nearest images of the same split.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

import torch

from dmlkit.assemble import load_finished_run, resolve_checkpoint
from dmlkit.viz.gallery import draw_gallery

__all__ = ["GALLERY_FILE", "run_gallery"]

#: File name of a run's gallery inside its ``plots/`` folder (picked up by ``dmlkit report``).
GALLERY_FILE = "nearest_neighbours.png"


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
    run = load_finished_run(run_dir)
    cfg, dataset = run.cfg, run.split(split)
    embeddings, labels = run.embed_split(split, quiet=False)  # cached by dmlkit evaluate, or kept for the next gallery
    if out is None:
        plots = resolve_checkpoint(run_dir)[0].plots
        plots.mkdir(exist_ok=True)
        out = plots / GALLERY_FILE
    title = f"{cfg.name}: {queries} {split} queries and their {k} nearest {split} images (green: same class)"
    return draw_gallery(dataset, embeddings, labels, out, queries=queries, k=k, seed=seed, title=title)
