"""Benchmark: GSP with the closed-form gradient (Prop. 5.2.2) against autograd through the
unrolled iterations of Prop. 5.2.1 (the thesis' Fig. 5.9), and the GSP vs GAP training step.

Part 1, the layer: random local features ``(B, n, d)`` and prototypes ``(m, d)``
(B = 32, n = 49, m = 64, d = 128 by default); for each number of iterations,
forward + backward of ``generalized_sum_pool`` (closed form), of
``generalized_sum_pool_unrolled`` with the proposition's iteration written
literally (``K^T 1`` and ``K rho`` recomputed each step) and with the column sums
hoisted out of the loop (the cheapest unrolled form).  Median wall time over
``--repeats`` interleaved runs in this process, the ratio unrolled / closed form,
and the largest gradient difference (closed form vs literal unrolled).  Peak
memory: each side and iteration count runs once more in a fresh subprocess that
warms up, resets the kernel's peak-RSS counter and reads ``VmHWM`` after one
forward + backward ("peak extra" = peak minus the RSS before the call;
:func:`benchmarks._harness.measure`).

Part 2, the model: one training step (forward, multi-similarity loss, backward,
Adam step) of the quickstart embedder (ResNet-20 on 32x32 one-channel glyph-sized
images, batch 64) in the thesis' Sec. 5.2.4 architecture (1x1 convolution to
128-d local embeddings, the pooled vector is the embedding) with GAP and with GSP
(64 prototypes, mu 0.3, eps 5, 100 iterations on the 8x8x128 local map); median
time and the ratio.

Run: ``dmlkit bench gsp`` (defaults: 1 torch thread, iters 10 25 50 100).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any, Callable

import torch

from benchmarks import _harness as h
from dmlkit.pooling.gsp import generalized_sum_pool, generalized_sum_pool_unrolled

__all__ = ["format_table", "main", "run", "run_layer", "run_model"]

SIDES = ("closed", "unrolled", "hoisted")


def make_inputs(b: int, n: int, m: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Local features (ReLU-like, non-negative), prototypes near the unit sphere, an output gradient."""
    g = torch.Generator().manual_seed(seed)
    feats = torch.relu(torch.randn(b, n, d, generator=g)) / d**0.5 * 2
    protos = torch.randn(m, d, generator=g) / d**0.5
    g_out = torch.randn(b, d, generator=g)
    return feats, protos, g_out


def _pool_fn(side: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    if side == "closed":
        return generalized_sum_pool
    if side in ("unrolled", "hoisted"):
        unroll = "literal" if side == "unrolled" else "hoisted"
        return lambda f, w, mu, eps, iters: generalized_sum_pool_unrolled(f, w, mu, eps, iters, unroll=unroll)
    raise ValueError(f"side must be one of {SIDES}, got {side!r}")


def _layer_step(
    side: str, f: torch.Tensor, w: torch.Tensor, g_out: torch.Tensor, iters: int, mu: float, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    fg, wg = f.clone().requires_grad_(True), w.clone().requires_grad_(True)
    pooled, _ = _pool_fn(side)(fg, wg, mu, eps, iters)
    (pooled * g_out).sum().backward()
    return fg.grad, wg.grad


def _layer_worker(
    side: str, b: int, n: int, m: int, d: int, iters: int, mu: float, eps: float, seed: int
) -> dict[str, Any]:
    f, w, g_out = make_inputs(b, n, m, d, seed)
    res = h.measure(lambda: _layer_step(side, f, w, g_out, iters, mu, eps), warmup=1)
    return {"peak_extra_bytes": res.peak_extra_bytes, "memory_probe": res.probe}


def _subprocess(
    side: str, b: int, n: int, m: int, d: int, iters: int, mu: float, eps: float, seed: int
) -> dict[str, Any]:
    return h.run_worker(
        "benchmarks.gsp",
        side,
        [
            "--batch",
            b,
            "--n",
            n,
            "--m",
            m,
            "--d",
            d,
            "--iters",
            iters,
            "--mu",
            mu,
            "--eps",
            eps,
            "--seed",
            seed,
            "--threads",
            torch.get_num_threads(),
        ],
    )


def run_layer(
    iters_list: tuple[int, ...] = (10, 25, 50, 100),
    b: int = 32,
    n: int = 49,
    m: int = 64,
    d: int = 128,
    mu: float = 0.3,
    eps: float = 5.0,
    repeats: int = 5,
    seed: int = 0,
    memory: bool = True,
) -> list[dict[str, Any]]:
    """Time (and memory) of the three sides for each iteration count."""
    f, w, g_out = make_inputs(b, n, m, d, seed)
    rows = []
    for iters in iters_list:
        grads = {s: _layer_step(s, f, w, g_out, iters, mu, eps) for s in SIDES}  # warm-up + agreement
        diff = float(
            torch.stack([(a - c).abs().max() for a, c in zip(grads["closed"], grads["unrolled"])]).max()
        )  # NaN shows
        scale = max(float(c.abs().max()) for c in grads["unrolled"])
        times = h.interleaved({s: (lambda s=s: _layer_step(s, f, w, g_out, iters, mu, eps)) for s in SIDES}, repeats)
        row: dict[str, Any] = {"iters": iters, "max_abs_grad_diff": diff, "max_abs_grad": scale}
        for s in SIDES:
            row[f"seconds_{s}"] = statistics.median(times[s])
            if memory:
                res = _subprocess(s, b, n, m, d, iters, mu, eps, seed)
                row[f"peak_extra_bytes_{s}"] = res["peak_extra_bytes"]
                row["memory_probe"] = res["memory_probe"]
        row["speedup_vs_unrolled"] = row["seconds_unrolled"] / row["seconds_closed"]
        row["speedup_vs_hoisted"] = row["seconds_hoisted"] / row["seconds_closed"]
        rows.append(row)
    return rows


def run_model(batch: int = 64, repeats: int = 5, iters: int = 100, seed: int = 0) -> dict[str, Any]:
    """Median time of one training step of the quickstart embedder with GAP + 1x1 conv and with GSP + 1x1 conv."""
    from pytorch_metric_learning.losses import MultiSimilarityLoss

    from dmlkit.models.config import ModelConfig, build_embedder

    g = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, 1, 32, 32, generator=g)
    labels = torch.arange(batch) // 4
    loss_fn = MultiSimilarityLoss()
    steps: dict[str, Callable[[], None]] = {}
    for name, params in (("gap", {}), ("gsp", {"num_prototypes": 64, "mu": 0.3, "eps": 5.0, "iters": iters})):
        torch.manual_seed(seed)  # model init under a fixed seed, as the trainer builds it
        model = build_embedder(
            ModelConfig(
                backbone="resnet20", pooling=name, pooling_params=params, embedding_dim=128, local_dim=128, head="none"
            ),
            in_channels=1,
        )  # Sec. 5.2.4
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def step(model: torch.nn.Module = model, opt: torch.optim.Optimizer = opt) -> None:
            opt.zero_grad(set_to_none=True)
            loss_fn(model(images), labels).backward()
            opt.step()

        steps[name] = step
    times = h.interleaved(steps, repeats, warmup=1)
    out = {f"seconds_{k}": statistics.median(v) for k, v in times.items()}
    out.update({f"min_seconds_{k}": min(v) for k, v in times.items()})
    out["ratio"] = out["seconds_gsp"] / out["seconds_gap"]
    out["ratio_of_min"] = out["min_seconds_gsp"] / out["min_seconds_gap"]
    out.update({"batch": batch, "iters": iters, "repeats": repeats})
    return out


def run(
    iters_list: tuple[int, ...] = (10, 25, 50, 100),
    b: int = 32,
    n: int = 49,
    m: int = 64,
    d: int = 128,
    mu: float = 0.3,
    eps: float = 5.0,
    repeats: int = 5,
    seed: int = 0,
    memory: bool = True,
    model: bool = True,
) -> dict[str, Any]:
    """Both parts; see the module docstring."""
    result: dict[str, Any] = {
        "B": b,
        "n": n,
        "m": m,
        "d": d,
        "mu": mu,
        "eps": eps,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "layer": run_layer(iters_list, b, n, m, d, mu, eps, repeats, seed, memory),
    }
    if model:
        result["model"] = run_model(repeats=repeats, iters=max(iters_list), seed=seed)
    return result


def format_table(result: dict[str, Any]) -> str:
    """The benchmark result as a plain-text table."""

    def mem(r: dict[str, Any], s: str) -> str:
        v = r.get(f"peak_extra_bytes_{s}")
        return f"{v / h.MIB:.1f}" if v is not None else "nan"

    rows = [
        [
            str(r["iters"]),
            f"{r['seconds_closed'] * 1e3:.2f}",
            f"{r['seconds_unrolled'] * 1e3:.2f}",
            f"{r['speedup_vs_unrolled']:.2f}x",
            f"{r['seconds_hoisted'] * 1e3:.2f}",
            f"{r['speedup_vs_hoisted']:.2f}x",
            mem(r, "closed"),
            mem(r, "unrolled"),
            mem(r, "hoisted"),
            f"{r['max_abs_grad_diff']:.1e}",
        ]
        for r in result["layer"]
    ]
    lines = [
        f"GSP layer forward+backward, B={result['B']} n={result['n']} m={result['m']} d={result['d']} "
        f"mu={result['mu']} eps={result['eps']}, median of {result['repeats']}, torch threads={result['threads']}",
        h.table(
            [
                "iters",
                "closed ms",
                "unrolled ms",
                "speedup",
                "hoisted ms",
                "speedup",
                "closed MiB",
                "unrolled MiB",
                "hoisted MiB",
                "max|dgrad|",
            ],
            rows,
        ),
    ]
    lines.append(
        "unrolled = autograd through Prop. 5.2.1 as written (K^T 1 and K rho every step); "
        "hoisted = autograd through the same iterates with the column sums computed once; "
        "speedup = that side's time / closed-form time; max|dgrad| = closed vs unrolled "
        f"(largest gradient entry {max(r['max_abs_grad'] for r in result['layer']):.1e})"
    )
    probe = next((r["memory_probe"] for r in result["layer"] if "memory_probe" in r), None)
    if probe:
        lines.append(f"memory: peak extra RSS of one forward+backward in a fresh process ({probe})")
    if "model" in result:
        mo = result["model"]
        lines.append(
            f"training step, quickstart embedder (ResNet-20, 1x32x32, 1x1 conv to 128-d, no head; batch {mo['batch']}, "
            "MS loss, Adam): "
            f"GAP {mo['seconds_gap'] * 1e3:.1f} ms, GSP (m=64, iters={mo['iters']}) {mo['seconds_gsp'] * 1e3:.1f} ms, "
            f"ratio GSP/GAP {mo['ratio']:.2f}x (medians; fastest runs: GAP {mo['min_seconds_gap'] * 1e3:.1f} ms, "
            f"GSP {mo['min_seconds_gsp'] * 1e3:.1f} ms, ratio {mo['ratio_of_min']:.2f}x)"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = h.parser("gsp", __doc__, workers=SIDES)
    p.add_argument("--iters", type=int, nargs="+", default=[10, 25, 50, 100], help="iterations of Prop. 5.2.1")
    p.add_argument("--batch", type=int, default=32, help="B")
    p.add_argument("--n", type=int, default=49, help="local features per sample")
    p.add_argument("--m", type=int, default=64, help="prototypes")
    p.add_argument("--d", type=int, default=128, help="feature dimension")
    p.add_argument("--mu", type=float, default=0.3)
    p.add_argument("--eps", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=5, help="timed runs per side")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1, the shared-machine setting); 0 keeps torch's default",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-memory", action="store_true", help="skip the subprocess memory measurement")
    p.add_argument("--no-model", action="store_true", help="skip the GSP vs GAP training-step comparison")
    return p


def _run(a: argparse.Namespace) -> dict[str, Any]:
    if a.repeats < 1 or min(a.iters) < 1 or min(a.batch, a.n, a.m, a.d) < 1:
        raise SystemExit("--repeats, --iters, --batch, --n, --m and --d must all be >= 1")
    return run(
        tuple(a.iters),
        a.batch,
        a.n,
        a.m,
        a.d,
        a.mu,
        a.eps,
        a.repeats,
        a.seed,
        memory=not a.no_memory,
        model=not a.no_model,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    return h.main(
        args,
        _run,
        format_table,
        worker=lambda a: _layer_worker(a.worker, a.batch, a.n, a.m, a.d, a.iters[0], a.mu, a.eps, a.seed),
    )


if __name__ == "__main__":
    raise SystemExit(main())
