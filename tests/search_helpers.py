"""Shared fixtures of the search / export / serve tests: one tiny trained run and a folder of glyph PNGs.

``tiny_search_run(tmp_path_factory)`` trains the run once per test session (the folder lives under
pytest's session temp dir and is reused by every module that asks); ``write_glyph_folder`` saves
glyph test images as ``ROOT/<class>/<n>.png``, the layout ``dmlkit embed`` reads labels from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from tests_helpers import TINY_OVERRIDES

SEARCH_OVERRIDES = TINY_OVERRIDES + ["train.max_steps=4", "train.val_every=4", "eval.clustering=false"]


def tiny_search_run(tmp_path_factory) -> Path:
    """A finished tiny glyphs run (16-d embeddings), trained once per session."""
    from dmlkit.config import load_config
    from dmlkit.assemble import build_trainer

    run_dir = tmp_path_factory.getbasetemp() / "search-tiny-run"
    if not (run_dir / "best.pt").is_file():
        cfg = load_config("configs/quickstart.yaml", SEARCH_OVERRIDES)
        build_trainer(cfg, run_dir, quiet=True).fit()
    return run_dir


def write_glyph_folder(root: Path, max_classes: int = 4, split: str = "test") -> tuple[Path, object]:
    """Glyph images of ``split`` as PNG files ``root/<class>/<index>.png``; returns ``(root, dataset)``."""
    from dmlkit.data import create_dataset

    dataset = create_dataset("glyphs", split, max_classes=max_classes)
    for i in range(len(dataset)):
        label = int(dataset.labels[i])
        folder = root / f"c{label:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.asarray(dataset.images[i]), mode="L").save(folder / f"{i:04d}.png")
    return root, dataset
