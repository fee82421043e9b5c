"""Miniature copies of the benchmark datasets, written by the tests in the official file layouts and formats.

Each ``write_<name>(root)`` writes a tiny dataset under ``root`` with the real
file names (annotation lists, ``.mat``, idx ``.gz``, CIFAR pickles) and tiny
JPEG images, and returns the folder to pass as ``data.root``. Every split has
at least 4 classes (the registry test keeps 4).
"""

from __future__ import annotations

import gzip
import pickle
import struct
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
from PIL import Image


_JPEG_SIZE = [(40, 30)]  # (width, height) of the images the writers make


@contextmanager
def jpeg_size(width: int, height: int) -> Iterator[None]:
    """Inside the block, the writers make ``width x height`` JPEGs (e.g. 300 x 250, a photograph's size)."""
    _JPEG_SIZE.append((width, height))
    try:
        yield
    finally:
        _JPEG_SIZE.pop()


def _jpeg(path: Path, seed: int, size: tuple[int, int] | None = None) -> None:
    size = size or _JPEG_SIZE[-1]
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    array = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(array).save(path, quality=90)


def write_cub(root: Path, num_classes: int = 8, per_class: int = 2) -> Path:
    """``CUB_200_2011/`` with images.txt, image_class_labels.txt, classes.txt, images/."""
    base = root / "CUB_200_2011"
    base.mkdir(parents=True)
    images, labels, classes = [], [], []
    image_id = 0
    for c in range(1, num_classes + 1):
        folder = f"{c:03d}.Bird_{c}"
        classes.append(f"{c} {folder}")
        for k in range(per_class):
            image_id += 1
            rel = f"{folder}/Bird_{c}_{k:04d}.jpg"
            images.append(f"{image_id} {rel}")
            labels.append(f"{image_id} {c}")
            _jpeg(base / "images" / rel, image_id)
    (base / "images.txt").write_text("\n".join(images) + "\n")
    (base / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (base / "classes.txt").write_text("\n".join(classes) + "\n")
    (base / "train_test_split.txt").write_text("".join(f"{i} {i % 2}\n" for i in range(1, image_id + 1)))
    return root


def _mat_struct(rows: list[dict], fields: list[str]) -> np.ndarray:
    array = np.zeros((1, len(rows)), dtype=[(f, "O") for f in fields])
    for i, row in enumerate(rows):
        array[0, i] = tuple(row[f] for f in fields)
    return array


def _cell(strings: list[str]) -> np.ndarray:
    cell = np.empty((1, len(strings)), dtype=object)
    for i, s in enumerate(strings):
        cell[0, i] = s
    return cell


def write_cars(root: Path, num_classes: int = 8, per_class: int = 2, layout: str = "annos") -> Path:
    """Cars196: ``cars_annos.mat`` + ``car_ims/`` (layout "annos") or the devkit layout ("devkit")."""
    from scipy.io import savemat

    root.mkdir(parents=True, exist_ok=True)
    names = [f"Make{c} Model {2000 + c}" for c in range(1, num_classes + 1)]
    u8 = lambda v: np.array([[v]], dtype=np.uint16)  # noqa: E731 - MATLAB stores small ints
    rows, n = [], 0
    for c in range(1, num_classes + 1):
        for k in range(per_class):
            n += 1
            rows.append(dict(c=c, n=n, test=k % 2))
    if layout == "annos":
        ann = [
            dict(
                relative_im_path=f"car_ims/{r['n']:06d}.jpg",
                bbox_x1=u8(1),
                bbox_y1=u8(1),
                bbox_x2=u8(30),
                bbox_y2=u8(20),
                **{"class": u8(r["c"]), "test": u8(r["test"])},
            )
            for r in rows
        ]
        fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
        savemat(root / "cars_annos.mat", {"annotations": _mat_struct(ann, fields), "class_names": _cell(names)})
        for r in rows:
            _jpeg(root / "car_ims" / f"{r['n']:06d}.jpg", r["n"])
        return root
    (root / "devkit").mkdir(parents=True)
    savemat(root / "devkit" / "cars_meta.mat", {"class_names": _cell(names)})
    fields = ["bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "fname"]
    for part, folder, mat in (
        (0, "cars_train", "devkit/cars_train_annos.mat"),
        (1, "cars_test", "cars_test_annos_withlabels.mat"),
    ):
        mine = [r for r in rows if r["test"] == part]
        ann = [
            dict(
                bbox_x1=u8(1),
                bbox_y1=u8(1),
                bbox_x2=u8(30),
                bbox_y2=u8(20),
                fname=f"{i + 1:05d}.jpg",
                **{"class": u8(r["c"])},
            )
            for i, r in enumerate(mine)
        ]
        savemat(root / mat, {"annotations": _mat_struct(ann, fields)})
        for i, r in enumerate(mine):
            _jpeg(root / folder / f"{i + 1:05d}.jpg", r["n"])
    return root


SOP_SUPER = ["bicycle", "cabinet", "chair"]


def write_sop(root: Path, train_classes: int = 5, test_classes: int = 5, per_class: int = 2) -> Path:
    """``Stanford_Online_Products/`` with Ebay_train.txt, Ebay_test.txt and <super>_final/ images."""
    base = root / "Stanford_Online_Products"
    image_id, class_id = 0, 0
    for split, count in (("train", train_classes), ("test", test_classes)):
        lines = ["image_id class_id super_class_id path"]
        for _ in range(count):
            class_id += 1
            sup = (class_id - 1) % len(SOP_SUPER)
            for k in range(per_class):
                image_id += 1
                rel = f"{SOP_SUPER[sup]}_final/{100000 + class_id}_{k}.JPG"
                lines.append(f"{image_id} {class_id} {sup + 1} {rel}")
                _jpeg(base / rel, image_id)
        base.mkdir(parents=True, exist_ok=True)
        (base / f"Ebay_{split}.txt").write_text("\n".join(lines) + "\n")
    return root


INSHOP_CATEGORIES = ["MEN/Denim", "WOMEN/Dresses", "WOMEN/Skirts"]


def write_inshop(root: Path, train_items: int = 5, test_items: int = 4) -> Path:
    """``Eval/list_eval_partition.txt`` and ``img/<GENDER>/<Category>/id_XXXXXXXX/*.jpg``."""
    rows = []
    n = 0
    for item in range(1, train_items + test_items + 1):
        cat = INSHOP_CATEGORIES[item % len(INSHOP_CATEGORIES)]
        statuses = ["train", "train"] if item <= train_items else ["query", "gallery", "query", "gallery"]
        for k, status in enumerate(statuses):
            n += 1
            rel = f"img/{cat}/id_{item:08d}/{k + 1:02d}_{k + 1}_front.jpg"
            rows.append(f"{rel}  id_{item:08d}  {status}")
            _jpeg(root / rel, n)
    (root / "Eval").mkdir(parents=True)
    text = f"{len(rows)}\nimage_name item_id evaluation_status\n" + "\n".join(rows) + "\n"
    (root / "Eval" / "list_eval_partition.txt").write_text(text)
    return root


def write_vehicleid(root: Path, per_list: int = 4, per_vehicle: int = 2) -> Path:
    """``VehicleID_V1.0/`` with train_test_split/*.txt, attribute/model_attr.txt and image/*.jpg."""
    base = root / "VehicleID_V1.0"
    (base / "train_test_split").mkdir(parents=True)
    (base / "attribute").mkdir()
    files = ["train_list.txt", "test_list_800.txt", "test_list_1600.txt", "test_list_2400.txt"]
    vehicle, n, models = 0, 0, []
    for name in files:
        lines = []
        for _ in range(per_list):
            vehicle += 1
            if vehicle % 3:  # every third vehicle has no model label
                models.append(f"{vehicle} {vehicle % 2 + 7}")
            for _ in range(per_vehicle):
                n += 1
                lines.append(f"{n:07d} {vehicle}")
                _jpeg(base / "image" / f"{n:07d}.jpg", n)
        (base / "train_test_split" / name).write_text("\n".join(lines) + "\n")
    (base / "attribute" / "model_attr.txt").write_text("\n".join(models) + "\n")
    return root


def idx_bytes(array: np.ndarray) -> bytes:
    """An unsigned-byte idx file of ``array``."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_mnist_like(root: Path, per_class: int = 2, num_classes: int = 10) -> Path:
    """The four idx ``.gz`` files; image ``i`` is constant ``10 * label + i % 3``."""
    root.mkdir(parents=True, exist_ok=True)
    for prefix, offset in (("train", 0), ("t10k", 1)):
        labels = np.repeat(np.arange(num_classes), per_class).astype(np.uint8)
        images = np.stack([np.full((28, 28), 10 * int(y) + (i + offset) % 3, np.uint8) for i, y in enumerate(labels)])
        with gzip.open(root / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
            f.write(idx_bytes(images))
        with gzip.open(root / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(idx_bytes(labels))
    return root


def _cifar_batch(labels: list[int], key: str, extra: dict | None = None, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
    batch = {b"data": data, key.encode(): labels, b"batch_label": b"testing batch"}
    batch.update(extra or {})
    return batch


def write_cifar10(root: Path, per_class: int = 2) -> Path:
    """``cifar-10-batches-py/`` with data_batch_1..5, test_batch and batches.meta (protocol-2 pickles)."""
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        labels = [c for c in range(10) for _ in range(per_class)]
        with open(base / name, "wb") as f:
            pickle.dump(_cifar_batch(labels, "labels", seed=i), f, protocol=2)
    with open(base / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": names, b"num_vis": 3072}, f, protocol=2)
    return root


def write_cifar100(root: Path, per_class: int = 1) -> Path:
    """``cifar-100-python/`` with train, test and meta; fine class ``f`` has coarse class ``f // 5``."""
    base = root / "cifar-100-python"
    base.mkdir(parents=True)
    fine = [c for c in range(100) for _ in range(per_class)]
    for i, name in enumerate(["train", "test"]):
        with open(base / name, "wb") as f:
            pickle.dump(
                _cifar_batch(fine, "fine_labels", {b"coarse_labels": [c // 5 for c in fine]}, seed=i), f, protocol=2
            )
    with open(base / "meta", "wb") as f:
        pickle.dump(
            {
                b"fine_label_names": [f"fine{c}".encode() for c in range(100)],
                b"coarse_label_names": [f"coarse{c}".encode() for c in range(20)],
            },
            f,
            protocol=2,
        )
    return root


MINIATURES = {
    "cub": write_cub,
    "cars": write_cars,
    "sop": write_sop,
    "inshop": write_inshop,
    "vehicleid": write_vehicleid,
    "mnist": write_mnist_like,
    "fashion_mnist": write_mnist_like,
    "cifar10": write_cifar10,
    "cifar100": write_cifar100,
}
