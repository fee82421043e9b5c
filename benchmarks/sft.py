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
the cost of a whole SFT training step relative to the plain one (:mod:`benchmarks.sft_step`).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

import torch

from benchmarks import _harness as h
from benchmarks.sft_step import format_step_table, step_costs
from dmlkit.augment.sft import rotation_matrix, spherical_transform

__all__ = ["run", "main"]


def _matrix(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (rotation_matrix(a, b) @ x.unsqueeze(-1)).squeeze(-1)


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
        t_r = h.median_time(wrap(spherical_transform), repeats, warmup)
        t_m = h.median_time(wrap(_matrix), repeats, warmup)
        out[name] = {"rank2_s": t_r, "matrix_s": t_m, "ratio": t_m / t_r}
    return out


def format_table(r: dict[str, Any]) -> str:
    rows = [
        [name, f"{r[name]['rank2_s'] * 1e3:.3f}", f"{r[name]['matrix_s'] * 1e3:.3f}", f"{r[name]['ratio']:.1f}x"]
        for name in ("forward", "forward_backward")
    ]
    return "\n".join(
        [
            f"SFT rank-2 vs explicit Eq. 4 matrix: B={r['batch']}, d={r['dim']}, float32, "
            f"{r['threads']} threads, median of {r['repeats']}; max |diff| = {r['max_abs_diff']:.2e}",
            h.table(["", "rank-2 (ms)", "matrix (ms)", "ratio"], rows),
        ]
    )


def _parser() -> argparse.ArgumentParser:
    p = h.parser("sft", __doc__)
    p.add_argument("--batch", type=int, default=60, help="number of features B (default 60)")
    p.add_argument("--dim", type=int, default=512, help="feature dimension d (default 512)")
    p.add_argument("--repeats", type=int, default=10, help="timed calls per measurement (default 10)")
    p.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    p.add_argument(
        "--step-repeats", type=int, default=10, help="timed training steps per variant (0 skips the step table)"
    )
    return p


def _run(a: argparse.Namespace) -> dict[str, Any]:
    r = run(batch=a.batch, dim=a.dim, repeats=a.repeats, seed=a.seed)
    steps = step_costs(repeats=a.step_repeats, seed=a.seed) if a.step_repeats > 0 else None
    return {**r, "training_step": steps}


def _table(r: dict[str, Any]) -> str:
    steps = r["training_step"]
    return format_table(r) + ("" if steps is None else "\n\n" + format_step_table(steps))


def main(argv: list[str] | None = None) -> int:
    return h.main(_parser().parse_args(argv), _run, _table)


if __name__ == "__main__":
    raise SystemExit(main())
