"""The collage study of GSP (thesis Sec. 5.3.2, Fig. 5.5) on ``glyph_collage``: GAP vs GSP vs GSP + L_ZS.

Each variant is an ordinary ``dmlkit`` training run (``Trainer``) on the glyph
collages (one foreground glyph + three background glyphs per image; foreground
and background classes disjoint across train / validation / test), differing
only in ``model.pooling`` and ``methods.zero_shot.weight``. A variant is a pooling
name of ``list_poolings()`` with an optional ``+zs`` suffix (zero-shot loss,
needs ``gsp``), e.g. ``gap``, ``gsp``, ``gsp+zs``, ``gmp``, ``gem``.

Settings from Sec. 5.3.2: Adam, learning rate 1e-3, reduce-on-plateau (factor
0.5), l2-normalised embeddings, batches of 4 samples x 16 classes, GSP with
``m = 64``, ``mu = 0.2``, ``eps = 10``, ``lam = 0.5``. Ours: the quickstart's
multi-similarity loss (the thesis does not name the loss), 32 px collages of
16 px glyph cells (an 8 x 8 feature map, 4 x 4 locations per cell), 50
iterations of Proposition 5.2.1 and a small step budget (``--max-steps``).

Two backbones (``--backbone``):

* ``scratch`` (the default, the first version of the study): ResNet-20 from scratch, its 64-channel map
  pooled and followed by a linear head to 128-d; GSP prototypes start random.
* ``pretrained`` (``pretrained_overrides``, the thesis' set-up: "ResNet20 pretrained on Cifar100 ... and follow
  the implementation explained in Sec. 5.2.4"): the testbed's backbone (``model.pretrained: glyphs-resnet20``,
  BatchNorm frozen, backbone lr 1e-4 = a tenth of the new layers' 1e-3, weight decay 1e-4, as
  ``configs/testbed/testbed.yaml``), a 1x1 convolution to the 128-d local embedding, the pooling, l2, no head
  (``model.head: none``), for GAP and GSP alike, so only the pooling differs; GSP prototypes start as the greedy
  k-centres of 1,024 GAP-pooled vectors (``init: kcenter``; 16 steps of GAP at batch 64). The glyph classes the
  backbone was pretrained on are the first half by code point, which is where the default collage layout draws
  its *training* characters (foreground and background); ``--class-pool testbed`` draws every role from the
  testbed's DML classes instead (``dmlkit_lab.datasets.collage``).

Written to ``--out``: ``table.md`` (mean ± std over ``--seeds`` of test MAP@R, P@1,
the share of the pooling weight that falls on the foreground quarter (0.25 for GAP) and the
entropy of the pooling weights (``log 64`` = 4.16 for GAP); with a ``gap`` run, the per-seed and mean
paired differences against it), ``results.json`` (one entry per run), ``heatmaps.png`` (test collages
with the per-location GSP weights ``sum_i pi_ij / mu`` = ``(1/n - rho_j)/mu`` of
Eq. 5.2.1 overlaid, first seed) and one run folder per variant and seed under
``runs/`` (finished runs are reused; ``--jobs N`` trains N at a time).

Run: ``dmlkit study collage --out DIR`` or ``python -m dmlkit_lab.studies.collage --out DIR``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from dmlkit.config import load_config
from dmlkit_lab.datasets.collage import CLASS_POOLS
from dmlkit.pooling.gsp_diagnostics import weight_entropy
from dmlkit_lab.studies.paired_runs import paired_differences

__all__ = [
    "BACKBONES",
    "DEFAULT_VARIANTS",
    "foreground_share",
    "main",
    "pooling_entropy",
    "pooling_weights",
    "pretrained_overrides",
    "run_study",
    "variant_overrides",
]

DEFAULT_VARIANTS = ("gap", "gsp", "gsp+zs")
BACKBONES = ("scratch", "pretrained")
PRETRAINED_BACKBONE = "glyphs-resnet20"
GSP_PARAMS = "num_prototypes: 64, mu: 0.2, eps: 10.0, iters: 50"  # Sec. 5.3.2 (m, mu, eps); 50 iterations ours


def pretrained_overrides(pooling: str) -> list[str]:
    """Overrides of the ``pretrained`` backbone (Sec. 5.3.2 on Sec. 5.2.4's architecture): the testbed's pretrained
    ResNet-20 with frozen BatchNorm, backbone lr a tenth of the new layers', a 1x1 convolution to the 128-d local
    embedding, no head (the pooled vector, l2-normalised, is the embedding) and, for GSP, k-centre prototypes."""
    out = [
        f"model.pretrained={PRETRAINED_BACKBONE}",
        "model.freeze_bn=true",
        "model.local_dim=128",
        "model.head=none",
        "train.lr=1.0e-4",
        "train.head_lr=1.0e-3",
        "train.loss_lr=1.0e-3",
        "train.weight_decay=1.0e-4",
    ]
    if pooling == "gsp":
        out.append(f"model.pooling_params={{{GSP_PARAMS}, init: kcenter, memory_size: 1024}}")
    return out


def variant_overrides(
    variant: str,
    max_steps: int,
    val_every: int,
    seed: int,
    per_class: int = 40,
    backbone: str = "scratch",
    class_pool: str = "glyphs",
) -> list[str]:
    """Config overrides (``key.path=value``) of one variant of the study (Sec. 5.3.2; ``backbone`` and
    ``class_pool`` as in the module docstring)."""
    pooling, _, extra = variant.partition("+")
    if extra not in ("", "zs"):
        raise ValueError(f"variant {variant!r}: the only suffix is '+zs' (zero-shot loss), e.g. 'gsp+zs'")
    if backbone not in BACKBONES:
        raise ValueError(f"collage backbone must be one of {', '.join(BACKBONES)}, got {backbone!r}")
    params = f"per_class: {per_class}" + ("" if class_pool == "glyphs" else f", class_pool: {class_pool}")
    out = [
        f"name=collage-{variant.replace('+', '_')}",
        f"seed={seed}",
        "data.name=glyph_collage",
        "data.val_fraction=0.2",  # = the 4 validation classes of 20 (own background group)
        "data.augment=false",
        f"data.params={{{params}}}",
        "model.embedding_dim=128",
        "model.normalize=l2",
        f"model.pooling={pooling}",
        "loss.name=multi_similarity",
        "train.optimizer=adam",
        "train.lr=1.0e-3",
        "train.val_metric=mean_average_precision_at_r",
        "train.batch_size=64",
        "train.m_per_class=4",
        f"train.max_steps={max_steps}",
        f"train.val_every={val_every}",
        f"train.log_every={max(1, val_every // 4)}",
        "train.patience=4",
        "train.schedule=plateau",
        "train.plateau_factor=0.5",
        "eval.clustering=false",
        "plots=false",
    ]
    if backbone == "pretrained":
        out += pretrained_overrides(pooling)
    elif pooling == "gsp":
        out.append(f"model.pooling_params={{{GSP_PARAMS}}}")
    if extra == "zs":
        out.append("methods.zero_shot.weight=0.5")
    return out


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)


def pooling_weights(model: nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
    """Per-location pooling weights ``(B, h*w)`` and the map size: GSP ``sum_i pi_ij / mu``, else uniform ``1/n``."""
    model = _unwrap(model)
    model.eval()
    with torch.no_grad():
        out = model.encode(images)
    h, w = out.local.shape[-2:]
    if out.plan is None or getattr(model.pooling, "pools_with_gap", False):  # GAP, or GSP still in its GAP warm-up
        return torch.full((images.shape[0], h * w), 1.0 / (h * w)), (h, w)
    return out.plan.sum(dim=1) / float(model.pooling.mu), (h, w)


def pooling_entropy(weights: torch.Tensor) -> float:
    """Mean over images of the entropy (nats) of the pooling weights ``(B, n)``, each row normalised to sum 1;
    ``log n`` for GAP, ``log(mu n)`` for a hard selection of a fraction ``mu`` (Sec. 5.3.2 diagnostics)."""
    w = weights.clamp(min=0.0)
    w = w / w.sum(dim=1, keepdim=True)
    return float(weight_entropy(w).mean())


def foreground_share(weights: torch.Tensor, hw: tuple[int, int], mask: torch.Tensor) -> float:
    """Mean over images of the pooling weight on the foreground quarter (``mask (B, h, w)``)."""
    w = weights.reshape(-1, *hw)
    return float(((w * mask).sum(dim=(1, 2)) / w.sum(dim=(1, 2))).mean())


def _heatmaps(images: torch.Tensor, maps: dict[str, torch.Tensor], hw: tuple[int, int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch.nn.functional as F

    rows = [("image", None)] + list(maps.items())
    n = images.shape[0]
    fig, axes = plt.subplots(len(rows), n, figsize=(1.5 * n, 1.6 * len(rows)), squeeze=False)
    size = images.shape[-2:]
    for r, (name, weights) in enumerate(rows):
        for i in range(n):
            ax = axes[r][i]
            ax.imshow(images[i, 0].numpy(), cmap="gray")
            if weights is not None:
                heat = F.interpolate(weights[i].reshape(1, 1, *hw), size=size, mode="nearest")[0, 0]
                ax.imshow(heat.numpy(), cmap="inferno", alpha=0.6)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[r][0].set_ylabel(name, fontsize=8)
    fig.suptitle("test collages and per-location pooling weights", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _study_runs(
    out: Path,
    variants: Sequence[str],
    seeds: Sequence[int],
    max_steps: int,
    val_every: int,
    per_class: int,
    backbone: str = "scratch",
    class_pool: str = "glyphs",
) -> list[tuple[str, int, Any, Path]]:
    """``(variant, seed, config, run folder)`` of every run of the study."""
    runs = []
    for variant in variants:
        for seed in seeds:
            cfg = load_config(
                None, variant_overrides(variant, max_steps, val_every, seed, per_class, backbone, class_pool)
            )
            runs.append((variant, seed, cfg, out / "runs" / f"{variant.replace('+', '_')}-seed{seed}"))
    return runs


def _train_missing(runs: Sequence[tuple[str, int, Any, Path]], jobs: int, quiet: bool) -> None:
    """Train (or resume) the runs without a ``summary.json``; ``jobs > 1`` trains them in parallel processes."""
    from dmlkit.config import dump_config
    from dmlkit.protocols.runs import train_in_parallel, train_or_reuse

    missing = [(cfg, run_dir) for _, _, cfg, run_dir in runs if not (run_dir / "summary.json").is_file()]
    if jobs > 1:
        errors = train_in_parallel([(dump_config(cfg), run_dir) for cfg, run_dir in missing], jobs)
        if errors:
            raise RuntimeError(f"{len(errors)} collage run(s) failed:\n" + "\n".join(errors))
    else:
        for cfg, run_dir in missing:
            train_or_reuse(cfg, run_dir, quiet=quiet)


def _measure_run(
    variant: str, seed: int, run_dir: Path, test: Any, samples: int
) -> tuple[dict[str, Any], torch.Tensor, tuple[int, int]]:
    """A finished run's test metrics and foreground weight share (best checkpoint), and its sample heat-maps."""
    from dmlkit.assemble import load_finished_run

    summary = json.loads((run_dir / "summary.json").read_text())
    model = load_finished_run(run_dir).model.eval()
    x, _ = test.get_batch(range(len(test)))
    weights = torch.cat([pooling_weights(model, x[i : i + 256])[0] for i in range(0, len(x), 256)])
    hw = pooling_weights(model, x[:1])[1]
    picks = torch.linspace(0, len(test) - 1, samples).long()
    result = {
        "variant": variant,
        "seed": seed,
        "test_map_at_r": summary["test"]["mean_average_precision_at_r"],
        "test_precision_at_1": summary["test"]["precision_at_1"],
        "best_val": summary["best_val"]["value"],
        "best_step": summary["best_step"],
        "steps": summary["steps"],
        "train_seconds": summary["train_seconds"],
        "foreground_weight_share": foreground_share(weights, hw, test.foreground_mask(*hw)),
        "weight_entropy": pooling_entropy(weights),
    }
    return result, weights[picks], hw


_TABLE_COLUMNS = [
    ("test_map_at_r", 100.0, 2),
    ("test_precision_at_1", 100.0, 2),
    ("best_val", 100.0, 2),
    ("steps", 1.0, 0),
    ("best_step", 1.0, 0),
    ("foreground_weight_share", 1.0, 3),
    ("weight_entropy", 1.0, 3),
    ("train_seconds", 1.0, 0),
]
_SETTING = {
    "scratch": "ResNet-20 from scratch, linear head after the pooling, random GSP prototypes",
    "pretrained": f"pretrained ResNet-20 ({PRETRAINED_BACKBONE}, frozen BatchNorm, backbone lr 1e-4, new layers 1e-3) "
    "-> 1x1 conv to 128-d -> pooling -> l2, no head; GSP prototypes k-centres of 1,024 GAP-pooled vectors",
}


def _paired_table(results: Sequence[dict[str, Any]], variants: Sequence[str]) -> list[str]:
    from dmlkit.protocols.table import format_mean_std, markdown_grid, mean_std

    diffs = paired_differences(results)
    rows = []
    for variant in variants:
        mine = [d for d in diffs if d["variant"] == variant]
        if not mine:
            continue
        per_seed = ", ".join(f"{d['seed']}: {100 * d['test_map_at_r']:+.2f}" for d in mine)
        ahead = sum(d["test_map_at_r"] > 0 for d in mine)
        rows.append(
            [
                variant,
                per_seed,
                format_mean_std(mean_std([d["test_map_at_r"] for d in mine]), 100.0, 2, signed=True),
                format_mean_std(mean_std([d["test_precision_at_1"] for d in mine]), 100.0, 2, signed=True),
                f"{ahead}/{len(mine)}",
            ]
        )
    if not rows:
        return []
    return [
        "",
        "Paired by seed against GAP (points):",
        "",
        markdown_grid(["variant", "MAP@R diff per seed", "MAP@R diff", "P@1 diff", "seeds ahead"], rows, align="llrrr"),
    ]


def _per_run_table(results: Sequence[dict[str, Any]]) -> list[str]:
    from dmlkit.protocols.table import markdown_grid

    rows = [
        [
            r["variant"],
            str(r["seed"]),
            f"{100 * r['test_map_at_r']:.2f}",
            f"{100 * r['test_precision_at_1']:.2f}",
            str(r["steps"]),
            str(r["best_step"]),
            f"{r['foreground_weight_share']:.3f}",
            f"{r['weight_entropy']:.3f}",
        ]
        for r in results
    ]
    return [
        "",
        "Per run:",
        "",
        markdown_grid(
            ["variant", "seed", "test MAP@R", "test P@1", "steps", "best step", "fg weight share", "entropy"],
            rows,
            align="lrrrrrrr",
        ),
    ]


def _table(
    results: Sequence[dict[str, Any]],
    variants: Sequence[str],
    seeds: Sequence[int],
    max_steps: int,
    backbone: str = "scratch",
    class_pool: str = "glyphs",
) -> str:
    from dmlkit.protocols.table import format_mean_std, markdown_grid, mean_std

    rows = []
    for variant in variants:
        runs = [r for r in results if r["variant"] == variant]
        cells = [
            format_mean_std(mean_std([r[key] for r in runs]), scale, digits) for key, scale, digits in _TABLE_COLUMNS
        ]
        rows.append([variant, str(len(runs)), *cells])
    headers = [
        "variant",
        "n",
        "test MAP@R",
        "test P@1",
        "best val MAP@R",
        "steps",
        "best step",
        "fg weight share",
        "entropy",
        "train s",
    ]
    return "\n".join(
        [
            "# Collage study (thesis Sec. 5.3.2) on glyph_collage",
            "",
            f"{_SETTING[backbone]}; collage classes from the {class_pool!r} pool; <= {max_steps} steps, seeds "
            f"{', '.join(map(str, seeds))} (mean ± sample std); fg weight share = mean pooling weight on the foreground "
            "quarter (GAP: 0.25); entropy = mean entropy of the pooling weights over the 64 locations (GAP: log 64 = 4.159; "
            "a hard selection of mu = 0.2: log 12.8 = 2.549). Thesis (Fig. 5.5; Sec. 6.2: +17 MAP@R points "
            "for GSP over GAP on Cifar collages, L_ZS adding to it).",
            "",
            markdown_grid(headers, rows, align="lrrrrrrrrr"),
            *_paired_table(results, variants),
            *_per_run_table(results),
        ]
    )


def run_study(
    out_dir: str | Path,
    variants: Sequence[str] = DEFAULT_VARIANTS,
    max_steps: int = 400,
    val_every: int = 50,
    seed: int = 0,
    quiet: bool = True,
    samples: int = 8,
    per_class: int = 40,
    seeds: Sequence[int] | None = None,
    jobs: int = 1,
    backbone: str = "scratch",
    class_pool: str = "glyphs",
) -> list[dict[str, Any]]:
    """Train each variant and seed into ``out_dir/runs/<variant>-seed<s>`` (finished runs are reused);
    write ``table.md`` (mean ± std over seeds, paired differences against ``gap``, per run), ``results.json``
    (per run) and ``heatmaps.png`` (first seed). Thesis Sec. 5.3.2; ``backbone`` / ``class_pool``: module docstring."""
    from dmlkit.data import create_dataset

    seeds = list(seeds) if seeds is not None else [seed]
    if not seeds:
        raise ValueError("the collage study needs at least one seed")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = _study_runs(out, variants, seeds, max_steps, val_every, per_class, backbone, class_pool)
    _train_missing(runs, jobs, quiet)
    cfg = runs[0][2]
    test = create_dataset(
        "glyph_collage", "test", root=cfg.data.root, image_size=cfg.data.image_size, **cfg.data.params
    )
    images = test.images[torch.linspace(0, len(test) - 1, samples).long()].float().div(255.0).unsqueeze(1)
    results, maps, hw = [], {}, None
    for variant, run_seed, run_cfg, run_dir in runs:
        result, sample_weights, hw = _measure_run(variant, run_seed, run_dir, test, samples)
        results.append(result)
        if run_seed == seeds[0] and run_cfg.model.pooling == "gsp":
            maps[variant] = sample_weights
    (out / "table.md").write_text(_table(results, variants, seeds, max_steps, backbone, class_pool))
    (out / "results.json").write_text(json.dumps(results, indent=2))
    if maps and hw is not None:
        _heatmaps(images, maps, hw, out / "heatmaps.png")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dmlkit study collage", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for table.md, results.json, heatmaps.png and runs/")
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), help="e.g. gap gsp gsp+zs gmp gem")
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--val-every", type=int, default=50)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds (default: 0); the table is mean ± std")
    parser.add_argument("--jobs", type=int, default=1, help="train the missing runs in this many processes")
    parser.add_argument("--per-class", type=int, default=40, help="collages per foreground class")
    parser.add_argument(
        "--backbone",
        choices=BACKBONES,
        default="scratch",
        help="scratch: ResNet-20 from scratch + linear head; pretrained: glyphs-resnet20 + 1x1 conv, no head",
    )
    parser.add_argument(
        "--class-pool",
        choices=CLASS_POOLS,
        default="glyphs",
        help="characters of the collages: glyphs (train from the pretraining half) or testbed (DML side only)",
    )
    args = parser.parse_args(argv)
    run_study(
        args.out,
        args.variants,
        args.max_steps,
        args.val_every,
        per_class=args.per_class,
        seeds=args.seeds,
        jobs=args.jobs,
        backbone=args.backbone,
        class_pool=args.class_pool,
    )
    print((Path(args.out) / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
