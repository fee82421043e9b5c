"""Mean and standard deviation over seeds, and the markdown tables of the papers.

Column sets follow the tables they mimic: ``thesis`` (P@1 and MAP@R, Table 3.1 /
5.1), ``sft`` (R@1/2/4, NMI, F1, SFT Table 1), ``all`` (every retrieval and
clustering metric). Each cell is ``mean ± std`` over seeds in percent, the way
the papers print them; ``std`` is the sample standard deviation (0 for one seed).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

SEED_KEY = "seed"  # per-seed metric dicts name their seed; not a metric

COLUMN_SETS: dict[str, list[tuple[str, str]]] = {
    "thesis": [("P@1", "precision_at_1"), ("MAP@R", "mean_average_precision_at_r")],
    "sft": [("R@1", "recall_at_1"), ("R@2", "recall_at_2"), ("R@4", "recall_at_4"), ("NMI", "NMI"), ("F1", "F1")],
    "all": [
        ("P@1", "precision_at_1"), ("R@2", "recall_at_2"), ("R@4", "recall_at_4"), ("R@8", "recall_at_8"),
        ("RP", "r_precision"), ("MAP@R", "mean_average_precision_at_r"), ("NMI", "NMI"), ("F1", "F1"),
    ],
}


def mean_std(values: Sequence[float], single_std: float = 0.0) -> tuple[float, float]:
    """Mean and sample standard deviation (``n - 1``; ``single_std`` for a single value); NaN for no values."""
    vals = [float(v) for v in values]
    if not vals:
        return math.nan, math.nan
    mean = sum(vals) / len(vals)
    if len(vals) == 1:
        return mean, single_std
    return mean, math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))


def check_columns(columns: str) -> list[tuple[str, str]]:
    if columns not in COLUMN_SETS:
        raise ValueError(f"unknown column set '{columns}'; valid: {', '.join(COLUMN_SETS)}")
    return COLUMN_SETS[columns]


def summarise(per_seed: Sequence[dict[str, float]]) -> dict[str, tuple[float, float]]:
    """``{metric: (mean, std)}`` over the seeds' metric dicts (metrics present in every seed)."""
    if not per_seed:
        return {}
    keys = [k for k in per_seed[0] if k != SEED_KEY and all(k in m for m in per_seed)]
    return {k: mean_std([m[k] for m in per_seed]) for k in keys}


def _cell(stat: tuple[float, float] | None, percent: bool) -> str:
    if stat is None or math.isnan(stat[0]):
        return "n/a"
    scale = 100.0 if percent else 1.0
    return f"{stat[0] * scale:.2f} ± {stat[1] * scale:.2f}"


def markdown_table(rows: Sequence[tuple[str, dict[str, Any]]], columns: str, extra: Sequence[tuple[str, str]] = ()) -> str:
    """A markdown table: one row per ``(label, {metric: (mean, std)})``.

    ``extra`` adds ``(header, key)`` columns printed without the percent scaling
    (e.g. seconds per step).
    """
    cols = check_columns(columns)
    headers = ["run"] + [h for h, _ in cols] + [h for h, _ in extra]
    cells = [
        [label] + [_cell(stats.get(key), True) for _, key in cols] + [_cell(stats.get(key), False) for _, key in extra]
        for label, stats in rows
    ]
    return markdown_grid(headers, cells)


def markdown_grid(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table of already formatted cells."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"
