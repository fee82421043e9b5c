"""Which images to embed: a folder (scanned recursively), a list file, or a Python list of paths.

Labels are known when every image lies below a class folder: for a folder the class is the name of
the image's parent folder (so ``ROOT/test`` of an ``image_folder`` dataset, laid out
``ROOT/test/<class>/<image>``, gives its classes); a list file may give the class after a tab
(``path<TAB>class``). Class names are numbered ``0..C-1`` in sorted order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from dmlkit.search.preprocess import IMAGE_SUFFIXES

__all__ = ["ImageList", "list_images"]


@dataclass
class ImageList:
    """Image paths in embedding order, with class labels where known."""

    paths: list[Path]
    labels: list[int] | None = None
    class_names: list[str] | None = None

    def __len__(self) -> int:
        return len(self.paths)


def _with_classes(paths: list[Path], names: list[str | None]) -> ImageList:
    if not names or any(n is None for n in names):
        return ImageList(paths)
    classes = sorted(set(names))  # type: ignore[arg-type]
    index = {name: i for i, name in enumerate(classes)}
    return ImageList(paths, [index[n] for n in names], classes)  # type: ignore[index]


def _scan_folder(folder: Path) -> ImageList:
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not paths:
        raise ValueError(
            f"folder '{folder}' holds no images ({', '.join(IMAGE_SUFFIXES)}); pass a folder of images or a list file"
        )
    names = [p.parent.name if p.parent != folder else None for p in paths]
    return _with_classes(paths, names)


def _read_list_file(path: Path) -> ImageList:
    paths: list[Path] = []
    names: list[str | None] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, label = line.partition("\t")
        image = Path(name.strip())
        image = image if image.is_absolute() else path.parent / image
        if not image.is_file():
            raise ValueError(f"{path}:{number}: image '{image}' does not exist; fix or remove the line")
        paths.append(image)
        names.append(label.strip() or None)
    if not paths:
        raise ValueError(
            f"list file '{path}' names no images; write one image path per line (optionally PATH<TAB>CLASS)"
        )
    return _with_classes(paths, names)


def list_images(source: str | Path | Sequence[str | Path]) -> ImageList:
    """The images of a folder, a list file (one path per line, relative to the file) or a sequence of paths."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            return _scan_folder(path)
        if path.is_file():
            if path.suffix.lower() in IMAGE_SUFFIXES:
                return ImageList([path])
            return _read_list_file(path)
        raise ValueError(f"'{path}' does not exist; pass a folder of images or a text file listing image paths")
    paths = [Path(p) for p in source]
    if not paths:
        raise ValueError("no images given; pass at least one image path")
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"{len(missing)} image(s) do not exist, e.g. '{missing[0]}'")
    return ImageList(paths)
