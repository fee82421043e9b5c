"""Benchmark dataset loaders on miniature trees in the official layouts (written by ``dataset_miniatures``)."""

from __future__ import annotations

import gzip
import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import dataset_miniatures as M
from dmlkit.data import check_dataset, create_dataset
from dmlkit.data import downloads as D
from dmlkit.data.datasets.cifar import CIFAR10Dataset
from dmlkit.data.datasets.fashion_mnist import FashionMNISTDataset
from dmlkit.data.datasets.mnist import MNISTDataset, read_idx


# ----------------------------------------------------------------- CUB
def test_cub_first_half_train_second_half_test(tmp_path):
    root = M.write_cub(tmp_path, num_classes=8, per_class=2)
    train = create_dataset("cub", "train", root=root, image_size=32)
    test = create_dataset(
        "cub", "test", root=root / "CUB_200_2011", image_size=32
    )  # the extracted folder itself works too
    for ds in (train, test):
        check_dataset(ds)
    assert train.class_names == [f"{c:03d}.Bird_{c}" for c in range(1, 5)]
    assert test.class_names == [f"{c:03d}.Bird_{c}" for c in range(5, 9)]
    assert train.labels.tolist() == [0, 0, 1, 1, 2, 2, 3, 3] and len(test) == 8
    assert test.paths[0].name == "Bird_5_0000.jpg" and test.paths[0].parent.name == "005.Bird_5"
    x, y = test[3]
    assert x.shape == (3, 32, 32) and y == 1
    assert train.category_names == [] and bool((train.class_categories == -1).all())


def test_cub_items_are_the_listed_images(tmp_path):
    root = M.write_cub(tmp_path, num_classes=4, per_class=1)
    ds = create_dataset("cub", "test", root=root, image_size=24, resize=24)
    # a 40x30 image: shorter side 30 -> 24, centre crop 24 -> exactly the PIL resize of the whole height
    img = Image.open(ds.paths[0]).convert("RGB").resize((32, 24), Image.Resampling.BILINEAR).crop((4, 0, 28, 24))
    expected = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255).permute(2, 0, 1)
    expected = (expected - torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)) / torch.tensor(
        [0.229, 0.224, 0.225]
    ).view(3, 1, 1)
    assert float((ds[0][0] - expected).abs().mean()) < 0.05


def test_cub_augmentation_is_a_function_of_seed_epoch_index(tmp_path):
    root = M.write_cub(tmp_path, num_classes=4, per_class=2)
    a = create_dataset("cub", "train", root=root, image_size=16, augment=True, seed=5)
    b = create_dataset("cub", "train", root=root, image_size=16, augment=True, seed=5)
    torch.testing.assert_close(a[1][0], b[1][0])
    before = a[1][0]
    a.set_epoch(1)
    assert not torch.equal(a[1][0], before)
    assert torch.equal(a.get_batch([0, 1])[0], torch.stack([a[0][0], a[1][0]]))


@pytest.mark.parametrize("missing", ["classes.txt", "image_class_labels.txt"])
def test_cub_missing_annotation_file_is_named(tmp_path, missing):
    root = M.write_cub(tmp_path, num_classes=4, per_class=1)
    (root / "CUB_200_2011" / missing).unlink()
    with pytest.raises(ValueError, match=f"'{missing}' is missing.*CUB_200_2011/{missing}.*CUB_200_2011.tgz"):
        create_dataset("cub", "train", root=root)


def test_cub_missing_folder_and_images(tmp_path):
    with pytest.raises(
        ValueError, match=r"'images.txt' not found; expected it at .*nowhere/images.txt.*CUB_200_2011/images.txt"
    ):
        create_dataset("cub", "train", root=tmp_path / "nowhere")
    root = M.write_cub(tmp_path / "data", num_classes=4, per_class=2)
    (root / "CUB_200_2011" / "images" / "001.Bird_1" / "Bird_1_0000.jpg").unlink()
    with pytest.raises(ValueError, match="Bird_1_0000.jpg' listed in the annotations is missing"):
        create_dataset("cub", "train", root=root)


def test_cub_image_missing_in_the_middle_is_named_when_loaded(tmp_path):
    root = M.write_cub(tmp_path, num_classes=4, per_class=3)
    ds = create_dataset("cub", "train", root=root, image_size=16)
    ds.paths[2].unlink()
    with pytest.raises(ValueError, match="Bird_1_0002.jpg' listed in the annotations is missing.*CUB_200_2011.tgz"):
        ds[2]
    ds.paths[1].write_bytes(b"not a jpeg")
    with pytest.raises(ValueError, match="Bird_1_0001.jpg' cannot be read"):
        ds[1]


def test_cub_truncated_list(tmp_path):
    root = M.write_cub(tmp_path, num_classes=4, per_class=1)
    (root / "CUB_200_2011" / "image_class_labels.txt").write_text("1 1\n2\n")
    with pytest.raises(ValueError, match="line 2 of .*image_class_labels.txt"):
        create_dataset("cub", "train", root=root)


# ----------------------------------------------------------------- Cars
@pytest.mark.parametrize("layout", ["annos", "devkit"])
def test_cars_split_by_class_in_both_layouts(tmp_path, layout):
    root = M.write_cars(tmp_path, num_classes=8, per_class=2, layout=layout)
    train = create_dataset("cars", "train", root=root, image_size=16)
    test = create_dataset("cars", "test", root=root, image_size=16)
    for ds in (train, test):
        check_dataset(ds)
    assert train.class_names == [f"Make{c} Model {2000 + c}" for c in range(1, 5)]
    assert test.class_names == [f"Make{c} Model {2000 + c}" for c in range(5, 9)]
    assert len(train) == 8 and len(test) == 8  # the image-level 'test' flag is ignored
    assert sorted(train.labels.tolist()) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_cars_missing_devkit_file(tmp_path):
    root = M.write_cars(tmp_path, layout="devkit")
    (root / "cars_test_annos_withlabels.mat").unlink()
    with pytest.raises(ValueError, match="'cars_test_annos_withlabels.mat' is missing"):
        create_dataset("cars", "train", root=root)


def test_cars_bad_mat_file(tmp_path):
    root = M.write_cars(tmp_path)
    (root / "cars_annos.mat").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not a readable MATLAB file"):
        create_dataset("cars", "train", root=root)


# ----------------------------------------------------------------- SOP
def test_sop_lists_and_super_categories(tmp_path):
    root = M.write_sop(tmp_path, train_classes=5, test_classes=4, per_class=2)
    train = create_dataset("sop", "train", root=root, image_size=16)
    test = create_dataset("sop", "test", root=root, image_size=16)
    for ds in (train, test):
        check_dataset(ds)
    assert (train.num_classes, test.num_classes, len(train), len(test)) == (5, 4, 10, 8)
    assert train.category_names == test.category_names == ["bicycle", "cabinet", "chair"]
    # class ids 1..5 train (super ids 1,2,3,1,2), 6..9 test (3,1,2,3)
    assert train.class_categories.tolist() == [0, 1, 2, 0, 1]
    assert test.class_categories.tolist() == [2, 0, 1, 2]
    assert test.class_names[0] == "product_6"
    assert train.paths[0] == root / "Stanford_Online_Products" / "bicycle_final" / "100001_0.JPG"


def test_sop_missing_test_list(tmp_path):
    root = M.write_sop(tmp_path)
    (root / "Stanford_Online_Products" / "Ebay_test.txt").unlink()
    with pytest.raises(ValueError, match="'Ebay_test.txt' is missing.*Stanford_Online_Products.zip"):
        create_dataset("sop", "train", root=root)


# ----------------------------------------------------------------- In-shop
def test_inshop_query_and_gallery_share_labels(tmp_path):
    root = M.write_inshop(tmp_path, train_items=5, test_items=4)
    train, query, gallery = (
        create_dataset("inshop", s, root=root, image_size=16) for s in ("train", "query", "gallery")
    )
    for ds in (train, query, gallery):
        check_dataset(ds)
    assert (train.num_classes, len(train)) == (5, 10)
    assert query.class_names == gallery.class_names == [f"id_{i:08d}" for i in range(6, 10)]
    assert (len(query), len(gallery)) == (8, 8)
    assert query.labels.tolist() == gallery.labels.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert train.category_names == ["MEN/Denim", "WOMEN/Dresses", "WOMEN/Skirts"]
    # item i lies in INSHOP_CATEGORIES[i % 3] = sorted index (i % 3)
    assert query.class_categories.tolist() == [i % 3 for i in range(6, 10)]
    from dmlkit.evaluation import retrieval_metrics

    emb_q = torch.nn.functional.one_hot(query.labels, 4).float()
    emb_g = torch.nn.functional.one_hot(gallery.labels, 4).float()
    metrics = retrieval_metrics(emb_q, query.labels, reference=emb_g, reference_labels=gallery.labels, ks=(1,))
    assert metrics["precision_at_1"] == 1.0


def test_inshop_unbalanced_query_gallery_is_an_error(tmp_path):
    root = M.write_inshop(tmp_path)
    path = root / "Eval" / "list_eval_partition.txt"
    lines = path.read_text().splitlines()
    lines = [ln for ln in lines if not ("id_00000009" in ln and "gallery" in ln)]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="id_00000009 is in only one of query and gallery"):
        create_dataset("inshop", "query", root=root)


def test_inshop_missing_partition_file(tmp_path):
    with pytest.raises(ValueError, match="Eval/list_eval_partition.txt' not found.*DeepFashion"):
        create_dataset("inshop", "train", root=tmp_path)


# ----------------------------------------------------------------- VehicleID
def test_vehicleid_lists_and_model_categories(tmp_path):
    root = M.write_vehicleid(tmp_path, per_list=4, per_vehicle=2)
    splits = {
        s: create_dataset("vehicleid", s, root=root, image_size=16)
        for s in ("train", "test_small", "test_medium", "test_large")
    }
    for ds in splits.values():
        check_dataset(ds)
        assert (ds.num_classes, len(ds)) == (4, 8)
    train = splits["train"]
    assert train.class_names == ["vehicle_1", "vehicle_2", "vehicle_3", "vehicle_4"]
    assert train.category_names == ["model_7", "model_8"]
    # vehicles 1, 2, 4 have models 8, 7, 7; vehicle 3 none
    assert train.class_categories.tolist() == [1, 0, -1, 0]
    assert splits["test_large"].class_names[0] == "vehicle_13"
    assert train.paths[0] == root / "VehicleID_V1.0" / "image" / "0000001.jpg"


def test_vehicleid_needs_model_attributes(tmp_path):
    root = M.write_vehicleid(tmp_path)
    (root / "VehicleID_V1.0" / "attribute" / "model_attr.txt").unlink()
    with pytest.raises(ValueError, match="'attribute/model_attr.txt' is missing.*pku-vehicleid"):
        create_dataset("vehicleid", "train", root=root)


def test_vehicleid_category_sampler_sees_unlabelled_classes(tmp_path):
    from dmlkit.data.samplers.fastap import HardCategoryBatchSampler

    root = M.write_vehicleid(tmp_path, per_list=12, per_vehicle=2)
    train = create_dataset("vehicleid", "train", root=root, image_size=16)
    sampler = HardCategoryBatchSampler(train.labels, train.class_categories, 8, unlabelled="pair", seed=0)
    batch = next(iter(sampler))
    cats = train.class_categories[train.labels[torch.as_tensor(batch)]]
    assert int((cats == -1).sum()) == 4 and int((cats >= 0).sum()) == 4


# ----------------------------------------------------------------- MNIST / Fashion-MNIST
def test_read_idx_round_trip_and_errors(tmp_path):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a.idx").write_bytes(M.idx_bytes(array))
    np.testing.assert_array_equal(read_idx(tmp_path / "a.idx", "t"), array)
    (tmp_path / "b.idx").write_bytes(M.idx_bytes(array)[:-1])
    with pytest.raises(ValueError, match="truncated"):
        read_idx(tmp_path / "b.idx", "t")
    with gzip.open(tmp_path / "c.gz", "wb") as f:
        f.write(b"\x00\x00\x0d\x01xxxx")
    with pytest.raises(ValueError, match="not an unsigned-byte idx"):
        read_idx(tmp_path / "c.gz", "t")


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_mnist_like_values(tmp_path, name):
    root = M.write_mnist_like(tmp_path, per_class=2)
    ds = create_dataset(name, "test", root=root, image_size=28)
    check_dataset(ds)
    assert ds.in_channels == 1 and len(ds) == 20 and ds.num_classes == 10
    x, y = ds[5]  # label 2, index 5 -> value 10 * 2 + (5 + 1) % 3 = 20
    cls = MNISTDataset if name == "mnist" else FashionMNISTDataset
    torch.testing.assert_close(x, torch.full((1, 28, 28), (20 / 255 - cls.MEAN[0]) / cls.STD[0]))
    assert y == 2
    big = create_dataset(name, "train", root=root, image_size=32, augment=True, max_classes=3)
    assert big[0][0].shape == (1, 32, 32) and big.num_classes == 3
    images, labels = big.get_batch([0, 3, 5])
    assert torch.equal(images, torch.stack([big[i][0] for i in (0, 3, 5)]))


def test_mnist_missing_file_says_how_to_get_it(tmp_path):
    M.write_mnist_like(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(
        ValueError, match=r"'t10k-labels-idx1-ubyte.gz' is missing; expected it at .*dmlkit data prepare mnist"
    ):
        create_dataset("mnist", "test", root=tmp_path)
    create_dataset("mnist", "train", root=tmp_path)  # the other split is complete


def _fake_fetch(sources: dict[str, bytes], calls: list[str]):
    def fetch(url: str, dest: Path) -> None:
        calls.append(url)
        name = url.rsplit("/", 1)[-1]
        if name not in sources:
            raise OSError("404")
        dest.write_bytes(sources[name])

    return fetch


def test_download_verifies_checksums(tmp_path, monkeypatch):
    src = M.write_mnist_like(tmp_path / "src")
    sources = {p.name: p.read_bytes() for p in src.iterdir()}
    files = {n: D.RemoteFile(n, ("http://a/" + n, "http://b/" + n), (D.md5_of(src / n),)) for n in sources}
    monkeypatch.setattr(MNISTDataset, "FILES", files)
    calls: list[str] = []
    monkeypatch.setattr(D, "fetch_url", _fake_fetch(sources, calls))
    dest = tmp_path / "dest"
    assert MNISTDataset.prepare(root=dest) == dest
    assert sorted(p.name for p in dest.iterdir()) == sorted(sources)  # no temporary files left
    assert len(calls) == 4
    assert create_dataset("mnist", "train", root=dest).num_classes == 10
    # a corrupt local file is reported by prepare
    (dest / "train-labels-idx1-ubyte.gz").write_bytes(b"xx")
    with pytest.raises(ValueError, match="train-labels-idx1-ubyte.gz' is corrupt.*MD5"):
        MNISTDataset.prepare(root=dest)
    # a mirror serving wrong bytes is skipped; if all do, nothing is left behind
    bad = {n: b"wrong" for n in sources}
    monkeypatch.setattr(D, "fetch_url", _fake_fetch(bad, calls))
    with pytest.raises(ValueError, match="could not download 't10k-images-idx3-ubyte.gz'.*http://a/.*MD5.*http://b/"):
        MNISTDataset.prepare(root=tmp_path / "other")
    assert not any((tmp_path / "other").iterdir())


def test_constructor_downloads_only_when_asked(tmp_path, monkeypatch):
    src = M.write_mnist_like(tmp_path / "src")
    sources = {p.name: p.read_bytes() for p in src.iterdir()}
    files = {n: D.RemoteFile(n, ("http://a/" + n,), (D.md5_of(src / n),)) for n in sources}
    monkeypatch.setattr(MNISTDataset, "FILES", files)
    monkeypatch.setattr(D, "fetch_url", _fake_fetch(sources, []))
    with pytest.raises(ValueError, match="is missing"):
        create_dataset("mnist", "test", root=tmp_path / "d")
    assert len(create_dataset("mnist", "test", root=tmp_path / "d", download=True)) == 20


def test_fashion_mnist_prefers_the_debian_copy(tmp_path, monkeypatch):
    debian = M.write_mnist_like(tmp_path / "debian", per_class=1)
    monkeypatch.setattr(FashionMNISTDataset, "DEBIAN_FOLDER", debian)
    monkeypatch.setenv("DMLKIT_CACHE", str(tmp_path / "cache"))
    assert FashionMNISTDataset.default_folder(None) == debian
    assert len(create_dataset("fashion_mnist", "train")) == 10
    (debian / "t10k-images-idx3-ubyte.gz").unlink()
    assert FashionMNISTDataset.default_folder(None) == tmp_path / "cache" / "fashion_mnist"
    assert FashionMNISTDataset.default_folder(tmp_path / "mine") == tmp_path / "mine"


def test_fashion_mnist_accepts_debian_and_official_digests():
    for spec in FashionMNISTDataset.FILES.values():
        assert len(spec.md5) == 2 and all(len(d) == 32 for d in spec.md5)
    real = FashionMNISTDataset.DEBIAN_FOLDER
    if (real / "train-labels-idx1-ubyte.gz").is_file():  # Debian's package is installed: its files verify
        for spec in FashionMNISTDataset.FILES.values():
            assert D.md5_of(real / spec.name) in spec.md5


# ----------------------------------------------------------------- CIFAR
def test_cifar10_pixel_layout_and_splits(tmp_path):
    root = M.write_cifar10(tmp_path, per_class=2)
    train = create_dataset("cifar10", "train", root=root, image_size=32)
    test = create_dataset("cifar10", "test", root=root, image_size=32)
    check_dataset(train)
    assert (len(train), len(test), train.num_classes, train.in_channels) == (100, 20, 10, 3)
    assert train.class_names[:2] == ["airplane", "automobile"]
    with open(root / "cifar-10-batches-py" / "test_batch", "rb") as f:
        row = pickle.load(f, encoding="bytes")[b"data"][7]
    expected = torch.from_numpy(row.reshape(3, 32, 32).astype(np.float32) / 255)  # R plane, G plane, B plane
    mean, std = torch.tensor(CIFAR10Dataset.MEAN).view(3, 1, 1), torch.tensor(CIFAR10Dataset.STD).view(3, 1, 1)
    torch.testing.assert_close(test[7][0], (expected - mean) / std)
    aug = create_dataset("cifar10", "train", root=root, augment=True, seed=2)
    assert torch.equal(aug.get_batch([1, 50])[0], torch.stack([aug[1][0], aug[50][0]]))


def test_cifar100_coarse_labels_are_categories(tmp_path):
    root = M.write_cifar100(tmp_path)
    ds = create_dataset("cifar100", "train", root=root)
    check_dataset(ds)
    assert ds.num_classes == 100 and ds.num_categories == 20
    assert ds.class_categories.tolist() == [c // 5 for c in range(100)]
    assert ds.category_names[3] == "coarse3" and ds.class_names[7] == "fine7"


def test_cifar_extracts_a_present_archive(tmp_path, monkeypatch):
    src = M.write_cifar10(tmp_path / "src", per_class=1)
    archive = tmp_path / "root" / "cifar-10-python.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    spec = D.RemoteFile(archive.name, ("http://x/" + archive.name,), (D.md5_of(archive),))
    monkeypatch.setattr(CIFAR10Dataset, "ARCHIVE", spec)
    ds = create_dataset("cifar10", "test", root=archive.parent)
    assert len(ds) == 10 and (archive.parent / "cifar-10-batches-py" / "data_batch_3").is_file()


def test_cifar_missing_data_and_hostile_pickles(tmp_path):
    with pytest.raises(ValueError, match=r"cifar-10-batches-py/.*is missing.*dmlkit data prepare cifar10"):
        create_dataset("cifar10", "train", root=tmp_path / "empty")
    root = M.write_cifar10(tmp_path / "c", per_class=1)

    class Evil:
        def __reduce__(self):
            return (print, ("owned",))

    (root / "cifar-10-batches-py" / "test_batch").write_bytes(pickle.dumps({b"data": Evil()}))
    with pytest.raises(ValueError, match="not an official CIFAR pickle.*refusing to load builtins.print"):
        create_dataset("cifar10", "test", root=root)


def test_extract_tar_writes_only_named_members(tmp_path):
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("good/x", b"1"), ("../evil", b"2")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    D.extract_tar(archive, tmp_path / "out", ["good/x"])
    assert (tmp_path / "out" / "good" / "x").read_bytes() == b"1" and not (tmp_path / "evil").exists()
    with pytest.raises(ValueError, match="lacks good/y"):
        D.extract_tar(archive, tmp_path / "out", ["good/y"])


def test_prepare_checks_image_list_datasets(tmp_path):
    from dmlkit.data import prepare_dataset

    root = M.write_sop(tmp_path)
    assert prepare_dataset("sop", root=root) == root / "Stanford_Online_Products"
    (root / "Stanford_Online_Products" / "Ebay_test.txt").unlink()
    with pytest.raises(ValueError, match="Ebay_test.txt"):
        prepare_dataset("sop", root=root)


def test_large_jpegs_are_decoded_at_reduced_scale_with_close_results(tmp_path):
    root = M.write_cub(tmp_path, num_classes=2, per_class=1)
    y, x = np.mgrid[0:900, 0:1200]
    smooth = np.stack([x * 255 // 1200, y * 255 // 900, (x + y) * 255 // 2100], -1).astype(np.uint8)
    for p in (root / "CUB_200_2011" / "images").rglob("*.jpg"):
        Image.fromarray(smooth).save(p, quality=95)
    fast = create_dataset("cub", "train", root=root, image_size=227)
    full = create_dataset("cub", "train", root=root, image_size=227, draft=False)
    assert fast.load_image(0).size == (600, 450)  # 1/2 scale: the shorter side stays >= 256
    assert full.load_image(0).size == (1200, 900)
    assert float((fast[0][0] - full[0][0]).abs().mean()) < 0.02
