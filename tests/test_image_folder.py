"""The ``image_folder`` dataset on a miniature tree the test writes; errors for missing or bad data."""

import pytest
import torch
from PIL import Image

from dmlkit.data import check_dataset, create_dataset


def write_tree(root, classes=("cat", "dog", "eel"), per_class=3, size=(20, 14)):
    for split in ("train", "test"):
        for c, name in enumerate(classes):
            folder = root / split / f"{split}_{name}"
            folder.mkdir(parents=True)
            for i in range(per_class):
                Image.new("RGB", size, (40 * c, 10 * i, 200)).save(folder / f"{i}.png")
    return root


def test_reads_classes_and_images(tmp_path):
    ds = create_dataset("image_folder", "train", root=write_tree(tmp_path), image_size=16)
    check_dataset(ds)
    assert ds.class_names == ["train_cat", "train_dog", "train_eel"]
    assert ds.labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    x, y = ds[4]
    assert x.shape == (3, 16, 16) and y == 1


def test_grey_and_augmentation_is_seeded(tmp_path):
    root = write_tree(tmp_path)
    a = create_dataset("image_folder", "test", root=root, image_size=8, augment=True, channels=1, seed=3)
    b = create_dataset("image_folder", "test", root=root, image_size=8, augment=True, channels=1, seed=3)
    assert a[0][0].shape == (1, 8, 8)
    torch.testing.assert_close(a[2][0], b[2][0])


def test_missing_root_names_the_layout(tmp_path):
    with pytest.raises(ValueError, match="does not exist.*ROOT/<split>/<class>"):
        create_dataset("image_folder", "train", root=tmp_path / "nowhere")


def test_empty_root(tmp_path):
    (tmp_path / "train").mkdir()
    with pytest.raises(ValueError, match="no class sub-folders"):
        create_dataset("image_folder", "train", root=tmp_path)


def test_empty_class_folder(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    with pytest.raises(ValueError, match="holds no images"):
        create_dataset("image_folder", "train", root=tmp_path)


def test_root_is_required():
    with pytest.raises(ValueError, match="needs data.root"):
        create_dataset("image_folder", "train")


def test_corrupt_image_is_named(tmp_path):
    root = write_tree(tmp_path)
    bad = root / "train" / "train_cat" / "0.png"
    bad.write_bytes(b"not a png")
    ds = create_dataset("image_folder", "train", root=root)
    with pytest.raises(ValueError, match="0.png"):
        ds[0]


def test_a_corrupt_test_image_stops_the_run_before_training_and_names_on_corrupt(tmp_path):
    from dmlkit.assemble import build_trainer
    from dmlkit.config import load_config

    root = write_tree(tmp_path / "data", classes=("a", "b", "c", "d", "e"), per_class=4, size=(16, 16))
    bad = root / "test" / "test_c" / "1.png"
    bad.write_bytes(b"not a png")
    overrides = ["data.name=image_folder", f"data.root={root}", "data.image_size=16", "data.val_fraction=0",
                 "model.embedding_dim=8", "train.batch_size=8", "train.m_per_class=2", "train.max_steps=2",
                 "train.val_every=2", "eval.clustering=false", "plots=false"]
    with pytest.raises(ValueError, match=r"1.png' of the test split cannot be read.*data.params.on_corrupt=skip"):
        build_trainer(load_config("configs/quickstart.yaml", overrides), tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()
    with pytest.warns(UserWarning, match="skipped 1 unreadable"):
        summary = build_trainer(load_config("configs/quickstart.yaml", [*overrides, "data.params.on_corrupt=skip"]),
                                tmp_path / "run", quiet=True).fit()
    assert summary["steps"] == 2
    with pytest.raises(ValueError, match="data.params.on_corrupt=skip"):  # found on use, it names the option too
        create_dataset("image_folder", "test", root=root)[9]
