"""The dataset registry: name -> ``DMLDataset`` subclass, each registered beside its class with ``@register_dataset``.

Every module of ``dmlkit.data.datasets`` is imported on the first lookup, so a new dataset file registers itself;
a name not found there, and a listing, also import the installed plug-ins (the lab's testbeds ``glyphs_testbed``,
``font_glyphs`` and ``glyph_collage`` come from ``dmlkit_lab``'s). ``dmlkit.data.catalog`` builds on it
(``create_dataset``, ``list_datasets``, ``prepare_dataset``).
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable

from dmlkit.data.datasets.base import DMLDataset
from dmlkit.registry import Registry, import_submodules

__all__ = ["DATASETS", "register_dataset"]


def _import_datasets() -> None:
    """Import every module of ``dmlkit.data.datasets``, so that their ``register_dataset`` run."""
    import_submodules(__name__.rpartition(".")[0], [str(Path(__file__).parent)])


DATASETS: Registry[DMLDataset] = Registry("dataset", populate=_import_datasets, plugins=True)


def register_dataset(name: str) -> Callable:
    """Class decorator registering a ``DMLDataset`` subclass (with its ``SPLITS`` and ``prepare``) as ``name``."""
    return DATASETS.register(name)
