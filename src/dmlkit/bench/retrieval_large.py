"""Benchmark: retrieval metrics of a gallery on disk (``dmlkit bench retrieval --approx``), approximate vs exact.

Data: ``n`` x ``dim`` float32 embeddings written block by block to a temporary
``.npy`` file (never whole in memory), the class-centre-plus-noise model of
``dmlkit.bench.retrieval.make_data`` (labels uniform over ``n / per_class``
classes, unit-norm points), drawn from ``numpy.random.default_rng(seed)``.

Measured, in this process, on the memory-mapped file:

* ``approx``: :func:`dmlkit.evaluation.streaming.retrieval_metrics_from_file`
  with a faiss index (``--index ivf`` or ``hnsw``): index build, search of
  ``--queries`` seeded queries (all with ``--queries 0``), and the exact
  streamed search of ``--recall-sample`` queries that measures the index's
  recall@1 (fraction of sampled queries whose approximate nearest neighbour is
  at the exact nearest distance).
* ``exact`` (with ``--exact``): the same metrics on the same queries by the
  exact streamed search within ``--budget-mb``; the table then gives the time
  ratio exact / approx and the metric differences.

Memory: "peak anon" is the largest anonymous resident memory (heap: index,
blocks, tables) above the level before the call, sampled every 5 ms; pages of
the memory-mapped file are file-backed (reclaimable page cache) and are not in
it. "peak RSS" (``VmHWM`` after a reset, above the level before) includes them.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from dmlkit.bench.retrieval import _reset_peak, _rss_bytes, _status_kb, _trim

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


class _AnonPeak(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = _status_kb("RssAnon")
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, _status_kb("RssAnon"))
            time.sleep(0.005)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return max(self.peak, _status_kb("RssAnon"))


def _measure(fn: Any) -> dict[str, Any]:
    _trim()
    anon0, rss0 = _status_kb("RssAnon"), _rss_bytes()
    exact_peak = _reset_peak()
    sampler = _AnonPeak()
    sampler.start()
    t0 = time.perf_counter()
    values = fn()
    seconds = time.perf_counter() - t0
    anon = sampler.stop()
    return {
        "seconds": seconds,
        "peak_anon_bytes": max(0, anon - anon0),
        "peak_rss_bytes": max(0, _status_kb("VmHWM") - rss0) if exact_peak else None,
        "values": values,
    }


def run(n: int, dim: int, per_class: float = 5, seed: int = 0, index: str = "ivf", budget_mb: float = 256,
        queries: int = 10000, recall_sample: int = 1000, exact: bool = False, params: dict[str, Any] | None = None) -> dict[str, Any]:
    from dmlkit.evaluation.streaming import retrieval_metrics_from_file

    query_sample = None if queries <= 0 or queries >= n else queries
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "embeddings.npy"
        t0 = time.perf_counter()
        labels = make_file(path, n, dim, per_class, seed)
        write_s = time.perf_counter() - t0
        common = dict(budget_mb=budget_mb, query_sample=query_sample, seed=seed)
        approx = _measure(lambda: retrieval_metrics_from_file(path, labels, approx=index, approx_params=params,
                                                              recall_sample=recall_sample, **common))
        ref = _measure(lambda: retrieval_metrics_from_file(path, labels, **common)) if exact else None
    return {"n": n, "dim": dim, "index": index, "budget_mb": budget_mb, "queries": query_sample or n,
            "file_bytes": n * dim * 4, "write_seconds": write_s, "approx": approx, "exact": ref}


def format_table(r: dict[str, Any]) -> str:
    mib = 2**20
    a = r["approx"]
    v = a["values"]
    lines = [
        f"gallery {r['n']:,} x {r['dim']} float32 on disk ({r['file_bytes'] / mib:.0f} MiB, written in {r['write_seconds']:.1f} s); "
        f"{r['queries']:,} queries; exact-search budget {r['budget_mb']} MB",
        f"{'mode':<14} {'time (s)':>9} {'peak anon (MiB)':>16} {'peak RSS (MiB)':>15} {'P@1':>7} {'R@8':>7} {'MAP@R':>7}",
    ]

    def row(name: str, m: dict[str, Any]) -> str:
        x = m["values"]
        rss = f"{m['peak_rss_bytes'] / mib:.0f}" if m["peak_rss_bytes"] is not None else "n/a"
        return (f"{name:<14} {m['seconds']:>9.1f} {m['peak_anon_bytes'] / mib:>16.0f} {rss:>15} "
                f"{x['precision_at_1']:>7.4f} {x.get('recall_at_8', math.nan):>7.4f} {x['mean_average_precision_at_r']:>7.4f}")

    lines.append(row(f"approx ({r['index']})", a))
    if r["exact"] is not None:
        lines.append(row("exact (stream)", r["exact"]))
        lines.append(f"time ratio exact / approx: {r['exact']['seconds'] / a['seconds']:.2f}x")
    lines.append(f"approx recall@1 vs exact on {int(v['approx_recall_sample']):,} sampled queries: {v['approx_recall_at_1']:.4f}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dmlkit bench retrieval --approx", description=__doc__.splitlines()[0])
    p.add_argument("--approx", action="store_true", help="this benchmark (gallery on disk, approximate search)")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--per-class", type=float, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--index", choices=("ivf", "hnsw"), default="ivf")
    p.add_argument("--nlist", type=int, default=None, help="IVF lists (default ~sqrt(n))")
    p.add_argument("--nprobe", type=int, default=None, help="IVF lists searched (default nlist / 16)")
    p.add_argument("--budget-mb", type=float, default=256)
    p.add_argument("--queries", type=int, default=10000, help="seeded query sample (0: all n)")
    p.add_argument("--recall-sample", type=int, default=1000)
    p.add_argument("--exact", action="store_true", help="also run the exact streamed search on the same queries")
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    params = {k: v for k, v in (("nlist", args.nlist), ("nprobe", args.nprobe)) if v is not None}
    r = run(args.n, args.dim, args.per_class, args.seed, args.index, args.budget_mb, args.queries,
            args.recall_sample, args.exact, params)
    print(json.dumps(r, indent=2) if args.json else format_table(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
