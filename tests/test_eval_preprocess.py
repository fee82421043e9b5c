"""Every dataset states its eval transform: an image file preprocessed with
``eval_preprocess`` is, bit for bit, the tensor the dataset itself feeds its evaluation.

Datasets with files on disk are checked on their own files (miniature copies in the official layouts);
in-memory datasets (MNIST, CIFAR, glyphs) on their stored pixels written out as PNG files.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch
from PIL import Image

import dataset_miniatures as M
from dmlkit.config import load_config
from dmlkit.data import create_dataset
from dmlkit.data.catalog import DATASETS, list_datasets
from dmlkit.data.datasets.base import DMLDataset
from dmlkit.search.preprocess import preprocess_for_config

# name -> (miniature writer, split, dataset options); image sizes that make each transform resample, and
# for the benchmark datasets one that decodes the 40 x 30 JPEGs at reduced scale (draft: resize 9 < 15)
FILE_DATASETS = {
    "cub": (M.write_cub, "test", {"image_size": 8}),
    "cars": (M.write_cars, "train", {"image_size": 20}),
    "sop": (M.write_sop, "test", {"image_size": 16, "resize": 24}),
    "inshop": (M.write_inshop, "query", {"image_size": 8}),
    "vehicleid": (M.write_vehicleid, "train", {"image_size": 16}),
}
ARRAY_DATASETS = {
    "mnist": (M.write_mnist_like, {"image_size": 20}),
    "cifar10": (M.write_cifar10, {"image_size": 24}),
    "cifar100": (M.write_cifar100, {"image_size": 32}),
}


@pytest.mark.parametrize("name", sorted(FILE_DATASETS))
def test_benchmark_image_files_preprocess_to_the_datasets_own_tensors(name, tmp_path):
    write, split, options = FILE_DATASETS[name]
    root = write(tmp_path)
    dataset = create_dataset(name, split, root=root, **options)
    preprocess = DATASETS.get(name).eval_preprocess(**options)
    assert preprocess.resize is not None, "the benchmark datasets evaluate on a centre crop"
    for i in range(min(len(dataset), 4)):
        torch.testing.assert_close(preprocess.load(dataset.paths[i]), dataset[i][0], rtol=0, atol=0)


def test_the_draft_decode_is_part_of_the_transform(tmp_path):
    root = M.write_cub(tmp_path)
    dataset = create_dataset("cub", "test", root=root, image_size=8)
    drafted = DATASETS.get("cub").eval_preprocess(image_size=8)
    full = DATASETS.get("cub").eval_preprocess(image_size=8, draft=False)
    assert not torch.equal(full.load(dataset.paths[0]), dataset[0][0]), "the fixture should trigger a draft decode"
    torch.testing.assert_close(drafted.load(dataset.paths[0]), dataset[0][0], rtol=0, atol=0)


def test_image_folder_files_preprocess_to_the_datasets_own_tensors(tmp_path):
    for split in ("train", "test"):
        for c in range(2):
            for j in range(2):
                path = tmp_path / split / f"class{c}" / f"{j}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                pixels = np.random.default_rng(10 * c + j).integers(0, 256, (30, 41, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(path)
    for channels in (3, 1):
        dataset = create_dataset("image_folder", "test", root=tmp_path, image_size=16, channels=channels)
        preprocess = DATASETS.get("image_folder").eval_preprocess(image_size=16, channels=channels)
        for i in range(len(dataset)):
            torch.testing.assert_close(preprocess.load(dataset.paths[i]), dataset[i][0], rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(ARRAY_DATASETS))
def test_in_memory_images_written_as_files_preprocess_to_the_datasets_own_tensors(name, tmp_path):
    write, options = ARRAY_DATASETS[name]
    dataset = create_dataset(name, "test", root=write(tmp_path), **options)
    preprocess = DATASETS.get(name).eval_preprocess(**options)
    for i in range(min(len(dataset), 4)):
        pixels = dataset.images[i].numpy()
        path = tmp_path / f"{i}.png"
        Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels).save(path)
        torch.testing.assert_close(preprocess.load(path), dataset[i][0], rtol=1e-6, atol=1e-6)


def test_glyph_collage_images_preprocess_to_the_datasets_own_tensors(tmp_path):
    cfg = load_config("configs/quickstart.yaml", ["data.name=glyph_collage", "data.image_size=32"])
    dataset = create_dataset("glyph_collage", "test", image_size=32, max_classes=2)
    preprocess = preprocess_for_config(cfg)
    for i in range(3):
        path = tmp_path / f"{i}.png"
        Image.fromarray(np.asarray(dataset.images[i]), mode="L").save(path)
        torch.testing.assert_close(preprocess.load(path), dataset[i][0])


def test_every_registered_dataset_states_its_eval_transform():
    for name in list_datasets():
        preprocess = DATASETS.get(name).eval_preprocess(image_size=32)
        assert preprocess.size == 32 and preprocess.channels in (1, 3), name


def test_a_dataset_without_an_eval_transform_says_what_to_implement():
    class Blobs(DMLDataset):
        pass

    with pytest.raises(
        ValueError, match="Blobs does not state its eval transform.*implement the classmethod eval_preprocess"
    ):
        Blobs.eval_preprocess(32)
