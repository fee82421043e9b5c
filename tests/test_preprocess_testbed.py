"""Runs on the glyph testbed (``data.name: glyphs_testbed``) embed image files as their dataset does."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from dmlkit.config import load_config
from dmlkit.data import create_dataset
from dmlkit.search.preprocess import preprocess_for_config


def test_testbed_image_files_preprocess_to_the_datasets_own_tensors(tmp_path):
    cfg = load_config("configs/testbed/testbed.yaml")
    assert cfg.data.name == "glyphs_testbed"
    preprocess = preprocess_for_config(cfg)
    dataset = create_dataset("glyphs_testbed", "test", max_classes=2)
    for i in range(min(len(dataset), 6)):
        path = tmp_path / f"{i}.png"
        Image.fromarray(np.asarray(dataset.images[i]), mode="L").save(path)
        torch.testing.assert_close(preprocess.load(path), dataset[i][0])
