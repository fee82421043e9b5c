"""Benchmark: exact retrieval metrics over N processes (``sharded_retrieval_metrics``) against one process.

Data: the class-centre-plus-noise model of ``benchmarks.retrieval.make_data``
(``n`` unit vectors of dimension ``dim`` around random unit class centres,
labels uniform over ``n / per_class`` classes), drawn by :func:`_data` from
``numpy.random.default_rng(0)``. Two
protocols: ``self`` (every item a query against all the others, as on SOP) and
``gallery`` (the first half of the items are queries, the second half the
gallery, as on In-shop).

Settings, each started by this process with ``torch.multiprocessing.spawn``
(gloo over a file store) and timed from a barrier to the end of the call
(slowest process): one process with ``threads`` torch threads running
``retrieval_metrics`` on the whole sets, and N processes with ``threads / N``
threads each, every process holding the ``shard_indices`` of the queries and
of the gallery and calling ``sharded_retrieval_metrics`` (the gallery goes
round in blocks within ``budget_mb``). So both settings use the same cores.
The ratio printed is the one-process time over the N-process time in this
run; ``equal`` says whether the N-process metrics equal the one-process
metrics exactly (``==``).

A self-search on one process computes only half the distance products (the
matrix is symmetric); the sharded search computes every query shard against
every gallery block, i.e. all of them. On the same cores the self protocol is
therefore not expected to be faster over several processes: what it buys is
that no process holds the whole gallery, and that the evaluation runs where
the training runs.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

from benchmarks import _harness as h

__all__ = ["run", "main"]


def _data(n: int, dim: int, per_class: float, spread: float = 1.5) -> tuple[Any, Any]:
    """Seeded ``(n, dim)`` float32 unit vectors and int64 labels (the model of ``retrieval.make_data``)."""
    import numpy as np

    rng = np.random.default_rng(0)
    labels = rng.integers(0, max(1, round(n / per_class)), size=n, dtype=np.int64)
    centres = rng.standard_normal((int(labels.max()) + 1, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = rng.standard_normal((n, dim), dtype=np.float32) * np.float32(spread / dim**0.5) + centres[labels]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, labels


def _worker(
    rank: int, world: int, tmp: str, n: int, dim: int, per_class: float, protocol: str, threads: int, budget_mb: float
) -> None:
    import torch
    import torch.distributed as dist

    from dmlkit.distributed import shard_indices
    from dmlkit.evaluation import retrieval_metrics, sharded_retrieval_metrics

    torch.set_num_threads(threads)
    x, y = _data(n, dim, per_class)
    q, ql, g, gl = (x, y, None, None) if protocol == "self" else (x[: n // 2], y[: n // 2], x[n // 2 :], y[n // 2 :])
    if world == 1:
        start = time.perf_counter()
        metrics = retrieval_metrics(q, ql, g, gl)
        seconds = time.perf_counter() - start
    else:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store{world}", rank=rank, world_size=world)
        try:
            qi = shard_indices(len(q), rank, world).numpy()
            gi = None if g is None else shard_indices(len(g), rank, world).numpy()
            shards = (q[qi], ql[qi]) + ((None, None) if g is None else (g[gi], gl[gi]))
            dist.barrier()
            start = time.perf_counter()
            metrics = sharded_retrieval_metrics(*shards, query_ids=qi, reference_ids=gi, budget_mb=budget_mb)
            seconds = time.perf_counter() - start
            slowest = torch.tensor([seconds], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            seconds = float(slowest)
        finally:
            dist.destroy_process_group()
    if rank == 0:
        with open(os.path.join(tmp, f"result{world}.json"), "w") as fh:
            json.dump({"seconds": seconds, "metrics": metrics}, fh)


def run(
    n: int = 20000,
    dim: int = 128,
    per_class: float = 5,
    protocol: str = "self",
    processes: int = 2,
    threads: int = 2,
    budget_mb: float = 256,
) -> list[dict[str, Any]]:
    """One row per setting (1 process, ``processes`` processes): seconds, ratio to one process, equality."""
    import torch.multiprocessing as mp

    if protocol not in ("self", "gallery"):
        raise ValueError(f"protocol must be 'self' or 'gallery'; got {protocol!r}")
    if processes < 2 or threads < 1:
        raise ValueError(f"need --processes >= 2 and --threads >= 1; got {processes}, {threads}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in (1, processes):
            per_process = max(1, threads // world)
            mp.spawn(
                _worker, args=(world, tmp, n, dim, per_class, protocol, per_process, budget_mb), nprocs=world, join=True
            )
            with open(os.path.join(tmp, f"result{world}.json")) as fh:
                r = json.load(fh)
            rows.append(
                {
                    "processes": world,
                    "threads_each": per_process,
                    "n": n,
                    "dim": dim,
                    "protocol": protocol,
                    "seconds": r["seconds"],
                    "metrics": r["metrics"],
                }
            )
    for row in rows:
        row["ratio_to_one_process"] = rows[0]["seconds"] / row["seconds"]
        row["equal"] = row["metrics"] == rows[0]["metrics"]
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    head = [
        "processes",
        "threads each",
        "protocol",
        "n x d",
        "seconds",
        "1-process time / this",
        "P@1",
        "MAP@R",
        "equal to 1 process",
    ]
    cells = [
        [
            str(r["processes"]),
            str(r["threads_each"]),
            r["protocol"],
            f"{r['n']} x {r['dim']}",
            f"{r['seconds']:.2f}",
            f"{r['ratio_to_one_process']:.2f}",
            f"{r['metrics']['precision_at_1']:.4f}",
            f"{r['metrics']['mean_average_precision_at_r']:.4f}",
            "yes" if r["equal"] else "NO",
        ]
        for r in rows
    ]
    return h.table(head, cells)


def _parser() -> argparse.ArgumentParser:
    p = h.parser("retrieval_sharded", __doc__)
    p.add_argument("--n", type=int, default=20000, help="number of embeddings (default 20000)")
    p.add_argument("--dim", type=int, default=128, help="embedding dimension (default 128)")
    p.add_argument("--per-class", type=float, default=5, help="mean items per label (default 5)")
    p.add_argument(
        "--protocol",
        choices=["self", "gallery"],
        default="self",
        help="self: every item against the others; gallery: first half queries, second half gallery",
    )
    p.add_argument("--processes", type=int, default=2, help="processes of the sharded setting (default 2)")
    p.add_argument("--threads", type=int, default=2, help="torch threads in all, split over the processes (default 2)")
    p.add_argument("--budget-mb", type=float, default=256, help="gallery block budget per process (default 256)")
    return p


def main(argv: list[str] | None = None) -> int:
    return h.main(
        _parser().parse_args(argv),
        lambda a: run(a.n, a.dim, a.per_class, a.protocol, a.processes, a.threads, a.budget_mb),
        format_table,
        ok=lambda rows: all(r["equal"] for r in rows),
    )


if __name__ == "__main__":
    raise SystemExit(main())
