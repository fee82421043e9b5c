"""Corrupted images and truncated annotation lists: a clear error by default, or skipped and counted."""

import pytest

import dataset_miniatures as M
from dmlkit.data import create_dataset


def _corrupt_one(root):
    victim = sorted((root / "CUB_200_2011" / "images").rglob("*.jpg"))[3]
    victim.write_bytes(b"\xff\xd8\xff not really a jpeg")
    return victim


def test_a_corrupted_image_is_named_when_used(tmp_path):
    root = M.write_cub(tmp_path, num_classes=4, per_class=3)
    victim = _corrupt_one(root)
    data = create_dataset("cub", "train", root=root, image_size=32)
    index = [str(p) for p in data.paths].index(str(victim))
    with pytest.raises(ValueError, match=victim.name):
        data[index]


def test_on_corrupt_skip_drops_and_counts_unreadable_images(tmp_path):
    root = M.write_cub(tmp_path, num_classes=4, per_class=3)
    victim = _corrupt_one(root)
    full = create_dataset("cub", "train", root=root, image_size=32)
    with pytest.warns(UserWarning, match="skipped 1 unreadable"):
        data = create_dataset("cub", "train", root=root, image_size=32, on_corrupt="skip")
    assert len(data) == len(full) - 1 and [p for p, _ in data.skipped] == [str(victim)]
    assert str(victim) not in map(str, data.paths)
    for i in range(len(data)):  # every remaining image loads
        data[i]
    with pytest.raises(ValueError, match="on_corrupt"):
        create_dataset("cub", "train", root=root, image_size=32, on_corrupt="ignore")


def test_image_folder_skip(tmp_path):
    from PIL import Image

    for c in ("a", "b"):
        for k in range(2):
            (tmp_path / "train" / c).mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), (k * 50, 0, 0)).save(tmp_path / "train" / c / f"{k}.png")
    (tmp_path / "train" / "b" / "1.png").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="skipped 1"):
        data = create_dataset("image_folder", "train", root=tmp_path, on_corrupt="skip")
    assert len(data) == 3 and data.labels.tolist() == [0, 0, 1]


def test_a_truncated_annotation_list_names_the_line(tmp_path):
    root = M.write_cub(tmp_path, num_classes=4, per_class=3)
    listing = root / "CUB_200_2011" / "images.txt"
    text = listing.read_text()
    listing.write_text(text[: text.rindex(" ")] + "\n")  # the last line loses its path
    with pytest.raises(ValueError, match="images.txt"):
        create_dataset("cub", "train", root=root, image_size=32)
