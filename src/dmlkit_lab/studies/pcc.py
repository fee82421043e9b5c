"""Chapter 4 check: GAP vs the prototype convex combination (PCC) of greedy k-centre prototypes.

For a model (a finished run's best checkpoint with ``--run``, else the
quickstart embedder at its seeded initialisation) this embeds
``--images-per-class`` test images of ``--classes`` classes, takes their local
features ``(n = h*w per image)``, scales them into the unit ball (one factor for
all, which keeps relative distances, as Sec. 4.3 does), picks ``k`` prototypes
among them by greedy k-centre (Algorithm 2, ``dmlkit.proxies.kcenter``) and
compares, per image, the GAP embedding with the PCC embedding (nearest-prototype
histogram, Eq. 4.2.5-4.2.6). Proposition 4.2.1 bounds the error by the
covering radius ``delta`` (see ``dmlkit_lab.evaluation.pcc``); the table reports
``delta``, the mean and max error, their ratio and whether the bound holds,
for several ``k``.

Written to ``--out``: ``table.md``, ``results.json`` and ``pcc_error.png``
(per-image error against k, with the covering radius).

Run: ``dmlkit study pcc --out DIR [--run RUN_DIR]`` or ``python -m dmlkit_lab.studies.pcc --out DIR``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from dmlkit_lab.evaluation.pcc import pcc_diagnostics, pcc_embedding
from dmlkit.protocols.table import markdown_grid
from dmlkit.proxies.kcenter import greedy_k_center

__all__ = ["local_feature_sets", "main", "pcc_table", "run_study"]


def local_feature_sets(model: nn.Module, images: torch.Tensor, batch_size: int = 128) -> torch.Tensor:
    """Local features ``(B, n, C)`` of ``images`` under ``model.local_features`` (eval mode, no grad)."""
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, images.shape[0], batch_size):
            local = model.local_features(images[i : i + batch_size])
            out.append(local.flatten(2).transpose(1, 2))
    return torch.cat(out)


def pcc_table(features: torch.Tensor, ks: Sequence[int], first: int = 0) -> list[dict[str, Any]]:
    """Diagnostics of Proposition 4.2.1 for greedy k-centre prototypes of ``features (B, n, d)``, one row per ``k``."""
    points = features.reshape(-1, features.shape[-1])
    rows = []
    for k in ks:
        if k > points.shape[0]:
            raise ValueError(f"k={k} prototypes but only {points.shape[0]} local features; lower --ks")
        protos = points[greedy_k_center(points, k, first=first)]
        row = {"k": k, **pcc_diagnostics(features, protos)}
        row["errors"] = (pcc_embedding(features, protos) - features.mean(1)).norm(dim=-1).tolist()
        rows.append(row)
    return rows


def _model_and_images(run: str | None, classes: int, per_class: int, seed: int) -> tuple[nn.Module, torch.Tensor, str]:
    from dmlkit.data import create_dataset

    if run is not None:
        from dmlkit.assemble import load_finished_run

        loaded = load_finished_run(run)
        model, dataset, source = loaded.model, loaded.split("test"), f"run {run}"  # its local features
    else:
        from dmlkit.config import load_config
        from dmlkit.models import build_embedder

        cfg = load_config(None, [f"seed={seed}"])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = build_embedder(cfg.model, in_channels=1)
        dataset, source = create_dataset("glyphs", "test"), f"untrained {cfg.model.backbone} (seed {seed})"
    labels = dataset.labels
    picks = torch.cat(
        [torch.nonzero(labels == c).flatten()[:per_class] for c in range(min(classes, dataset.num_classes))]
    )
    images, _ = dataset.get_batch(picks)
    return model, images, source


def run_study(
    out_dir: str | Path,
    run: str | None = None,
    ks: Sequence[int] = (8, 16, 32, 48, 64, 128),
    classes: int = 10,
    per_class: int = 16,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Write ``table.md``, ``results.json`` and ``pcc_error.png`` into ``out_dir``; return the rows."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, images, source = _model_and_images(run, classes, per_class, seed)
    features = local_feature_sets(model, images)
    scale = float(features.norm(dim=-1).max())
    features = features / max(scale, 1e-12)  # into the unit ball, relative distances kept
    rows = pcc_table(features, ks)
    lines = [
        "# GAP vs prototype convex combination (thesis Ch. 4, Proposition 4.2.1)",
        "",
        f"{source}; {images.shape[0]} test images, {features.shape[1]} local features of dim {features.shape[2]} each, "
        "scaled into the unit ball; prototypes by greedy k-centre over all local features.",
        "",
        markdown_grid(
            ["k", "covering radius delta", "mean ‖PCC−GAP‖", "max ‖PCC−GAP‖", "max / delta", "max ‖PCC−GAP‖² ≤ delta"],
            [
                [
                    str(r["k"]),
                    f"{r['delta']:.4f}",
                    f"{r['mean_error']:.4f}",
                    f"{r['max_error']:.4f}",
                    f"{r['max_error_over_delta']:.3f}",
                    "yes" if r["bound_holds"] else "NO",
                ]
                for r in rows
            ],
            align="rrrrrc",
        ),
    ]
    (out / "table.md").write_text("\n".join(lines))
    (out / "results.json").write_text(json.dumps({"source": source, "rows": rows}, indent=1))
    _plot(rows, out / "pcc_error.png")
    return rows


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, r in enumerate(rows):
        ax.scatter([i] * len(r["errors"]), r["errors"], s=6, alpha=0.4, color="tab:blue")
        ax.plot([i - 0.35, i + 0.35], [r["delta"]] * 2, color="tab:red", lw=2)
    ax.set_xticks(range(len(rows)), [str(r["k"]) for r in rows])
    ax.set(
        xlabel="prototypes k (greedy k-centre)",
        ylabel="||PCC - GAP||",
        yscale="log",
        title="per-image error (dots) vs covering radius (red)",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dmlkit study pcc", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--run", default=None, help="a finished run folder (default: an untrained quickstart model)")
    parser.add_argument("--ks", type=int, nargs="+", default=[8, 16, 32, 48, 64, 128])
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--images-per-class", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    run_study(args.out, args.run, args.ks, args.classes, args.images_per_class, args.seed)
    print((Path(args.out) / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
