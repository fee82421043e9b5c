"""The ``image_folder`` dataset on miniature trees the tests write (split and flat layouts); errors for missing or bad data."""

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
    overrides = [
        "data.name=image_folder",
        f"data.root={root}",
        "data.image_size=16",
        "data.val_fraction=0",
        "model.embedding_dim=8",
        "train.batch_size=8",
        "train.m_per_class=2",
        "train.max_steps=2",
        "train.val_every=2",
        "eval.clustering=false",
        "plots=false",
    ]
    with pytest.raises(ValueError, match=r"(?s)1.png \(test split\): not an image.*data.params.on_corrupt=skip"):
        build_trainer(load_config("configs/quickstart.yaml", overrides), tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()
    with pytest.warns(UserWarning, match="skipped 1 unreadable"):
        summary = build_trainer(
            load_config("configs/quickstart.yaml", [*overrides, "data.params.on_corrupt=skip"]),
            tmp_path / "run",
            quiet=True,
        ).fit()
    assert summary["steps"] == 2
    with pytest.raises(ValueError, match="data.params.on_corrupt=skip"):  # found on use, it names the option too
        create_dataset("image_folder", "test", root=root)[9]


# ---------------------------------------------------------------- the flat layout ROOT/<class>/<image>


def write_flat(root, num_classes=10, per_class=3, size=(12, 10)):
    """``root/c00 .. c<N-1>/`` with ``per_class`` images each (PNG and JPEG mixed), names in a scrambled order."""
    for c in range(num_classes):
        folder = root / f"c{(7 * c) % num_classes:02d}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", size, (25 * c % 256, 40 * i % 256, 90)).save(folder / f"{i}.{'jpg' if i % 2 else 'png'}")
    return root


def _sides(root, **params):
    train = create_dataset("image_folder", "train", root=root, **params)
    test = create_dataset("image_folder", "test", root=root, **params)
    return train.class_names, test.class_names


def test_flat_sorted_split_is_the_first_half_of_the_names_as_the_benchmarks(tmp_path):
    root = write_flat(tmp_path, num_classes=10)
    names = [f"c{i:02d}" for i in range(10)]  # the reference: sorted names, first half trains
    assert _sides(root) == (names[:5], names[5:])
    assert _sides(root, train_share=0.7) == (names[:7], names[7:])
    ds = create_dataset("image_folder", "test", root=root, image_size=8)
    check_dataset(ds)
    assert ds.labels.tolist() == [k for k in range(5) for _ in range(3)]
    assert {p.parent.name for p in ds.paths} == set(names[5:]) and ds[0][0].shape == (3, 8, 8)


def test_flat_random_split_is_seeded_disjoint_and_covers_every_class(tmp_path):
    root = write_flat(tmp_path, num_classes=20)
    a = _sides(root, class_split="random", split_seed=3)
    assert a == _sides(root, class_split="random", split_seed=3)  # deterministic for a seed
    draws = {tuple(_sides(root, class_split="random", split_seed=s)[0]) for s in range(4)}
    assert len(draws) > 1  # another seed, another draw
    assert a[0] != [f"c{i:02d}" for i in range(10)]  # not the sorted half
    train, test = a
    assert len(train) == len(test) == 10 and not set(train) & set(test)
    assert sorted(train + test) == [f"c{i:02d}" for i in range(20)]
    # the split does not depend on the run's seed (runs of several seeds test on the same classes)
    assert _sides(root, class_split="random", split_seed=3, seed=5) == a


def test_flat_train_validation_and_test_classes_are_disjoint_in_a_run(tmp_path):
    from dmlkit.config import load_config
    from dmlkit.data import build_datasets

    root = write_flat(tmp_path, num_classes=12)
    cfg = load_config(
        "configs/own_images.yaml",
        [f"data.root={root}", "data.val_fraction=0.34", "data.params.class_split=random", "data.params.split_seed=1"],
    )
    sets = build_datasets(cfg.data, seed=0)
    names = {k: set(d.class_names) for k, d in sets.items()}
    assert len(names["train"]) == 4 and len(names["val"]) == 2 and len(names["test"]) == 6
    assert not names["train"] & names["val"] and not names["train"] & names["test"] and not names["val"] & names["test"]


@pytest.mark.parametrize(
    "params, match",
    [
        ({"train_share": 1.0}, r"train_share.*strictly between 0 and 1"),
        ({"train_share": 0}, r"train_share.*strictly between 0 and 1"),
        ({"train_share": -0.5}, r"train_share.*strictly between 0 and 1"),
        ({"class_split": "first"}, r"class_split must be one of sorted, random"),
        ({"split_seed": 1.5}, r"split_seed must be an int"),
    ],
)
def test_flat_bad_split_options_name_the_option(tmp_path, params, match):
    root = write_flat(tmp_path, num_classes=6)
    with pytest.raises(ValueError, match=match):
        create_dataset("image_folder", "train", root=root, **params)


def test_flat_root_with_too_few_classes_says_how_many_are_needed(tmp_path):
    root = write_flat(tmp_path, num_classes=3)
    with pytest.raises(
        ValueError, match=r"3 class folder.*2 train and 1 test.*at least 2.*Add class folders \(at least 4\)"
    ):
        create_dataset("image_folder", "train", root=root)
    with pytest.raises(ValueError, match=r"train_share=0.2 give 1 train"):
        create_dataset("image_folder", "train", root=write_flat(tmp_path / "more", num_classes=6), train_share=0.2)


def test_flat_classes_of_one_image_are_named(tmp_path):
    root = write_flat(tmp_path, num_classes=6)
    for extra in ("c03", "c05"):
        for p in sorted((root / extra).iterdir())[1:]:
            p.unlink()
    with pytest.raises(ValueError, match=r"2 class folder\(s\) .* hold a single image \(c03, c05\).*at least 2 images"):
        create_dataset("image_folder", "test", root=root)


def test_a_folder_mixing_the_two_layouts_is_refused_with_the_fix(tmp_path):
    root = write_tree(tmp_path / "mixed")
    write_flat(tmp_path / "mixed", num_classes=2)
    with pytest.raises(ValueError, match=r"mixes the two layouts.*train/.*class folder\(s\) c00, c01.*move those"):
        create_dataset("image_folder", "train", root=root)
    loose = write_tree(tmp_path / "loose")
    Image.new("RGB", (8, 8)).save(loose / "train" / "stray.png")
    with pytest.raises(ValueError, match=r"split folder .*train' holds 1 image\(s\) directly.*mixes the two layouts"):
        create_dataset("image_folder", "train", root=loose)
    flat = write_flat(tmp_path / "flat", num_classes=4)
    Image.new("RGB", (8, 8)).save(flat / "stray.jpg")
    with pytest.raises(ValueError, match=r"holds 1 image\(s\) directly.*move each image into the folder of its class"):
        create_dataset("image_folder", "train", root=flat)


def test_split_options_on_a_split_folder_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"split already; data.params.class_split splits a flat folder"):
        create_dataset("image_folder", "train", root=write_tree(tmp_path), class_split="random")


def test_the_split_record_round_trips_and_outlives_a_new_class(tmp_path):
    import json

    root = write_flat(tmp_path / "data", num_classes=8)
    train = create_dataset("image_folder", "train", root=root, class_split="random", split_seed=2)
    record = tmp_path / "classes.json"
    record.write_text(json.dumps(train.split_record))
    # a class added later sorts first: a fresh sorted or random split would move classes; the record does not
    write_flat(tmp_path / "late", num_classes=1)
    (tmp_path / "late" / "c00").rename(root / "a_new_class")
    with pytest.warns(UserWarning, match=r"1 class folder\(s\) not in the split record.*a_new_class"):
        again = create_dataset("image_folder", "train", root=root, classes_file=str(record))
    assert again.class_names == train.class_names and [str(p) for p in again.paths] == [str(p) for p in train.paths]
    with pytest.warns(UserWarning, match="not in the split record"):
        test = create_dataset("image_folder", "test", root=root, classes_file=str(record), image_size=8)
    assert test.class_names == train.split_record["test"]
    (root / train.class_names[0]).rename(tmp_path / "moved")
    with pytest.raises(ValueError, match=rf"{train.class_names[0]} named by the split record .* are gone"):
        create_dataset("image_folder", "test", root=root, classes_file=str(record))
    record.write_text("{}")
    with pytest.raises(ValueError, match="is not a class split record"):
        create_dataset("image_folder", "test", root=root, classes_file=str(record))


FLAT_RUN = [
    "data.image_size=16",
    "model.embedding_dim=8",
    "train.batch_size=8",
    "train.m_per_class=2",
    "train.max_steps=2",
    "train.val_every=2",
    "eval.clustering=false",
    "plots=false",
]


def test_a_run_records_its_classes_and_evaluate_uses_them_after_the_folder_changed(tmp_path):
    import json

    from dmlkit.assemble import build_trainer, load_finished_run
    from dmlkit.config import load_config

    root = write_flat(tmp_path / "photos", num_classes=12)
    cfg = load_config("configs/own_images.yaml", [f"data.root={root}", "data.params.class_split=random", *FLAT_RUN])
    build_trainer(cfg, tmp_path / "run", quiet=True).fit()
    record = json.loads((tmp_path / "run" / "classes.json").read_text())
    assert not (tmp_path / "run" / ".lock").exists()  # a clean finish leaves no lock file
    assert set(record["validation"]) < set(record["train"]) and not set(record["train"]) & set(record["test"])
    assert record["validation"] == record["train"][-1:]  # the last round(0.2 * 6) training classes by name
    write_flat(tmp_path / "late", num_classes=2)
    for name in ("c00", "c01"):  # new classes sort first: without the record the test half would shift
        (tmp_path / "late" / name).rename(root / f"a_{name}")
    with pytest.warns(UserWarning, match="not in the split record"):
        run = load_finished_run(tmp_path / "run")
        assert run.split("test").class_names == record["test"]
        assert run.split("val").class_names == record["validation"]
