"""The CCP figure (like Fig. 3.2 of the thesis): samples, converged proxies and the next proxies.

Takes embeddings and proxies only, nothing of the trainer.  2-D embeddings are drawn as
they are; higher-dimensional ones are projected on the two principal components of the
samples (the proxies with the same projection).  Samples are dots, converged proxies
squares and the next proxies (the k-centre picks that start the next projection)
circles, one colour per class. ``proxy_panels`` draws several such states side by side (one
panel per projection of a CCP run, as Fig. 3.2 (b) shows iterations 1-4).
"""

from __future__ import annotations

from pathlib import Path

from dmlkit.extras import require

require("matplotlib", "plots", "dmlkit's plots and reports").use("Agg")  # no display needed
plt = require("matplotlib.pyplot", "plots", "dmlkit's plots and reports")
import torch  # noqa: E402

__all__ = ["proxy_figure", "proxy_panels"]


def _projection(samples: torch.Tensor):
    if samples.shape[1] == 2:
        return lambda x: x.float()
    mean = samples.double().mean(0, keepdim=True)
    _, _, v = torch.linalg.svd(samples.double() - mean, full_matrices=False)
    return lambda x: ((x.double() - mean) @ v[:2].T).float()


def _draw(ax, samples, labels, converged, converged_labels, next_proxies, next_labels, title: str) -> None:
    if samples.dim() != 2 or samples.shape[1] < 2:
        raise ValueError(f"samples must be (N, d) with d >= 2, got {tuple(samples.shape)}")
    project = _projection(samples.detach().cpu())
    cmap = plt.get_cmap("tab10" if int(labels.max()) < 10 else "tab20")
    colour = lambda y: cmap(int(y) % cmap.N)  # noqa: E731
    pts = project(samples.detach().cpu())
    ax.scatter(
        pts[:, 0], pts[:, 1], c=[colour(y) for y in labels.tolist()], s=14, alpha=0.7, linewidths=0, label="samples"
    )
    conv = project(converged.detach().cpu())
    ax.scatter(
        conv[:, 0],
        conv[:, 1],
        c=[colour(y) for y in converged_labels.tolist()],
        marker="s",
        s=60,
        edgecolors="black",
        linewidths=0.8,
        label="converged proxies",
    )
    if next_proxies is not None and next_labels is not None:
        nxt = project(next_proxies.detach().cpu())
        ax.scatter(
            nxt[:, 0],
            nxt[:, 1],
            facecolors="none",
            edgecolors=[colour(y) for y in next_labels.tolist()],
            marker="o",
            s=90,
            linewidths=1.6,
            label="next proxies (k-centre)",
        )
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_title(title, fontsize=9)


def proxy_figure(
    samples: torch.Tensor,
    labels: torch.Tensor,
    converged: torch.Tensor,
    converged_labels: torch.Tensor,
    next_proxies: torch.Tensor | None,
    next_labels: torch.Tensor | None,
    path: str | Path,
    title: str = "CCP: samples, converged proxies (squares), next proxies (circles)",
) -> None:
    """Write the figure to ``path`` (PNG)."""
    proxy_panels(
        [
            {
                "samples": samples,
                "labels": labels,
                "converged": converged,
                "converged_labels": converged_labels,
                "next": next_proxies,
                "next_labels": next_labels,
                "title": title,
            }
        ],
        path,
    )


def proxy_panels(panels: list[dict], path: str | Path) -> None:
    """One panel per state, side by side, written to ``path`` (PNG).

    Each panel: ``samples``, ``labels``, ``converged``, ``converged_labels``, ``next`` and ``next_labels``
    (or None), ``title``.
    """
    if not panels:
        raise ValueError("proxy_panels needs at least one panel")
    cols = min(len(panels), 4)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 4.5 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        _draw(
            ax,
            panel["samples"],
            panel["labels"],
            panel["converged"],
            panel["converged_labels"],
            panel.get("next"),
            panel.get("next_labels"),
            panel.get("title", ""),
        )
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
