"""Nearest-neighbour gallery: query images beside their top-k retrieved references.

The figure every DML paper shows: one row per query, the query first (framed
blue), then its ``k`` nearest references in embedding space, nearest first,
framed green when they share the query's class and red when they do not.

It takes embeddings, labels and images, nothing of the trainer: the search is
the exact k-NN of ``dmlkit.evaluation.knn`` with the query itself left out (as
the retrieval metrics do), so a gallery shows the neighbours P@1 and R@K count.
``dmlkit.report.gallery.run_gallery`` rebuilds a trained run and calls it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import IO, Sequence

from dmlkit.extras import require

require("matplotlib", "plots", "dmlkit's plots and reports").use("Agg")  # no display needed
plt = require("matplotlib.pyplot", "plots", "dmlkit's plots and reports")
import torch  # noqa: E402

from dmlkit.evaluation import knn_search  # noqa: E402
from dmlkit.validation import is_int  # noqa: E402

QUERY_COLOUR = "#1f3fbf"
CORRECT_COLOUR = "#00a000"
WRONG_COLOUR = "#e00000"

__all__ = [
    "CORRECT_COLOUR",
    "QUERY_COLOUR",
    "WRONG_COLOUR",
    "choose_queries",
    "draw_gallery",
    "gallery_figure",
    "nearest_neighbours",
]


def choose_queries(labels: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """``n`` query indices drawn with ``seed``: one per class first (classes with >= 2 images), then any.

    Raises ``ValueError`` when ``n`` is not positive or exceeds the number of images.
    """
    labels = torch.as_tensor(labels).reshape(-1)
    if not is_int(n) or not 1 <= n <= len(labels):
        raise ValueError(
            f"the number of queries must be an integer in [1, {len(labels)}] (the images of the split), got {n!r}"
        )
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed)).tolist()
    values, counts = torch.unique(labels, return_counts=True)
    repeated = {int(v) for v, c in zip(values, counts) if c > 1}
    seen: set[int] = set()
    first, rest = [], []
    for i in order:
        c = int(labels[i])
        if c not in seen and c in repeated:
            seen.add(c)
            first.append(i)
        else:
            rest.append(i)
    return torch.tensor((first + rest)[:n], dtype=torch.long)


def nearest_neighbours(embeddings: torch.Tensor, query_idx: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices ``(q, k)`` and Euclidean distances ``(q, k)`` of the ``k`` nearest items of each query.

    The search runs over the whole set (exact, ``knn_search``) and leaves the query itself out by
    index, as ``retrieval_metrics`` does, so a duplicate image at another index is still found.
    """
    n = len(embeddings)
    if not is_int(k) or not 1 <= k <= n - 1:
        raise ValueError(f"k must be an integer in [1, {n - 1}] (the other images of the split), got {k!r}")
    query_idx = torch.as_tensor(query_idx, dtype=torch.long).reshape(-1)
    found = knn_search(embeddings[query_idx], min(k + 1, n), reference=embeddings, exclude_self=False)
    keep = found.indices != query_idx[:, None]
    # Rows where the query was not among its k + 1 nearest (exact ties) drop their last entry instead.
    no_self = keep.all(dim=1)
    keep[no_self, -1] = False
    idx = found.indices[keep].reshape(len(query_idx), -1)[:, :k]
    dist = found.distances[keep].reshape(len(query_idx), -1)[:, :k]
    return idx, dist


def _display(image: torch.Tensor) -> torch.Tensor:
    """A ``(C, H, W)`` image (any normalisation) as ``(H, W)`` or ``(H, W, 3)`` in [0, 1] for ``imshow``."""
    x = image.detach().float().cpu()
    lo, hi = x.min(), x.max()
    x = (x - lo) / (hi - lo) if hi > lo else torch.zeros_like(x)
    return x[0] if x.shape[0] == 1 else x[:3].permute(1, 2, 0)


def _frame(ax: plt.Axes, colour: str) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_edgecolor(colour)
        spine.set_linewidth(4)


def gallery_figure(
    query_images: torch.Tensor,
    query_labels: torch.Tensor,
    neighbour_images: torch.Tensor,
    neighbour_labels: torch.Tensor,
    path: str | Path | IO[bytes],
    class_names: Sequence[str] | None = None,
    distances: torch.Tensor | None = None,
    title: str | None = None,
) -> torch.Tensor:
    """Draw the gallery to ``path`` (PNG) and return the ``(q, k)`` boolean mask of correct neighbours.

    Args:
        query_images: ``(q, C, H, W)`` (any normalisation: each image is min-max scaled for display).
        query_labels: ``(q,)``.
        neighbour_images: ``(q, k, C, H, W)``, nearest first.
        neighbour_labels: ``(q, k)``; a neighbour is correct (green) when its label is its query's.
        path: PNG file or binary file object.
        class_names: names of the classes, shown above the queries (else the label).
        distances: ``(q, k)`` distances, shown above the neighbours.
        title: figure title (default: the share of correct neighbours).
    """
    query_labels = torch.as_tensor(query_labels).reshape(-1)
    neighbour_labels = torch.as_tensor(neighbour_labels)
    q = len(query_labels)
    if neighbour_labels.dim() != 2 or neighbour_labels.shape[0] != q or len(query_images) != q:
        raise ValueError(
            f"query_images ({len(query_images)}), query_labels ({q}) and the rows of neighbour_labels "
            f"{tuple(neighbour_labels.shape)} must agree: one row of neighbours per query"
        )
    if tuple(neighbour_images.shape[:2]) != tuple(neighbour_labels.shape):
        raise ValueError(
            f"neighbour_images {tuple(neighbour_images.shape)} must be (q, k, C, H, W) with (q, k) = "
            f"{tuple(neighbour_labels.shape)}, the shape of neighbour_labels"
        )
    k = neighbour_labels.shape[1]
    correct = neighbour_labels == query_labels[:, None]
    fig, axes = plt.subplots(q, k + 1, figsize=(1.35 * (k + 1), 1.6 * q + 0.4), squeeze=False)
    for row in range(q):
        label = int(query_labels[row])
        ax = axes[row, 0]
        _show(ax, query_images[row], QUERY_COLOUR)
        ax.set_title(
            _short(class_names[label] if class_names is not None else str(label)), fontsize=6, color=QUERY_COLOUR
        )
        for col in range(k):
            ax = axes[row, col + 1]
            _show(ax, neighbour_images[row, col], CORRECT_COLOUR if bool(correct[row, col]) else WRONG_COLOUR)
            if distances is not None:
                ax.set_title(f"d = {float(distances[row, col]):.2f}", fontsize=7)
    share = float(correct.float().mean()) if correct.numel() else 0.0
    fig.suptitle(title or f"nearest neighbours: {share:.0%} of {q} x {k} retrieved share the query's class", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
    return correct


def _short(name: str, width: int = 20, lines: int = 2) -> str:
    """``name`` wrapped to at most ``lines`` lines of ``width`` characters, cut with an ellipsis."""
    wrapped = textwrap.wrap(name, width) or [""]
    if len(wrapped) > lines:
        wrapped = wrapped[:lines]
        wrapped[-1] = wrapped[-1][: width - 1] + "\u2026"
    return "\n".join(wrapped)


def _show(ax: plt.Axes, image: torch.Tensor, colour: str) -> None:
    picture = _display(image)
    ax.imshow(picture.numpy(), cmap="gray" if picture.dim() == 2 else None, vmin=0.0, vmax=1.0)
    _frame(ax, colour)


def _images(dataset: object, indices: torch.Tensor) -> torch.Tensor:
    """Images of ``indices`` from a dataset with ``get_batch`` (``DMLDataset``) or plain ``dataset[i]``."""
    flat = indices.reshape(-1)
    get_batch = getattr(dataset, "get_batch", None)
    if get_batch is not None:
        images = get_batch(flat)[0]
    else:
        images = torch.stack([dataset[int(i)][0] for i in flat])  # type: ignore[index]
    return images.reshape(*indices.shape, *images.shape[1:])


def draw_gallery(
    dataset: object,
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    path: str | Path | IO[bytes],
    queries: int = 8,
    k: int = 5,
    seed: int = 0,
    title: str | None = None,
) -> torch.Tensor:
    """Gallery of ``queries`` seeded queries of ``dataset`` and their ``k`` nearest items by ``embeddings``.

    ``embeddings`` / ``labels`` are those of ``dataset`` in its order (e.g. from
    ``dmlkit.engine.embed.embed_dataset``). Returns the ``(queries, k)`` mask of correct neighbours.
    """
    labels = torch.as_tensor(labels).reshape(-1)
    if len(embeddings) != len(labels):
        raise ValueError(f"embeddings ({len(embeddings)}) and labels ({len(labels)}) must have one row per image")
    query_idx = choose_queries(labels, queries, seed=seed)
    neighbour_idx, distances = nearest_neighbours(embeddings, query_idx, k)
    return gallery_figure(
        _images(dataset, query_idx),
        labels[query_idx],
        _images(dataset, neighbour_idx),
        labels[neighbour_idx],
        path,
        class_names=getattr(dataset, "class_names", None),
        distances=distances,
        title=title,
    )
