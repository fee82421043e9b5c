"""The section of the HTML report for a hyperparameter study folder (``dmlkit tune``): what it searched, its best
trial, every trial, the best-so-far curve, each key's importance and rank correlation with the objective, and the
test of the best values when there is one."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Callable, Sequence


from dmlkit.tune.study_setup import is_study_folder, read_record

__all__ = ["is_study_folder", "study_section"]


def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    if not path.is_file():
        return [], []
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    return (rows[0], rows[1:]) if rows else ([], [])


def _percent(header: list[str], rows: list[list[str]]) -> list[list[str]]:
    """The objective and its SEM in % (the CSV keeps fractions)."""
    scaled = {i for i, h in enumerate(header) if h in ("value", "sem")}
    return [[f"{100 * float(c):.2f}" if i in scaled and c else c for i, c in enumerate(row)] for row in rows]


def _space_rows(space: dict, best: dict | None) -> list[list[str]]:
    """Each searched key with its range and how it bore on the objective (``best.json``; blank when undefined)."""
    importances = (best or {}).get("importances") or {}
    correlations = (best or {}).get("rank_correlations") or {}

    def figure(value: object, sign: bool = False) -> str:
        return "" if value is None else (f"{value:+.2f}" if sign else f"{value:.2f}")

    return [
        [key, json.dumps(spec), figure(importances.get(key)), figure(correlations.get(key), sign=True)]
        for key, spec in space.items()
    ]


def study_section(
    folder: Path, escape: Callable[[object], str], table: Callable[..., str], figure: Callable[[bytes, str], str]
) -> str:
    """HTML of one study folder (the report's own helpers escape text and draw tables and figures)."""
    record = read_record(folder)
    best = json.loads((folder / "best.json").read_text()) if (folder / "best.json").is_file() else None
    parts = [
        f"<h2>Study {escape(record.get('study_name', folder.name))}</h2>",
        f"<p>{escape(record.get('protocol'))} protocol, objective: validation {escape(record.get('metric'))}; "
        f"config {escape(record.get('config_path'))}; folder <code>{escape(folder)}</code></p>",
    ]
    space = record.get("space", {})
    parts.append(
        table(["key", "range", "importance (fANOVA)", "Spearman's rho with the objective"], _space_rows(space, best))
    )
    if best is not None:
        values = ", ".join(
            f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in best["params"].items()
        )
        sem = "" if best.get("sem") is None else f" ± {100 * best['sem']:.2f} (SEM over folds)"
        parts.append(
            f"<p><b>Best: trial {best['trial']}, {100 * best['value']:.2f}{sem}</b>: {escape(values)} "
            f"(<code>best.yaml</code>)</p>"
        )
    header, rows = _rows(folder / "trials.csv")
    if rows:
        parts.append("<h3>Trials</h3>" + table(header, _percent(header, rows)))
    figures = [
        figure((folder / name).read_bytes(), caption)
        for name, caption in (
            ("best_so_far.png", "every trial and the best so far"),
            ("importances.png", "importance of each key"),
        )
        if (folder / name).is_file()
    ]
    if figures:
        parts.append('<div class="row">' + "".join(figures) + "</div>")
    if (folder / "test.md").is_file():
        parts.append("<h3>Test of the best values</h3><pre>" + escape((folder / "test.md").read_text()) + "</pre>")
    return "".join(parts)


def split_folders(folders: Sequence[str | Path]) -> tuple[list[Path], list[Path]]:
    """``(run folders, study folders)`` of the folders given to the report."""
    studies = [Path(f) for f in folders if is_study_folder(f)]
    return [Path(f) for f in folders if not is_study_folder(f)], studies
