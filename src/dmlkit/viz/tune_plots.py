"""Figures of a hyperparameter study: the best-so-far curve and the keys' importances."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from dmlkit.extras import require

require("matplotlib", "plots", "dmlkit's plots and reports").use("Agg")  # no display needed
plt = require("matplotlib.pyplot", "plots", "dmlkit's plots and reports")


def best_so_far_figure(values: Sequence[tuple[int, float]], metric: str, out: Path) -> None:
    """Each trial's value (dots) and the best value so far (step line), in %, against the trial number."""
    values = sorted(values)
    numbers = [n for n, _ in values]
    best, running = [], float("-inf")
    for _, value in values:
        running = max(running, value)
        best.append(100 * running)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(numbers, [100 * v for _, v in values], "o", alpha=0.5, label="trial")
    ax.step(numbers, best, where="post", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(f"validation {metric} (%)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def importance_figure(importances: dict[str, float], out: Path) -> None:
    """Horizontal bars of each key's importance (fANOVA, fractions summing to 1)."""
    keys = list(importances)[::-1]
    fig, ax = plt.subplots(figsize=(6, 0.5 + 0.4 * len(keys)))
    ax.barh(keys, [importances[k] for k in keys])
    ax.set_xlabel("importance (fANOVA)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
