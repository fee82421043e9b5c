"""Benchmark: ``dmlkit.evaluation.retrieval_metrics`` against PML's ``AccuracyCalculator``.

Data: ``n`` L2-normalised float32 embeddings of dimension ``dim`` (default the
size of the Stanford Online Products test set, 60,502 x 128). Labels are drawn
uniformly from ``round(n / per_class)`` classes, so class sizes vary
(binomial, about ``per_class`` on average, with singleton labels). Each
embedding is its class centre (a random unit vector) plus isotropic Gaussian
noise of norm about ``spread``, then normalised; this gives mid-range metric
values, so that agreement of the two implementations is a real check rather
than a comparison of zeros. Everything is drawn from ``numpy.random.default_rng(seed)``.

What is compared: the self-retrieval protocol (queries are their own
references, each query excluded from its own neighbours), i.e.
``retrieval_metrics(x, y)`` versus
``AccuracyCalculator(include=("precision_at_1", "r_precision",
"mean_average_precision_at_r"), k="max_bin_count", device=cpu).get_accuracy(x, y)``.
Values must agree to ``1e-6``.

Float32 ties: both sides rank neighbours by float32 distances, and PML's faiss
search is itself not bitwise reproducible (its results change with faiss'
BLAS block sizes and thread count). At tens of thousands of queries a few
queries typically have a same-label and a different-label neighbour whose
squared distances differ by less than float32 rounding; each such query moves
P@1 by ``1 / n``, more than ``1e-6``. When the values differ by more than
``1e-6`` the benchmark therefore also computes :func:`tie_bounds`: the range
of every metric over all orderings of neighbours whose squared distances lie
within ``TIE_RTOL * (|q|^2 + |r|^2)`` of each other (chained), and reports
whether both implementations lie inside it. A difference inside those bounds
is a float32 tie, not an error.

How it is measured: by default each side runs once in its own fresh Python
process (``python -m benchmarks.retrieval --worker SIDE ...``), which builds
the same data, then runs the call under :func:`benchmarks._harness.measure`
(wall clock; peak RSS from ``VmHWM`` after resetting it). "Peak extra memory"
is that peak minus the RSS just before the call: everything the call allocated
at its worst moment, torch, faiss and numpy buffers alike. With
``in_process=True`` both sides run one after the other in the calling process
(dmlkit first); times are then as valid, but memory that the first call freed
and the allocator kept can be reused by the second, which then looks smaller.

``--approx`` forwards to :mod:`benchmarks.retrieval_tradeoff` (a gallery on disk: recall@1, search
and build time, memory of approximate indexes against exact search, table and PNG plot), also
``dmlkit bench retrieval_tradeoff``; the metrics of one approximate setting against exact are
``dmlkit bench retrieval_large``; ``--processes N``
to :mod:`benchmarks.retrieval_sharded` (the metrics over N processes against one, also
``dmlkit bench retrieval_sharded``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

import numpy as np

from benchmarks import _harness as h

__all__ = ["make_data", "measure", "run", "main", "tie_bounds", "PML_METRICS"]

PML_METRICS = ("precision_at_1", "r_precision", "mean_average_precision_at_r")
TOLERANCE = 1e-6
#: Relative size of a float32 tie: 16 float32 rounding units of |q|^2 + |r|^2.
TIE_RTOL = 16 * 2.0**-24


def make_data(
    n: int = 60502, dim: int = 128, per_class: float = 5, seed: int = 0, spread: float = 1.5
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded embeddings ``(n, dim)`` float32 (unit norm) and int64 labels ``(n,)``."""
    if n < 2 or dim < 1 or per_class <= 0:
        raise ValueError(f"need n >= 2, dim >= 1, per_class > 0; got n={n}, dim={dim}, per_class={per_class}")
    rng = np.random.default_rng(seed)
    num_classes = max(1, round(n / per_class))
    labels = rng.integers(0, num_classes, size=n, dtype=np.int64)
    centres = rng.standard_normal((num_classes, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x *= np.float32(spread / math.sqrt(dim))
    x += centres[labels]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, labels


def tie_bounds(x: np.ndarray, y: np.ndarray, rtol: float = TIE_RTOL) -> tuple[dict[str, float], dict[str, float], int]:
    """Range of the self-retrieval metrics over float32-tied neighbour orders.

    The exact neighbours of each query (the nearest ``max R + 1``) are split
    into groups of consecutive neighbours whose squared distances differ by at
    most ``rtol * (|q|^2 + |r|^2)``, the size of the float32 rounding error of
    faiss' expansion ``|q|^2 + |r|^2 - 2 q.r`` that PML's search ranks by. Putting the
    same-label neighbours first (last) inside every group gives the highest
    (lowest) value of every metric, since all of them reward same-label items
    earlier. Returns ``(low, high, number of queries whose order matters)``.
    """
    from dmlkit.evaluation.knn import knn_search
    from dmlkit.evaluation.metric_values import MetricSums as _Sums

    n = len(y)
    _, codes = np.unique(y, return_inverse=True)
    big_r = np.bincount(codes)[codes] - 1
    active = np.flatnonzero(big_r > 0)
    window = int(big_r.max())
    num_k = min(n - 1, window + 1)
    res = knn_search(x, num_k, squared=True)
    d2 = res.distances.numpy().astype(np.float64)[active]
    idx = res.indices.numpy()[active]
    match = codes[idx] == codes[active, None]
    sq = (x.astype(np.float64) ** 2).sum(axis=1)
    tol = rtol * (sq[active, None] + sq[idx])
    gap = np.diff(d2, axis=1) > np.maximum(tol[:, 1:], tol[:, :-1])
    group = np.concatenate([np.zeros((len(active), 1), np.int64), np.cumsum(gap, axis=1)], axis=1)
    low, high = _Sums(()), _Sums(())
    hi_order = np.argsort(2 * group + (~match), axis=1, kind="stable")
    lo_order = np.argsort(2 * group + match, axis=1, kind="stable")
    hi_match = np.take_along_axis(match, hi_order, axis=1)[:, :window]
    lo_match = np.take_along_axis(match, lo_order, axis=1)[:, :window]
    high.add(hi_match, big_r[active])
    low.add(lo_match, big_r[active])
    affected = int((hi_match != lo_match).any(axis=1).sum())
    low_all, high_all = low.result(), high.result()
    return {m: low_all[m] for m in PML_METRICS}, {m: high_all[m] for m in PML_METRICS}, affected


def _call(side: str, x: Any, y: Any) -> dict[str, float]:
    import torch

    if side == "dmlkit":
        from dmlkit.evaluation.retrieval import retrieval_metrics

        out = retrieval_metrics(x, y)
        return {k: out[k] for k in PML_METRICS}
    if side == "pml":
        from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

        calc = AccuracyCalculator(include=PML_METRICS, k="max_bin_count", device=torch.device("cpu"))
        out = calc.get_accuracy(x, y)
        return {k: float(out[k]) for k in PML_METRICS}
    raise ValueError(f"side must be 'dmlkit' or 'pml'; got {side!r}")


def measure(side: str, x: Any, y: Any) -> dict[str, Any]:
    """Run one side once: wall time, peak extra RSS and metric values."""
    import torch  # noqa: F401  (imported before the baseline)
    import dmlkit.evaluation.retrieval  # noqa: F401
    import pytorch_metric_learning.utils.accuracy_calculator  # noqa: F401

    m = h.measure(lambda: _call(side, x, y))
    return {"seconds": m.seconds, "peak_extra_bytes": m.peak_extra_bytes, "memory_probe": m.probe, "values": m.value}


def _worker(side: str, n: int, dim: int, per_class: float, seed: int) -> dict[str, Any]:
    import torch

    x, y = make_data(n, dim, per_class, seed)
    return measure(side, torch.from_numpy(x), torch.from_numpy(y))


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _subprocess(side: str, n: int, dim: int, per_class: float, seed: int) -> dict[str, Any]:
    return h.run_worker(
        "benchmarks.retrieval", side, ["--n", n, "--dim", dim, "--per-class", per_class, "--seed", seed]
    )


def run(
    n: int = 60502,
    dim: int = 128,
    per_class: float = 5,
    seed: int = 0,
    in_process: bool = False,
) -> dict[str, Any]:
    """Time both implementations on the same data and compare their values.

    Returns a dict with the data description, ``dmlkit_seconds``,
    ``pml_seconds``, ``speedup`` (PML time / dmlkit time),
    ``dmlkit_peak_extra_mb``, ``pml_peak_extra_mb``, both value dicts,
    ``max_abs_diff``, ``values_match`` (``max_abs_diff <= 1e-6``) and
    ``agree`` (values match, or both lie within the float32-tie bounds; when
    they do not match, ``tie_low``, ``tie_high``, ``queries_with_ties`` and
    ``within_tie_bounds`` are added, see :func:`tie_bounds`).
    """
    x, y = make_data(n, dim, per_class, seed)
    counts = np.bincount(y)
    info: dict[str, Any] = {
        "n": n,
        "dim": dim,
        "per_class": per_class,
        "seed": seed,
        "num_labels": int((counts > 0).sum()),
        "max_bin_count": int(counts.max()),
        "singleton_labels": int((counts == 1).sum()),
        "mode": "in-process" if in_process else "one fresh process per side",
        "cpus": os.cpu_count(),
        "torch_threads": _torch_threads(),
        "load_before": round(os.getloadavg()[0], 2),
    }
    if in_process:
        import torch

        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        ours = measure("dmlkit", xt, yt)
        theirs = measure("pml", xt, yt)
    else:
        del x, y
        ours = _subprocess("dmlkit", n, dim, per_class, seed)
        theirs = _subprocess("pml", n, dim, per_class, seed)
    diffs = [abs(ours["values"][k] - theirs["values"][k]) for k in PML_METRICS]
    diff = math.nan if any(math.isnan(d) for d in diffs) else max(diffs)  # max() would hide a NaN
    if not diff <= TOLERANCE:  # NaN is a disagreement too
        if not in_process:
            x, y = make_data(n, dim, per_class, seed)
        low, high, affected = tie_bounds(x, y)
        inside = all(
            low[k] - TOLERANCE <= side["values"][k] <= high[k] + TOLERANCE
            for side in (ours, theirs)
            for k in PML_METRICS
        )
        info.update(tie_low=low, tie_high=high, queries_with_ties=affected, within_tie_bounds=inside)
    info.update(
        dmlkit_seconds=ours["seconds"],
        pml_seconds=theirs["seconds"],
        speedup=theirs["seconds"] / ours["seconds"],
        dmlkit_peak_extra_mb=ours["peak_extra_bytes"] / 2**20,
        pml_peak_extra_mb=theirs["peak_extra_bytes"] / 2**20,
        memory_probe=ours["memory_probe"],
        dmlkit_values=ours["values"],
        pml_values=theirs["values"],
        max_abs_diff=diff,
        values_match=bool(diff <= TOLERANCE),
    )
    info["load_after"] = round(os.getloadavg()[0], 2)
    info["agree"] = info["values_match"] or bool(info.get("within_tie_bounds", False))
    return info


def format_table(r: dict[str, Any]) -> str:
    """Plain-text table of a :func:`run` result."""
    lines = [
        f"retrieval metrics, n={r['n']} dim={r['dim']} labels={r['num_labels']} "
        f"(max class size {r['max_bin_count']}, {r['singleton_labels']} singletons), seed={r['seed']}",
        f"measured: {r['mode']}; memory = peak RSS during the call minus RSS before it ({r['memory_probe']})",
        f"machine: {r['cpus']} CPUs, torch threads {r['torch_threads']}; 1-min load average "
        f"{r['load_before']} before / {r['load_after']} after (this run's own threads included)",
        "",
        h.table(
            ["", "dmlkit", "PML"],
            [
                ["time (s)", f"{r['dmlkit_seconds']:.2f}", f"{r['pml_seconds']:.2f}"],
                ["peak extra memory (MB)", f"{r['dmlkit_peak_extra_mb']:.0f}", f"{r['pml_peak_extra_mb']:.0f}"],
                *([k, f"{r['dmlkit_values'][k]:.8f}", f"{r['pml_values'][k]:.8f}"] for k in PML_METRICS),
            ],
        ),
        "",
        f"speed-up (PML time / dmlkit time): {r['speedup']:.2f}x",
        f"values match to {TOLERANCE:g}: {'yes' if r['values_match'] else 'no'} (max abs diff {r['max_abs_diff']:.3g})",
    ]
    if not r["values_match"]:
        lines.append(
            f"float32 ties: {r['queries_with_ties']} queries have a same-label and a different-label "
            "neighbour at distances equal within float32 rounding; over all orders of those ties:"
        )
        for k in PML_METRICS:
            lines.append(f"  {k:28s}[{r['tie_low'][k]:.8f}, {r['tie_high'][k]:.8f}]")
        lines.append(
            "both implementations lie within these bounds: "
            + ("yes (the difference is float32 ties)" if r["within_tie_bounds"] else "NO")
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = h.parser(
        "retrieval",
        "Time dmlkit's retrieval metrics against pytorch-metric-learning's "
        "AccuracyCalculator on random clustered embeddings.",
        workers=("dmlkit", "pml"),
    )
    p.add_argument("--n", type=int, default=60502, help="number of embeddings (default 60502)")
    p.add_argument("--dim", type=int, default=128, help="embedding dimension (default 128)")
    p.add_argument("--per-class", type=float, default=5, help="mean items per label (default 5)")
    p.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    p.add_argument("--in-process", action="store_true", help="run both sides in this process")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``dmlkit bench retrieval``; returns 0 when the values agree
    (to 1e-6, or within the float32-tie bounds). ``--approx`` runs :mod:`benchmarks.retrieval_tradeoff`,
    ``--processes N`` :mod:`benchmarks.retrieval_sharded` (N processes against one)."""
    if "--approx" in (sys.argv[1:] if argv is None else argv):
        from benchmarks.retrieval_tradeoff import main as approx_main

        return approx_main(argv)
    if any(a == "--processes" or a.startswith("--processes=") for a in (sys.argv[1:] if argv is None else argv)):
        from benchmarks.retrieval_sharded import main as sharded_main

        return sharded_main(argv)
    return h.main(
        _parser().parse_args(argv),
        lambda a: run(a.n, a.dim, a.per_class, a.seed, in_process=a.in_process),
        format_table,
        worker=lambda a: _worker(a.worker, a.n, a.dim, a.per_class, a.seed),
        ok=lambda r: r["agree"],
    )


if __name__ == "__main__":
    sys.exit(main())
