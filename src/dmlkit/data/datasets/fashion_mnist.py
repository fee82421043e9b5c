"""Fashion-MNIST (Xiao et al. 2017): Debian's ``dataset-fashion-mnist`` copy when present, else the official files.

Without ``data.root`` the loader reads the four idx files from Debian's package
(``apt install dataset-fashion-mnist`` puts them in ``/usr/share/datasets/fashion-mnist``)
when all four are there, else from ``$DMLKIT_CACHE/fashion_mnist``, where
``dmlkit data prepare fashion_mnist`` downloads the official files and checks
their MD5. Debian recompressed the files, so each file accepts two digests:
the official archive's and Debian's (of the same idx data). 10 classes,
28 x 28 grey, official ``train`` (60,000) / ``test`` (10,000).
"""

from __future__ import annotations

from pathlib import Path

from dmlkit.data.cache import dataset_dir
from dmlkit.data.datasets.mnist import IDX_NAMES, IdxDataset, mnist_files
from dmlkit.data.datasets.registry import register_dataset

DEBIAN_FOLDER = Path("/usr/share/datasets/fashion-mnist")


@register_dataset("fashion_mnist")
class FashionMNISTDataset(IdxDataset):
    """Fashion-MNIST, official ``train`` / ``test``; see the module docstring."""

    PUBLISHED_SIZE = (10, 70000)

    NAME = "fashion_mnist"
    MEAN = (0.2860,)
    STD = (0.3530,)
    CLASS_NAMES = (
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    )
    DEBIAN_FOLDER = DEBIAN_FOLDER

    @classmethod
    def local_state(cls, name: str) -> str:
        """As the other downloads, or Debian's copy when ``dataset-fashion-mnist`` is installed."""
        state = super().local_state(name)
        if state == "not downloaded" and cls.DEBIAN_FOLDER.is_dir():
            return f"installed by Debian ({cls.DEBIAN_FOLDER})"
        return state

    FILES = mnist_files(
        (
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
            "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
        ),
        {  # (official, Debian 0.0~git20200523.55506a9-1)
            "train-images-idx3-ubyte.gz": ("8d4fb7e6c68d591d4c3dfef9ec88bf0d", "cf8536b0aa1a6ac5fa3f23001093305c"),
            "train-labels-idx1-ubyte.gz": ("25c81989df183df01b3e8a0aad5dffbe", "10bea18fdb374794d4bb42e356e600c9"),
            "t10k-images-idx3-ubyte.gz": ("bef4ecab320f06d8554ea6380940ec79", "f78720b4224f21cce2f2ccf2d7a94c9a"),
            "t10k-labels-idx1-ubyte.gz": ("bb300cfdad3c16e7a12a480ee83cd310", "0d30e22e447f3c33dab9ed536400ac01"),
        },
    )

    @classmethod
    def default_folder(cls, root: str | Path | None) -> Path:
        """``root`` if given; else Debian's folder when it holds all four files; else the cache folder."""
        if root is not None:
            return Path(root).expanduser()
        names = [n for pair in IDX_NAMES.values() for n in pair]
        if all((cls.DEBIAN_FOLDER / n).is_file() for n in names):
            return cls.DEBIAN_FOLDER
        return dataset_dir(cls.NAME, None)
