"""The figure of a parameter sweep: a metric against one swept key, or a heat-map over two.

Input is ``{config: {point values: (mean, std)}}`` (``protocols.sweep.sweep_cells``); NaN marks
grid points that were invalid or have not finished, drawn as gaps (lines) or grey cells (heat-maps).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Sequence

from dmlkit.extras import require

require("matplotlib", "plots", "dmlkit's plots and reports").use("Agg")  # no display needed
plt = require("matplotlib.pyplot", "plots", "dmlkit's plots and reports")
import numpy as np  # noqa: E402

Cells = dict[str, dict[tuple[str, ...], tuple[float, float]]]

__all__ = ["sweep_figure"]


def _numeric(values: Sequence[str]) -> list[float] | None:
    try:
        return [float(v) for v in values]
    except ValueError:
        return None


def _line_plot(cells: Cells, key: str, values: Sequence[str], metric: str) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    numbers = _numeric(values)
    xs = numbers if numbers is not None else list(range(len(values)))
    for config, stats in cells.items():
        means = [100 * stats.get((v,), (math.nan, math.nan))[0] for v in values]
        stds = [100 * stats.get((v,), (math.nan, math.nan))[1] for v in values]
        ax.errorbar(xs, means, yerr=stds, marker="o", ms=4, capsize=3, label=config)
    if numbers is not None and min(numbers) > 0 and max(numbers) / min(numbers) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs, list(values))
    ax.set(xlabel=key, ylabel=f"{metric} (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _heat_maps(cells: Cells, keys: Sequence[str], grid: dict[str, list[str]], metric: str) -> plt.Figure:
    rows, cols = grid[keys[0]], grid[keys[1]]
    fig, axes = plt.subplots(
        1,
        len(cells),
        figsize=(1.0 + 0.9 * len(cols) * len(cells) + 1.2 * len(cells), 0.7 * len(rows) + 1.6),
        squeeze=False,
    )
    for ax, (config, stats) in zip(axes[0], cells.items()):
        table = np.array([[100 * stats.get((r, c), (math.nan, math.nan))[0] for c in cols] for r in rows])
        cmap = plt.get_cmap("viridis").with_extremes(bad="lightgrey")
        image = ax.imshow(np.ma.masked_invalid(table), cmap=cmap, aspect="auto")
        finite = table[np.isfinite(table)]
        middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for i, j in itertools.product(range(len(rows)), range(len(cols))):
            value = table[i, j]
            text = "–" if math.isnan(value) else f"{value:.1f}"
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=8,
                color="white" if not math.isnan(value) and value < middle else "black",
            )  # readable on viridis
        ax.set_xticks(range(len(cols)), cols)
        ax.set_yticks(range(len(rows)), rows)
        ax.set(xlabel=keys[1], ylabel=keys[0], title=config)
        fig.colorbar(image, ax=ax, shrink=0.8, label=f"{metric} (%)")
    return fig


def sweep_figure(cells: Cells, keys: Sequence[str], grid: dict[str, list[str]], metric: str, path: str | Path) -> None:
    """Write the sweep's figure: a line plot for one key, heat-maps for two (one per config)."""
    if len(keys) not in (1, 2):
        raise ValueError(f"a sweep figure shows one or two swept keys, got {len(keys)}")
    fig = _line_plot(cells, keys[0], grid[keys[0]], metric) if len(keys) == 1 else _heat_maps(cells, keys, grid, metric)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
