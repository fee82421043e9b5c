"""Index folders from embedding files, and queries that return described neighbours.

``build_index_from_embeddings`` turns the output of ``dmlkit embed`` (``embeddings.npy`` and its
``.meta.json``) into an index folder whose ``meta.json`` keeps, per row, the image path and label,
and the run that embedded them (so a query image can be embedded the same way later).
``neighbours`` answers one query with ``Neighbour`` records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dmlkit.extras import require
from dmlkit.search.embed_images import load_embeddings
from dmlkit.search.index import IndexConfig, SearchIndex

__all__ = [
    "Neighbour",
    "build_index_from_embeddings",
    "neighbours",
    "print_neighbours",
    "row_description",
    "search_index_folder",
]

KEPT_META = ("run_dir", "checkpoint", "normalize", "paths", "labels", "class_names")


@dataclass
class Neighbour:
    """One search result: its rank (1 = nearest), row id in the index, Euclidean distance, and what the row is."""

    rank: int
    id: int
    distance: float
    path: str | None = None
    label: int | None = None
    class_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_index_from_embeddings(
    embeddings: str | Path,
    out: str | Path,
    config: IndexConfig | None = None,
    recall_k: int = 10,
    recall_sample: int = 1000,
    seed: int = 0,
) -> SearchIndex:
    """Index the rows of an embeddings file into folder ``out``; approximate modes report recall (see ``index``)."""
    x, meta = load_embeddings(embeddings)
    kept = {key: meta[key] for key in KEPT_META if meta.get(key) is not None}
    kept["embeddings"] = str(Path(embeddings).resolve())
    index = SearchIndex.build(x, config, kept, recall_k=recall_k, recall_sample=recall_sample, seed=seed)
    index.save(out)
    return index


def row_description(index: SearchIndex, row: int) -> dict[str, Any]:
    """Path, label and class name of row ``row`` where the index knows them."""
    meta = index.meta
    paths, labels, names = meta.get("paths"), meta.get("labels"), meta.get("class_names")
    label = int(labels[row]) if labels else None
    return {
        "path": paths[row] if paths else None,
        "label": label,
        "class_name": names[label] if names and label is not None else None,
    }


def neighbours(index: SearchIndex, query: np.ndarray, k: int = 10) -> list[Neighbour]:
    """The ``k`` nearest rows to one query embedding ``(d,)`` (or ``(1, d)``), nearest first."""
    q = np.asarray(query, dtype=np.float32)
    if q.ndim == 2 and q.shape[0] == 1:
        q = q[0]
    if q.ndim != 1:
        raise ValueError(
            f"one query embedding of shape (d,) is expected, got {q.shape}; search several with SearchIndex.search"
        )
    distances, ids = index.search(q, k)
    out = []
    for rank, (dist, row) in enumerate(zip(distances[0], ids[0]), 1):
        if row < 0:  # approximate modes may return fewer than k
            continue
        out.append(Neighbour(rank, int(row), float(dist), **row_description(index, int(row))))
    return out


def search_index_folder(
    index_dir: str | Path,
    image: str | Path | None = None,
    embedding: str | Path | None = None,
    k: int = 10,
    run: str | Path | None = None,
) -> tuple[SearchIndex, list[Neighbour]]:
    """Open an index folder and answer one query given as an image file or a ``.npy`` embedding.

    An image is embedded with ``run`` (default: the run recorded in the index when it was built), which
    may also be a model file of ``dmlkit export``: its own metadata then gives the preprocessing.
    """
    if (image is None) == (embedding is None):
        raise ValueError("give exactly one query: --image FILE or --embedding FILE")
    index = SearchIndex.load(index_dir)
    if embedding is not None:
        path = Path(embedding)
        if not path.is_file():
            raise ValueError(f"embedding file '{path}' does not exist; pass a .npy of shape (d,) or (1, d)")
        return index, neighbours(index, np.load(path), k)
    from dmlkit.search.exported_model import load_query_model

    run_dir = run or index.meta.get("run_dir")
    if run_dir is None:
        raise ValueError("this index does not record the run that embedded it; pass --run RUN_DIR to embed the image")
    model = load_query_model(run_dir)  # a run folder, or a file of dmlkit export with its preprocessing
    query = model.embed(model.preprocess.load(image)[None]).numpy()
    return index, neighbours(index, query, k)


def print_neighbours(index: SearchIndex, results: list[Neighbour]) -> None:
    """The neighbours as a rich table on stdout."""
    require("rich", "search", "dmlkit search's table")
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"nearest neighbours ({index.describe()})")
    for column, justify in [
        ("rank", "right"),
        ("distance", "right"),
        ("id", "right"),
        ("class", "left"),
        ("path", "left"),
    ]:
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for n in results:
        label = n.class_name if n.class_name is not None else ("" if n.label is None else str(n.label))
        table.add_row(str(n.rank), f"{n.distance:.4f}", str(n.id), label, n.path or "")
    Console().print(table)
