"""CUB-200-2011 (Wah et al. 2011) from the official archive ``CUB_200_2011.tgz``.

Layout read under ``data.root`` (the extracted ``CUB_200_2011/`` or its parent)::

    images.txt              "<image_id> <class folder>/<file>.jpg"
    image_class_labels.txt  "<image_id> <class_id>"       (class ids 1..200)
    classes.txt             "<class_id> <NNN.Class_name>"
    images/<class folder>/<file>.jpg

Split of the papers (thesis Sec. 3.3.2.1, SFT Sec. 4.1): the first 100 classes
(5,864 images) train, the last 100 (5,924) test; in general the first half of
the classes by id. The official ``train_test_split.txt`` (an image-level split
for classification) is not used. CUB has no super-categories here.
"""

from __future__ import annotations

from pathlib import Path

from dmlkit.data.datasets.image_list import AnnotatedSplit, ImageListDataset, first_half_split, parse_int, read_rows
from dmlkit.data.datasets.registry import register_dataset


@register_dataset("cub")
class CUBDataset(ImageListDataset):
    """CUB-200-2011, class-disjoint halves ``train`` (classes 1-100) and ``test`` (101-200)."""

    PUBLISHED_SIZE = (200, 11788)

    NAME = "cub"
    SPLITS = ("train", "test")
    MARKER = "images.txt"
    SUBFOLDERS = ("CUB_200_2011",)
    HOW_TO_GET = (
        "Download CUB_200_2011.tgz from https://www.vision.caltech.edu/datasets/cub_200_2011/ , extract it, "
        "and set data.root to the folder holding CUB_200_2011/ (or to CUB_200_2011/ itself)."
    )

    def _read(self, folder: Path, split: str) -> AnnotatedSplit:
        images_txt = self.require(folder, "images.txt")
        labels_txt = self.require(folder, "image_class_labels.txt")
        classes_txt = self.require(folder, "classes.txt")
        names = {parse_int(i, images_txt, self.NAME): rel for i, rel in read_rows(images_txt, 2, self.NAME)}
        labels = {
            parse_int(i, labels_txt, self.NAME): parse_int(c, labels_txt, self.NAME)
            for i, c in read_rows(labels_txt, 2, self.NAME)
        }
        class_rows = sorted((parse_int(c, classes_txt, self.NAME), n) for c, n in read_rows(classes_txt, 2, self.NAME))
        class_ids = [c for c, _ in class_rows]
        missing = sorted(set(names) - set(labels))
        if missing:
            raise ValueError(
                f"{self.NAME}: image id {missing[0]} of images.txt has no class in '{labels_txt}'; the file is truncated"
            )
        position = {c: k for k, c in enumerate(class_ids)}
        unknown = sorted(set(labels.values()) - set(position))
        if unknown:
            raise ValueError(f"{self.NAME}: class id {unknown[0]} of image_class_labels.txt is not in '{classes_txt}'")
        ids = sorted(names)
        classes = [position[labels[i]] for i in ids]
        keep, split_classes = first_half_split(classes, len(class_ids), split)
        remap = {c: k for k, c in enumerate(split_classes)}
        return AnnotatedSplit(
            paths=[folder / "images" / names[ids[i]] for i in keep],
            classes=[remap[classes[i]] for i in keep],
            class_names=[class_rows[c][1] for c in split_classes],
        )
