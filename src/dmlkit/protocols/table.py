"""Mean and standard deviation over seeds, and the markdown tables of the papers.

``mean_std`` is dmlkit's one mean ± std over seeds (protocols, studies and ``dmlkit report``
use it), ``format_mean_std`` its one ``"mean ± std"`` cell, ``markdown_grid`` its one markdown table.

Column sets follow the tables they mimic: ``thesis`` (P@1 and MAP@R, Table 3.1 /
5.1), ``sft`` (R@1/2/4, NMI, F1, SFT Table 1), ``all`` (every retrieval and
clustering metric, a registered plug-in metric included: ``register_retrieval_metric``). Each cell is ``mean ± std`` over seeds in percent, the way
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
        ("P@1", "precision_at_1"),
        ("R@2", "recall_at_2"),
        ("R@4", "recall_at_4"),
        ("R@8", "recall_at_8"),
        ("RP", "r_precision"),
        ("MAP@R", "mean_average_precision_at_r"),
        ("NMI", "NMI"),
        ("F1", "F1"),
    ],
}


#: The K of a plug-in ``per_k`` metric's columns in the ``all`` set (the built-in Recall@K's).
_PLUG_IN_KS = (1, 2, 4, 8)


def mean_std(values: Sequence[float], single_std: float = 0.0) -> tuple[float, float]:
    """Mean and sample standard deviation (``n - 1``) over seeds; NaN for no values.

    A single value has no sample spread: its std is ``single_std`` (0, as the papers print it;
    ``dmlkit report`` passes NaN to show the mean alone).
    """
    vals = [float(v) for v in values]
    if not vals:
        return math.nan, math.nan
    mean = sum(vals) / len(vals)
    if len(vals) == 1:
        return mean, single_std
    return mean, math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))


def check_columns(columns: str) -> list[tuple[str, str]]:
    """``(header, metric key)`` of the column set ``columns``; ``all`` ends with the registered plug-in metrics."""
    if columns not in COLUMN_SETS:
        raise ValueError(f"unknown column set '{columns}'; valid: {', '.join(COLUMN_SETS)}")
    if columns != "all":
        return COLUMN_SETS[columns]
    from dmlkit.evaluation.metric_registry import retrieval_metric_list

    cols = list(COLUMN_SETS["all"])
    shown = {key for _, key in cols} | {"recall_at_1"}  # R@1 is P@1
    for metric in retrieval_metric_list():
        ks = _PLUG_IN_KS if metric.per_k else (None,)
        cols += [
            (metric.short.format(k=k), metric.name.format(k=k)) for k in ks if metric.name.format(k=k) not in shown
        ]
    return cols


def summarise(per_seed: Sequence[dict[str, float]], single_std: float = 0.0) -> dict[str, tuple[float, float]]:
    """``{metric: (mean, std)}`` over the seeds' metric dicts (metrics present in every seed); ``single_std`` as
    in ``mean_std`` (NaN: a single seed's cell shows its value alone)."""
    if not per_seed:
        return {}
    keys = [k for k in per_seed[0] if k != SEED_KEY and all(k in m for m in per_seed)]
    return {k: mean_std([m[k] for m in per_seed], single_std) for k in keys}


def format_mean_std(
    stat: tuple[float, float] | None, scale: float = 100.0, digits: int = 2, signed: bool = False
) -> str:
    """``"mean ± std"`` of a ``mean_std`` result times ``scale`` (100: percent), ``digits`` decimals
    (``signed``: the mean with its sign, for differences); ``"n/a"`` when there were no values."""
    if stat is None or math.isnan(stat[0]):
        return "n/a"
    sign = "+" if signed else ""
    if math.isnan(stat[1]):  # one value and no spread to show (``mean_std(..., single_std=nan)``)
        return f"{stat[0] * scale:{sign}.{digits}f}"
    return f"{stat[0] * scale:{sign}.{digits}f} ± {stat[1] * scale:.{digits}f}"


def markdown_table(
    rows: Sequence[tuple[str, dict[str, Any]]], columns: str, extra: Sequence[tuple[Any, ...]] = ()
) -> str:
    """A markdown table: one row per ``(label, {metric: (mean, std)})``.

    ``extra`` adds ``(header, key)`` or ``(header, key, digits)`` columns printed without the
    percent scaling (e.g. steps, seconds per step; 2 decimals unless ``digits`` says otherwise).
    """
    cols = check_columns(columns)
    headers = ["run"] + [h for h, _ in cols] + [e[0] for e in extra]
    cells = [
        [label]
        + [format_mean_std(stats.get(key)) for _, key in cols]
        + [format_mean_std(stats.get(e[1]), scale=1.0, digits=e[2] if len(e) > 2 else 2) for e in extra]
        for label, stats in rows
    ]
    return markdown_grid(headers, cells)


_RULES = {"l": "---", "r": "---:", "c": ":---:"}


def markdown_grid(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A markdown table of already formatted cells.

    ``align`` holds one letter per column, ``l`` (markdown's default), ``r`` or ``c`` (``"lrr"``: numbers
    right-aligned); columns beyond it are ``l``.
    """
    if set(align) - set(_RULES):
        raise ValueError(f"align must hold one of 'l', 'r', 'c' per column, got {align!r}")
    rules = [_RULES[a] for a in align.ljust(len(headers), "l")[: len(headers)]]
    lines = [_row(headers), "|" + "|".join(rules) + "|"] + [_row(cells) for cells in rows]
    return "\n".join(lines) + "\n"


def _row(cells: Sequence[str]) -> str:
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"
