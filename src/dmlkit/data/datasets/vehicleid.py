"""PKU VehicleID (Liu et al. 2016) from the official ``VehicleID_V1.0`` release.

Layout read under ``data.root`` (``VehicleID_V1.0/`` or its parent)::

    train_test_split/train_list.txt       "<image name> <vehicle id>" (13,164 vehicles)
    train_test_split/test_list_800.txt    small test set  (800 vehicles)
    train_test_split/test_list_1600.txt   medium test set (1,600 vehicles)
    train_test_split/test_list_2400.txt   large test set  (2,400 vehicles)
    attribute/model_attr.txt              "<vehicle id> <model id>" (250 models, about half the vehicles)
    image/<image name>.jpg

Splits: ``train``, ``test_small``, ``test_medium``, ``test_large``. Classes are
vehicles (ids sorted, relabelled ``0..C-1`` per split). Categories are the
vehicle models (``model_<id>``, the same ids in every split); a vehicle
without a model label has category ``-1``, as the FastAP supplement's
VehicleID sampler expects ("not every class has a category label").
"""

from __future__ import annotations

from pathlib import Path

from dmlkit.data.datasets.image_list import AnnotatedSplit, ImageListDataset, parse_int, read_rows, relabel
from dmlkit.data.datasets.registry import register_dataset

SPLIT_FILES = {
    "train": "train_test_split/train_list.txt",
    "test_small": "train_test_split/test_list_800.txt",
    "test_medium": "train_test_split/test_list_1600.txt",
    "test_large": "train_test_split/test_list_2400.txt",
}
MODEL_FILE = "attribute/model_attr.txt"


@register_dataset("vehicleid")
class VehicleIDDataset(ImageListDataset):
    """PKU VehicleID: ``train`` and the small / medium / large test lists; models as categories."""

    PUBLISHED_SIZE = (26267, 221763)

    NAME = "vehicleid"
    SPLITS = tuple(SPLIT_FILES)
    MARKER = SPLIT_FILES["train"]
    SUBFOLDERS = ("VehicleID_V1.0", "VehicleID")
    HOW_TO_GET = (
        "Request PKU VehicleID from https://www.pkuml.org/resources/pku-vehicleid.html , extract VehicleID_V1.0 "
        "(image/, train_test_split/, attribute/), and set data.root to it or to its parent."
    )

    def _read(self, folder: Path, split: str) -> AnnotatedSplit:
        list_file = self.require(folder, SPLIT_FILES[split])
        model_file = self.require(folder, MODEL_FILE)
        model_of = {
            parse_int(v, model_file, self.NAME): parse_int(m, model_file, self.NAME)
            for v, m in (row[:2] for row in read_rows(model_file, 2, self.NAME))
        }
        models = sorted(set(model_of.values()))
        model_index = {m: k for k, m in enumerate(models)}
        rows = read_rows(list_file, 2, self.NAME)
        vehicles = [parse_int(v.split()[0], list_file, self.NAME) for _, v in rows]
        labels, distinct = relabel(vehicles)
        return AnnotatedSplit(
            paths=[folder / "image" / f"{name}.jpg" for name, _ in rows],
            classes=labels,
            class_names=[f"vehicle_{v}" for v in distinct],
            class_categories=[model_index[model_of[v]] if v in model_of else -1 for v in distinct],
            category_names=[f"model_{m}" for m in models],
        )
