"""MNIST (LeCun et al. 1998) from the official idx files, fetched with MD5 verification.

Files (in ``data.root``, default ``$DMLKIT_CACHE/mnist``)::

    train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz
    t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz

The idx format (LeCun's page): a big-endian header ``0x00 0x00 <type> <ndim>``
(type ``0x08`` = unsigned byte), ``ndim`` big-endian int32 sizes, then the
data. ``prepare`` (``dmlkit data prepare mnist``) downloads missing files and
checks the MD5 of every file; the constructor downloads only with
``download=True`` and otherwise says how to get a missing file. Splits
``train`` (60,000) and ``test`` (10,000), 10 digit classes, 28 x 28 grey
(thesis Sec. 3.3.1 uses MNIST with 2-d embeddings).
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import ClassVar

import numpy as np

from dmlkit.data.datasets.array_images import ArrayImageDataset, ImageArrays
from dmlkit.data.cache import dataset_dir
from dmlkit.data.downloads import RemoteFile, ensure_file
from dmlkit.data.datasets.registry import register_dataset

__all__ = ["MNISTDataset", "read_idx", "mnist_files"]

IDX_NAMES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def read_idx(path: Path, dataset: str) -> np.ndarray:
    """The array in an idx file (gzipped or not); ``ValueError`` for a truncated or foreign file."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as err:
        raise ValueError(f"{dataset}: '{path}' cannot be read ({err}); delete it and download it again") from err
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{dataset}: '{path}' is not an unsigned-byte idx file; delete it and download it again")
    ndim = data[3]
    header = 4 + 4 * ndim
    shape = tuple(int(v) for v in np.frombuffer(data[4:header], dtype=">i4"))
    if len(data) != header + int(np.prod(shape)):
        raise ValueError(f"{dataset}: '{path}' is truncated (header says {shape}); delete it and download it again")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def mnist_files(base_urls: tuple[str, ...], md5: dict[str, tuple[str, ...]]) -> dict[str, RemoteFile]:
    return {name: RemoteFile(name, tuple(u + name for u in base_urls), md5[name]) for name in md5}


class IdxDataset(ArrayImageDataset):
    """An MNIST-format dataset: four idx files; subclasses give ``FILES`` and ``CLASS_NAMES``."""

    FILES: ClassVar[dict[str, RemoteFile]] = {}
    CLASS_NAMES: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def default_folder(cls, root: str | Path | None) -> Path:
        return dataset_dir(cls.NAME, root)

    def _load(self, split: str, root: str | Path | None, download: bool) -> ImageArrays:
        folder = self.default_folder(root)
        image_name, label_name = IDX_NAMES[split]
        paths = [self._file(folder, name, download) for name in (image_name, label_name)]
        images, labels = read_idx(paths[0], self.NAME), read_idx(paths[1], self.NAME)
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(
                f"{self.NAME}: '{paths[0].name}' ({images.shape}) and '{paths[1].name}' ({labels.shape}) do not match"
            )
        if labels.size and int(labels.max()) >= len(self.CLASS_NAMES):
            raise ValueError(
                f"{self.NAME}: '{paths[1]}' has label {int(labels.max())}; expected 0..{len(self.CLASS_NAMES) - 1}"
            )
        return ImageArrays(images[..., None], labels.astype(np.int64), list(self.CLASS_NAMES))

    def _file(self, folder: Path, name: str, download: bool) -> Path:
        path = folder / name
        if path.is_file():  # verified when it was downloaded / prepared
            return path
        return ensure_file(folder, self.FILES[name], self.NAME, download=download)

    @classmethod
    def prepare(cls, root: str | Path | None = None, download: bool = True) -> Path:
        """Download the missing files into the dataset folder and check every file's MD5; return the folder."""
        folder = cls.default_folder(root)
        for spec in cls.FILES.values():
            ensure_file(folder, spec, cls.NAME, download=download)
        return folder


@register_dataset("mnist")
class MNISTDataset(IdxDataset):
    """MNIST digits, official ``train`` / ``test``; see the module docstring."""

    PUBLISHED_SIZE = (10, 70000)

    NAME = "mnist"
    MEAN = (0.1307,)
    STD = (0.3081,)
    CLASS_NAMES = tuple(str(d) for d in range(10))
    FILES = mnist_files(
        ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"),
        {
            "train-images-idx3-ubyte.gz": ("f68b3c2dcbeaaa9fbdd348bbdeb94873",),
            "train-labels-idx1-ubyte.gz": ("d53e105ee54ea40749a09fcbcd1e9432",),
            "t10k-images-idx3-ubyte.gz": ("9fb629c4189551a2d022fa330f9573f3",),
            "t10k-labels-idx1-ubyte.gz": ("ec29112dd5afa0611ce80d1b7f02629c",),
        },
    )
