"""Which of the two class-folder layouts a user's image folder has, and the images of its class folders.

``image_folder`` reads either layout under ``ROOT``:

- *split*: ``ROOT/train/<class>/<image>`` and ``ROOT/test/<class>/<image>``, the classes already split;
- *flat*: ``ROOT/<class>/<image>``, every class in one place, split by ``dmlkit.data.datasets.class_split``.

``folder_layout(root)`` tells them apart: a root whose sub-folders include ``train`` or ``test`` is a split
root; any other root of class folders is flat. A root holding both split folders and other class folders,
a split folder holding images itself, or images lying directly in the root mix the layouts and raise a
``ValueError`` that says which files to move.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
SPLIT_FOLDERS = ("train", "test")
LAYOUTS_TEXT = (
    "ROOT/<class>/<image> (the classes are then split by data.params.class_split) or ROOT/<split>/<class>/<image>"
)


def images_in(folder: Path) -> list[Path]:
    """The image files directly inside ``folder``, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def folder_layout(root: Path) -> str:
    """``"split"`` or ``"flat"``; ``ValueError`` for a missing root or one that mixes the layouts."""
    if not root.is_dir():
        raise ValueError(
            f"dataset folder '{root}' does not exist; image_folder expects {LAYOUTS_TEXT} (set data.root to ROOT)"
        )
    folders = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    loose = images_in(root)
    if loose:
        raise ValueError(
            f"dataset folder '{root}' holds {len(loose)} image(s) directly (e.g. '{loose[0].name}'); image_folder "
            f"expects {LAYOUTS_TEXT}: move each image into the folder of its class"
        )
    splits = [name for name in folders if name in SPLIT_FOLDERS]
    if not splits:
        return "flat"
    others = [name for name in folders if name not in SPLIT_FOLDERS]
    if others:
        raise ValueError(
            f"dataset folder '{root}' mixes the two layouts: it holds the split folder(s) {', '.join(splits)}/ "
            f"(ROOT/<split>/<class>/<image>) and the class folder(s) {', '.join(others[:5])}"
            f"{' ...' if len(others) > 5 else ''} (ROOT/<class>/<image>); move those class folders into "
            f"{'/ or '.join(SPLIT_FOLDERS)}/, or rename {', '.join(splits)}/ if they are classes of a flat folder"
        )
    for name in splits:
        inside = images_in(root / name)
        if inside:
            raise ValueError(
                f"split folder '{root / name}' holds {len(inside)} image(s) directly (e.g. '{inside[0].name}'), which "
                f"mixes the two layouts; put them in class folders ROOT/{name}/<class>/, or, for a flat folder "
                f"ROOT/<class>/<image>, rename '{name}' (a class cannot be called {' or '.join(SPLIT_FOLDERS)})"
            )
    return "split"


def class_folders(folder: Path) -> list[str]:
    """The class sub-folder names of ``folder`` in sorted order; ``ValueError`` when there are none."""
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise ValueError(
            f"dataset folder '{folder}' has no class sub-folders; put each class's images in a folder of its own "
            f"({LAYOUTS_TEXT})"
        )
    return classes


def scan_classes(folder: Path, classes: Sequence[str]) -> tuple[list[Path], list[int]]:
    """Image paths and labels (the position of each class in ``classes``) of the class folders of ``folder``."""
    paths: list[Path] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        images = images_in(folder / name)
        if not images:
            raise ValueError(f"class folder '{folder / name}' holds no images ({', '.join(IMAGE_SUFFIXES)})")
        paths += images
        labels += [label] * len(images)
    return paths, labels
