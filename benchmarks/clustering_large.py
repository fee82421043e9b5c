"""Benchmark: NMI / F1 of a gallery on disk, k-means on a sample within a memory budget, against all rows in memory.

``dmlkit bench clustering_large``. Data: ``benchmarks.retrieval_large.make_file`` (class centre plus
noise, unit vectors, labels uniform over ``n / per_class`` classes) written to a temporary ``.npy``;
clustering needs one centroid per class, so ``--per-class`` sets the cost (``k = n / per_class``).

Measured in this process (:func:`benchmarks._harness.measure`: wall time, peak anonymous memory above
the level before the call, the memory-mapped file's pages not counted):

* ``streamed``: :func:`dmlkit.evaluation.clustering_streamed.clustering_metrics_from_file` with
  ``--budget-mb`` (k-means on the sample size it reports, every row assigned block by block), once per
  ``--sample-sizes`` value (0, the default: the size the budget gives);
* ``in memory`` (``--compare``): :func:`dmlkit.evaluation.clustering_metrics` of all rows loaded into
  memory (faiss k-means, which itself subsamples to 256 points per centroid).

The NMI / F1 differences say what the sample costs in accuracy; the time and memory ratios what it saves.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _harness as h

__all__ = ["run", "format_table", "main"]


def run(
    n: int = 200_000,
    dim: int = 128,
    per_class: float = 200,
    seed: int = 0,
    budget_mb: float = 256,
    sample_sizes: tuple[int, ...] = (),
    compare: bool = False,
) -> dict[str, Any]:
    from benchmarks.retrieval_large import make_file
    from dmlkit.evaluation import clustering_metrics
    from dmlkit.evaluation.clustering_streamed import clustering_metrics_from_file

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "embeddings.npy"
        t0 = time.perf_counter()
        labels = make_file(path, n, dim, per_class, seed)
        write_s = time.perf_counter() - t0
        for size in sample_sizes or (None,):
            m = h.measure(
                lambda: clustering_metrics_from_file(
                    path, labels, budget_mb=budget_mb, sample_size=size or None, seed=seed
                )
            )
            rows.append({"mode": "streamed", "seconds": m.seconds, "peak_anon_bytes": m.peak_anon_bytes, **m.value})
        if compare:

            def in_memory() -> dict[str, float]:
                x = np.load(path)
                return clustering_metrics(x, labels, seed=seed)

            m = h.measure(in_memory)
            rows.append(
                {
                    "mode": "in memory",
                    "seconds": m.seconds,
                    "peak_anon_bytes": m.peak_anon_bytes,
                    "sample_size": float(min(n, 256 * len(np.unique(labels)))),
                    **m.value,
                }
            )
    return {
        "n": n,
        "dim": dim,
        "per_class": per_class,
        "num_clusters": int(len(np.unique(labels))),
        "budget_mb": budget_mb,
        "file_bytes": n * dim * 4,
        "write_seconds": write_s,
        "rows": rows,
    }


def format_table(r: dict[str, Any]) -> str:
    ref = next((x for x in r["rows"] if x["mode"] == "in memory"), None)
    head = ["mode", "k-means sample", "time (s)", "peak anon (MiB)", "NMI", "F1"] + (
        ["NMI diff", "F1 diff"] if ref else []
    )
    body = []
    for x in r["rows"]:
        row = [
            x["mode"],
            f"{int(x['sample_size']):,}",
            f"{x['seconds']:.1f}",
            f"{x['peak_anon_bytes'] / h.MIB:.0f}",
            f"{x['NMI']:.4f}",
            f"{x['F1']:.4f}",
        ]
        if ref:
            row += [f"{x['NMI'] - ref['NMI']:+.4f}", f"{x['F1'] - ref['F1']:+.4f}"]
        body.append(row)
    return "\n".join(
        [
            f"gallery {r['n']:,} x {r['dim']} float32 on disk ({r['file_bytes'] / h.MIB:.0f} MiB), {r['num_clusters']:,} "
            f"clusters (one per label); streamed budget {r['budget_mb']:g} MB",
            h.table(head, body),
        ]
    )


def _parser() -> argparse.ArgumentParser:
    p = h.parser("clustering_large", __doc__)
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--per-class", type=float, default=200, help="items per label; k = n / per_class clusters")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-mb", type=float, default=256)
    p.add_argument(
        "--sample-sizes", default="", help="comma-separated k-means sample sizes; 0 or none: the size the budget gives"
    )
    p.add_argument("--compare", action="store_true", help="also cluster all rows in memory (clustering_metrics)")
    return p


def _run(a: argparse.Namespace) -> dict[str, Any]:
    sizes = tuple(int(s) for s in a.sample_sizes.split(",") if s.strip())
    return run(a.n, a.dim, a.per_class, a.seed, a.budget_mb, sizes, a.compare)


def main(argv: list[str] | None = None) -> int:
    return h.main(_parser().parse_args(argv), _run, format_table)


if __name__ == "__main__":
    raise SystemExit(main())
