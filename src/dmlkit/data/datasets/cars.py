"""Cars196 / Stanford Cars (Krause et al. 2013) from the official annotation files.

Two official layouts are read under ``data.root``:

1. the all-in-one release (used by the DML papers)::

       cars_annos.mat     struct array 'annotations' (relative_im_path, bbox_*, class, test)
                          and cell array 'class_names'
       car_ims/000001.jpg ...

2. the devkit release (train / test folders of the classification benchmark)::

       devkit/cars_meta.mat                 'class_names'
       devkit/cars_train_annos.mat          'annotations' (bbox_*, class, fname)
       cars_test_annos_withlabels.mat       (in devkit/ or beside it) the same for the test images
       cars_train/00001.jpg ...  cars_test/00001.jpg ...

Class ids are 1-based. Split of the papers: the first 98 classes (8,054 images)
train, the last 98 (8,131) test, whatever the official image-level train/test
flag says; in general the first half of the classes. Images are not cropped
to their bounding boxes (as in the papers). Reading ``.mat`` files needs
scipy. No super-categories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dmlkit.data.datasets.image_list import AnnotatedSplit, ImageListDataset, first_half_split
from dmlkit.data.datasets.registry import register_dataset

HOW_TO_GET_CARS = (
    "Download car_ims.tgz and cars_annos.mat of Stanford Cars (https://ai.stanford.edu/~jkrause/cars/car_dataset.html, "
    "or a mirror of it), extract car_ims/ beside cars_annos.mat, and set data.root to that folder."
)


def load_mat(path: Path, dataset: str) -> dict[str, Any]:
    """``scipy.io.loadmat(path, squeeze_me=True)`` with a clear error when scipy is missing or the file is bad."""
    try:
        from scipy.io import loadmat
    except ImportError as err:
        raise ValueError(f"{dataset}: reading '{path.name}' needs scipy: pip install scipy") from err
    try:
        return loadmat(str(path), squeeze_me=True)
    except Exception as err:  # scipy raises several types for a bad file
        raise ValueError(f"{dataset}: '{path}' is not a readable MATLAB file ({err}); download it again") from err


def _field(records: Any, name: str, path: Path) -> list[Any]:
    array = np.atleast_1d(records)
    if array.dtype.names is None or name not in array.dtype.names:
        raise ValueError(f"cars: '{path}' has no field '{name}' in its annotations; is it the official file?")
    return [array[i][name] for i in range(array.shape[0])]


@register_dataset("cars")
class CarsDataset(ImageListDataset):
    """Cars196, class-disjoint halves ``train`` (classes 1-98) and ``test`` (99-196)."""

    PUBLISHED_SIZE = (196, 16185)

    NAME = "cars"
    SPLITS = ("train", "test")
    MARKER = "cars_annos.mat"
    ALT_MARKERS = ("devkit/cars_meta.mat",)
    SUBFOLDERS = ("stanford_cars", "cars196", "Cars196")
    HOW_TO_GET = HOW_TO_GET_CARS

    def _read(self, folder: Path, split: str) -> AnnotatedSplit:
        if (folder / "cars_annos.mat").is_file():
            paths, classes, names = self._read_all_in_one(folder)
        else:
            paths, classes, names = self._read_devkit(folder)
        if not names:
            raise ValueError(f"{self.NAME}: no class names in the annotations under '{folder}'")
        bad = [c for c in classes if not 1 <= c <= len(names)]
        if bad:
            raise ValueError(
                f"{self.NAME}: class id {bad[0]} outside 1..{len(names)} in the annotations under '{folder}'"
            )
        zero_based = [c - 1 for c in classes]
        keep, split_classes = first_half_split(zero_based, len(names), split)
        remap = {c: k for k, c in enumerate(split_classes)}
        return AnnotatedSplit(
            paths=[paths[i] for i in keep],
            classes=[remap[zero_based[i]] for i in keep],
            class_names=[names[c] for c in split_classes],
        )

    def _read_all_in_one(self, folder: Path) -> tuple[list[Path], list[int], list[str]]:
        path = folder / "cars_annos.mat"
        mat = load_mat(path, self.NAME)
        if "annotations" not in mat or "class_names" not in mat:
            raise ValueError(
                f"{self.NAME}: '{path}' lacks 'annotations' or 'class_names'; is it the official cars_annos.mat?"
            )
        ann = mat["annotations"]
        rel = [str(p) for p in _field(ann, "relative_im_path", path)]
        classes = [int(c) for c in _field(ann, "class", path)]
        names = [str(n) for n in np.atleast_1d(mat["class_names"])]
        return [folder / r for r in rel], classes, names

    def _read_devkit(self, folder: Path) -> tuple[list[Path], list[int], list[str]]:
        meta = load_mat(self.require(folder, "devkit/cars_meta.mat"), self.NAME)
        names = [str(n) for n in np.atleast_1d(meta.get("class_names", []))]
        train_path = self.require(folder, "devkit/cars_train_annos.mat")
        test_path = folder / "devkit" / "cars_test_annos_withlabels.mat"
        if not test_path.is_file():
            test_path = self.require(folder, "cars_test_annos_withlabels.mat")
        paths: list[Path] = []
        classes: list[int] = []
        for ann_path, images in ((train_path, "cars_train"), (test_path, "cars_test")):
            ann = load_mat(ann_path, self.NAME).get("annotations")
            if ann is None:
                raise ValueError(f"{self.NAME}: '{ann_path}' has no 'annotations'; is it the official devkit file?")
            paths += [folder / images / str(f) for f in _field(ann, "fname", ann_path)]
            classes += [int(c) for c in _field(ann, "class", ann_path)]
        return paths, classes, names
