"""Approximate nearest-neighbour indexes for evaluation: parameters from the data size, search tuned to a recall.

Used by :func:`dmlkit.evaluation.streaming.retrieval_metrics_from_file` (``approx="ivf"|"hnsw"|"ivf_sq8"``)
and by ``dmlkit bench retrieval --approx``. Distances are squared Euclidean (faiss ``METRIC_L2``).

Build parameters (:func:`plan_index`), from the number of rows ``n``; any of them can be given instead:

- ``ivf``: ``IndexIVFFlat`` with ``nlist = min(n // 39, round(sqrt(n)))`` k-means lists (at least 1),
  trained on a seeded sample of ``train_size = 40 nlist`` rows (faiss warns below 39 per list). Memory:
  the float32 rows (``4 n d`` bytes) plus 8-byte ids.
- ``ivf_sq8``: the same lists holding rows quantised to 8 bits per dimension (``IndexIVFScalarQuantizer``,
  ``QT_8bit``): a quarter of the memory. Its distances carry the quantisation error, which exceeds the
  gap between near neighbours of real embeddings, so by default ``rerank = 4``: ``4 (k + 1)`` candidates
  are fetched and re-ranked by their exact distance to the query, read from the rows on disk (the
  memory-mapped file, in chunks of 256 queries); ``rerank = 1`` turns it off.
- ``hnsw``: ``IndexHNSWFlat`` with ``M = 32`` links per node, ``efConstruction = 40``. Memory: the rows
  plus about ``8 M n`` bytes of links.

Search parameter (``nprobe`` lists, or ``efSearch`` candidates), chosen from the data unless given
(:func:`tune_search`): the smallest value of the ladder ``1, 2, 3, 4, 6, 8, 11, 16, ..., nlist`` (IVF,
steps of about sqrt(2)) or ``16, 23, 32, 45, ..., 2048`` (HNSW) whose recall@1 on a seeded tuning sample
of queries reaches ``target_recall`` (default 0.95) with 95% confidence (one-sided Wilson lower bound:
on 1000 tuning queries a measured 0.962 is needed), or the last value when none does. Recall@1 (:func:`recall_at_1`)
is the fraction of queries whose approximate nearest neighbour (the query itself left out) lies at the
exact nearest distance: ``d(q, returned row) <= d_exact (1 + 1e-5) + 1e-12`` (the returned row's distance
recomputed in float64), so an equally near neighbour counts.
The recall reported with the metrics is measured afterwards on a second sample, disjoint from the
tuning sample when ``n`` allows, so it is not the figure the choice was made on.

How far approximate search pays depends on the data's intrinsic dimension, not on ``d``: on embeddings
of a trained model (a few tens of effective dimensions) a few percent of the lists reach 0.95; on points
spread uniformly over a 128-dimensional sphere no index does much better than scanning everything.
HNSW can also fail where IVF does not: on a gallery of many near-duplicates (1M rows grown from 5k
embeddings) its recall@1 stayed below 0.83 at every ``efSearch``. Tuning reports both cases
(``approx_target_reached``); measured figures: ``docs/large_galleries.md``.

A saved index (:func:`load_index`: a faiss file, or a folder of ``dmlkit index build`` holding
``index.faiss``) must hold exactly the rows being evaluated, in order: its dimension and count are checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from dmlkit.extras import require
from dmlkit.validation import is_int

__all__ = [
    "APPROX_METHODS",
    "IndexPlan",
    "TunePoint",
    "default_nlist",
    "plan_index",
    "build_index",
    "load_index",
    "recall_at_1",
    "tune_search",
    "wilson_lower",
]

APPROX_METHODS = ("ivf", "ivf_sq8", "hnsw")
_IVF = ("ivf", "ivf_sq8")
_PARAMS = {
    "ivf": ("nlist", "nprobe", "train_size"),
    "ivf_sq8": ("nlist", "nprobe", "train_size", "rerank"),
    "hnsw": ("M", "efConstruction", "efSearch"),
}
_HNSW_LADDER = (16, 23, 32, 45, 64, 91, 128, 181, 256, 362, 512, 724, 1024, 1448, 2048)
#: Relative tolerance of "at the exact nearest distance" (float32 distances of faiss vs the exact search).
RECALL_RTOL = 1e-5


@dataclass(frozen=True)
class IndexPlan:
    """What to build and how to search it. ``search_param`` is ``nprobe`` (IVF) or ``efSearch`` (HNSW);
    ``None`` means: tune it (:func:`tune_search`)."""

    method: str
    nlist: int = 0
    train_size: int = 0
    M: int = 0
    ef_construction: int = 0
    search_param: int | None = None
    rerank: int = 0

    @property
    def search_name(self) -> str:
        return "nprobe" if self.method in _IVF else "efSearch"

    def describe(self) -> str:
        if self.method in _IVF:
            return f"{self.method} nlist={self.nlist}"
        return f"hnsw M={self.M} efConstruction={self.ef_construction}"


def _positive_int(name: str, value: Any) -> int:
    if not is_int(value, numpy=True) or value < 1:
        raise ValueError(f"approx_params['{name}'] must be a positive integer; got {value!r}")
    return int(value)


def default_nlist(n: int) -> int:
    """IVF lists for ``n`` rows: ``min(n // 39, round(sqrt(n)))``, at least 1 (faiss wants 39 training rows a list);
    the one rule of the approximate evaluation and of ``dmlkit index build``."""
    return max(1, min(int(n) // 39, round(math.sqrt(int(n)))))


def plan_index(n: int, method: str, params: Mapping[str, Any] | None = None) -> IndexPlan:
    """Build parameters of ``method`` for ``n`` rows (module docstring); ``params`` overrides them."""
    if method not in APPROX_METHODS:
        raise ValueError(f"approx must be None or one of {APPROX_METHODS}; got {method!r}")
    params = dict(params or {})
    unknown = sorted(set(params) - set(_PARAMS[method]))
    if unknown:
        raise ValueError(
            f"approx_params {unknown} do not apply to {method!r}; its parameters are {list(_PARAMS[method])}"
        )
    values = {k: _positive_int(k, v) for k, v in params.items()}
    if method in _IVF:
        nlist = values.get("nlist", default_nlist(n))
        if nlist > n:
            raise ValueError(f"approx_params['nlist'] = {nlist} exceeds the {n} rows; choose at most sqrt(n) lists")
        train = min(n, values.get("train_size", 40 * nlist))
        if train < nlist:
            raise ValueError(
                f"approx_params['train_size'] = {train} is below nlist = {nlist}; train on at least one row per list"
            )
        probe = values.get("nprobe")
        rerank = values.get("rerank", 4) if method == "ivf_sq8" else 0
        return IndexPlan(
            method,
            nlist=nlist,
            train_size=train,
            search_param=None if probe is None else min(probe, nlist),
            rerank=rerank if rerank > 1 else 0,
        )
    return IndexPlan(
        method,
        M=values.get("M", 32),
        ef_construction=values.get("efConstruction", 40),
        search_param=values.get("efSearch"),
    )


def build_index(plan: IndexPlan, rows: Callable[[int, int], np.ndarray], n: int, d: int, block: int, seed: int) -> Any:
    """A faiss index of the ``n`` rows given block by block by ``rows(start, stop)`` (float32, C order)."""
    faiss = require("faiss", "faiss", "approximate search (faiss indexes)")

    if plan.method in _IVF:
        quantizer = faiss.IndexFlatL2(d)
        if plan.method == "ivf":
            index = faiss.IndexIVFFlat(quantizer, d, plan.nlist, faiss.METRIC_L2)
        else:
            index = faiss.IndexIVFScalarQuantizer(
                quantizer, d, plan.nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_L2
            )
        index.cp.seed = int(seed)
        index.cp.min_points_per_centroid = 1  # the train_size rule above; no warning noise on small data
        picks = np.sort(np.random.default_rng(seed).choice(n, size=plan.train_size, replace=False))
        index.train(_gather(rows, picks, block))  # faiss keeps the quantizer alive with the index
    else:
        index = faiss.IndexHNSWFlat(d, plan.M)
        index.hnsw.efConstruction = plan.ef_construction
    for s in range(0, n, block):
        index.add(rows(s, min(n, s + block)))
    if plan.search_param is not None:
        set_search_param(index, plan.search_param)
    return index


def _gather(rows: Callable[[int, int], np.ndarray], picks: np.ndarray, block: int) -> np.ndarray:
    """The sorted rows ``picks``, read block by block (one contiguous read per block of the file)."""
    out = []
    for s in range(0, int(picks[-1]) + 1, block):
        inside = picks[(picks >= s) & (picks < s + block)]
        if inside.size:
            chunk = rows(int(inside[0]), int(inside[-1]) + 1)
            out.append(chunk[inside - inside[0]])
    return np.ascontiguousarray(np.concatenate(out))


def load_index(path: str | Path, n: int, d: int) -> Any:
    """A saved faiss index for ``n`` rows of dimension ``d``: a file, or a folder holding ``index.faiss``."""
    faiss = require("faiss", "faiss", "approximate search (faiss indexes)")

    path = Path(path)
    file = path / "index.faiss" if path.is_dir() else path
    if not file.is_file():
        raise ValueError(
            f"index '{path}' does not exist; build one with `dmlkit index build EMBEDDINGS.npy --out DIR` "
            "or leave index_file unset to build it here"
        )
    try:
        index = faiss.read_index(str(file))
    except RuntimeError as err:
        raise ValueError(
            f"'{file}' is not a faiss index ({str(err).splitlines()[0]}); rebuild it with dmlkit index build"
        ) from err
    if index.d != d or index.ntotal != n:
        raise ValueError(
            f"index '{file}' holds {index.ntotal} vectors of dimension {index.d} but the embeddings are {n} x {d}: "
            "it was built from other embeddings; rebuild it from these (dmlkit index build EMBEDDINGS.npy --out DIR) "
            "or pass the embeddings it was built from"
        )
    return index


def _method_of(index: Any) -> str:
    faiss = require("faiss", "faiss", "approximate search (faiss indexes)")

    if isinstance(index, faiss.IndexHNSW):
        return "hnsw"
    try:
        faiss.extract_index_ivf(index)
        return "ivf"
    except RuntimeError:
        return "exact"


def search_param_name(index: Any) -> str:
    """``"efSearch"`` for an HNSW index, ``"nprobe"`` otherwise."""
    return "efSearch" if _method_of(index) == "hnsw" else "nprobe"


def search_ladder(index: Any) -> list[int]:
    """The values of the search parameter that :func:`tune_search` tries, cheapest first."""
    faiss = require("faiss", "faiss", "approximate search (faiss indexes)")

    method = _method_of(index)
    if method == "hnsw":
        return list(_HNSW_LADDER)
    if method == "exact":
        return [1]
    nlist = int(faiss.extract_index_ivf(index).nlist)
    steps = sorted({round(2 ** (i / 2)) for i in range(2 * nlist.bit_length())})  # factors of sqrt(2)
    return [v for v in steps if v < nlist] + [nlist]


def set_search_param(index: Any, value: int) -> None:
    """Set ``nprobe`` (IVF) or ``efSearch`` (HNSW); nothing for an exact index."""
    faiss = require("faiss", "faiss", "approximate search (faiss indexes)")

    method = _method_of(index)
    if method == "hnsw":
        index.hnsw.efSearch = int(value)
    elif method == "ivf":
        ivf = faiss.extract_index_ivf(index)
        ivf.nprobe = min(int(value), int(ivf.nlist))


def search_neighbours(
    index: Any, queries: np.ndarray, query_ids: np.ndarray, k: int, gallery: np.ndarray | None = None, rerank: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``k`` nearest rows of each query other than itself: ``(squared distances, ids)``, missing ones ``(inf, -1)``.

    With ``rerank > 1`` and the indexed rows ``gallery``, ``rerank (k + 1)`` candidates are fetched and
    ordered by their exact float64 distance to the query (ties by id) instead of the index's estimate.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if rerank > 1 and gallery is not None:
        _, cand = index.search(queries, rerank * (k + 1))
        dist = np.full(cand.shape, np.inf)
        for s in range(0, len(queries), 256):
            c = cand[s : s + 256]
            ok = (c >= 0) & (c != query_ids[s : s + 256, None])
            uniq, inverse = np.unique(c[ok], return_inverse=True)
            rows = np.asarray(gallery[uniq], dtype=np.float64)[inverse]
            q = np.repeat(queries[s : s + 256].astype(np.float64), ok.sum(axis=1), axis=0)
            block = dist[s : s + 256]
            block[ok] = ((q - rows) ** 2).sum(axis=1)
        idx = cand
    else:
        dist, idx = index.search(queries, k + 1)
    dist = np.where((idx == query_ids[:, None]) | (idx < 0), np.inf, dist)
    order = np.lexsort((idx, dist), axis=1)[:, :k]  # by distance, ties by id
    dist, idx = np.take_along_axis(dist, order, 1), np.take_along_axis(idx, order, 1)
    return dist, np.where(np.isfinite(dist), idx, -1)


def recall_at_1(
    index: Any, gallery: np.ndarray, queries: np.ndarray, query_ids: np.ndarray, exact_d2: np.ndarray, rerank: int = 0
) -> float:
    """Fraction of queries whose approximate nearest other row is at the exact nearest squared distance ``exact_d2``.

    The distance of the row the index returns is recomputed in float64 from ``gallery`` (the indexed rows,
    any array indexable by row ids, e.g. a memmap), so quantised indexes (``ivf_sq8``) are judged by the
    true distance of what they return, not by their own estimate of it.
    """
    _, ids = search_neighbours(index, queries, query_ids, 1, gallery, rerank)
    found = ids[:, 0]
    ok = found >= 0
    rows = np.asarray(gallery[np.sort(found[ok])], dtype=np.float64)[np.argsort(np.argsort(found[ok]))]
    dist = np.full(len(found), np.inf)
    dist[ok] = ((np.asarray(queries, dtype=np.float64)[ok] - rows) ** 2).sum(axis=1)
    return float(np.mean(dist <= exact_d2 * (1 + RECALL_RTOL) + 1e-12))


def wilson_lower(p: float, m: int, confidence: float = 0.95) -> float:
    """One-sided lower confidence bound of a proportion ``p`` observed on ``m`` trials (Wilson score interval)."""
    z = NormalDist().inv_cdf(confidence)
    centre = p + z * z / (2 * m)
    spread = z * math.sqrt(p * (1 - p) / m + z * z / (4 * m * m))
    return (centre - spread) / (1 + z * z / m)


@dataclass(frozen=True)
class TunePoint:
    """One value of the search parameter, its recall@1 on the tuning sample and that recall's lower bound."""

    value: int
    recall: float
    lower: float


def tune_search(
    index: Any,
    gallery: np.ndarray,
    queries: np.ndarray,
    query_ids: np.ndarray,
    exact_d2: np.ndarray,
    target_recall: float = 0.95,
    confidence: float = 0.95,
    rerank: int = 0,
) -> tuple[int, list[TunePoint]]:
    """The cheapest ladder value whose recall@1 reaches ``target_recall`` with ``confidence``, and the curve tried.

    "Reaches" means that the one-sided Wilson lower bound (:func:`wilson_lower`) of the recall measured on
    the ``m`` tuning queries is at least the target, so that the recall on other queries is below the target
    with probability about ``1 - confidence`` (at ``m = 1000``, a measured 0.962 is needed for 0.95).
    When no value reaches it, the last one. The index is left set to the chosen value.
    """
    if not 0.0 < float(target_recall) <= 1.0:
        raise ValueError(f"target_recall must be in (0, 1]; got {target_recall!r} (0.95 is usual)")
    if not 0.5 <= float(confidence) < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1); got {confidence!r} (0.95 is usual)")
    curve: list[TunePoint] = []
    for value in search_ladder(index):
        set_search_param(index, value)
        recall = recall_at_1(index, gallery, queries, query_ids, exact_d2, rerank)
        curve.append(TunePoint(value, recall, wilson_lower(recall, len(queries), confidence)))
        if curve[-1].lower >= target_recall or recall == 1.0:
            break
    return curve[-1].value, curve
