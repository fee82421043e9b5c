"""A finished run's embeddings in TensorBoard's embedding projector: what ``dmlkit tensorboard RUN`` writes.

``write_projector(RUN, split, max_images)`` loads the run with its best weights (``load_finished_run``), embeds
up to ``max_images`` images of the un-augmented ``split`` with the module the run evaluates (the vectors of
``dmlkit evaluate`` and ``embed_run``), and writes them with ``SummaryWriter.add_embedding`` into
``RUN/tensorboard/projector_<split>/``: the ``N x d`` matrix (``tensors.tsv``), one metadata row per image
(its position in the split, its class id and class name: colour the points by ``label`` or ``class``) and the
images as a sprite, each shown as a thumbnail at its point. ``tensorboard --logdir RUN/tensorboard`` then shows
them under PROJECTOR, beside the run's scalars (``train.tensorboard``).

A split larger than ``max_images`` is sampled without replacement with the run's seed (kept in split order).
Thumbnails are at most 64 pixels a side and small enough that the square sprite stays within the projector's
8192 x 8192 pixels; each image is min-max scaled for display, as the gallery shows it.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import Subset

from dmlkit.assemble import load_finished_run
from dmlkit.engine.tensorboard import require_tensorboard, summary_writer, tensorboard_dir
from dmlkit.validation import is_int

__all__ = ["MAX_SPRITE_PIXELS", "Projector", "write_projector"]

#: The largest sprite side TensorBoard's projector loads, in pixels.
MAX_SPRITE_PIXELS = 8192
THUMBNAIL_PIXELS = 64
_IMAGE_CHUNK = 256  # images read at once for the sprite: a whole split of large images would not fit in memory


@dataclass
class Projector:
    """What ``write_projector`` wrote: the folder, the images embedded, the embedding size, the checkpoint used."""

    folder: Path
    images: int
    dim: int
    checkpoint: Path


def chosen_indices(size: int, max_images: int, seed: int) -> torch.Tensor:
    """Every position of a split of ``size`` images, or ``max_images`` of them drawn with ``seed``, in order."""
    if size <= max_images:
        return torch.arange(size)
    drawn = torch.randperm(size, generator=torch.Generator().manual_seed(seed))[:max_images]
    return drawn.sort().values


def thumbnail_side(count: int, height: int, width: int) -> int:
    """The side of the square thumbnails of ``count`` images: the sprite is ``ceil(sqrt(count))`` of them a side."""
    per_side = math.ceil(math.sqrt(count))
    return max(1, min(THUMBNAIL_PIXELS, max(height, width), MAX_SPRITE_PIXELS // per_side))


def thumbnails(images: torch.Tensor, side: int) -> torch.Tensor:
    """``(B, C, H, W)`` images (any normalisation) as ``(B, 1 or 3, side, side)`` in [0, 1]: each min-max scaled,
    shrunk to fit ``side`` with its aspect kept, and centred on black."""
    x = images.detach().float().cpu()
    x = x[:, :3] if x.shape[1] >= 3 else x[:, :1]
    lo = x.amin(dim=(1, 2, 3), keepdim=True)
    span = x.amax(dim=(1, 2, 3), keepdim=True) - lo
    x = torch.where(span > 0, (x - lo) / span.clamp_min(1e-12), torch.zeros_like(x))
    height, width = x.shape[2:]
    scale = side / max(height, width)
    size = (max(1, round(height * scale)), max(1, round(width * scale)))
    if size != (height, width):
        x = F.interpolate(x, size=size, mode="area" if scale < 1 else "bilinear").clamp(0, 1)
    out = torch.zeros(x.shape[0], x.shape[1], side, side)
    top, left = (side - size[0]) // 2, (side - size[1]) // 2
    out[:, :, top : top + size[0], left : left + size[1]] = x
    return out


def _images(dataset: Any, indices: list[int]) -> torch.Tensor:
    get_batch = getattr(dataset, "get_batch", None)
    if get_batch is not None:
        return get_batch(indices)[0]
    return torch.stack([dataset[i][0] for i in indices])


def sprite_images(dataset: Any, indices: torch.Tensor) -> torch.Tensor:
    """The thumbnails of ``dataset``'s images at ``indices``, read a chunk at a time."""
    positions = indices.tolist()
    first = _images(dataset, positions[:1])
    side = thumbnail_side(len(positions), *first.shape[2:])
    chunks = [
        thumbnails(_images(dataset, positions[i : i + _IMAGE_CHUNK]), side)
        for i in range(0, len(positions), _IMAGE_CHUNK)
    ]
    return torch.cat(chunks)


def _cell(text: Any) -> str:
    """A metadata cell: the TSV's tabs and line breaks would shift columns or rows."""
    return " ".join(str(text).split()) or "-"


def write_projector(run_dir: str | Path, split: str = "test", max_images: int = 2000) -> Projector:
    """Embed ``split`` of the run in ``run_dir`` (a run folder: its best weights; or a checkpoint file inside one) and
    write the projector files (module docstring).

    A previous ``projector_<split>/`` of the run is replaced.
    """
    if not is_int(max_images) or max_images < 1:
        raise ValueError(
            f"max_images must be a positive integer (the images shown in the projector), got {max_images!r}"
        )
    require_tensorboard("dmlkit tensorboard")  # before the run is loaded and embedded
    run = load_finished_run(run_dir)  # a run folder (its best.pt) or a checkpoint inside one
    out = tensorboard_dir(run.folder.path) / f"projector_{split}"
    dataset = run.split(split)
    if len(dataset) == 0:
        raise ValueError(f"split '{split}' of run '{run_dir}' holds no images; choose another --split")
    indices = chosen_indices(len(dataset), max_images, run.cfg.seed)
    embeddings, labels = run.embed(Subset(dataset, indices.tolist()))
    names = list(getattr(dataset, "class_names", []))
    metadata = [
        [str(int(i)), str(int(c)), _cell(names[int(c)] if int(c) < len(names) else int(c))]
        for i, c in zip(indices, labels, strict=True)
    ]
    images = sprite_images(dataset, indices)
    if out.exists():
        shutil.rmtree(out)
    writer = summary_writer(out, "dmlkit tensorboard")
    try:
        writer.add_embedding(
            embeddings.float(),
            metadata=metadata,
            label_img=images,
            tag=split,
            metadata_header=["index", "label", "class"],
        )
    finally:
        writer.close()
    return Projector(out, len(indices), embeddings.shape[1], run.checkpoint)
