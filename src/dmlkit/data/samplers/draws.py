"""How often a batch sampler draws each category's images, against the category's share of the data.

Category-based sampling re-weights the data: FastAP's Hard sampler gives every category ``ceil(2 N_c / M)``
half-batches per round (or every pair of categories the same number of batches), so a category's share of
the drawn images need not be its share of the images. ``category_draws`` counts, over ``num_batches``
batches of consecutive epochs, the images drawn from each category, and ``format_category_draws`` prints
the comparison (``ratio`` = draw share / image share; 1 means drawn in proportion to its size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor
from dmlkit.validation import is_int

#: The row name of classes without a category (``class_categories == -1``).
NO_CATEGORY = "(none)"


@dataclass(frozen=True)
class CategoryDraws:
    """One category's images in the data and in the drawn batches."""

    category: int
    name: str
    classes: int
    images: int
    image_share: float
    draws: int
    draw_share: float

    @property
    def ratio(self) -> float:
        """Draw share over image share: above 1, the sampler draws the category more than its size."""
        return self.draw_share / self.image_share if self.image_share else float("nan")


def _image_categories(labels: Tensor, class_categories: Tensor) -> Tensor:
    labels = torch.as_tensor(labels, dtype=torch.long)
    class_categories = torch.as_tensor(class_categories, dtype=torch.long)
    if labels.numel() == 0:
        raise ValueError("labels is empty: category draws need a non-empty dataset")
    if int(labels.min()) < 0 or int(labels.max()) >= class_categories.numel():
        raise ValueError(
            f"labels must be class ids 0..{class_categories.numel() - 1} indexing class_categories "
            f"(got {int(labels.min())}..{int(labels.max())})"
        )
    return class_categories[labels]


def count_draws(sampler: Any, num_batches: int) -> Tensor:
    """How many times each dataset index is drawn in the first ``num_batches`` batches, epoch after epoch.

    The sampler is iterated as the trainer does (``set_epoch(e)`` then ``iter``); its epoch is restored after.
    """
    if not is_int(num_batches) or num_batches < 1:
        raise ValueError(f"num_batches must be a positive int, got {num_batches!r}")
    counts: dict[int, int] = {}
    start, epoch, seen = getattr(sampler, "epoch", 0), 0, 0
    try:
        while seen < num_batches:
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)
            batches_this_epoch = 0
            for batch in sampler:
                for index in batch:
                    counts[int(index)] = counts.get(int(index), 0) + 1
                seen += 1
                batches_this_epoch += 1
                if seen == num_batches:
                    break
            if batches_this_epoch == 0:
                raise ValueError("the sampler yields no batch: cannot count its draws")
            epoch += 1
    finally:
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(start)
    size = max(counts) + 1
    out = torch.zeros(size, dtype=torch.long)
    for index, n in counts.items():
        out[index] = n
    return out


def category_draws(
    sampler: Any,
    labels: Sequence[int] | Tensor,
    class_categories: Sequence[int] | Tensor,
    num_batches: int,
    category_names: Sequence[str] = (),
) -> list[CategoryDraws]:
    """Per category (``-1``: classes without one), images in the data vs images drawn in ``num_batches`` batches."""
    image_cats = _image_categories(torch.as_tensor(labels), torch.as_tensor(class_categories))
    labels = torch.as_tensor(labels, dtype=torch.long)
    drawn = count_draws(sampler, num_batches)
    if drawn.numel() > image_cats.numel():
        raise ValueError(f"the sampler drew index {drawn.numel() - 1}, outside the {image_cats.numel()} labelled items")
    drawn = torch.nn.functional.pad(drawn, (0, image_cats.numel() - drawn.numel()))
    total_images, total_draws = image_cats.numel(), int(drawn.sum())
    rows = []
    for cat in sorted(set(image_cats.tolist())):
        mask = image_cats == cat
        name = NO_CATEGORY if cat < 0 else (category_names[cat] if cat < len(category_names) else str(cat))
        images, draws = int(mask.sum()), int(drawn[mask].sum())
        rows.append(
            CategoryDraws(
                category=cat,
                name=name,
                classes=int(labels[mask].unique().numel()),
                images=images,
                image_share=images / total_images,
                draws=draws,
                draw_share=draws / total_draws,
            )
        )
    return rows


def format_category_draws(rows: Sequence[CategoryDraws]) -> str:
    """A Markdown table: category, classes, images, image share, draws, draw share, ratio."""
    lines = [
        "| category | classes | images | image share | draws | draw share | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: -r.images):
        lines.append(
            f"| {r.name} | {r.classes} | {r.images} | {100 * r.image_share:.1f}% | {r.draws} | "
            f"{100 * r.draw_share:.1f}% | {r.ratio:.2f} |"
        )
    return "\n".join(lines)
