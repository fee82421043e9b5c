"""Benchmark: dmlkit's all-triplets margin loss against PML's ``TripletMarginLoss`` (forward and backward).

For each shape ``BATCHxREFS`` (a batch of ``BATCH`` embeddings of ``--classes`` classes against ``REFS``
references: the batch itself when ``REFS`` is ``self``, else e.g. CCP's proxies, ``--classes x 8``), both losses
compute the loss and its gradient ``--repeats`` times in this process, interleaved, on the CPU and, when there is
one, on CUDA (each call synchronised). The table gives the median time of a call of each, their ratio
(PML / dmlkit), the peak memory above the start on CUDA, and whether both losses are equal bit for bit.
CCP with the triplet loss on the font testbed (60 images against 330 classes x 8 proxies) spent most of its
1.4 s CPU step in PML's B x R x R triplet mask.

Run: ``python -m benchmarks.triplet --shapes 60xself 60x2640 120x5280 --repeats 20``.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch
from pytorch_metric_learning import losses as pml_losses

from benchmarks import _harness as h
from dmlkit.losses.triplet_margin_loss import TripletMarginLoss

__all__ = ["main", "run", "format_table"]


def _inputs(batch: int, refs: str, classes: int, dim: int, device: str) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(batch, dim, generator=g), dim=1).to(device)
    y = torch.randint(classes, (batch,), generator=g).to(device)
    if refs == "self":
        return x, y, None, None
    r = int(refs)
    ref = torch.nn.functional.normalize(torch.randn(r, dim, generator=g), dim=1).to(device)
    return x, y, ref, (torch.arange(r) % classes).to(device)


def _step(loss: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ref: Any, ref_y: Any) -> torch.Tensor:
    leaf = x.detach().requires_grad_(True)
    value = loss(leaf, y, ref_emb=ref, ref_labels=ref_y)
    value.backward()
    return torch.cat([value.detach().reshape(1), leaf.grad.reshape(-1)])


def _peak(fn: Any, device: str) -> int | None:
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - start


def run(shapes: list[str], classes: int, dim: int, repeats: int, threads: int = 1) -> dict[str, Any]:
    torch.set_num_threads(threads)
    rows = []
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        sync = torch.cuda.synchronize if device == "cuda" else None
        for spec in shapes:
            batch, refs = spec.split("x")
            x, y, ref, ref_y = _inputs(int(batch), refs, classes, dim, device)
            ours, pml = TripletMarginLoss(margin=0.0961), pml_losses.TripletMarginLoss(margin=0.0961)
            calls = {"dmlkit": lambda: _step(ours, x, y, ref, ref_y), "pml": lambda: _step(pml, x, y, ref, ref_y)}
            times = h.interleaved(calls, repeats, warmup=2, sync=sync)
            rows.append(
                {
                    "device": device,
                    "shape": spec,
                    "dmlkit_s": statistics.median(times["dmlkit"]),
                    "pml_s": statistics.median(times["pml"]),
                    "peak_bytes": [_peak(calls["dmlkit"], device), _peak(calls["pml"], device)],
                    "equal": bool(torch.equal(calls["dmlkit"](), calls["pml"]())),
                }
            )
            rows[-1]["ratio"] = rows[-1]["pml_s"] / rows[-1]["dmlkit_s"]
    return {"classes": classes, "dim": dim, "repeats": repeats, "threads": threads, "rows": rows}


def format_table(result: dict[str, Any]) -> str:
    def mib(v: int | None) -> str:
        return "-" if v is None else f"{v / 2**20:.0f}"

    head = ["device", "batch x refs", "dmlkit ms", "PML ms", "PML / dmlkit", "peak MiB (dmlkit, PML)", "equal"]
    body = [
        [
            r["device"],
            r["shape"],
            f"{1e3 * r['dmlkit_s']:.2f}",
            f"{1e3 * r['pml_s']:.2f}",
            f"{r['ratio']:.1f}",
            f"{mib(r['peak_bytes'][0])}, {mib(r['peak_bytes'][1])}",
            "yes" if r["equal"] else "NO",
        ]
        for r in result["rows"]
    ]
    return (
        f"triplet margin loss over all triplets, forward + backward, {result['classes']} classes, dim "
        f"{result['dim']}, median of {result['repeats']} calls, {result['threads']} thread(s)\n" + h.table(head, body)
    )


def main(argv: list[str] | None = None) -> int:
    p = h.parser("triplet", __doc__)
    p.add_argument(
        "--shapes",
        nargs="+",
        default=["60xself", "60x2640", "120x5280"],
        help="BATCHxREFS: REFS references, or 'self' for the batch against itself",
    )
    p.add_argument("--classes", type=int, default=330)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    return h.main(
        args,
        lambda a: run(a.shapes, a.classes, a.dim, a.repeats, a.threads),
        format_table,
        ok=lambda r: all(row["equal"] for row in r["rows"]),
    )


if __name__ == "__main__":
    raise SystemExit(main())
