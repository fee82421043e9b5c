"""The figure of GSP's synthetic study, ``embedding_space.png`` (thesis Fig. 5.4): one panel per variant.

Test embeddings, class tokens, background tokens and prototypes in the token space (2-D as trained, else the
PCA of the embeddings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dmlkit.data.datasets.synthetic import TokenSpec

__all__ = ["plot_embedding_space"]


def plot_embedding_space(results: list[dict[str, Any]], spec: TokenSpec, path: str | Path) -> None:
    """One panel per variant: test embeddings (dots), class tokens (x), background tokens (black squares), prototypes (stars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dmlkit.viz.plots import pca_2d

    fig, axes = plt.subplots(1, len(results), figsize=(4.6 * len(results), 4.4), squeeze=False)
    cmap = plt.get_cmap("tab20")
    k = spec.class_tokens
    for ax, r in zip(axes[0], results):
        emb, labels, tokens, protos = r["test_embeddings"], r["test_labels"], r["tokens"], r["prototypes"]
        if emb.shape[1] != 2:  # project everything with the PCA of the embeddings
            stacked = torch.cat([emb, tokens] + ([protos] if protos is not None else []))
            stacked = pca_2d(stacked)
            emb, tokens = stacked[: len(emb)], stacked[len(emb) : len(emb) + len(tokens)]
            protos = stacked[len(emb) + len(r["tokens"]) :] if protos is not None else None
        for c in range(spec.num_classes):
            colour = cmap(c % 20)
            pts = emb[labels == c]
            ax.scatter(pts[:, 0], pts[:, 1], s=5, color=colour, alpha=0.5)
            tk = tokens[c * k : (c + 1) * k]
            ax.scatter(tk[:, 0], tk[:, 1], marker="x", s=30, color=colour)
        bg = tokens[spec.num_classes * k :]
        ax.scatter(bg[:, 0], bg[:, 1], marker="s", s=40, color="black", label="background tokens")
        if protos is not None:
            ax.scatter(
                protos[:, 0], protos[:, 1], marker="*", s=60, color="grey", edgecolor="black", label="prototypes"
            )
        ax.set_title(f"{r['variant']}: test MAP@R {100 * r['test_map_at_r']:.1f}")
        ax.legend(loc="lower right", fontsize=7)
        ax.set_aspect("equal", adjustable="datalim")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
