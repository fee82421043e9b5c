"""Stanford Online Products (Oh Song et al. 2016) from the official ``Stanford_Online_Products.zip``.

Layout read under ``data.root`` (the extracted ``Stanford_Online_Products/`` or its parent)::

    Ebay_train.txt  header "image_id class_id super_class_id path", then
                    "1 1 1 bicycle_final/111085122871_0.JPG" ...
    Ebay_test.txt   the same for the test classes (class ids continue after the train ones)
    bicycle_final/111085122871_0.JPG ...

Splits of the papers: ``train`` 11,318 classes (59,551 images), ``test`` 11,316
classes (60,502 images). Every class belongs to one of 12 super-categories
(bicycle, cabinet, chair, coffee_maker, fan, kettle, lamp, mug, sofa, stapler,
table, toaster): ``category_names`` are their names (the image folder without
``_final``) in ``super_class_id`` order, the same ids in both splits.
"""

from __future__ import annotations

from pathlib import Path

from dmlkit.data.datasets.image_list import AnnotatedSplit, ImageListDataset, parse_int, read_rows, relabel
from dmlkit.data.datasets.registry import register_dataset


def super_class_name(relative_path: str) -> str:
    """``'bicycle_final/1_0.JPG'`` -> ``'bicycle'``."""
    head = relative_path.replace("\\", "/").split("/", 1)[0]
    return head[: -len("_final")] if head.endswith("_final") else head


@register_dataset("sop")
class SOPDataset(ImageListDataset):
    """Stanford Online Products, ``train`` / ``test`` from ``Ebay_train.txt`` / ``Ebay_test.txt``."""

    PUBLISHED_SIZE = (22634, 120053)

    NAME = "sop"
    SPLITS = ("train", "test")
    MARKER = "Ebay_train.txt"
    SUBFOLDERS = ("Stanford_Online_Products",)
    HOW_TO_GET = (
        "Download Stanford_Online_Products.zip (https://cvgl.stanford.edu/projects/lifted_struct/), extract it, and "
        "set data.root to the folder holding Stanford_Online_Products/ (or to that folder itself)."
    )

    def _read(self, folder: Path, split: str) -> AnnotatedSplit:
        # both lists are read so that super-category ids and names agree between the splits
        lists = {s: self.require(folder, f"Ebay_{s}.txt") for s in ("train", "test")}
        rows = {s: read_rows(p, 4, self.NAME, skip=1) for s, p in lists.items()}
        category_of: dict[int, str] = {}
        for s, table in rows.items():
            for _, _, sup, rel in table:
                category_of.setdefault(parse_int(sup, lists[s], self.NAME), super_class_name(rel))
        super_ids = sorted(category_of)
        category_index = {c: k for k, c in enumerate(super_ids)}
        table = rows[split]
        class_ids = [parse_int(c, lists[split], self.NAME) for _, c, _, _ in table]
        labels, distinct = relabel(class_ids)
        class_category = {}
        for (_, c, sup, _), cid in zip(table, class_ids):
            class_category.setdefault(cid, category_index[int(sup)])
        return AnnotatedSplit(
            paths=[folder / rel for _, _, _, rel in table],
            classes=labels,
            class_names=[f"product_{c}" for c in distinct],
            class_categories=[class_category[c] for c in distinct],
            category_names=[category_of[s] for s in super_ids],
        )
