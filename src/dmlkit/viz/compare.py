"""Figures that compare runs: training curves of several runs on shared axes.

They take logged records (``metrics.jsonl`` lines), nothing of the trainer; one
colour per group of runs (the seeds of one experiment), one line per run.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, Sequence

from dmlkit.extras import require

require("matplotlib", "plots", "dmlkit's plots and reports").use("Agg")  # no display needed
plt = require("matplotlib.pyplot", "plots", "dmlkit's plots and reports")

__all__ = ["compare_training_curves"]


def compare_training_curves(
    curves: Sequence[tuple[str, int, list[dict[str, Any]]]],
    path: str | Path | IO[bytes],
    val_metric: str = "mean_average_precision_at_r",
) -> None:
    """Training loss (left) and validation ``val_metric`` (right) against the step, one line per run.

    ``curves`` holds ``(label, group index, records)`` per run; runs of a group share a colour.
    """
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(11, 3.8))
    colours = plt.get_cmap("tab10")
    for label, group, records in curves:
        colour = colours(group % 10)
        train = [(r["step"], r["loss"]) for r in records if r.get("split") == "train" and "loss" in r]
        val = [(r["step"], r[val_metric]) for r in records if r.get("split") == "val" and val_metric in r]
        if train:
            ax_loss.plot(*zip(*train), lw=1, color=colour, label=label)
        if val:
            ax_val.plot(*zip(*val), marker="o", ms=3, lw=1, color=colour, label=label)
    ax_loss.set(xlabel="step", ylabel="loss", title="training loss")
    ax_val.set(xlabel="step", ylabel=val_metric, title=f"validation {val_metric}")
    for ax in (ax_loss, ax_val):
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
