"""Dataset registry, DataConfig, class-disjoint splits and subsets keeping the DMLDataset interface."""

from __future__ import annotations

import shutil

import pytest
import torch

from dmlkit.data import (
    DataConfig,
    DMLDataset,
    LabelledSubset,
    build_datasets,
    check_dataset,
    class_disjoint_split,
    create_dataset,
    dataset_splits,
    glyphs_cache_path,
    list_datasets,
    no_categories,
    prepare_dataset,
    subset_classes,
)
from dmlkit.data.datasets import glyph_cache
from dataset_miniatures import MINIATURES as BENCHMARK_MINIATURES  # noqa: E402 - tests/ helper


class ToyDataset(DMLDataset):
    """Five classes of 3 constant images each, no categories."""

    SPLITS = ("all",)

    def __init__(self, split: str = "all", root=None, seed: int = 0, augment: bool = False, image_size: int = 4):
        self.labels = torch.arange(5).repeat_interleave(3)
        self.class_names = [f"c{i}" for i in range(5)]
        self.class_categories = no_categories(5)
        self.category_names = []
        self.in_channels = 3
        self.size = image_size

    def __getitem__(self, i):
        return torch.full((3, self.size, self.size), float(i)), int(self.labels[i])


def test_list_and_splits():
    assert "glyphs" in list_datasets()
    assert dataset_splits("glyphs") == ("train", "test")


def _glyphs_root(tmp_path):
    return None  # embedded: rendered into the shared test cache


def _font_glyphs_miniature(tmp_path):
    """Four faces of matplotlib's fonts instead of the Debian packages', classes of at least 2 images."""
    from test_font_glyphs import FACES, font_dir

    folder = tmp_path / "fonts"
    folder.mkdir()
    for name in FACES:
        shutil.copy(font_dir() / name, folder / name)
    return tmp_path / "cache", {"faces": [str(folder / name) for name in FACES], "min_images": 2}


def _image_folder_root(tmp_path):
    from test_image_folder import write_tree

    return write_tree(tmp_path, classes=("a", "b", "c", "d", "e"))


# Every registered dataset needs a miniature copy here (the tests make it; no download).
MINIATURES = {
    "glyphs": _glyphs_root,
    "glyph_collage": _glyphs_root,  # built from the rendered glyphs, like glyphs itself
    "glyphs_testbed": _glyphs_root,  # the glyph table cut into pretraining and DML classes
    "font_glyphs": _font_glyphs_miniature,  # returns (root, data.params)
    "image_folder": _image_folder_root,
    **BENCHMARK_MINIATURES,
}


@pytest.mark.parametrize("name", list_datasets())
def test_every_registered_dataset_follows_the_interface(name, tmp_path):
    assert name in MINIATURES, f"add a miniature copy of dataset '{name}' to MINIATURES"
    made = MINIATURES[name](tmp_path)
    root, params = made if isinstance(made, tuple) else (made, {})
    for split in dataset_splits(name):
        ds = create_dataset(name, split, root=root, max_classes=4, **params)
        check_dataset(ds)
        assert ds.num_classes == 4


def test_unknown_names_splits_and_arguments():
    with pytest.raises(ValueError, match="glyphs"):
        create_dataset("imagenet", "train")
    with pytest.raises(ValueError, match="valid splits are: train, test"):
        create_dataset("glyphs", "val")
    with pytest.raises(ValueError, match="unknown parameter"):
        create_dataset("glyphs", "train", colour=True)
    with pytest.raises(ValueError, match="max_classes"):
        create_dataset("glyphs", "train", max_classes=0)
    with pytest.raises(ValueError, match="glyphs"):
        prepare_dataset("nope")


def test_create_dataset_passes_arguments():
    ds = create_dataset("glyphs", "test", seed=9, augment=True, max_classes=6)
    assert ds.num_classes == 6 and ds.augment and ds.seed == 9 and ds.split == "test"
    assert int(ds.labels.min()) == 0 and int(ds.labels.max()) == 5
    full = create_dataset("glyphs", "test")
    assert ds.class_names == full.class_names[:6]


def test_prepare_dataset_uses_the_cache(tmp_path, monkeypatch):
    shutil.copy(glyphs_cache_path(), tmp_path / glyphs_cache_path().name)
    monkeypatch.setattr(glyph_cache, "build_glyph_table", lambda *a, **k: pytest.fail("should not render"))
    path = prepare_dataset("glyphs", root=tmp_path)
    assert path == tmp_path / glyphs_cache_path().name and path.is_file()
    assert prepare_dataset("glyphs") == glyphs_cache_path()


def test_data_config_defaults_and_validation():
    cfg = DataConfig()
    assert (cfg.name, cfg.root, cfg.image_size, cfg.val_fraction, cfg.max_classes, cfg.augment, cfg.num_workers) == (
        "glyphs",
        None,
        32,
        0.2,
        None,
        True,
        0,
    )
    for bad in [
        dict(val_fraction=1.0),
        dict(val_fraction=-0.1),
        dict(image_size=4),
        dict(max_classes=0),
        dict(num_workers=-1),
        dict(name=""),
    ]:
        with pytest.raises(ValueError):
            DataConfig(**bad)


def test_build_datasets():
    out = build_datasets(DataConfig(max_classes=20, val_fraction=0.25), seed=1)
    train, val, test = out["train"], out["val"], out["test"]
    assert (train.num_classes, val.num_classes, test.num_classes) == (15, 5, 20)
    assert train.augment and not val.augment and not test.augment
    assert set(train.class_names).isdisjoint(val.class_names)
    assert set(train.class_names + val.class_names).isdisjoint(test.class_names)
    for ds in (train, val, test):
        check_dataset(ds)
    assert "val" not in build_datasets(DataConfig(max_classes=4, val_fraction=0.0))


def test_class_disjoint_split_keeps_the_interface():
    base = create_dataset("glyphs", "train", max_classes=10)
    first, second = class_disjoint_split(base, 0.3)
    assert (first.num_classes, second.num_classes) == (7, 3)
    assert second.class_names == base.class_names[7:] and first.class_names == base.class_names[:7]
    assert torch.equal(second.class_categories, base.class_categories[7:])
    assert second.category_names == base.category_names
    assert len(first) + len(second) == len(base)
    for part in (first, second):
        assert isinstance(part, LabelledSubset) and part.in_channels == 1
        check_dataset(part)
        for i in (0, len(part) // 2, len(part) - 1):
            x, y = part[i]
            x0, y0 = base[int(part.indices[i])]
            assert torch.equal(x, x0) and part.class_names[y] == base.class_names[y0]
    images, labels = second.get_batch([0, 3, 5])
    assert torch.equal(images, torch.stack([second[i][0] for i in (0, 3, 5)]))
    assert torch.equal(labels, second.labels[[0, 3, 5]])
    a, b = class_disjoint_split(base, 0.3, shuffle=True, seed=4)
    a2, b2 = class_disjoint_split(base, 0.3, shuffle=True, seed=4)
    assert b.class_names == b2.class_names and set(a.class_names).isdisjoint(b.class_names)


def test_subsets_share_augmentation_state():
    base = create_dataset("glyphs", "train", max_classes=6, augment=True)
    first, second = class_disjoint_split(base, 0.5)
    before = second[0][0]
    second.set_epoch(2)
    assert base.epoch == 2 and second.epoch == 2 and second.augment
    assert not torch.equal(second[0][0], before)
    plain = second.with_augment(False)
    assert not plain.augment and second.augment and plain.dataset.images is base.images
    nested = subset_classes(second, [1, 2])
    assert nested.num_classes == 2 and nested.class_names == second.class_names[1:]
    check_dataset(nested)


def test_splits_of_a_dataset_without_categories():
    toy = ToyDataset()
    check_dataset(toy)
    first, second = class_disjoint_split(toy, 0.4)
    assert second.class_names == ["c3", "c4"] and second.category_names == []
    assert torch.equal(second.class_categories, torch.tensor([-1, -1]))
    assert second.labels.tolist() == [0, 0, 0, 1, 1, 1]
    x, y = second[4]
    assert float(x[0, 0, 0]) == 13.0 and y == 1 and second.in_channels == 3
    check_dataset(second)
    assert torch.equal(toy.get_batch([1, 2])[0], torch.stack([toy[1][0], toy[2][0]]))


@pytest.mark.parametrize("fraction", [0.0, 1.0, 1.5, 0.01, 0.99, True])
def test_bad_split_fractions(fraction):
    with pytest.raises(ValueError, match="fraction"):
        class_disjoint_split(ToyDataset(), fraction)


def test_check_dataset_reports_broken_datasets():
    toy = ToyDataset()
    toy.labels = toy.labels * 2  # ids 0, 2, 4, ... are not contiguous
    with pytest.raises(ValueError, match="contiguous"):
        check_dataset(toy)
    toy = ToyDataset()
    toy.class_categories = torch.zeros(5, dtype=torch.long)
    with pytest.raises(ValueError, match="category_names"):
        check_dataset(toy)
    with pytest.raises(ValueError, match="class ids"):
        subset_classes(ToyDataset(), [7])
    with pytest.raises(ValueError, match="indices"):
        LabelledSubset(ToyDataset(), [99])


def test_dataloader_fetches_whole_batches():
    from torch.utils.data import DataLoader

    from dmlkit.data import MPerClassBatchSampler

    train, _ = class_disjoint_split(create_dataset("glyphs", "train", max_classes=12, augment=True), 0.25)
    sampler = MPerClassBatchSampler(train.labels, 16, 4, seed=0, batches_per_epoch=3)
    for (images, labels), batch in zip(DataLoader(train, batch_sampler=sampler), sampler.batches(0)):
        expected, expected_labels = train.get_batch(batch)
        assert torch.equal(images, expected) and torch.equal(labels, expected_labels)
        assert images.shape == (16, 1, 32, 32)


def test_data_list_says_each_datasets_splits_and_where_its_images_come_from(capsys):
    from dmlkit.cli import main
    from dmlkit.data.catalog import DATASETS, dataset_splits, list_datasets

    assert main(["data", "list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["name", "splits", "classes", "images", "here", "source"]
    lines = {line.split()[0]: line for line in rows}
    assert sorted(lines) == list_datasets()
    for name in list_datasets():
        assert DATASETS.get(name).SOURCE, f"dataset {name} states no SOURCE"
        assert ", ".join(dataset_splits(name)) in lines[name]
    assert "dmlkit data prepare mnist" in lines["mnist"] and "data.root" in lines["cub"]


def test_data_list_gives_published_sizes_and_what_this_machine_holds(tmp_path, monkeypatch, capsys):
    from dmlkit.cli import main
    from dmlkit.data.datasets.glyphs import GLYPHS_VERSION

    monkeypatch.setenv("DMLKIT_CACHE", str(tmp_path))

    def rows() -> dict[str, str]:
        assert main(["data", "list"]) == 0
        return {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}

    before = rows()
    assert "not downloaded" in before["mnist"] and "renders on first use" in before["glyphs"]
    assert " 200 " in before["cub"] and "11,788" in before["cub"] and "needs data.root" in before["cub"]
    assert "22,634" in before["sop"] and "120,053" in before["sop"]
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(b"x")
    (tmp_path / "glyphs").mkdir()
    (tmp_path / "glyphs" / f"glyphs-v{GLYPHS_VERSION}-24px.npz").write_bytes(b"x")
    after = rows()
    assert f"downloaded ({tmp_path / 'mnist'})" in after["mnist"]
    assert "cached (24 px)" in after["glyphs"] and "cached (24 px)" in after["glyphs_testbed"]
