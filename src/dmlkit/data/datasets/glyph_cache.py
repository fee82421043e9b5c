"""The glyph table's ``.npz`` cache: where it lies, writing and reading it, and rendering on a miss.

File: ``<root>/glyphs-v<GLYPHS_VERSION>-<size>px.npz``, ``root`` defaulting to
``$DMLKIT_CACHE/glyphs`` or ``~/.cache/dmlkit/glyphs``. Besides every ``GlyphTable`` field it
stores the version, the selection rule (``GLYPHS_RULE``) and the fonts' fingerprint; a file whose
version, rule, size or fonts do not match, or that cannot be read, is rendered again
(``build_glyph_table``) and replaced atomically.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from dmlkit.data.cache import dataset_dir, save_npz_atomic
from dmlkit.data.datasets.glyph_render import font_paths, fonts_fingerprint
from dmlkit.data.datasets.glyph_select import GLYPHS_RULE, REFERENCE_SIZE
from dmlkit.data.datasets.glyph_table import GlyphTable, build_glyph_table
from dmlkit.validation import is_int

__all__ = [
    "GLYPHS_VERSION",
    "cached_sizes",
    "cached_table_sizes",
    "glyphs_cache_path",
    "load_glyph_table",
    "prepare_glyphs",
    "read_table",
    "table_cache_path",
    "table_arrays",
]

# Part of the cache file name and of the pretrained backbones' data fingerprint: bump it when the
# rendering changes the images of an unchanged rule.
GLYPHS_VERSION = "2"


def table_cache_path(name: str, version: str, image_size: int, root: str | Path | None = None) -> Path:
    """Where dataset ``name``'s table of ``image_size`` px lies: ``<root>/<name>-v<version>-<size>px.npz``."""
    return dataset_dir(name, root) / f"{name}-v{version}-{int(image_size)}px.npz"


def cached_table_sizes(name: str, version: str, root: str | Path | None = None) -> list[int]:
    """The image sizes (ascending) whose tables of dataset ``name`` at ``version`` lie in its cache folder."""
    files = dataset_dir(name, root).glob(f"{name}-v{version}-*px.npz")
    return sorted(int(p.stem.rsplit("-", 1)[-1].removesuffix("px")) for p in files)


def glyphs_cache_path(image_size: int = REFERENCE_SIZE, root: str | Path | None = None) -> Path:
    """Where the table of ``image_size`` px lies: ``<root>/glyphs-v<version>-<size>px.npz``."""
    return table_cache_path("glyphs", GLYPHS_VERSION, image_size, root)


def cached_sizes(root: str | Path | None = None) -> list[int]:
    """The image sizes (ascending) whose tables of this version lie in the cache folder."""
    return cached_table_sizes("glyphs", GLYPHS_VERSION, root)


def load_glyph_table(
    root: str | Path | None = None, image_size: int = REFERENCE_SIZE, force: bool = False
) -> GlyphTable:
    """The glyph table of ``image_size`` px, from the cache or rendered (and cached) now."""
    image_size = _check_size(image_size)
    fingerprint = fonts_fingerprint(font_paths())
    path = glyphs_cache_path(image_size, root)
    table = None if force else _load(path, image_size, fingerprint)
    if table is not None:
        return table
    reference = None
    if image_size != REFERENCE_SIZE:
        reference = load_glyph_table(root, REFERENCE_SIZE, force=force)
    table = build_glyph_table(image_size, reference)
    _save(table, path, fingerprint)
    return table


def prepare_glyphs(root: str | Path | None = None, image_size: int = REFERENCE_SIZE, force: bool = False) -> Path:
    """Render and cache the glyphs at ``image_size`` px (if not cached yet); return the cache file."""
    load_glyph_table(root, image_size, force=force)
    return glyphs_cache_path(image_size, root)


def _check_size(image_size: int) -> int:
    if not is_int(image_size) or image_size < 8:
        raise ValueError(f"image_size must be an int >= 8, got {image_size!r}")
    return image_size


def _header(table: GlyphTable, fingerprint: str) -> dict[str, np.ndarray]:
    """What a cache file must match to be used, and the table's scalar fields."""
    return {
        "version": np.array(GLYPHS_VERSION),
        "rule": np.array(GLYPHS_RULE),
        "fingerprint": np.array(fingerprint),
        "image_size": np.array(table.image_size),
        "render_seconds": np.array(table.render_seconds),
    }


def table_arrays(table: GlyphTable, header: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``header`` followed by every ``GlyphTable`` field as an array: what a table's ``.npz`` holds."""
    arrays = dict(header)
    for f in dataclasses.fields(GlyphTable):
        arrays.setdefault(f.name, np.asarray(getattr(table, f.name)))
    return arrays


def read_table(z: Any) -> GlyphTable:
    """The ``GlyphTable`` stored in an open ``.npz`` ``z`` (written from ``table_arrays``)."""
    fields = dataclasses.fields(GlyphTable)
    return GlyphTable(**{f.name: _from_npz(f.name, str(f.type), z[f.name]) for f in fields})


def _save(table: GlyphTable, path: Path, fingerprint: str) -> None:
    save_npz_atomic(path, table_arrays(table, _header(table, fingerprint)))


def _load(path: Path, image_size: int, fingerprint: str) -> GlyphTable | None:
    """The cached table, or ``None`` if the file is missing, unreadable or stale."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if (
                str(z["version"]) != GLYPHS_VERSION
                or "rule" not in z.files
                or str(z["rule"]) != GLYPHS_RULE
                or str(z["fingerprint"]) != fingerprint
                or int(z["image_size"]) != image_size
            ):
                return None
            return read_table(z)
    except (OSError, ValueError, KeyError, EOFError) as err:  # corrupt or foreign file: rebuild
        warnings.warn(f"ignoring unreadable glyph cache {path} ({err}); rendering again", stacklevel=3)
        return None


def _from_npz(name: str, annotation: str, value: np.ndarray) -> Any:
    """Field ``name`` of a ``GlyphTable`` from its stored array, as the type its ``annotation`` names."""
    if name == "images":
        return value  # uint8, as stored
    if annotation == "np.ndarray":
        return value.astype(np.int64)
    if annotation == "list[str]":
        return [str(s) for s in value]
    if annotation == "int":
        return int(value)
    if annotation == "float":
        return float(value)
    raise TypeError(
        f"GlyphTable field '{name}' has type {annotation}, which the glyph cache cannot read; "
        "add the type to glyph_cache._from_npz"
    )
