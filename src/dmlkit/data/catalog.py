"""The dataset registry: ``create_dataset(name, split, ...)``, ``list_datasets()``, ``prepare_dataset(name)``.

A dataset registers its ``DMLDataset`` subclass under a name with ``@register_dataset(name)``
(``datasets/registry.py``); the class names its splits in ``SPLITS`` and makes its data available in ``prepare``.
Adding a dataset = one file in ``datasets/`` with that decorator (or, from a plug-in, the same decorator: the
lab's testbeds ``glyphs_testbed``, ``font_glyphs`` and ``glyph_collage`` are registered by ``dmlkit_lab``'s, which
the registry imports when a name is not found here).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from dmlkit.data.datasets.base import DMLDataset
from dmlkit.data.config import DataConfig
from dmlkit.data.datasets.registry import DATASETS, register_dataset  # noqa: F401 (also reached from here)
from dmlkit.data.long_tail import cut_long_tail
from dmlkit.data.splits import class_disjoint_split, class_fold_split, subset_classes
from dmlkit.registry import check_kwargs
from dmlkit.validation import is_int


def list_datasets() -> list[str]:
    """Names accepted by ``create_dataset``."""
    return DATASETS.names()


def dataset_splits(name: str) -> tuple[str, ...]:
    """The splits of dataset ``name``."""
    return tuple(getattr(DATASETS.get(name), "SPLITS", ()))


def create_dataset(
    name: str,
    split: str,
    root: str | Path | None = None,
    seed: int = 0,
    augment: bool = False,
    image_size: int = 32,
    max_classes: int | None = None,
    **kwargs: Any,
) -> DMLDataset:
    """Split ``split`` of dataset ``name``, following the ``DMLDataset`` interface.

    ``max_classes`` keeps the first classes of the split (natively where the
    dataset supports it, else as a ``LabelledSubset``); other keyword arguments
    go to the dataset's constructor. Unknown names, splits or arguments raise
    ``ValueError`` listing the valid ones.
    """
    factory = DATASETS.get(name)
    splits = dataset_splits(name)
    if split not in splits:
        raise ValueError(f"unknown split '{split}' of dataset '{name}'; valid splits are: {', '.join(splits)}")
    if max_classes is not None and (not is_int(max_classes) or max_classes < 1):
        raise ValueError(f"max_classes must be a positive int or None, got {max_classes!r}")
    args = dict(split=split, root=root, seed=seed, augment=augment, image_size=image_size, **kwargs)
    native = "max_classes" in inspect.signature(factory).parameters
    if native:
        args["max_classes"] = max_classes
    check_kwargs(factory, args, f"dataset '{name}'")
    dataset = factory(**args)
    if max_classes is not None and not native and max_classes < dataset.num_classes:
        dataset = subset_classes(dataset, range(max_classes))
    return dataset


def prepare_dataset(name: str, root: str | Path | None = None, **kwargs: Any) -> Path | None:
    """Make dataset ``name`` available (glyphs: render and cache); return its folder or file."""
    factory = DATASETS.get(name)
    prepare = getattr(factory, "prepare")
    check_kwargs(prepare, kwargs, f"prepare_dataset('{name}')")
    return prepare(root=root, **kwargs)


def split_options(config: DataConfig, seed: int) -> dict[str, Any]:
    """The keyword arguments every split of ``config``'s dataset is created with (augmentation aside)."""
    return dict(
        root=config.root, seed=seed, image_size=config.image_size, max_classes=config.max_classes, **config.params
    )


def training_set(config: DataConfig, seed: int = 0) -> tuple[DMLDataset, DMLDataset | None]:
    """The run's own training set and the validation classes held out of it (``None`` when there are none).

    The training set is split ``config.train_split`` (augmented if ``config.augment``) without the last
    ``val_fraction`` of its classes (or fold ``fold`` of them), cut long-tailed when ``config.tail_fraction > 0``
    (``dmlkit.data.long_tail``); the held-out classes are never augmented nor cut. With ``config.val_split`` the
    validation set is another split and nothing is held out. ``build_datasets`` and ``assemble.run_split`` (the
    training set a finished run is evaluated or inspected on) both start here, so the hold-out and the cut have
    one definition.
    """
    common = split_options(config, seed)
    train = create_dataset(config.name, config.train_split, augment=config.augment, **common)
    held_out = None
    if config.val_split is None and config.folds:
        train, held_out = class_fold_split(train, config.folds, config.fold)
    elif config.val_split is None and config.val_fraction > 0:
        train, held_out = class_disjoint_split(train, config.val_fraction)
    if config.tail_fraction > 0:
        train = cut_long_tail(train, config.tail_fraction, config.tail_images)
    return train, None if held_out is None else held_out.with_augment(False)


def build_datasets(config: DataConfig, seed: int = 0, test_split: str = "test") -> dict[str, DMLDataset]:
    """The ``train`` / ``val`` / ``test`` datasets of ``config`` (``val`` only if ``val_split``, ``val_fraction > 0``
    or ``folds``).

    ``train`` and a held-out ``val`` are ``training_set``'s; ``val`` is split ``config.val_split`` when set (never
    augmented). ``test`` is the (un-augmented) ``test_split``.
    """
    common = split_options(config, seed)
    train, held_out = training_set(config, seed)
    out: dict[str, DMLDataset] = {"train": train}
    if config.val_split is not None:
        out["val"] = create_dataset(config.name, config.val_split, augment=False, **common)
    elif held_out is not None:
        out["val"] = held_out
    out["test"] = create_dataset(config.name, test_split, augment=False, **common)
    return out


def dataset_table() -> str:
    """``dmlkit data list``: one line per dataset with its splits, its published size (classes / images, where
    fixed), what this machine holds of it, and where its images come from."""
    rows = [("name", "splits", "classes", "images", "here", "source")]
    for name in list_datasets():
        cls = DATASETS.get(name)
        size = cls.PUBLISHED_SIZE
        rows.append(
            (
                name,
                ", ".join(dataset_splits(name)),
                f"{size[0]:,}" if size else "-",
                f"{size[1]:,}" if size else "-",
                cls.local_state(name),
                cls.SOURCE.replace("NAME", name) or "(the class states no source)",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows)
