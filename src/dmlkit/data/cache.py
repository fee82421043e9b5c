"""Where dmlkit keeps prepared data, and atomic writes into it.

The cache root is ``$DMLKIT_CACHE`` when set, else ``~/.cache/dmlkit``; each
dataset keeps its files in a sub-folder named after it (``<root>/glyphs``),
unless the caller passes its own folder (the ``root`` argument of the
datasets). Files are written to a temporary name in the same folder and moved
into place with ``os.replace``, so a reader never sees half a file, and two
processes preparing the same data at once both end with a complete one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from dmlkit.io import atomic_write


def cache_root() -> Path:
    """dmlkit's cache folder: ``$DMLKIT_CACHE`` if set (and non-empty), else ``~/.cache/dmlkit``."""
    env = os.environ.get("DMLKIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dmlkit"


def dataset_dir(name: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of dataset ``name``: ``root`` itself when given, else ``cache_root() / name``."""
    return Path(root).expanduser() if root is not None else cache_root() / name


def save_npz_atomic(path: Path, arrays: dict[str, Any], compress: bool = True) -> None:
    """Write ``arrays`` as an ``.npz`` at ``path`` atomically (see ``dmlkit.io.atomic_write``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:
        (np.savez_compressed if compress else np.savez)(f, **arrays)
