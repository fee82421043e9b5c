"""Plots written to a run folder; they take logged records and embeddings, nothing of the trainer.

- ``training_curves``: loss and validation metrics over steps;
- ``embedding_projection``: the 2-D PCA projection of embeddings coloured by class;
- ``distance_histogram``: distances of positive and negative pairs (Fig. 4b of the SFT paper).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmlkit.extras import require

require("matplotlib", "plots", "dmlkit's plots and reports").use("Agg")  # no display needed
plt = require("matplotlib.pyplot", "plots", "dmlkit's plots and reports")
import torch  # noqa: E402

VAL_METRICS = ("precision_at_1", "mean_average_precision_at_r", "r_precision")


def _save(fig: plt.Figure, path: str | Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def training_curves(records: list[dict[str, Any]], path: str | Path) -> None:
    """Training loss (left) and validation metrics (right) against the step."""
    train = [r for r in records if r.get("split") == "train"]
    val = [r for r in records if r.get("split") == "val"]
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], lw=1)
    ax_loss.set(xlabel="step", ylabel="loss", title="training loss")
    for name in VAL_METRICS:
        points = [(r["step"], r[name]) for r in val if name in r]
        if points:
            ax_val.plot(*zip(*points), marker="o", ms=3, label=name)
    ax_val.set(xlabel="step", ylabel="score", title="validation")
    if val:
        ax_val.legend(fontsize=8)
    _save(fig, path)


def pca_2d(embeddings: torch.Tensor) -> torch.Tensor:
    """Project onto the two leading principal components."""
    centred = embeddings.double() - embeddings.double().mean(0, keepdim=True)
    _, _, v = torch.linalg.svd(centred, full_matrices=False)
    return (centred @ v[:2].T).float()


def embedding_projection(
    embeddings: torch.Tensor, labels: torch.Tensor, path: str | Path, max_classes: int = 20
) -> None:
    """2-D PCA of the embeddings of the first ``max_classes`` classes, one colour per class."""
    classes = torch.unique(labels)[:max_classes]
    keep = torch.isin(labels, classes)
    points = pca_2d(embeddings[keep])
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.scatter(points[:, 0], points[:, 1], c=labels[keep].numpy(), cmap="tab20", s=8)
    ax.set(title=f"test embeddings, PCA ({len(classes)} classes)", xticks=[], yticks=[])
    _save(fig, path)


def pair_distances(
    embeddings: torch.Tensor, labels: torch.Tensor, max_pairs: int = 200_000, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Euclidean distances of all positive pairs and of up to ``max_pairs`` random negative pairs."""
    gen = torch.Generator().manual_seed(seed)
    positives = []
    for c in torch.unique(labels):
        members = embeddings[labels == c]
        if len(members) > 1:
            d = torch.cdist(members, members)
            iu = torch.triu_indices(len(members), len(members), 1)
            positives.append(d[iu[0], iu[1]])
    pos = torch.cat(positives) if positives else torch.empty(0)
    i = torch.randint(len(labels), (max_pairs,), generator=gen)
    j = torch.randint(len(labels), (max_pairs,), generator=gen)
    neg_mask = labels[i] != labels[j]
    neg = (embeddings[i[neg_mask]] - embeddings[j[neg_mask]]).norm(dim=1)
    if len(pos) > max_pairs:
        pos = pos[torch.randperm(len(pos), generator=gen)[:max_pairs]]
    return pos, neg


def distance_histogram(embeddings: torch.Tensor, labels: torch.Tensor, path: str | Path, seed: int = 0) -> None:
    """Normalised histograms of positive and negative pair distances."""
    pos, neg = pair_distances(embeddings, labels, seed=seed)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    bins = torch.linspace(0, float(max(pos.max() if len(pos) else 0, neg.max() if len(neg) else 0, 1e-6)), 60).numpy()
    ax.hist(pos.numpy(), bins=bins, density=True, alpha=0.6, label=f"positive ({len(pos)})")
    ax.hist(neg.numpy(), bins=bins, density=True, alpha=0.6, label=f"negative ({len(neg)})")
    ax.set(xlabel="Euclidean distance", ylabel="density", title="pair distances (test)")
    ax.legend()
    _save(fig, path)
