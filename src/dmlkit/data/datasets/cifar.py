"""CIFAR-10 and CIFAR-100 (Krizhevsky 2009) from the official "python version" archives.

Layout in ``data.root`` (default ``$DMLKIT_CACHE/cifar10`` / ``cifar100``)::

    cifar-10-python.tar.gz                         (optional once extracted)
    cifar-10-batches-py/data_batch_1 .. data_batch_5, test_batch, batches.meta
    cifar-100-python.tar.gz
    cifar-100-python/train, test, meta

Each batch is a pickled dict with ``data`` (``N x 3072`` uint8, the red, green
and blue 32 x 32 planes) and ``labels`` (CIFAR-10) or ``fine_labels`` /
``coarse_labels`` (CIFAR-100). The pickles are read with an unpickler that
accepts only numpy arrays, so a foreign file cannot run code. CIFAR-100's
20 super-classes (``coarse_labels``) are the class categories (the thesis'
Cifar-collage study groups classes by them). ``prepare`` downloads the archive
(MD5-checked) and extracts the needed members; the constructor extracts an
archive already present, downloads only with ``download=True``, and otherwise
says how to get the data. Official ``train`` (50,000) / ``test`` (10,000).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dmlkit.data.datasets.array_images import ArrayImageDataset, ImageArrays
from dmlkit.data.cache import dataset_dir
from dmlkit.data.downloads import RemoteFile, ensure_file, extract_tar
from dmlkit.data.datasets.registry import register_dataset

__all__ = ["CIFAR10Dataset", "CIFAR100Dataset", "load_pickle"]

_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),  # bytes in protocol-2 pickles written by Python 3
}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(
                module.replace("numpy.core", "numpy._core") if hasattr(np, "_core") else module, name
            )
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a CIFAR file")


def load_pickle(path: Path, dataset: str) -> dict[str, Any]:
    """A CIFAR pickle as a dict with ``str`` keys (the files use ``bytes`` keys)."""
    try:
        with open(path, "rb") as f:
            raw = _ArrayUnpickler(f, encoding="bytes").load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError) as err:
        raise ValueError(
            f"{dataset}: '{path}' is not an official CIFAR pickle ({err}); delete it and extract it again"
        ) from err
    if not isinstance(raw, dict):
        raise ValueError(f"{dataset}: '{path}' does not hold a dict; is it the official file?")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in raw.items()}


def _names(values: Any) -> list[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


class _CIFARBase(ArrayImageDataset):
    ARCHIVE: ClassVar[RemoteFile]
    FOLDER: ClassVar[str]
    SPLIT_FILES: ClassVar[dict[str, tuple[str, ...]]]
    META: ClassVar[str]
    FLIP = True

    @classmethod
    def members(cls) -> list[str]:
        names = {n for files in cls.SPLIT_FILES.values() for n in files} | {cls.META}
        return [f"{cls.FOLDER}/{n}" for n in sorted(names)]

    @classmethod
    def _extracted(cls, folder: Path, download: bool, verify: bool = False) -> Path:
        """The extracted folder, extracting the archive (fetching it when ``download``) if a file is missing."""
        if not verify and all((folder / m).is_file() for m in cls.members()):
            return folder / cls.FOLDER
        archive = folder / cls.ARCHIVE.name
        if not archive.is_file() and not download:
            missing = next(m for m in cls.members() if not (folder / m).is_file())
            raise ValueError(
                f"{cls.NAME}: file '{missing}' is missing; expected it at '{folder / missing}'. Get it with "
                f"`dmlkit data prepare {cls.NAME} --root {folder}` (downloads {cls.ARCHIVE.name}, checks its MD5 and "
                f"extracts it) or extract {cls.ARCHIVE.urls[0]} into that folder"
            )
        ensure_file(folder, cls.ARCHIVE, cls.NAME, download=download)
        extract_tar(archive, folder, cls.members())
        return folder / cls.FOLDER

    @classmethod
    def prepare(cls, root: str | Path | None = None, download: bool = True) -> Path:
        """Download (MD5-checked) and extract the archive into the dataset folder; return the extracted folder."""
        folder = dataset_dir(cls.NAME, root)
        if all((folder / m).is_file() for m in cls.members()):
            return folder / cls.FOLDER
        return cls._extracted(folder, download, verify=True)

    def _load(self, split: str, root: str | Path | None, download: bool) -> ImageArrays:
        base = self._extracted(dataset_dir(self.NAME, root), download)
        parts = [load_pickle(base / name, self.NAME) for name in self.SPLIT_FILES[split]]
        meta = load_pickle(base / self.META, self.NAME)
        images, labels = [], []
        for part, name in zip(parts, self.SPLIT_FILES[split]):
            data = np.asarray(part.get("data"))
            if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
                raise ValueError(
                    f"{self.NAME}: '{base / name}' holds data of shape {data.shape}, expected (N, 3072) uint8"
                )
            images.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
            labels.append(np.asarray(part[self.LABEL_KEY], dtype=np.int64))
        return self._arrays(np.concatenate(images), np.concatenate(labels), parts, meta)

    LABEL_KEY: ClassVar[str] = "labels"

    def _arrays(
        self, images: np.ndarray, labels: np.ndarray, parts: list[dict[str, Any]], meta: dict[str, Any]
    ) -> ImageArrays:
        return ImageArrays(images, labels, _names(meta["label_names"]))


@register_dataset("cifar10")
class CIFAR10Dataset(_CIFARBase):
    """CIFAR-10, 10 classes, no categories; see the module docstring."""

    PUBLISHED_SIZE = (10, 60000)

    NAME = "cifar10"
    MEAN = (0.4914, 0.4822, 0.4465)
    STD = (0.2470, 0.2435, 0.2616)
    FOLDER = "cifar-10-batches-py"
    SPLIT_FILES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)}
    META = "batches.meta"
    ARCHIVE = RemoteFile(
        "cifar-10-python.tar.gz",
        ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
        ("c58f30108f718f92721af3b95e74349a",),
    )


@register_dataset("cifar100")
class CIFAR100Dataset(_CIFARBase):
    """CIFAR-100, 100 classes in 20 super-class categories; see the module docstring."""

    PUBLISHED_SIZE = (100, 60000)

    NAME = "cifar100"
    MEAN = (0.5071, 0.4865, 0.4409)
    STD = (0.2673, 0.2564, 0.2762)
    FOLDER = "cifar-100-python"
    SPLIT_FILES = {"train": ("train",), "test": ("test",)}
    META = "meta"
    LABEL_KEY = "fine_labels"
    ARCHIVE = RemoteFile(
        "cifar-100-python.tar.gz",
        ("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",),
        ("eb9058c3a382ffc7106e4002c42a8d85",),
    )

    def _arrays(
        self, images: np.ndarray, labels: np.ndarray, parts: list[dict[str, Any]], meta: dict[str, Any]
    ) -> ImageArrays:
        fine_names, coarse_names = _names(meta["fine_label_names"]), _names(meta["coarse_label_names"])
        coarse = np.concatenate([np.asarray(p["coarse_labels"], dtype=np.int64) for p in parts])
        categories = [-1] * len(fine_names)
        for f, c in zip(labels.tolist(), coarse.tolist()):
            categories[f] = c
        return ImageArrays(images, labels, fine_names, categories, coarse_names)
