"""``SearchIndex``: nearest-neighbour search over embeddings with faiss, exact or approximate.

Distances are Euclidean (the metric DML models are trained for); faiss works with squared L2 and
the square root is taken on the way out. Modes:

- ``exact``: ``IndexFlatL2``, brute force;
- ``ivf``: ``IndexIVFFlat`` with ``nlist`` k-means cells (trained on the data added first), searching
  ``nprobe`` cells per query;
- ``hnsw``: ``IndexHNSWFlat`` with ``M`` links per node, ``ef_search`` candidates per query.

Unless given, ``nlist`` follows the data's size and the search parameter is tuned on it, by the rules of
the approximate evaluation (``evaluation.approx_index``): ``default_nlist(n)`` lists, and the cheapest
``nprobe`` / ``efSearch`` of its ladder whose leave-one-out recall@1 on a sample of the rows reaches 0.95
(Wilson lower bound at 95% confidence); the tuning curve is stored in ``meta.json`` under ``tuned``.

Approximate modes are measured when built (``SearchIndex.build``): ``recall@k`` = the mean fraction
of a query's exact ``k`` nearest neighbours that the index returns among its ``k``, over a sample of
the indexed vectors used as queries, each query's own row left out of both lists (leave-one-out, so
finding the query itself does not count). The figure is stored with the index and reported.

An index folder holds ``index.faiss`` and ``meta.json`` (mode, parameters, measured recall, and
what the rows are: image paths, labels, the run that embedded them).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dmlkit.evaluation.approx_index import default_nlist, tune_search
from dmlkit.extras import require
from dmlkit.io import atomic_write, remove_stale_temporaries, write_json_atomic
from dmlkit.validation import is_int

__all__ = ["IndexConfig", "MODES", "SearchIndex", "recall_at_k"]

MODES = ("exact", "ivf", "hnsw")
CLI_FLAGS = {
    "nlist": "--ivf N",
    "nprobe": "--nprobe",
    "m": "--hnsw M",
    "ef_search": "--ef-search",
}  # of dmlkit index build
FORMAT = "dmlkit-index/1"
TUNED = ("nlist", "nprobe", "ef_search")  # chosen from the data when left None
TARGET_RECALL = 0.95  # recall@1 that a tuned search parameter reaches (Wilson lower bound, 95% confidence)


def _faiss() -> Any:
    """The faiss module (imported when an index is made or read: ``dmlkit.search`` imports without it)."""
    return require("faiss", "search", "a search index (dmlkit index build, search, serve)")


@dataclass
class IndexConfig:
    """Mode and parameters of a ``SearchIndex``."""

    mode: str = "exact"
    nlist: int | None = None  # ivf: number of k-means cells; None: default_nlist(n) of the data, as the evaluation
    nprobe: int | None = None  # ivf: cells visited per query; None: tuned on the data (SearchIndex.build)
    m: int = 32  # hnsw: links per node
    ef_construction: int = 80  # hnsw: candidates while building
    ef_search: int | None = None  # hnsw: candidates per query; None: tuned on the data (SearchIndex.build)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown index mode '{self.mode}'; valid modes are: {', '.join(MODES)}")
        for name in ("nlist", "nprobe", "m", "ef_construction", "ef_search"):
            value = getattr(self, name)
            if value is None and name in TUNED:
                continue
            if not is_int(value) or value < 1:
                flag = f" ({CLI_FLAGS[name]})" if name in CLI_FLAGS else ""
                raise ValueError(f"index {name}{flag} must be a positive integer, got {value!r}")

    @property
    def search_param(self) -> str | None:
        """The field that trades accuracy for speed at query time: ``nprobe`` (IVF), ``ef_search`` (HNSW)."""
        return {"ivf": "nprobe", "hnsw": "ef_search"}.get(self.mode)


def _as_matrix(x: np.ndarray, dim: int | None, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2:
        raise ValueError(f"{what} must be (N, d) or (d,), got shape {x.shape}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"{what} have dimension {x.shape[1]} but the index holds {dim}-dimensional embeddings")
    if not np.isfinite(x).all():
        raise ValueError(f"{what} contain NaN or Inf; re-embed the images")
    return np.ascontiguousarray(x)


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean over rows of ``|found_i ∩ truth_i| / |truth_i|`` (ids ``-1`` in ``found`` never match)."""
    if found.shape[0] != truth.shape[0] or truth.shape[0] == 0:
        raise ValueError(f"recall needs matching non-empty rows, got {found.shape} and {truth.shape}")
    hits = [len(set(f.tolist()) & set(t.tolist())) / len(t) for f, t in zip(found, truth)]
    return float(np.mean(hits))


@dataclass
class SearchIndex:
    """A faiss index plus what it indexes; see the module docstring."""

    dim: int
    config: IndexConfig = field(default_factory=IndexConfig)
    meta: dict[str, Any] = field(default_factory=dict)  # paths, labels, run_dir, recall, ...

    def __post_init__(self) -> None:
        if not is_int(self.dim) or self.dim < 1:
            raise ValueError(f"index dim must be a positive integer, got {self.dim!r}")
        self._index = self._new_index()

    # -------------------------------------------------------------- building
    def _new_index(self) -> Any:
        faiss = _faiss()
        c = self.config
        if c.mode == "exact":
            return faiss.IndexFlatL2(self.dim)
        if c.mode == "ivf":
            if c.nlist is None:
                raise ValueError("an IVF index needs nlist; SearchIndex.build chooses it from the data (default_nlist)")
            quantizer = faiss.IndexFlatL2(self.dim)
            index = faiss.IndexIVFFlat(quantizer, self.dim, c.nlist, faiss.METRIC_L2)
            self._quantizer = quantizer  # keep the Python object alive with the index
            index.nprobe = min(c.nprobe or 1, c.nlist)
            return index
        index = faiss.IndexHNSWFlat(self.dim, c.m)
        index.hnsw.efConstruction = c.ef_construction
        index.hnsw.efSearch = c.ef_search or 16
        return index

    @property
    def ntotal(self) -> int:
        return int(self._index.ntotal)

    def __len__(self) -> int:
        return self.ntotal

    def train(self, embeddings: np.ndarray, seed: int = 0) -> None:
        """Train the IVF cells on ``embeddings`` (at least ``nlist`` rows); a no-op for the other modes."""
        if self.config.mode != "ivf" or self._index.is_trained:
            return
        x = _as_matrix(embeddings, self.dim, "training embeddings")
        if x.shape[0] < self.config.nlist:
            raise ValueError(
                f"IVF with nlist={self.config.nlist} needs at least that many training embeddings, got {x.shape[0]}; "
                "choose a smaller --ivf N (about sqrt(number of embeddings) is usual)"
            )
        self._index.cp.seed = seed
        self._index.cp.min_points_per_centroid = 1  # small collections: no warning noise
        self._index.train(x)

    def add(self, embeddings: np.ndarray) -> None:
        """Append rows; their ids continue from ``len(self)``."""
        x = _as_matrix(embeddings, self.dim, "embeddings")
        if not self._index.is_trained:
            raise ValueError("this IVF index is not trained; call train(embeddings) first, or use SearchIndex.build")
        self._index.add(x)

    @classmethod
    def build(
        cls,
        embeddings: np.ndarray,
        config: IndexConfig | None = None,
        meta: dict[str, Any] | None = None,
        recall_k: int = 10,
        recall_sample: int = 1000,
        seed: int = 0,
    ) -> "SearchIndex":
        """Index ``embeddings``; approximate modes also measure ``recall@recall_k`` (see the module docstring)."""
        for name, value in (("recall_k (--recall-k)", recall_k), ("recall_sample (--recall-sample)", recall_sample)):
            if not is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r} (it sizes the recall measurement)")
        x = _as_matrix(embeddings, None, "embeddings")
        config = dataclasses.replace(config or IndexConfig())
        if config.mode == "ivf" and config.nlist is None:
            config.nlist = default_nlist(x.shape[0])
        index = cls(int(x.shape[1]), config, dict(meta or {}))
        index.train(x, seed=seed)
        index.add(x)
        param = config.search_param
        if param is not None and getattr(config, param) is None:
            if x.shape[0] > 1:
                index.meta["tuned"] = index.tune_search_param(x, recall_sample, seed)
            else:  # nothing to tune on: the cheapest setting
                setattr(config, param, 1 if param == "nprobe" else 16)
        if index.config.mode != "exact" and x.shape[0] > 1:
            index.meta["recall"] = index.measure_recall(x, recall_k, recall_sample, seed)
        return index

    def tune_search_param(self, embeddings: np.ndarray, sample: int = 1000, seed: int = 0) -> dict[str, Any]:
        """Set ``nprobe`` / ``efSearch`` to the cheapest value whose leave-one-out recall@1 on ``sample`` of the
        rows reaches ``TARGET_RECALL`` (``evaluation.approx_index.tune_search``, the evaluation's rule)."""
        faiss = _faiss()
        x = _as_matrix(embeddings, self.dim, "embeddings")
        rows = np.sort(np.random.default_rng(seed).choice(x.shape[0], size=min(sample, x.shape[0]), replace=False))
        exact = faiss.IndexFlatL2(self.dim)
        exact.add(x)
        d2, ids = exact.search(x[rows], 2)
        nearest_other = np.where(ids[:, 0] == rows, d2[:, 1], d2[:, 0])  # a duplicate row may come first
        value, curve = tune_search(self._index, x, x[rows], rows, nearest_other, target_recall=TARGET_RECALL)
        setattr(self.config, self.config.search_param, int(value))
        return {
            "param": self.config.search_param,
            "value": int(value),
            "target_recall_at_1": TARGET_RECALL,
            "curve": [[p.value, p.recall, p.lower] for p in curve],
            "queries": int(rows.size),
        }

    def measure_recall(self, embeddings: np.ndarray, k: int = 10, sample: int = 1000, seed: int = 0) -> dict[str, Any]:
        """Leave-one-out ``recall@k`` of this index against exact search on ``sample`` of its own rows."""
        faiss = _faiss()
        x = _as_matrix(embeddings, self.dim, "embeddings")
        n = x.shape[0]
        k = min(k, n - 1)
        rng = np.random.default_rng(seed)
        rows = np.sort(rng.choice(n, size=min(sample, n), replace=False))
        exact = faiss.IndexFlatL2(self.dim)
        exact.add(x)
        _, truth = exact.search(x[rows], k + 1)
        _, found = self._index.search(x[rows], k + 1)
        truth = np.stack([[j for j in t if j != r][:k] for t, r in zip(truth, rows)])
        found = np.stack([([j for j in f if j != r] + [-1])[:k] for f, r in zip(found, rows)])
        return {"k": int(k), "recall": recall_at_k(found, truth), "queries": int(rows.size)}

    # ------------------------------------------------------------- searching
    def search(self, queries: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """``(distances, ids)``, each ``(Q, k')`` with ``k' = min(k, len(self))``: Euclidean distances, ascending."""
        if not is_int(k) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if self.ntotal == 0:
            raise ValueError("the index is empty; add embeddings first")
        q = _as_matrix(queries, self.dim, "queries")
        squared, ids = self._index.search(q, min(k, self.ntotal))
        return np.sqrt(np.maximum(squared, 0.0)), ids

    def vector(self, row: int) -> np.ndarray:
        """The stored embedding of row ``row`` (``(d,)`` float32)."""
        if not is_int(row) or not 0 <= row < self.ntotal:
            raise ValueError(f"row must be an id in 0..{self.ntotal - 1}, got {row!r}")
        if self.config.mode == "ivf" and not getattr(self, "_direct_map", False):
            self._index.make_direct_map()
            self._direct_map = True
        return self._index.reconstruct(row)

    def describe(self) -> str:
        """One line: mode, parameters, size and measured recall."""
        c = self.config
        params = {
            "exact": "",
            "ivf": f" nlist={c.nlist} nprobe={c.nprobe}",
            "hnsw": f" M={c.m} efSearch={c.ef_search}",
        }[c.mode]
        text = f"{c.mode}{params}: {self.ntotal} x {self.dim}"
        if "recall" in self.meta:
            r = self.meta["recall"]
            text += f", recall@{r['k']} = {r['recall']:.4f} vs exact ({r['queries']} queries)"
        return text

    # ------------------------------------------------------------ persisting
    def save(self, folder: str | Path) -> Path:
        """Write ``index.faiss`` and ``meta.json`` into ``folder`` (created if needed)."""
        faiss = _faiss()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(folder, targets=["index.faiss", "meta.json"])  # of a build that was killed
        with atomic_write(folder / "index.faiss") as fh:
            faiss.write_index(self._index, faiss.PyCallbackIOWriter(fh.write))
        write_json_atomic(
            folder / "meta.json",
            {"format": FORMAT, "dim": self.dim, "count": self.ntotal, "config": asdict(self.config), **self.meta},
        )
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "SearchIndex":
        """Read an index folder written by ``save``."""
        faiss = _faiss()
        folder = Path(folder)
        meta_file, index_file = folder / "meta.json", folder / "index.faiss"
        if not (meta_file.is_file() and index_file.is_file()):
            raise ValueError(
                f"'{folder}' is not an index folder (needs index.faiss and meta.json); build one with dmlkit index build"
            )
        meta = json.loads(meta_file.read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(f"'{meta_file}' is not a {FORMAT} index description")
        config = IndexConfig(**meta.pop("config"))
        dim = int(meta.pop("dim"))
        meta.pop("format"), meta.pop("count", None)
        index = cls(dim, config, meta)
        index._index = faiss.read_index(str(index_file))
        if index._index.d != dim:
            raise ValueError(f"'{index_file}' holds {index._index.d}-dimensional vectors but meta.json says {dim}")
        if config.mode == "ivf":
            index._index.nprobe = min(config.nprobe, config.nlist)
        elif config.mode == "hnsw":
            index._index.hnsw.efSearch = config.ef_search
        return index

    def set_search_params(self, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Change the query-time accuracy / speed trade-off (IVF ``nprobe``, HNSW ``efSearch``)."""
        if nprobe is not None and self.config.mode == "ivf":
            self.config.nprobe = nprobe
            self._index.nprobe = min(nprobe, self.config.nlist)
        if ef_search is not None and self.config.mode == "hnsw":
            self.config.ef_search = ef_search
            self._index.hnsw.efSearch = ef_search
