"""Benchmark: data-parallel training steps per second with 1 and 2 processes (CPU, gloo) and the communication share.

Workload: the quickstart model (ResNet-20, GAP, 128-d L2-normalised embedding)
on random ``1 x 32 x 32`` images, global batch ``batch`` (default 64, 4 images
per class), multi-similarity loss with its miner on the gathered global batch
(``GlobalBatchLoss``), Adam, wrapped in ``DistributedDataParallel``. Each
process runs ``threads`` torch threads (default 1), so N processes use N cores.

Both settings are started by this process (``torch.multiprocessing.spawn``,
gloo over a file store); each runs ``warmup`` untimed steps, then ``steps``
timed steps (the median step time is reported), then the same number of steps
with the communication removed: ``DDP.no_sync()`` (no gradient all-reduce) and
the loss on the local slice only (no all-gather). Two communication shares are
printed: ``comm share`` = (all-gather of the embeddings and labels + one
all-reduce of a tensor as large as all the gradients, each timed alone) /
step time, an upper bound since DDP overlaps its all-reduce with the backward;
``exposed`` = ``1 - t_local / t_full``, the step time that removing the
communication saves (noisy when other processes compete for the cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

import torch

from benchmarks import _harness as h

__all__ = ["run", "main"]


def _worker(rank: int, world: int, tmp: str, batch: int, steps: int, warmup: int, threads: int) -> None:
    import torch.distributed as dist
    from torch import nn

    from dmlkit.distributed import GlobalBatchLoss, all_gather_no_grad, all_gather_with_grad
    from dmlkit.losses import create_loss, create_miner
    from dmlkit.models import build_embedder
    from dmlkit.models.config import ModelConfig

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store{world}", rank=rank, world_size=world)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = nn.parallel.DistributedDataParallel(build_embedder(ModelConfig(), in_channels=1))
        loss_fn, miner = create_loss("multi_similarity"), create_miner("multi_similarity")
        global_loss = GlobalBatchLoss(loss_fn, miner)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        g = torch.Generator().manual_seed(1)
        images = torch.randn(batch, 1, 32, 32, generator=g)
        labels = torch.arange(batch // 4).repeat_interleave(4)
        b = batch // world
        x, y = images[rank * b : (rank + 1) * b], labels[rank * b : (rank + 1) * b]

        def full_step() -> None:
            opt.zero_grad()
            global_loss(model(x), y).backward()
            opt.step()

        def local_step() -> None:
            opt.zero_grad()
            with model.no_sync():
                emb = model(x)
                loss_fn(emb, y, miner(emb, y)).backward()
            opt.step()

        def timed(step: Any, n: int) -> list[float]:
            out = []
            for _ in range(n):
                dist.barrier()
                t0 = time.perf_counter()
                step()
                out.append(time.perf_counter() - t0)
            return out

        timed(full_step, warmup)
        full = timed(full_step, steps)
        local = timed(local_step, steps)
        emb = torch.randn(b, 128, generator=g)
        gather = timed(lambda: (all_gather_with_grad(emb), all_gather_no_grad(y)), steps)
        flat = torch.zeros(sum(p.numel() for p in model.parameters()))
        allreduce = timed(lambda: dist.all_reduce(flat), steps)
        if rank == 0:
            result = {
                "full": statistics.median(full),
                "local": statistics.median(local),
                "gather": statistics.median(gather),
                "allreduce": statistics.median(allreduce),
            }
            with open(os.path.join(tmp, f"result{world}.json"), "w") as fh:
                json.dump(result, fh)
    finally:
        dist.destroy_process_group()


def run(
    batch: int = 64, steps: int = 10, warmup: int = 2, threads: int = 1, worlds: tuple[int, ...] = (1, 2)
) -> list[dict[str, Any]]:
    """One row per process count: step time, steps/s, samples/s, speed-up vs the first row, communication share."""
    import torch.multiprocessing as mp

    if batch % 4 or any(batch % (4 * w) for w in worlds):
        raise ValueError(f"batch must be a multiple of 4 x the largest process count (4 images per class); got {batch}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in worlds:
            mp.spawn(_worker, args=(world, tmp, batch, steps, warmup, threads), nprocs=world, join=True)
            with open(os.path.join(tmp, f"result{world}.json")) as fh:
                r = json.load(fh)
            rows.append(
                {
                    "processes": world,
                    "global_batch": batch,
                    "step_s": r["full"],
                    "steps_per_s": 1.0 / r["full"],
                    "samples_per_s": batch / r["full"],
                    "exposed_comm_share": max(0.0, 1.0 - r["local"] / r["full"]) if world > 1 else 0.0,
                    "comm_share": (r["gather"] + r["allreduce"]) / r["full"] if world > 1 else 0.0,
                    "gather_ms": 1e3 * r["gather"],
                    "allreduce_ms": 1e3 * r["allreduce"],
                }
            )
    for row in rows:
        row["speedup"] = rows[0]["step_s"] / row["step_s"]
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    head = [
        "processes",
        "batch",
        "step (ms)",
        "steps/s",
        "samples/s",
        "speed-up",
        "gather (ms)",
        "all-reduce (ms)",
        "comm share",
        "exposed",
    ]
    cells = [
        [
            str(r["processes"]),
            str(r["global_batch"]),
            f"{1e3 * r['step_s']:.1f}",
            f"{r['steps_per_s']:.2f}",
            f"{r['samples_per_s']:.1f}",
            f"{r['speedup']:.2f}x",
            f"{r['gather_ms']:.2f}",
            f"{r['allreduce_ms']:.2f}",
            f"{100 * r['comm_share']:.1f}%",
            f"{100 * r['exposed_comm_share']:.1f}%",
        ]
        for r in rows
    ]
    return "\n".join(
        [
            h.table(head, cells),
            "comm share: (all-gather of embeddings + all-reduce of all gradients, each timed alone) / step time; "
            "exposed: 1 - (step without communication) / step",
        ]
    )


def _parser() -> argparse.ArgumentParser:
    p = h.parser("ddp", __doc__)
    p.add_argument("--batch", type=int, default=64, help="global batch size (default 64)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per setting (default 10)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="process counts to run (default 1 2)")
    return p


def main(argv: list[str] | None = None) -> int:
    return h.main(
        _parser().parse_args(argv),
        lambda a: run(a.batch, a.steps, a.warmup, a.threads, tuple(a.processes)),
        format_table,
    )


if __name__ == "__main__":
    raise SystemExit(main())
