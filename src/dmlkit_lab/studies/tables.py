"""The ``table.md`` pages of the bare-loop studies (``sft_unbalanced``, ``gsp_synthetic``), from their result rows.

A study's results are a list of dicts, one per run, each with its ``seed``, its arm (``method`` in
``sft_unbalanced``, ``variant`` in ``gsp_synthetic``) and its metrics as fractions. Every cell is
``mean ± sample std`` over seeds (``dmlkit.protocols.table``); runs of one seed share the data, the initial
weights and the batches, so the differences to the baseline arm are paired by seed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from dmlkit.protocols.table import format_mean_std, markdown_grid, mean_std
from dmlkit_lab.studies.paired_runs import paired_differences

if TYPE_CHECKING:
    from dmlkit_lab.studies.gsp_synthetic_config import SyntheticStudyConfig
    from dmlkit_lab.studies.sft_unbalanced_config import UnbalancedStudyConfig
    from dmlkit_lab.studies.sft_unbalanced_split import UnbalancedSplit

__all__ = ["gsp_synthetic_table", "sft_unbalanced_table"]

SFT_TITLES = {"baseline": "Baseline", "balanced": "Balanced Train", "unbalanced": "Unbalanced Train"}
# The SFT paper's Table 5: (head, tail) accuracy in %.
SFT_PAPER = {"baseline": (95.61, 73.91), "balanced": (95.77, 78.35), "unbalanced": (95.49, 82.32)}
_HEAD_TAIL = ("head", "tail")


def _cell(values: Sequence[float], signed: bool = False) -> str:
    """``mean ± std`` in percent, two decimals."""
    return format_mean_std(mean_std(values), 100.0, 2, signed=signed)


# ------------------------------------------------------------------------------ sft_unbalanced
def _sft_setting(cfg: UnbalancedStudyConfig, seeds: Sequence[int], split: UnbalancedSplit) -> str:
    backbone = (f"pretrained: {cfg.pretrained}" if cfg.pretrained else "from scratch") + (
        ", BatchNorm frozen" if cfg.freeze_bn else ""
    )
    rates = ("" if cfg.backbone_lr is None else f" (backbone {cfg.backbone_lr:g})") + (
        "" if cfg.classifier_lr is None else f" (classifier {cfg.classifier_lr:g})"
    )
    test_head = split.is_head[split.test_labels]
    return (
        f"Closed-set classification on {cfg.dataset} ({cfg.split} split, classes with >= {cfg.min_images} images, "
        f"{cfg.image_size} px): {cfg.num_head} head classes x {cfg.head_train} training images, {cfg.num_tail} tail "
        f"classes x {cfg.tail_train}; test = the other images of those classes "
        f"({int(test_head.sum())} head, {int((~test_head).sum())} tail "
        f"for seed {seeds[0]}). resnet20 ({backbone}) + GAP, {cfg.embedding_dim}-D L2-normalised "
        f"embedding, loss {cfg.loss}; "
        f"SFT ({cfg.transform}) lam={cfg.lam}, centre step alpha={cfg.alpha}, tail_threshold={cfg.threshold}; "
        f"Adam lr {cfg.lr:g}{rates}, weight decay {cfg.weight_decay:g}, cosine, "
        f"{cfg.steps} steps x {cfg.batch_size} images ({cfg.sampling} sampling), "
        f"augment={cfg.augment}. Accuracy (%) of argmax class score, mean ± std over seeds {list(seeds)}."
    )


def _sft_differences(results: Sequence[dict[str, Any]], methods: Sequence[str]) -> list[str]:
    """Head and tail accuracy minus the baseline's of the same seed, one column per other method."""
    base = {(r["seed"], k): r[k] for r in results if r["method"] == "baseline" for k in _HEAD_TAIL}
    others = [m for m in methods if m != "baseline"]
    rows = [
        [key.capitalize()]
        + [_cell([r[key] - base[(r["seed"], key)] for r in results if r["method"] == m], True) for m in others]
        for key in _HEAD_TAIL
    ]
    return [
        "Difference to the baseline of the same seed (percentage points, mean ± std over seeds):",
        "",
        markdown_grid(["", *(SFT_TITLES[m] for m in others)], rows, align="l" + "r" * len(others)),
    ]


def sft_unbalanced_table(
    results: Sequence[dict[str, Any]],
    cfg: UnbalancedStudyConfig,
    seeds: Sequence[int],
    methods: Sequence[str],
    split: UnbalancedSplit,
) -> str:
    """Head / Tail accuracy per method (mean ± std), the paired differences to the baseline and the paper's Table 5;
    ``split``: the first seed's, whose test-set size the setting names."""
    titles = [SFT_TITLES[m] for m in methods]
    align = "l" + "r" * len(methods)
    measured = [
        [key.capitalize()] + [_cell([r[key] for r in results if r["method"] == m]) for m in methods]
        for key in _HEAD_TAIL
    ]
    lines = [
        "# SFT on an unbalanced training set (SFT paper, Sec. 4, Table 5), glyphs miniature",
        "",
        _sft_setting(cfg, seeds, split),
        "",
        markdown_grid(["", *titles], measured, align=align),
    ]
    if "baseline" in methods and len(methods) > 1:
        lines += _sft_differences(results, methods)
    paper = [[key] + [f"{SFT_PAPER[m][i]:.2f}" for m in methods] for i, key in enumerate(("Head", "Tail"))]
    lines += [
        "Paper (Table 5, MS-Celeb-1M mini, 50 vs 5 training samples):",
        "",
        markdown_grid(["", *titles], paper, align=align),
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ gsp_synthetic
def _gsp_setting(cfg: SyntheticStudyConfig) -> str:
    start = (
        f"k-centres of {cfg.memory_size} GAP-pooled vectors after {cfg.warmup_steps} GAP steps"
        if cfg.prototype_init == "kcenter"
        else "uniform in the box"
    )
    return (
        f"16 classes x 4 tokens + 4 background tokens, 50 tokens/sample, class fraction ~ N(0.5, 0.1); "
        f"{cfg.token_dim}-D tokens and prototypes in [-{cfg.token_range}, {cfg.token_range}], Adam {cfg.lr:g}, "
        f"loss {cfg.loss} {cfg.loss_params}; GSP m={cfg.num_prototypes}, mu={cfg.mu}, eps={cfg.eps}, "
        f"iters={cfg.iters}, costs normalised {cfg.normalization}, prototypes start {start}; "
        f"lam={cfg.zero_shot_weight}; patience {cfg.patience} "
        f"epochs of {cfg.steps_per_epoch} steps, at most {cfg.max_epochs} epochs."
    )


def _gsp_paired(results: Sequence[dict[str, Any]], variants: Sequence[str]) -> list[str]:
    """Test MAP@R minus GAP's of the same seed, per variant: every seed's difference, their mean, seeds ahead."""
    diffs = paired_differences(results)
    if not diffs:
        return []
    rows = []
    for v in variants:
        mine = [d for d in diffs if d["variant"] == v]
        if mine:
            rows.append(
                [
                    v,
                    ", ".join(f"{d['seed']}: {100 * d['test_map_at_r']:+.2f}" for d in mine),
                    _cell([d["test_map_at_r"] for d in mine], True),
                    f"{sum(d['test_map_at_r'] > 0 for d in mine)}/{len(mine)}",
                ]
            )
    return [
        "",
        "Paired by seed against GAP, test MAP@R points (thesis: GSP about +70, Sec. 6.2; Fig. 5.4 "
        "shows the geometry only):",
        "",
        markdown_grid(["pooling", "per seed", "mean", "seeds ahead"], rows, align="llrr"),
    ]


def _gsp_per_run(results: Sequence[dict[str, Any]]) -> list[str]:
    rows = [
        [
            r["variant"],
            str(r["seed"]),
            f"{100 * r['test_map_at_r']:.2f}",
            f"{100 * r['test_precision_at_1']:.2f}",
            f"{100 * r['val_map_at_r']:.2f}",
            str(r["kcenter_step"] if r["kcenter_step"] is not None else ""),
            str(r["best_step"]),
            str(r["steps"]),
            str(r["seconds"]),
        ]
        for r in results
    ]
    return [
        "",
        "Per run (steps: trained; best step: end of the best epoch; k-centre step: GSP from the next step):",
        "",
        markdown_grid(
            [
                "pooling",
                "seed",
                "test MAP@R",
                "test P@1",
                "best val MAP@R",
                "k-centre step",
                "best step",
                "steps",
                "seconds",
            ],
            rows,
            align="lrrrrrrrr",
        ),
        "",
    ]


def gsp_synthetic_table(results: Sequence[dict[str, Any]], cfg: SyntheticStudyConfig) -> str:
    """Test MAP@R, P@1 and best validation MAP@R per variant (mean ± std), the paired differences to GAP, per run."""
    variants = list(dict.fromkeys(r["variant"] for r in results))
    seeds = sorted({r["seed"] for r in results})
    summary = []
    for v in variants:
        runs = [r for r in results if r["variant"] == v]
        summary.append(
            [
                v,
                str(len(runs)),
                *(_cell([r[k] for r in runs]) for k in ("test_map_at_r", "test_precision_at_1", "val_map_at_r")),
            ]
        )
    lines = [
        "# Synthetic study (thesis Sec. 5.3.1): GAP vs GSP vs GSP + L_ZS",
        "",
        _gsp_setting(cfg) + f" Seeds {', '.join(map(str, seeds))} (mean ± sample std).",
        "",
        markdown_grid(["pooling", "n", "test MAP@R", "test P@1", "best val MAP@R"], summary, align="lrrrr"),
    ]
    lines += _gsp_paired(results, variants) + _gsp_per_run(results)
    return "\n".join(lines)
