"""Benchmark: retrieval metrics of a gallery on disk, approximate vs exact (``dmlkit bench retrieval_large``).

The recall / time / memory trade-off of several index settings is ``dmlkit bench retrieval --approx``
(:mod:`benchmarks.retrieval_tradeoff`).

Data: ``n`` x ``dim`` float32 embeddings written block by block to a temporary
``.npy`` file (never whole in memory), the class-centre-plus-noise model of
``benchmarks.retrieval.make_data`` (labels uniform over ``n / per_class``
classes, unit-norm points), drawn from ``numpy.random.default_rng(seed)``.

Measured, in this process, on the memory-mapped file:

* ``approx``: :func:`dmlkit.evaluation.streaming.retrieval_metrics_from_file`
  with a faiss index (``--index ivf``, ``ivf_sq8`` or ``hnsw``; parameters from ``n``, the search
  parameter tuned to recall@1 >= 0.95 unless ``--nprobe`` is given): index build, tuning, search of
  ``--queries`` seeded queries (all with ``--queries 0``), and the exact
  streamed search of ``--recall-sample`` queries that measures the index's
  recall@1 (fraction of sampled queries whose approximate nearest neighbour is
  at the exact nearest distance).
* ``exact`` (with ``--exact``): the same metrics on the same queries by the
  exact streamed search within ``--budget-mb``; the table then gives the time
  ratio exact / approx and the metric differences.

Memory (:func:`benchmarks._harness.measure`): "peak anon" is the largest
anonymous resident memory (heap: index, blocks, tables) above the level before
the call, sampled every millisecond; pages of the memory-mapped file are
file-backed (reclaimable page cache) and are not in it. "peak RSS" (``VmHWM``
after a reset, above the level before) includes them.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _harness as h

__all__ = ["make_file", "run", "main"]


def make_file(path: Path, n: int, dim: int, per_class: float, seed: int, block: int = 65536) -> np.ndarray:
    """Write ``(n, dim)`` float32 embeddings to ``path`` (.npy) block by block; return the int64 labels."""
    rng = np.random.default_rng(seed)
    num_classes = max(1, round(n / per_class))
    labels = rng.integers(0, num_classes, size=n, dtype=np.int64)
    centres = rng.standard_normal((num_classes, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, dim))
    for s in range(0, n, block):
        e = min(n, s + block)
        x = rng.standard_normal((e - s, dim), dtype=np.float32) * np.float32(1.5 / math.sqrt(dim))
        x += centres[labels[s:e]]
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[s:e] = x
    out.flush()
    del out
    return labels


def _measure(fn: Any) -> dict[str, Any]:
    m = h.measure(fn)
    return {
        "seconds": m.seconds,
        "peak_anon_bytes": m.peak_anon_bytes,
        "peak_rss_bytes": m.peak_extra_bytes,
        "memory_probe": m.probe,
        "values": m.value,
    }


def run(
    n: int,
    dim: int,
    per_class: float = 5,
    seed: int = 0,
    index: str = "ivf",
    budget_mb: float = 256,
    queries: int = 10000,
    recall_sample: int = 1000,
    exact: bool = False,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from dmlkit.evaluation.streaming import retrieval_metrics_from_file

    query_sample = None if queries <= 0 or queries >= n else queries
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "embeddings.npy"
        t0 = time.perf_counter()
        labels = make_file(path, n, dim, per_class, seed)
        write_s = time.perf_counter() - t0
        common = dict(budget_mb=budget_mb, query_sample=query_sample, seed=seed)
        approx = _measure(
            lambda: retrieval_metrics_from_file(
                path, labels, approx=index, approx_params=params, recall_sample=recall_sample, **common
            )
        )
        ref = _measure(lambda: retrieval_metrics_from_file(path, labels, **common)) if exact else None
    return {
        "n": n,
        "dim": dim,
        "index": index,
        "budget_mb": budget_mb,
        "queries": query_sample or n,
        "file_bytes": n * dim * 4,
        "write_seconds": write_s,
        "approx": approx,
        "exact": ref,
    }


def format_table(r: dict[str, Any]) -> str:
    a = r["approx"]
    v = a["values"]

    def row(name: str, m: dict[str, Any]) -> list[str]:
        x = m["values"]
        return [
            name,
            f"{m['seconds']:.1f}",
            f"{m['peak_anon_bytes'] / h.MIB:.0f}",
            f"{m['peak_rss_bytes'] / h.MIB:.0f}",
            f"{x['precision_at_1']:.4f}",
            f"{x.get('recall_at_8', math.nan):.4f}",
            f"{x['mean_average_precision_at_r']:.4f}",
        ]

    rows = [row(f"approx ({r['index']})", a)] + ([row("exact (stream)", r["exact"])] if r["exact"] is not None else [])
    lines = [
        f"gallery {r['n']:,} x {r['dim']} float32 on disk ({r['file_bytes'] / h.MIB:.0f} MiB, written in "
        f"{r['write_seconds']:.1f} s); {r['queries']:,} queries; exact-search budget {r['budget_mb']} MB",
        h.table(["mode", "time (s)", "peak anon (MiB)", "peak RSS (MiB)", "P@1", "R@8", "MAP@R"], rows),
    ]
    if r["exact"] is not None:
        lines.append(f"time ratio exact / approx: {r['exact']['seconds'] / a['seconds']:.2f}x")
    lines.append(
        f"approx recall@1 vs exact on {int(v['approx_recall_sample']):,} sampled queries: {v['approx_recall_at_1']:.4f}"
    )
    lines.append(f"memory: {a['memory_probe']}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = h.parser("retrieval_large", __doc__)
    p.add_argument("--approx", action="store_true", help="accepted (the approximate side always runs)")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--per-class", type=float, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--index", choices=("ivf", "ivf_sq8", "hnsw"), default="ivf")
    p.add_argument("--nlist", type=int, default=None, help="IVF lists (default ~sqrt(n))")
    p.add_argument("--nprobe", type=int, default=None, help="IVF lists searched (default: tuned to recall@1 >= 0.95)")
    p.add_argument("--budget-mb", type=float, default=256)
    p.add_argument("--queries", type=int, default=10000, help="seeded query sample (0: all n)")
    p.add_argument("--recall-sample", type=int, default=1000)
    p.add_argument("--exact", action="store_true", help="also run the exact streamed search on the same queries")
    return p


def _run(a: argparse.Namespace) -> dict[str, Any]:
    params = {k: v for k, v in (("nlist", a.nlist), ("nprobe", a.nprobe)) if v is not None}
    return run(a.n, a.dim, a.per_class, a.seed, a.index, a.budget_mb, a.queries, a.recall_sample, a.exact, params)


def main(argv: list[str] | None = None) -> int:
    return h.main(_parser().parse_args(argv), _run, format_table)


if __name__ == "__main__":
    raise SystemExit(main())
