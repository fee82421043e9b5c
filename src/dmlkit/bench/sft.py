"""Benchmark: the rank-2 SFT update against building the ``d x d`` matrix of Eq. 4 per pair.

Data: ``B`` (default 60, the paper's batch size) L2-normalised float32 features of
dimension ``d`` (default 512, the paper's embedding size), each with its own source and
target centre (random unit vectors), drawn from ``torch.Generator().manual_seed(seed)``.

Compared, in one process and one run:

* ``rank2``: :func:`dmlkit.augment.spherical_transform(x, mu_from, mu_to)` -- ``O(B d)``.
* ``matrix``: :func:`dmlkit.augment.rotation_matrix(mu_from, mu_to)` builds the ``(B, d, d)``
  matrices of Eq. 4 (one per pair, batched), then ``A @ x`` -- ``O(B d^2)`` time and memory.

Each side is timed forward-only and forward + backward (gradient w.r.t. ``x``), as the
median of ``repeats`` timed calls after ``warmup`` untimed ones; the two outputs are
checked to agree. Prints the times and the ratio ``matrix / rank2`` (goal: >= 10x), then
the cost of a whole SFT training step relative to the plain one (:mod:`dmlkit.bench.sft_step`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable

import torch

from dmlkit.augment.sft import rotation_matrix, spherical_transform

__all__ = ["run", "main"]


def _matrix(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (rotation_matrix(a, b) @ x.unsqueeze(-1)).squeeze(-1)


def _time(fn: Callable[[], Any], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(batch: int = 60, dim: int = 512, repeats: int = 10, warmup: int = 2, seed: int = 0) -> dict[str, Any]:
    """Time both implementations; returns seconds per call, ratios and the max abs difference."""
    g = torch.Generator().manual_seed(seed)
    x, a, b = (torch.nn.functional.normalize(torch.randn(batch, dim, generator=g), dim=1) for _ in range(3))
    diff = (spherical_transform(x, a, b) - _matrix(x, a, b)).abs().max().item()

    def fwd(f: Callable[..., torch.Tensor]) -> Callable[[], Any]:
        def call() -> None:
            with torch.no_grad():
                f(x, a, b)

        return call

    def fwd_bwd(f: Callable[..., torch.Tensor]) -> Callable[[], Any]:
        def call() -> None:
            xg = x.clone().requires_grad_(True)
            f(xg, a, b).sum().backward()

        return call

    out: dict[str, Any] = {
        "batch": batch,
        "dim": dim,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "max_abs_diff": diff,
    }
    for name, wrap in (("forward", fwd), ("forward_backward", fwd_bwd)):
        t_r = _time(wrap(spherical_transform), warmup, repeats)
        t_m = _time(wrap(_matrix), warmup, repeats)
        out[name] = {"rank2_s": t_r, "matrix_s": t_m, "ratio": t_m / t_r}
    return out


def format_table(r: dict[str, Any]) -> str:
    lines = [
        f"SFT rank-2 vs explicit Eq. 4 matrix: B={r['batch']}, d={r['dim']}, float32, "
        f"{r['threads']} threads, median of {r['repeats']}; max |diff| = {r['max_abs_diff']:.2e}",
        f"{'':18s}{'rank-2 (ms)':>14s}{'matrix (ms)':>14s}{'ratio':>10s}",
    ]
    for name in ("forward", "forward_backward"):
        m = r[name]
        lines.append(f"{name:18s}{m['rank2_s'] * 1e3:14.3f}{m['matrix_s'] * 1e3:14.3f}{m['ratio']:9.1f}x")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dmlkit bench sft", description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=60, help="number of features B (default 60)")
    p.add_argument("--dim", type=int, default=512, help="feature dimension d (default 512)")
    p.add_argument("--repeats", type=int, default=10, help="timed calls per measurement (default 10)")
    p.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    p.add_argument("--step-repeats", type=int, default=10, help="timed training steps per variant (0 skips the step table)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    r = run(batch=args.batch, dim=args.dim, repeats=args.repeats, seed=args.seed)
    steps = None
    if args.step_repeats > 0:
        from dmlkit.bench.sft_step import format_step_table, step_costs

        steps = step_costs(repeats=args.step_repeats, seed=args.seed)
    if args.json:
        print(json.dumps({**r, "training_step": steps}, indent=2))
    else:
        print(format_table(r))
        if steps is not None:
            print()
            print(format_step_table(steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
