"""In-shop Clothes Retrieval (DeepFashion, Liu et al. 2016) from the official benchmark files.

Layout read under ``data.root`` (the benchmark folder, or its parent ``In-shop Clothes Retrieval Benchmark``)::

    Eval/list_eval_partition.txt   line 1: the image count; line 2: header
                                   "image_name item_id evaluation_status"; then
                                   "img/WOMEN/Dresses/id_00000002/02_1_front.jpg id_00000002 train" ...
    img/WOMEN/Dresses/id_00000002/02_1_front.jpg ...   (``Img/img.zip`` extracted; ``Img/img/...`` works too)

Splits of the papers: ``train`` 3,997 items (25,882 images); evaluation by
query / gallery retrieval with ``query`` 14,218 images and ``gallery``
12,612 images of the same 3,985 items. ``query`` and ``gallery`` share their
labels (item ids sorted), so evaluate with
``retrieval_metrics(query_emb, query.labels, reference=gallery_emb, reference_labels=gallery.labels)``.
Super-categories: the 23 ``<GENDER>/<Category>`` folders (e.g. ``MEN/Denim``),
sorted, the same ids in every split; an item takes the category of its first image.
"""

from __future__ import annotations

from pathlib import Path

from dmlkit.data.datasets.image_list import AnnotatedSplit, ImageListDataset, read_rows, relabel
from dmlkit.data.datasets.registry import register_dataset

EVAL_FILE = "Eval/list_eval_partition.txt"


def clothes_category(relative_path: str) -> str:
    """``'img/WOMEN/Dresses/id_1/x.jpg'`` -> ``'WOMEN/Dresses'``."""
    parts = relative_path.replace("\\", "/").split("/")
    return "/".join(parts[1:3]) if len(parts) >= 4 else "unknown"


@register_dataset("inshop")
class InShopDataset(ImageListDataset):
    """In-shop Clothes Retrieval: ``train``, and ``query`` / ``gallery`` with shared labels."""

    PUBLISHED_SIZE = (7982, 52712)

    NAME = "inshop"
    SPLITS = ("train", "query", "gallery")
    QUERY_GALLERY = ("query", "gallery")  # evaluate query against gallery, not self-retrieval
    MARKER = EVAL_FILE
    SUBFOLDERS = ("In-shop Clothes Retrieval Benchmark", "inshop", "In-shop")
    HOW_TO_GET = (
        "Download the 'In-shop Clothes Retrieval Benchmark' of DeepFashion (http://mmlab.ie.cuhk.edu.hk/projects/DeepFashion.html): "
        "Eval/list_eval_partition.txt and Img/img.zip, extract img.zip so that img/ sits beside Eval/, and set data.root to that folder."
    )

    def _read(self, folder: Path, split: str) -> AnnotatedSplit:
        eval_file = self.require(folder, EVAL_FILE)
        rows = read_rows(eval_file, 3, self.NAME, skip=2)
        statuses = {r[2] for r in rows}
        unknown = statuses - set(self.SPLITS)
        if unknown:
            raise ValueError(
                f"{self.NAME}: '{eval_file}' has evaluation status {sorted(unknown)[0]!r}; expected train, query or gallery"
            )
        category_names = sorted({clothes_category(r[0]) for r in rows})
        category_index = {c: k for k, c in enumerate(category_names)}
        item_category: dict[str, int] = {}
        for rel, item, _ in rows:
            item_category.setdefault(item, category_index[clothes_category(rel)])
        table = [r for r in rows if r[2] == split]
        if split == "train":
            labels, items = relabel([r[1] for r in table])
        else:
            query = {r[1] for r in rows if r[2] == "query"}
            gallery = {r[1] for r in rows if r[2] == "gallery"}
            if query != gallery:
                odd = sorted(query ^ gallery)[0]
                raise ValueError(
                    f"{self.NAME}: item {odd} is in only one of query and gallery in '{eval_file}'; "
                    "they must hold the same items (is the file complete?)"
                )
            labels, items = relabel([r[1] for r in table], sorted(query))
        base = (
            folder if not table or (folder / table[0][0]).exists() or not (folder / "Img").is_dir() else folder / "Img"
        )
        return AnnotatedSplit(
            paths=[base / r[0] for r in table],
            classes=labels,
            class_names=[str(i) for i in items],
            class_categories=[item_category[str(i)] for i in items],
            category_names=category_names,
        )
