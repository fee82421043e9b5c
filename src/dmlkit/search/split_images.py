"""The image files of a run's own split, to embed with ``dmlkit embed RUN --split NAME``.

The split is the one ``dmlkit evaluate RUN --split NAME`` scores: the run's config rebuilt with its
recorded classes (``classes.json`` of a flat image folder, ``dmlkit.assemble.run_records``), so a flat
folder's test classes stay the run's even after classes were added. Labels and class names come from
the dataset. Only datasets read from image files (``image_folder``, the benchmarks) have paths to embed.
"""

from __future__ import annotations

from pathlib import Path

from dmlkit.assemble import resolve_checkpoint, run_split
from dmlkit.assemble.run_records import with_split_record
from dmlkit.config import load_config
from dmlkit.data.datasets.unreadable import dataset_paths
from dmlkit.search.image_list import ImageList

__all__ = ["split_images"]


def split_images(run_or_checkpoint: str | Path, split: str) -> ImageList:
    """Paths, labels and class names of split ``split`` of the run's dataset, in dataset order."""
    folder, _ = resolve_checkpoint(run_or_checkpoint)
    cfg = with_split_record(load_config(folder.config, stored=True), folder.path)
    dataset = run_split(cfg, split)
    paths = dataset_paths(dataset)
    if paths is None:
        raise ValueError(
            f"dataset '{cfg.data.name}' of run '{folder.path}' is not read from image files, so its {split} split has "
            "no files to embed; pass --images DIR (a folder of images or a list file) instead"
        )
    return ImageList([Path(p) for p in paths], [int(y) for y in dataset.labels], list(dataset.class_names))
