"""Benchmark: recall@1 / search time / build time / memory of approximate evaluation, against exact search.

``dmlkit bench retrieval --approx`` (also ``dmlkit bench retrieval_tradeoff``) prints a table and writes a
PNG plot (``--plot``) so that a user can pick an index for a large gallery.

Data: ``n`` x ``dim`` float32 unit vectors written block by block to a temporary ``.npy`` file, labels
uniform over ``n / per_class`` classes, from ``numpy.random.default_rng(seed)``:

* ``--data isotropic``: class centre plus noise of norm 1.5 in all ``dim`` directions
  (``benchmarks.retrieval_large.make_file``): points spread almost uniformly over the sphere, the
  hardest case for any index (intrinsic dimension ``dim``);
* ``--data latent`` (``--latent-dim L``, default 16): the same model in an ``L``-dimensional subspace
  (random orthonormal basis) plus ambient noise of 0.02 per coordinate, like the embeddings of a trained
  model, whose effective dimension is a few tens;
* ``--data tiled --source EMB.npy --source-labels LABELS.npy``: real embeddings (e.g. a run's test set,
  ``dmlkit.assemble.embed_run``) grown to ``n`` rows: each row mixes two random embeddings of one class
  (``lam a + (1 - lam) b``, ``lam ~ U(0, 1)``) plus Gaussian noise of norm half the median
  nearest-neighbour distance of the source, normalised. Labels are the source class split at random
  into groups of about ``per_class`` rows (so ``K`` stays small): P@1 on such data says nothing; recall
  against exact search and the times do.

Measured, in this process, on the memory-mapped file, with the threads torch and faiss are given
(``OMP_NUM_THREADS``):

* exact: :func:`dmlkit.evaluation.streaming.retrieval_metrics_from_file` on ``--queries`` seeded queries
  (exact streamed search within ``--budget-mb``, ``K`` neighbours as the metrics need): seconds per query;
* per index (``--methods``, parameters from the data size, ``dmlkit.evaluation.approx_index``): build
  time and peak anonymous memory of the build (:func:`benchmarks._harness.measure`) and the index's own
  size; the search parameter chosen by :func:`tune_search` for ``--target`` on ``--tune-sample``
  queries (marked ``*``); then for each value of the ladder (``nprobe`` 1, 2, 4, ... / ``efSearch`` 16,
  32, ...) the time to search the ``--queries`` timed queries for ``K + 1`` neighbours, and recall@1 on
  them (approximate nearest neighbour at the exact nearest distance, the exact distances from
  :func:`nearest_distances_from_file`). The ladder stops after the chosen value once recall reaches
  0.99 or search is ``--max-ratio`` times slower than exact.

"all queries" extrapolates to evaluating all ``n`` items as queries: build + ``n`` x search time per
query, against ``n`` x exact time per query; the ratio exact / approx is the speed-up of the whole
evaluation. Times on a machine with other jobs running move by tens of percent between runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _harness as h

__all__ = ["make_latent_file", "make_tiled_file", "run", "format_table", "plot", "main"]


def make_latent_file(
    path: Path, n: int, dim: int, per_class: float, latent_dim: int, seed: int, block: int = 65536
) -> np.ndarray:
    """Write ``(n, dim)`` unit vectors of classes in a ``latent_dim`` subspace to ``path``; return the labels."""
    if not 1 <= latent_dim <= dim:
        raise ValueError(f"--latent-dim must be between 1 and --dim ({dim}); got {latent_dim}")
    rng = np.random.default_rng(seed)
    num_classes = max(1, round(n / per_class))
    labels = rng.integers(0, num_classes, size=n, dtype=np.int64)
    centres = rng.standard_normal((num_classes, latent_dim), dtype=np.float32)
    basis = np.linalg.qr(rng.standard_normal((dim, latent_dim)))[0].astype(np.float32)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, dim))
    for s in range(0, n, block):
        e = min(n, s + block)
        z = centres[labels[s:e]] + np.float32(0.5) * rng.standard_normal((e - s, latent_dim), dtype=np.float32)
        x = z @ basis.T + np.float32(0.02) * rng.standard_normal((e - s, dim), dtype=np.float32)
        out[s:e] = x / np.linalg.norm(x, axis=1, keepdims=True)
    out.flush()
    del out
    return labels


def make_tiled_file(
    path: Path, n: int, source: np.ndarray, source_labels: np.ndarray, per_class: float, seed: int, block: int = 65536
) -> np.ndarray:
    """Write ``n`` within-class mixtures of ``source`` rows (module docstring) to ``path``; return the labels."""
    from dmlkit.evaluation.streaming import nearest_distances_from_file

    src = np.ascontiguousarray(source, dtype=np.float32)
    y = np.asarray(source_labels).reshape(-1)
    if src.ndim != 2 or len(src) != len(y) or len(src) < 2:
        raise ValueError(f"--source must be (m, d) with m >= 2 and --source-labels (m,); got {src.shape} and {y.shape}")
    rng = np.random.default_rng(seed)
    _, codes = np.unique(y, return_inverse=True)
    order = np.argsort(codes, kind="stable")
    starts = np.searchsorted(codes[order], np.arange(codes.max() + 1))
    sizes = np.bincount(codes)
    sample = rng.choice(len(src), size=min(len(src), 2000), replace=False)
    sigma = 0.5 * float(np.median(np.sqrt(nearest_distances_from_file(src, sample)))) / np.sqrt(src.shape[1])
    groups = max(1, round(n / (len(sizes) * per_class)))
    labels = np.empty(n, dtype=np.int64)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, src.shape[1]))
    for s in range(0, n, block):
        e = min(n, s + block)
        a = rng.integers(0, len(src), size=e - s)
        c = codes[a]
        b = order[starts[c] + rng.integers(0, sizes[c])]
        lam = rng.random((e - s, 1), dtype=np.float32)
        x = (
            lam * src[a]
            + (1 - lam) * src[b]
            + np.float32(sigma) * rng.standard_normal((e - s, src.shape[1]), dtype=np.float32)
        )
        out[s:e] = x / np.linalg.norm(x, axis=1, keepdims=True)
        labels[s:e] = c * groups + rng.integers(0, groups, size=e - s)
    out.flush()
    del out
    return labels


def _index_bytes(index: Any, method: str, n: int, d: int, nlist: int) -> int:
    """Resident size of the index: stored vectors, ids, lists' centroids or graph links."""
    if method == "ivf":
        return n * (4 * d + 8) + 4 * d * nlist
    if method == "ivf_sq8":
        return n * (d + 8) + 4 * d * nlist  # re-ranking reads the rows from the file
    return n * 4 * d + 4 * int(index.hnsw.neighbors.size()) + 8 * (n + 1) + 4 * n


def _method_rows(
    arr: np.ndarray,
    method: str,
    m: int,
    rep: np.ndarray,
    d_rep: np.ndarray,
    tune: np.ndarray,
    d_tune: np.ndarray,
    k: int,
    target: float,
    exact_per_query: float,
    max_ratio: float,
    seed: int,
) -> dict[str, Any]:
    from dmlkit.evaluation.approx_index import (
        build_index,
        plan_index,
        recall_at_1,
        search_ladder,
        search_neighbours,
        set_search_param,
        tune_search,
    )

    n, d = arr.shape
    plan = plan_index(n, method, {"M": m} if method == "hnsw" else None)
    built = h.measure(
        lambda: build_index(plan, lambda s, e: np.ascontiguousarray(arr[s:e], dtype=np.float32), n, d, 65536, seed)
    )
    index = built.value
    chosen, curve = tune_search(index, arr, np.ascontiguousarray(arr[tune]), tune, d_tune, target, rerank=plan.rerank)
    q = np.ascontiguousarray(arr[rep], dtype=np.float32)
    points = []
    for value in search_ladder(index):
        set_search_param(index, value)
        t0 = time.perf_counter()
        search_neighbours(index, q, rep, k, arr, plan.rerank)
        per_query = (time.perf_counter() - t0) / len(rep)
        recall = recall_at_1(index, arr, q, rep, d_rep, plan.rerank)
        points.append({"value": value, "recall": recall, "seconds_per_query": per_query, "chosen": value == chosen})
        if value >= chosen and (recall >= 0.99 or per_query > max_ratio * exact_per_query):
            break
    out = {
        "method": method,
        "setting": plan.describe() + (f" rerank={plan.rerank}" if plan.rerank else ""),
        "param": plan.search_name,
        "build_seconds": built.seconds,
        "build_peak_anon_bytes": built.peak_anon_bytes,
        "index_bytes": _index_bytes(index, method, n, d, plan.nlist),
        "chosen": chosen,
        "tune_recall": curve[-1].recall,
        "tune_lower": curve[-1].lower,
        "reached": curve[-1].lower >= target or curve[-1].recall == 1.0,
        "points": points,
    }
    del index
    return out


def run(
    n: int = 1_000_000,
    dim: int = 128,
    per_class: float = 5,
    seed: int = 0,
    data: str = "isotropic",
    latent_dim: int = 16,
    source: str | None = None,
    source_labels: str | None = None,
    methods: tuple[str, ...] = ("ivf", "ivf_sq8", "hnsw"),
    hnsw_m: int = 32,
    queries: int = 1000,
    tune_sample: int = 1000,
    target: float = 0.95,
    budget_mb: float = 256,
    max_ratio: float = 3.0,
    plot_path: str | None = None,
) -> dict[str, Any]:
    from benchmarks.retrieval_large import make_file
    from dmlkit.evaluation.streaming import nearest_distances_from_file, retrieval_metrics_from_file

    if queries + tune_sample > n:
        raise ValueError(f"--queries + --tune-sample ({queries + tune_sample}) must not exceed --n ({n})")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "embeddings.npy"
        t0 = time.perf_counter()
        if data == "latent":
            labels = make_latent_file(path, n, dim, per_class, latent_dim, seed)
        elif data == "tiled":
            if not source or not source_labels:
                raise ValueError("--data tiled needs --source EMB.npy and --source-labels LABELS.npy")
            src = np.load(source)
            labels = make_tiled_file(path, n, src, np.load(source_labels), per_class, seed)
            dim = src.shape[1]
        else:
            labels = make_file(path, n, dim, per_class, seed)
        write_s = time.perf_counter() - t0
        arr = np.load(path, mmap_mode="r")
        counts = np.bincount(labels)
        k = min(n - 1, max(int(counts.max()) - 1, 8))  # K of the metrics with ks up to 8
        order = np.random.default_rng(seed + 1).permutation(n)
        rep, tune = np.sort(order[:queries]), np.sort(order[queries : queries + tune_sample])
        nearest = nearest_distances_from_file(arr, np.concatenate([rep, tune]), budget_mb=budget_mb)
        d_rep, d_tune = nearest[:queries], nearest[queries:]
        exact = h.measure(  # the lambda runs here, before `del arr` below
            lambda: retrieval_metrics_from_file(arr, labels, budget_mb=budget_mb, query_sample=queries, seed=seed)  # noqa: F821
        )
        exact_pq = exact.seconds / queries
        rows = [
            _method_rows(arr, m, hnsw_m, rep, d_rep, tune, d_tune, k, target, exact_pq, max_ratio, seed)
            for m in methods
        ]
        del arr
    name = {"latent": f"latent (L={latent_dim})", "tiled": f"tiled from {Path(str(source)).name}"}.get(data, data)
    result = {
        "n": n,
        "dim": dim,
        "data": name,
        "per_class": per_class,
        "k": k,
        "queries": queries,
        "tune_sample": tune_sample,
        "target": target,
        "budget_mb": budget_mb,
        "file_bytes": n * dim * 4,
        "write_seconds": write_s,
        "exact": {
            "seconds_per_query": exact_pq,
            "peak_anon_bytes": exact.peak_anon_bytes,
            "precision_at_1": exact.value["precision_at_1"],
        },
        "methods": rows,
    }
    if plot_path:
        result["plot"] = str(plot(result, plot_path))
    return result


def format_table(r: dict[str, Any]) -> str:
    n = r["n"]
    ex = r["exact"]
    exact_all = n * ex["seconds_per_query"]
    head = [
        "index",
        "search param",
        "recall@1",
        "search ms/query",
        "build s",
        "build peak MiB",
        "index MiB",
        "all queries s",
        "exact / approx",
    ]
    rows = [
        [
            "exact (streamed)",
            f"budget {r['budget_mb']:g} MB",
            "1.0000",
            f"{1000 * ex['seconds_per_query']:.3f}",
            "-",
            f"{ex['peak_anon_bytes'] / h.MIB:.0f}",
            "-",
            f"{exact_all:,.1f}",
            "1.00x",
        ]
    ]
    summary = []
    for m in r["methods"]:
        for i, p in enumerate(m["points"]):
            total = m["build_seconds"] + n * p["seconds_per_query"]
            rows.append(
                [
                    m["setting"] if i == 0 else "",
                    f"{m['param']}={p['value']}{' *' if p['chosen'] else ''}",
                    f"{p['recall']:.4f}",
                    f"{1000 * p['seconds_per_query']:.3f}",
                    f"{m['build_seconds']:.1f}" if i == 0 else "",
                    f"{m['build_peak_anon_bytes'] / h.MIB:.0f}" if i == 0 else "",
                    f"{m['index_bytes'] / h.MIB:.0f}" if i == 0 else "",
                    f"{total:,.1f}",
                    f"{exact_all / total:.2f}x",
                ]
            )
        best = next(p for p in m["points"] if p["chosen"])
        total = m["build_seconds"] + n * best["seconds_per_query"]
        reached = "reaches" if m["reached"] else "does NOT reach"
        summary.append(
            f"{m['setting']}: tuned {m['param']}={m['chosen']} {reached} {r['target']} on the tuning sample "
            f"({m['tune_recall']:.4f}, lower bound {m['tune_lower']:.4f}), {best['recall']:.4f} on the "
            f"timed queries; all {n:,} queries "
            f"{total:,.1f} s vs exact {exact_all:,.1f} s ({exact_all / total:.2f}x)"
        )
    lines = [
        f"gallery {n:,} x {r['dim']} float32 on disk ({r['file_bytes'] / h.MIB:.0f} MiB), data {r['data']}, "
        f"{r['per_class']:g} items per class, exact P@1 {ex['precision_at_1']:.4f}; K = {r['k']} neighbours per query",
        f"{r['queries']:,} timed queries; search parameter tuned (*) to recall@1 >= {r['target']} on "
        f"{r['tune_sample']:,} other queries (95% lower bound); 'all queries' = build + n x search time per query",
        h.table(head, rows),
        *summary,
    ]
    if "plot" in r:
        lines.append(f"plot: {r['plot']}")
    return "\n".join(lines)


def plot(r: dict[str, Any], path: str | Path) -> Path:
    """Recall@1 against search time per query, one line per index, exact as a vertical line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in r["methods"]:
        xs = [1000 * p["seconds_per_query"] for p in m["points"]]
        ys = [p["recall"] for p in m["points"]]
        (line,) = ax.plot(
            xs,
            ys,
            marker="o",
            label=f"{m['setting']} (build {m['build_seconds']:.0f} s, {m['index_bytes'] / h.MIB:.0f} MiB)",
        )
        for p, x, y in zip(m["points"], xs, ys):
            ax.annotate(str(p["value"]), (x, y), textcoords="offset points", xytext=(3, -10), fontsize=7)
            if p["chosen"]:
                ax.plot([x], [y], marker="*", markersize=14, color=line.get_color())
    ax.axvline(1000 * r["exact"]["seconds_per_query"], color="k", linestyle="--", label="exact (streamed)")
    ax.axhline(r["target"], color="grey", linestyle=":", label=f"target recall@1 {r['target']}")
    ax.set_xscale("log")
    ax.set_xlabel("search time per query (ms)")
    ax.set_ylabel("recall@1 against exact search")
    ax.set_title(f"{r['n']:,} x {r['dim']}, data {r['data']} (* = tuned choice)", fontsize=10)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _parser() -> argparse.ArgumentParser:
    p = h.parser("retrieval_tradeoff", __doc__)
    p.add_argument("--approx", action="store_true", help="accepted, for ``dmlkit bench retrieval --approx``")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--per-class", type=float, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", choices=("isotropic", "latent", "tiled"), default="isotropic")
    p.add_argument("--latent-dim", type=int, default=16)
    p.add_argument("--source", default=None, help="--data tiled: (m, d) embeddings .npy to grow to --n rows")
    p.add_argument("--source-labels", default=None, help="--data tiled: (m,) labels .npy of --source")
    p.add_argument("--methods", default="ivf,ivf_sq8,hnsw", help="comma-separated: ivf, ivf_sq8, hnsw")
    p.add_argument("--hnsw-m", type=int, default=32)
    p.add_argument("--queries", type=int, default=1000, help="timed queries (recall measured on them)")
    p.add_argument("--tune-sample", type=int, default=1000)
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--budget-mb", type=float, default=256)
    p.add_argument("--max-ratio", type=float, default=3.0, help="stop a ladder this many times slower than exact")
    p.add_argument("--plot", default="retrieval_tradeoff.png", help="PNG to write ('' for none)")
    return p


def _run(a: argparse.Namespace) -> dict[str, Any]:
    from dmlkit.evaluation.approx_index import APPROX_METHODS

    methods = tuple(m.strip() for m in a.methods.split(",") if m.strip())
    bad = [m for m in methods if m not in APPROX_METHODS]
    if bad or not methods:
        raise SystemExit(f"--methods: {bad or 'none given'}; choose from {', '.join(APPROX_METHODS)}")
    return run(
        a.n,
        a.dim,
        a.per_class,
        a.seed,
        a.data,
        a.latent_dim,
        a.source,
        a.source_labels,
        methods,
        a.hnsw_m,
        a.queries,
        a.tune_sample,
        a.target,
        a.budget_mb,
        a.max_ratio,
        a.plot or None,
    )


def main(argv: list[str] | None = None) -> int:
    return h.main(_parser().parse_args(argv), _run, format_table)


if __name__ == "__main__":
    raise SystemExit(main())
