"""A run's image-file transform: its dataset's eval transform (``ImagePreprocess``), read from its config.

``preprocess_for_config(cfg)`` asks the dataset class the config names for ``eval_preprocess(image_size,
**data.params)``; search, serve and export then treat every dataset alike.
"""

from __future__ import annotations

from dmlkit.config import ExperimentConfig
from dmlkit.data.catalog import DATASETS
from dmlkit.data.datasets.image_folder import IMAGE_SUFFIXES
from dmlkit.data.transforms.eval_preprocess import MAX_IMAGE_PIXELS, ImagePreprocess

__all__ = ["IMAGE_SUFFIXES", "ImagePreprocess", "MAX_IMAGE_PIXELS", "preprocess_for_config"]


def preprocess_for_config(cfg: ExperimentConfig) -> ImagePreprocess:
    """The eval transform of the dataset of a run's config, as that dataset class states it."""
    dataset = DATASETS.get(cfg.data.name)
    return dataset.eval_preprocess(cfg.data.image_size, **cfg.data.params)
