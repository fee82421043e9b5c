"""A long-tailed training split: a share of the training classes cut to a few images each.

``data.tail_fraction`` / ``data.tail_images`` (``DataConfig``) make any dataset's training split long-tailed,
as the SFT paper's unbalanced setting (Sec. 3.5, Sec. 4 "Effect on Unbalanced Datasets"): data-rich *head*
classes keep all their images, data-poor *tail* classes keep ``tail_images``. ``build_datasets`` applies
``cut_long_tail`` to the training split only, after any validation hold-out (``val_fraction``, ``folds``), so
the validation and test classes keep every image and retrieval is scored as on the untouched data.

The rule (deterministic; it uses no run seed, so paired seeds see the same long-tailed data):

* a class's key is its name (``class_names[c]``); its rank is the SHA-256 digest of
  ``"dmlkit-long-tail:" + name`` (ties, i.e. equal names, by class id);
* the ``round(tail_fraction * C)`` classes of smallest rank are cut (``C``: classes of the training split);
  the choice is nested: a larger fraction cuts the same classes and more, and a class keeps its rank
  whatever other classes the split holds (``max_classes``, a hold-out);
* a cut class keeps the ``tail_images`` of its images whose position ``i`` among the class's items (in item
  order) has the smallest digest of ``"dmlkit-long-tail:" + name + ":" + str(i)``; a class with no more than
  ``tail_images`` images keeps them all.

The cut keeps every class (each keeps ``tail_images >= 2`` images, so it still has a positive pair), so class
ids are unchanged; the result is a ``LabelledSubset`` in the parent's item order. The digests come from
``hashlib``, not from a torch generator, so the cut does not depend on the torch version either.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import Tensor

from dmlkit.data.datasets.base import DMLDataset
from dmlkit.data.splits import LabelledSubset
from dmlkit.validation import check_int, check_real

__all__ = ["LongTailCut", "check_long_tail", "cut_long_tail", "long_tail_cut", "tail_classes"]

#: The prefix of every digest of the rule; changing it would change every long-tailed split.
SALT = "dmlkit-long-tail:"


def _rank(text: str) -> int:
    """The first 8 bytes of the SHA-256 digest of ``SALT + text``, as an int."""
    return int.from_bytes(hashlib.sha256((SALT + text).encode("utf-8")).digest()[:8], "big")


def check_long_tail(fraction: object, images: object, prefix: str = "data.") -> None:
    """Raise a ``ValueError`` naming ``{prefix}tail_fraction`` / ``{prefix}tail_images`` for values no cut can use."""
    check_real(
        f"{prefix}tail_fraction",
        fraction,
        0,
        1,
        high_open=True,
        hint=f"the share of training classes cut to {prefix}tail_images images; 0 cuts none",
    )
    check_int(f"{prefix}tail_images", images, 2, hint="images kept per cut class, so each keeps a positive pair")


def tail_classes(class_names: list[str], fraction: float) -> Tensor:
    """The class ids cut by ``fraction`` (module docstring): ``round(fraction * C)`` of them, sorted."""
    check_long_tail(fraction, 2, prefix="")
    count = int(round(fraction * len(class_names)))
    order = sorted(range(len(class_names)), key=lambda c: (_rank(class_names[c]), c))
    return torch.tensor(sorted(order[:count]), dtype=torch.long)


def _kept_positions(name: str, n: int, images: int) -> list[int]:
    """Positions (in item order) of the ``images`` items a cut class named ``name`` with ``n`` items keeps."""
    if n <= images:
        return list(range(n))
    return sorted(sorted(range(n), key=lambda i: (_rank(f"{name}:{i}"), i))[:images])


@dataclass(frozen=True)
class LongTailCut:
    """What ``long_tail_cut`` keeps: the item indices of the training split, and the classes it cut."""

    indices: Tensor  # (N',) item indices of the parent, ascending
    cut: Tensor  # (K,) class ids cut to ``images`` images, ascending


def long_tail_cut(labels: Tensor, class_names: list[str], fraction: float, images: int) -> LongTailCut:
    """The items kept when ``fraction`` of the classes are cut to ``images`` images (module docstring)."""
    check_long_tail(fraction, images, prefix="")
    labels = torch.as_tensor(labels, dtype=torch.long)
    cut = tail_classes(class_names, fraction)
    keep = torch.ones(labels.numel(), dtype=torch.bool)
    for c in cut.tolist():
        members = torch.nonzero(labels == c).flatten()  # ascending: item order
        keep[members] = False
        keep[members[_kept_positions(class_names[c], members.numel(), images)]] = True
    return LongTailCut(indices=torch.nonzero(keep).flatten(), cut=cut)


def cut_long_tail(dataset: DMLDataset, fraction: float, images: int) -> DMLDataset:
    """``dataset`` with ``round(fraction * C)`` of its classes cut to ``images`` images each (module docstring).

    ``dataset`` itself when nothing is cut (``fraction`` 0, or too few classes for one); otherwise a
    ``LabelledSubset`` with the same classes and class ids.
    """
    plan = long_tail_cut(dataset.labels, list(dataset.class_names), fraction, images)
    if plan.indices.numel() == len(dataset):
        return dataset
    return LabelledSubset(dataset, plan.indices)
