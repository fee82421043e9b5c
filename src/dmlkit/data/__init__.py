"""Datasets, splits, samplers and augmentation for deep metric learning.

- ``create_dataset(name, split, ...)`` / ``list_datasets()`` / ``prepare_dataset(name)``:
  the dataset registry (``catalog``); its config (``config``), class-disjoint splits (``splits``),
  the cache folder (``cache``), checked downloads (``downloads``) and seed derivation (``seeding``).
- ``datasets/``: one file per dataset, every one following ``DMLDataset`` (``datasets.base``):
  ``glyphs``, the embedded default dataset (Unicode characters rendered in matplotlib's fonts,
  class-disjoint train / test halves); the papers' benchmarks read from their official archives
  under ``data.root``: ``cub``, ``cars``, ``sop``, ``inshop`` (``query`` / ``gallery``), ``vehicleid``
  (``datasets.image_list`` base), and the small ``mnist``, ``fashion_mnist``, ``cifar10``, ``cifar100``
  (``downloads``: MD5-checked).
- ``samplers/``: ``MPerClassBatchSampler`` (batches of ``batch_size / m`` classes x ``m`` images),
  FastAP's samplers, and ``create_batch_sampler`` by name (``samplers.registry``).
- ``transforms/``: ``GlyphAugment`` (``transforms.glyph_augment``: seeded augmentation with torch ops,
  per image or per batch) and the papers' RGB crops (``transforms.image_crops``: resize 256 / crop 227
  of thesis Sec. 3.3.2.1).
- ``class_disjoint_split`` / ``LabelledSubset``: class-disjoint hold-outs that keep the interface.

Nothing here imports model or training code.
"""

from dmlkit.data.datasets.base import DMLDataset, check_dataset, no_categories
from dmlkit.data.samplers.registry import create_batch_sampler, list_batch_samplers, register_batch_sampler
from dmlkit.data.cache import cache_root
from dmlkit.data.catalog import (
    DATASETS,
    build_datasets,
    create_dataset,
    dataset_splits,
    list_datasets,
    prepare_dataset,
    register_dataset,
)
from dmlkit.data.config import DataConfig
from dmlkit.data.datasets.glyphs import GLYPHS_MEAN, GLYPHS_STD, GlyphsDataset, glyphs_cache_path, prepare_glyphs
from dmlkit.data.samplers.m_per_class import MPerClassBatchSampler
from dmlkit.data.seeding import derive_seed, make_generator
from dmlkit.data.splits import LabelledSubset, class_disjoint_split, subset_classes
from dmlkit.data.transforms.glyph_augment import GlyphAugment, GlyphAugmentConfig

__all__ = [
    "create_batch_sampler",
    "list_batch_samplers",
    "register_batch_sampler",
    "register_dataset",
    "DATASETS",
    "DMLDataset",
    "DataConfig",
    "GLYPHS_MEAN",
    "GLYPHS_STD",
    "GlyphAugment",
    "GlyphAugmentConfig",
    "GlyphsDataset",
    "LabelledSubset",
    "MPerClassBatchSampler",
    "build_datasets",
    "cache_root",
    "check_dataset",
    "class_disjoint_split",
    "create_dataset",
    "dataset_splits",
    "derive_seed",
    "glyphs_cache_path",
    "list_datasets",
    "make_generator",
    "no_categories",
    "prepare_dataset",
    "prepare_glyphs",
    "subset_classes",
]
