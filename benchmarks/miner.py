"""Benchmark: dmlkit's batched distance-weighted miner against PML's ``DistanceWeightedMiner``.

For each batch (``classes x per_class`` L2-normalised random embeddings of ``--dim``), both miners mine the batch
``--repeats`` times in this process, interleaved, on the CPU and, when there is one, on CUDA (each call
synchronised). The table gives the median time of a call of each, their ratio (PML / dmlkit) and the triplets
each returned (the same count: one per anchor and class member, the anchors skipped alike). The margin loss's
training on an H200 spent 0.32 s a step with PML's miner against multi-similarity's 0.05 (``docs/device.md``).

Run: ``python -m benchmarks.miner --batches 20x3 60x4 100x5 --dim 128 --repeats 50``.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch
from pytorch_metric_learning.miners import DistanceWeightedMiner as PMLDistanceWeightedMiner

from benchmarks import _harness as h
from dmlkit.losses.distance_weighted_miner import DistanceWeightedMiner

__all__ = ["main", "run", "format_table"]


def _batch(classes: int, per_class: int, dim: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(classes * per_class, dim, generator=g), dim=1)
    return x.to(device), torch.arange(classes).repeat_interleave(per_class).to(device)


def _devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def run(batches: list[str], dim: int, repeats: int, threads: int = 1) -> dict[str, Any]:
    torch.set_num_threads(threads)
    rows = []
    for device in _devices():
        sync = torch.cuda.synchronize if device == "cuda" else None
        for spec in batches:
            classes, per_class = (int(v) for v in spec.split("x"))
            x, y = _batch(classes, per_class, dim, device)
            ours, pml = DistanceWeightedMiner(seed=0), PMLDistanceWeightedMiner()
            times = h.interleaved(
                {"dmlkit": lambda: ours(x, y), "pml": lambda: pml(x, y)}, repeats, warmup=3, sync=sync
            )
            t_ours, t_pml = statistics.median(times["dmlkit"]), statistics.median(times["pml"])
            rows.append(
                {
                    "device": device,
                    "batch": spec,
                    "dmlkit_s": t_ours,
                    "pml_s": t_pml,
                    "ratio": t_pml / t_ours,
                    "triplets": [len(ours(x, y)[0]), len(pml(x, y)[0])],
                }
            )
    return {"dim": dim, "repeats": repeats, "threads": threads, "rows": rows}


def format_table(result: dict[str, Any]) -> str:
    head = ["device", "batch", "dmlkit ms", "PML ms", "PML / dmlkit", "triplets (dmlkit, PML)"]
    body = [
        [
            r["device"],
            r["batch"],
            f"{1e3 * r['dmlkit_s']:.2f}",
            f"{1e3 * r['pml_s']:.2f}",
            f"{r['ratio']:.1f}",
            f"{r['triplets'][0]}, {r['triplets'][1]}",
        ]
        for r in result["rows"]
    ]
    return (
        f"distance-weighted mining, dim {result['dim']}, median of {result['repeats']} calls, "
        f"{result['threads']} thread(s)\n" + h.table(head, body)
    )


def main(argv: list[str] | None = None) -> int:
    p = h.parser("miner", __doc__)
    p.add_argument("--batches", nargs="+", default=["20x3", "60x4", "100x5"], help="CLASSESxPER_CLASS batches")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    return h.main(
        args,
        lambda a: run(a.batches, a.dim, a.repeats, a.threads),
        format_table,
        ok=lambda r: all(row["triplets"][0] == row["triplets"][1] for row in r["rows"]),
    )


if __name__ == "__main__":
    raise SystemExit(main())
