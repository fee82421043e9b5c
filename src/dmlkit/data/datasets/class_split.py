"""The class split of a flat folder ``ROOT/<class>/<image>`` into train and test classes, and its record.

The benchmarks' convention (CUB, Cars: the first half of the classes train, the rest test) applied to a
user's folder: ``class_split: sorted`` puts the first ``train_share`` of the class names in sorted order
into ``train`` and the rest into ``test``; ``class_split: random`` draws which classes train from
``split_seed`` (a seed of its own, not the run's, so runs of several seeds test on the same classes).
``round(train_share * C)`` classes train; each side needs at least ``MIN_CLASSES`` classes. The
validation classes are then held out of ``train`` by ``data.val_fraction`` as for every dataset.

A run writes the split into its folder as ``classes.json`` (``split_record``); ``evaluate``, ``embed``
and ``--resume`` read it back (``data.params.classes_file``), so they use the run's classes even after
classes were added to the folder. A record is checked against the folder: a recorded class that is gone
is an error; a class the record does not know is left out, with a warning.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch

from dmlkit.seeding import make_generator
from dmlkit.validation import is_int, is_real

CLASS_SPLITS = ("sorted", "random")
MIN_CLASSES = 2
RECORD_FORMAT = "dmlkit-class-split/1"
RECORD_NAME = "classes.json"


def check_class_split(class_split: object, train_share: object, split_seed: object) -> None:
    """``ValueError`` naming the ``data.params`` option whose value cannot split classes."""
    if class_split not in CLASS_SPLITS:
        raise ValueError(f"data.params.class_split must be one of {', '.join(CLASS_SPLITS)}, got {class_split!r}")
    if not is_real(train_share) or not 0.0 < float(train_share) < 1.0:  # type: ignore[arg-type]
        raise ValueError(
            f"data.params.train_share is the share of the classes that train and must lie strictly between 0 and 1 "
            f"(e.g. 0.5), got {train_share!r}"
        )
    if not is_int(split_seed):
        raise ValueError(f"data.params.split_seed must be an int, got {split_seed!r}")


def split_classes(
    names: Sequence[str], class_split: str = "sorted", train_share: float = 0.5, split_seed: int = 0
) -> dict[str, list[str]]:
    """``{"train": [...], "test": [...]}``: the class names of each side, each in sorted order."""
    check_class_split(class_split, train_share, split_seed)
    ordered = sorted(names)
    c = len(ordered)
    n_train = int(round(float(train_share) * c))
    if n_train < MIN_CLASSES or c - n_train < MIN_CLASSES:
        raise ValueError(
            f"{c} class folder(s) split with train_share={train_share} give {n_train} train and {c - n_train} test "
            f"classes; each side needs at least {MIN_CLASSES}. Add class folders (at least {2 * MIN_CLASSES}), "
            "or change data.params.train_share"
        )
    if class_split == "random":
        order = torch.randperm(c, generator=make_generator(split_seed, 0xC1A55)).tolist()
    else:
        order = list(range(c))
    train = sorted(ordered[i] for i in order[:n_train])
    test = sorted(ordered[i] for i in order[n_train:])
    return {"train": train, "test": test}


def split_record(
    root: Path, split: dict[str, list[str]], class_split: str, train_share: float, split_seed: int
) -> dict[str, Any]:
    """What ``classes.json`` holds: how the classes were split and the class names of each side."""
    return {
        "format": RECORD_FORMAT,
        "root": str(root),
        "class_split": class_split,
        "train_share": train_share,
        "split_seed": split_seed,
        "train": list(split["train"]),
        "test": list(split["test"]),
    }


def read_split_record(path: str | Path, folder_classes: Sequence[str]) -> dict[str, Any]:
    """The record at ``path`` (``split_record``'s fields), checked against the folder's classes."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"data.params.classes_file '{path}' does not exist; pass the classes.json of a run") from None
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(
            f"data.params.classes_file '{path}' cannot be read ({err}); pass the classes.json of a run"
        ) from err
    sides = (record.get("train"), record.get("test")) if isinstance(record, dict) else (None, None)
    if (
        not isinstance(record, dict)
        or record.get("format") != RECORD_FORMAT
        or not all(isinstance(s, list) and s and all(isinstance(n, str) for n in s) for s in sides)
    ):
        raise ValueError(
            f"'{path}' is not a class split record ({RECORD_FORMAT}: lists 'train' and 'test' of class names)"
        )
    present = set(folder_classes)
    missing = [name for side in sides for name in side if name not in present]
    if missing:
        raise ValueError(
            f"class folder(s) {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} named by the split record "
            f"'{path}' are gone from the dataset folder; restore them, or train a new run on the folder as it is now"
        )
    unknown = sorted(present - set(sides[0]) - set(sides[1]))
    if unknown:
        warnings.warn(
            f"{len(unknown)} class folder(s) not in the split record '{path}' are left out "
            f"({', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}): the run was trained and tested without them",
            UserWarning,
            stacklevel=4,
        )
    return record
