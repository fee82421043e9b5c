"""Benchmark: dmlkit's closed-form-gradient FastAP against PML's ``FastAPLoss`` (autograd).

For each batch size M: random embeddings ``(M, dim)`` and labels with uneven
classes (about 4 per class on average).  Both losses run forward + backward
``--repeats`` times in this process, interleaved; the table gives the median
wall time of each, their ratio (PML / dmlkit), and checks that loss values and
gradients agree.  Peak memory: each side runs once more in a fresh subprocess,
which warms up once, resets the kernel's peak-RSS counter
(``/proc/self/clear_refs``), runs one forward + backward and reads ``VmHWM``;
"peak extra" is that peak minus the RSS just before the call
(:func:`benchmarks._harness.measure`).

Both sides use the same number of torch threads (``--threads``, default 1).

Run: ``python -m benchmarks.fastap --sizes 128 256 512 --dim 512 --bins 10 --repeats 5``.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import torch

from benchmarks import _harness as h

__all__ = ["main", "make_batch", "run", "format_table"]


def make_batch(m: int, dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random embeddings and labels with uneven class sizes (``m // 4`` classes, skewed draw)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, dim, generator=g)
    n_classes = max(2, m // 4)
    probs = torch.linspace(1.0, 3.0, n_classes)
    y = torch.multinomial(probs, m, replacement=True, generator=g)
    return x, y


def _loss(side: str, bins: int) -> torch.nn.Module:
    if side == "dmlkit":
        from dmlkit.losses.fast_ap_loss import FastAPLoss

        return FastAPLoss(num_bins=bins)
    if side == "pml":
        from pytorch_metric_learning.losses import FastAPLoss as PMLFastAPLoss

        return PMLFastAPLoss(num_bins=bins)
    raise ValueError(f"side must be 'dmlkit' or 'pml'; got {side!r}")


def _step(loss_fn: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
    xg = x.clone().requires_grad_(True)
    loss = loss_fn(xg, y)
    loss.backward()
    return float(loss.detach()), xg.grad


def _worker(side: str, m: int, dim: int, bins: int, seed: int) -> dict[str, Any]:
    x, y = make_batch(m, dim, seed)
    loss_fn = _loss(side, bins)
    res = h.measure(lambda: _step(loss_fn, x, y)[0], warmup=1)  # warm-up: allocator, lazy imports
    return {"peak_extra_bytes": res.peak_extra_bytes, "memory_probe": res.probe, "loss": res.value}


def _subprocess(side: str, m: int, dim: int, bins: int, seed: int) -> dict[str, Any]:
    return h.run_worker(
        "benchmarks.fastap",
        side,
        ["--sizes", m, "--dim", dim, "--bins", bins, "--seed", seed, "--threads", torch.get_num_threads()],
    )


def run(
    sizes: tuple[int, ...] = (128, 256, 512),
    dim: int = 512,
    bins: int = 10,
    repeats: int = 5,
    seed: int = 0,
    memory: bool = True,
) -> dict[str, Any]:
    """Time and memory of both sides for each M; raises ``RuntimeError`` if the losses disagree."""
    rows = []
    ours_fn, pml_fn = _loss("dmlkit", bins), _loss("pml", bins)
    for m in sizes:
        x, y = make_batch(m, dim, seed)
        v_ours, g_ours = _step(ours_fn, x, y)  # warm-up + agreement check
        v_pml, g_pml = _step(pml_fn, x, y)
        if not abs(v_ours - v_pml) <= 1e-5 * max(1.0, abs(v_pml)):  # NaN disagrees too
            raise RuntimeError(f"M={m}: loss values differ: dmlkit {v_ours} vs PML {v_pml}")
        grad_diff = float((g_ours - g_pml).abs().max())
        times = h.interleaved(
            {side: (lambda fn=fn: _step(fn, x, y)) for side, fn in (("dmlkit", ours_fn), ("pml", pml_fn))}, repeats
        )
        row: dict[str, Any] = {
            "M": m,
            "loss_dmlkit": v_ours,
            "loss_pml": v_pml,
            "max_abs_grad_diff": grad_diff,
            "max_abs_grad": float(g_pml.abs().max()),
            "seconds_dmlkit": statistics.median(times["dmlkit"]),
            "seconds_pml": statistics.median(times["pml"]),
        }
        row["speedup"] = row["seconds_pml"] / row["seconds_dmlkit"]
        if memory:
            for side in ("dmlkit", "pml"):
                res = _subprocess(side, m, dim, bins, seed)
                row[f"peak_extra_bytes_{side}"] = res["peak_extra_bytes"]
                row["memory_probe"] = res["memory_probe"]
        rows.append(row)
    return {"dim": dim, "bins": bins, "repeats": repeats, "threads": torch.get_num_threads(), "rows": rows}


def format_table(result: dict[str, Any]) -> str:
    """The benchmark result as a plain-text table."""

    def mib(r: dict[str, Any], side: str) -> str:
        v = r.get(f"peak_extra_bytes_{side}")
        return f"{v / h.MIB:.1f}" if v is not None else "nan"

    rows = [
        [
            str(r["M"]),
            f"{r['seconds_dmlkit'] * 1e3:.2f}",
            f"{r['seconds_pml'] * 1e3:.2f}",
            f"{r['speedup']:.2f}x",
            mib(r, "dmlkit"),
            mib(r, "pml"),
            f"{abs(r['loss_dmlkit'] - r['loss_pml']):.1e}",
            f"{r['max_abs_grad_diff']:.1e}",
        ]
        for r in result["rows"]
    ]
    lines = [
        f"FastAP forward+backward, dim={result['dim']}, bins={result['bins']}, "
        f"median of {result['repeats']}, torch threads={result['threads']}",
        h.table(["M", "dmlkit ms", "PML ms", "speedup", "dmlkit MiB", "PML MiB", "|dloss|", "max|dgrad|"], rows),
    ]
    probe = next((r["memory_probe"] for r in result["rows"] if "memory_probe" in r), None)
    if probe:
        lines.append(f"memory: peak extra RSS of one forward+backward in a fresh process ({probe})")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = h.parser("fastap", __doc__, workers=("dmlkit", "pml"))
    p.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512], help="batch sizes M")
    p.add_argument("--dim", type=int, default=512, help="embedding dimension")
    p.add_argument("--bins", type=int, default=10, help="FastAP num_bins")
    p.add_argument("--repeats", type=int, default=5, help="timed forward+backward runs per side and M")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for both sides (default 1: on a shared 2-core machine, "
        "multi-threaded runs are dominated by contention); 0 keeps torch's default",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-memory", action="store_true", help="skip the subprocess memory measurement")
    return p


def _run(a: argparse.Namespace) -> dict[str, Any]:
    if a.repeats < 1 or a.dim < 1 or any(m < 2 for m in a.sizes):
        raise SystemExit("--repeats and --dim must be >= 1 and every size >= 2")
    return run(tuple(a.sizes), a.dim, a.bins, a.repeats, a.seed, memory=not a.no_memory)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    return h.main(args, _run, format_table, worker=lambda a: _worker(a.worker, a.sizes[0], a.dim, a.bins, a.seed))


if __name__ == "__main__":
    raise SystemExit(main())
