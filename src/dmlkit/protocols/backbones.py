"""Paired differences pooled over several pretrained backbones: the backbone as a second random factor.

A fine-tuning table pairs a method with its baseline seed by seed on *one* pretrained backbone. The
pretraining is random too (its seed, and the thread count that orders its float sums), and on the glyph
testbed it moved a paired MAP@R difference from +0.55 (5/5 seeds) to -0.29 (1/5): larger than the
effects the tables report. ``dmlkit protocol --backbones A B C`` therefore runs every config x seed on
each backbone, pairs seeds within a backbone, and pools here:

    d_{b,s} = m(method, b, s) - m(baseline, b, s)
    mean   = mean over every (b, s) pair
    seeds  = sqrt(mean_b var_s d_{b,s})             the spread across seeds (pooled within backbones)
    backbones = std_b (mean_s d_{b,s})              the spread of the per-backbone means

A verdict is *ahead* when, on every backbone, the run beats its baseline on at least ``AHEAD_SHARE`` of
the seeds (4 of 5), *behind* when it loses on that share of the seeds on every backbone, and *not
resolved* otherwise: a pooled mean that one backbone carries is not a verdict a user can reproduce.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from dmlkit.protocols.table import check_columns, markdown_grid, mean_std

__all__ = ["AHEAD_SHARE", "across_backbones", "backbone_label", "backbones_table", "verdict"]

AHEAD_SHARE = 0.8  # 4 of 5 seeds on every backbone


def backbone_label(name: str, backbone: str) -> str:
    """A table row's name for config ``name`` fine-tuned from ``backbone``."""
    return f"{name} [{backbone}]"


def verdict(deltas_by_backbone: Sequence[Sequence[float]]) -> str:
    """``ahead`` / ``behind`` / ``not resolved`` from the per-seed differences of each backbone (module docstring)."""
    if not deltas_by_backbone or any(not d for d in deltas_by_backbone):
        return "not resolved"
    if all(sum(x > 0 for x in d) >= AHEAD_SHARE * len(d) for d in deltas_by_backbone):
        return "ahead"
    if all(sum(x < 0 for x in d) >= AHEAD_SHARE * len(d) for d in deltas_by_backbone):
        return "behind"
    return "not resolved"


def across_backbones(per_backbone: Mapping[str, Mapping[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """Pool ``{backbone: paired_difference(...)}`` results (each with its ``deltas``) over the backbones.

    Returns ``{"backbones", "n", "mean", "seed_std", "backbone_std", "wins", "seeds", "verdict"}``, the last six
    keyed by metric; ``wins`` / ``seeds`` list per backbone the seeds ahead and the seeds paired.
    """
    out: dict[str, Any] = {
        "backbones": list(per_backbone),
        "n": sum(r["n"] for r in per_backbone.values()),
        "mean": {},
        "seed_std": {},
        "backbone_std": {},
        "wins": {},
        "seeds": {},
        "verdict": {},
    }
    for key in keys:
        deltas = [list(result["deltas"][key]) for result in per_backbone.values()]
        pooled = [d for ds in deltas for d in ds]
        variances = [mean_std(ds)[1] ** 2 for ds in deltas if len(ds) > 1]
        out["mean"][key] = mean_std(pooled)[0]
        out["seed_std"][key] = math.sqrt(sum(variances) / len(variances)) if variances else math.nan
        out["backbone_std"][key] = mean_std([mean_std(ds)[0] for ds in deltas if ds])[1]
        out["wins"][key] = [sum(d > 0 for d in ds) for ds in deltas]
        out["seeds"][key] = [len(ds) for ds in deltas]
        out["verdict"][key] = verdict(deltas)
    return out


def _cell(pooled: Mapping[str, Any], key: str) -> str:
    if not any(pooled["seeds"][key]):
        return "n/a"
    mean = f"{100 * pooled['mean'][key]:+.2f}"
    spread = f"seeds ± {100 * pooled['seed_std'][key]:.2f}, backbones ± {100 * pooled['backbone_std'][key]:.2f}"
    wins = ", ".join(f"{w}/{n}" for w, n in zip(pooled["wins"][key], pooled["seeds"][key]))
    return f"{mean} ({spread}; {wins}) {pooled['verdict'][key]}"


def backbones_table(rows: Sequence[tuple[str, str, Mapping[str, Any]]], columns: str) -> str:
    """Markdown table of ``(run, baseline, across_backbones(...))`` rows, in points."""
    cols = check_columns(columns)
    headers = ["run", "baseline", "backbones", "pairs"] + [h for h, _ in cols]
    cells = [
        [run, base, str(len(p["backbones"])), str(p["n"])] + [_cell(p, key) for _, key in cols] for run, base, p in rows
    ]
    return markdown_grid(headers, cells)
