"""Figures comparing the embedding geometry of run groups (``dmlkit geometry``): SFT paper Fig. 4a and 6c.

They draw the summary of ``dmlkit_lab.report.geometry_compare.compare_geometry`` (plain numbers),
nothing of the trainer:

- ``plot_r_w``: ``r_w`` (Eq. 8, energy 0.99) per group with one point per seed, and the mean
  ``r_w`` curve against the energy of the class means kept (Fig. 6c);
- ``plot_divergences``: per non-baseline group, the per-class divergences (Eq. 11) with the
  classes sorted by the baseline's (Fig. 4a left; rank-wise means over paired seeds) and the
  control curve (another baseline seed sorted the same way); last panel: the std of the
  divergences over classes per group, one point per seed (Fig. 4a right).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmlkit.viz.plots import plt

__all__ = ["plot_divergences", "plot_r_w"]


def _save(fig: Any, path: str | Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _groups_scatter(ax: Any, summary: dict[str, Any], stat: str) -> None:
    names = list(summary["groups"])
    for i, name in enumerate(names):
        g = summary["groups"][name]
        values = g[stat]["per_seed"]
        colour = "tab:blue" if name == summary["baseline"] else "tab:orange"
        ax.errorbar(i, g[stat]["mean"], yerr=g[stat]["std"], fmt="_", ms=18, mew=2, color=colour, capsize=4, lw=1)
        offsets = [(k - (len(values) - 1) / 2) * 0.08 for k in range(len(values))]
        ax.scatter([i + o for o in offsets], values, s=12, color="k", zorder=3)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    groups = [summary["groups"][n][stat] for n in names]
    lo = min(min(min(g["per_seed"]), g["mean"] - g["std"]) for g in groups)
    hi = max(max(max(g["per_seed"]), g["mean"] + g["std"]) for g in groups)
    pad = 0.2 * (hi - lo) if hi > lo else 0.05 * abs(hi) + 1e-6
    ax.set_ylim(lo - pad, hi + pad)


def plot_r_w(summary: dict[str, Any], path: str | Path, title: str = "") -> None:
    """``r_w`` per group with its seeds (left) and the mean ``r_w`` curve per group (right)."""
    fig, (ax_bar, ax_curve) = plt.subplots(1, 2, figsize=(9, 3.4))
    _groups_scatter(ax_bar, summary, "r_w")
    ax_bar.set(ylabel=f"r_w (Eq. 8, energy {summary['r_w_energy']})", title=f"r_w per run, points = seeds ({title})")
    for name, g in summary["groups"].items():
        energies = [float(k) for k in g["r_w_curve"]]
        ax_curve.plot(
            energies,
            list(g["r_w_curve"].values()),
            marker="o",
            ms=3,
            label=name,
            lw=2 if name == summary["baseline"] else 1,
        )
    ax_curve.set(
        xlabel="energy of the class means kept",
        ylabel="r_w",
        ylim=(0, 1),
        title=f"r_w curve, mean over seeds (Fig. 6c; {title})",
    )
    ax_curve.legend(fontsize=7)
    _save(fig, path)


def plot_divergences(summary: dict[str, Any], path: str | Path, title: str = "") -> None:
    """Fig. 4a: divergences sorted by the baseline's, one panel per group, plus the std over classes per group."""
    base = summary["baseline"]
    others = list(summary["fig4a_curves"])
    fig, axes = plt.subplots(1, len(others) + 1, figsize=(3.6 * (len(others) + 1), 3.4), squeeze=False)
    for ax, name in zip(axes[0], others):
        c = summary["fig4a_curves"][name]
        ranks = range(len(c["baseline"]))
        mean = sum(c["baseline"]) / len(c["baseline"])
        ax.plot(ranks, c["other"], ".", ms=2, color="tab:orange", label=name)
        if c["control"]:
            ax.plot(ranks, c["control"], ".", ms=2, color="tab:gray", alpha=0.6, label=f"{base}, next seed (control)")
        ax.plot(ranks, c["baseline"], color="tab:blue", lw=1.5, label=base)
        ax.axhline(mean, color="tab:blue", ls="--", lw=1)
        ax.set(
            xlabel=f"class, sorted by {base}'s divergence",
            ylabel="divergence trace(S_w,k)",
        )
        ax.set_title(f"{name} vs {base} ({len(c['seeds'])} seeds)", fontsize=9)
        ax.legend(fontsize=6, markerscale=3)
    _groups_scatter(axes[0][-1], summary, "divergence_std")
    axes[0][-1].set(ylabel="std of divergences over classes", title="balance (Fig. 4a right)")
    fig.suptitle(f"Class divergences (Eq. 11), {title}; rank-wise means over paired seeds", fontsize=9)
    _save(fig, path)
