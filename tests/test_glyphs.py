"""The embedded glyphs dataset: classes, collisions, categories, cache, rendering, augmentation."""

from __future__ import annotations

import dataclasses
import os
import shutil
import unicodedata

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dmlkit.data import GLYPHS_MEAN, GLYPHS_STD, GlyphAugment, GlyphAugmentConfig, GlyphsDataset, check_dataset
from dmlkit.data.datasets import glyph_cache
from dmlkit.data.datasets import glyphs as G
from dmlkit.data.cache import save_npz_atomic
from dmlkit.data.datasets.glyph_duplicates import keep_distinct, relative_l1
from dmlkit.data.datasets.glyph_render import GLYPH_FONTS, GlyphRenderer, font_paths, glyph_category, is_candidate
from dmlkit.data.transforms.glyph_augment import change_stroke, gaussian_blur


@pytest.fixture(scope="module")
def table() -> G.GlyphTable:
    # The shared cache of tests/conftest.py ($DMLKIT_CACHE): rendered once per machine (~15 s).
    return G.load_glyph_table()


@pytest.fixture(scope="module")
def train() -> GlyphsDataset:
    return GlyphsDataset("train")


@pytest.fixture(scope="module")
def heldout() -> GlyphsDataset:
    return GlyphsDataset("test")


# ------------------------------------------------------------------ classes
def test_table_shapes_and_counts(table):
    n, c = table.images.shape[0], table.num_classes
    assert table.images.shape == (n, 32, 32) and table.images.dtype == np.uint8
    assert 2500 < c < 3500, c  # 2832 with matplotlib 3.11's fonts
    assert table.image_class.shape == table.image_font.shape == (n,)
    assert np.all(np.diff(table.codepoints) > 0), "classes are ordered by code point"
    assert np.all(np.diff(table.image_class) >= 0), "images are ordered by class"
    assert table.font_names == list(GLYPH_FONTS)
    counts = np.bincount(table.image_class, minlength=c)
    assert counts.min() >= G.MIN_IMAGES and counts.max() <= len(GLYPH_FONTS)
    # at most one image per (class, font), and no two near-identical images in a class
    assert len(set(zip(table.image_class.tolist(), table.image_font.tolist()))) == n
    assert keep_distinct(table.images, table.image_class).all()
    assert table.duplicates > 0 and table.thin.size > 0
    assert set(table.thin.tolist()).isdisjoint(table.codepoints.tolist())
    assert table.images.reshape(n, -1).max(1).min() >= 64, "no blank renderings"
    assert all(is_candidate(int(cp)) for cp in table.codepoints)
    assert table.class_names == [unicodedata.name(chr(int(cp))) for cp in table.codepoints]


def test_splits_are_class_disjoint_halves(table, train, heldout):
    c = table.num_classes
    assert train.num_classes == (c + 1) // 2 and heldout.num_classes == c // 2
    assert len(train) + len(heldout) == table.images.shape[0]
    assert set(train.class_chars).isdisjoint(heldout.class_chars)
    assert int(train.codepoints.max()) < int(heldout.codepoints.min())
    for ds in (train, heldout):
        check_dataset(ds)
        assert torch.equal(torch.unique(ds.labels), torch.arange(ds.num_classes))
        assert int(torch.bincount(ds.labels).min()) >= G.MIN_IMAGES
        assert ds.in_channels == 1


def test_collisions_dropped_lowest_code_point_kept(table):
    kept = set(table.codepoints.tolist())
    for keep, drop in [
        ("A", "\u0391"),
        ("A", "\u0410"),
        ("o", "\u043e"),
        ("o", "\u03bf"),
        ("p", "\u0440"),
        ("B", "\u0392"),
    ]:
        assert ord(keep) in kept and ord(drop) not in kept, (keep, drop)
        assert ord(drop) in table.dropped.tolist()
    # look-alikes that differ in shape or position stay apart
    for ch in ["l", "I", "1", "O", "0", ",", "'", ".", "\u00b7", "-", "_", "\u2014"]:
        assert ord(ch) in kept, ch
    assert np.all(table.dropped_for < table.dropped), "the lower code point is kept"
    assert set(table.dropped_for.tolist()) <= kept


def test_no_two_kept_classes_collide(table):
    collide = G.find_collisions(table.images, table.image_class, table.image_font, table.num_classes)
    assert np.all(collide == -1)


def test_find_collisions_majority_rule():
    rng = np.random.default_rng(0)
    base = (rng.random((3, 32, 32)) > 0.7).astype(np.uint8) * 255
    other = (rng.random((32, 32)) > 0.7).astype(np.uint8) * 255
    images = np.stack([base[0], base[1], base[2], base[0], base[1], other, base[0], other, other])
    image_class = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    image_font = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2])
    # 1 equals 0 in 2 of 3 fonts: dropped for 0. 2 equals 0 in 1 of 3 only: kept, and it
    # equals 1 in 2 of 3, but 1 is gone, so only collisions with kept classes count.
    assert G.find_collisions(images, image_class, image_font, 3).tolist() == [-1, 0, -1]
    # a tiny change keeps them near-identical; a shifted copy does not
    nudged = images.copy()
    nudged[3, 0, 0] ^= 255
    assert G.find_collisions(nudged, image_class, image_font, 3).tolist() == [-1, 0, -1]
    shifted = images.copy()
    shifted[3:5] = np.roll(shifted[3:5], 3, axis=2)
    assert G.find_collisions(shifted, image_class, image_font, 3).tolist() == [-1, -1, -1]


def test_keep_distinct_drops_near_copies_within_a_class_only():
    rng = np.random.default_rng(0)
    a = (rng.random((32, 32)) > 0.7).astype(np.uint8) * 255
    b = (rng.random((32, 32)) > 0.7).astype(np.uint8) * 255
    near = a.copy()
    near[0, :3] ^= 255  # a few pixels off: relative L1 well under 0.05
    assert relative_l1(a.reshape(1, -1), near.reshape(1, -1))[0, 0] < 0.05
    images = np.stack([a, b, near, a, a, b])
    image_class = np.array([0, 0, 0, 0, 1, 1])
    # class 0: b differs, the near copy and the exact copy of a go; class 1 keeps its own copy of a
    assert keep_distinct(images, image_class).tolist() == [True, True, False, False, True, True]
    assert keep_distinct(images, image_class, threshold=0.0).all(), "threshold 0 drops nothing"
    # the first image of a group (in font order) is the one kept, whatever the order of classes
    shuffled = np.array([1, 0, 0, 0, 0, 1])
    assert keep_distinct(images, shuffled).tolist() == [True, True, True, False, False, True]
    with pytest.raises(ValueError, match="threshold"):
        keep_distinct(images, image_class, threshold=1.5)


def test_no_query_has_a_free_match(heldout):
    """No test query has a pixel-identical twin among the references (raw pixels once found one for 60.8%)."""
    x = heldout.images.reshape(len(heldout), -1).float()
    for c in range(0, heldout.num_classes, 97):
        rows = torch.nonzero(heldout.labels == c).flatten()
        d = relative_l1(x[rows].numpy(), x[rows].numpy())
        np.fill_diagonal(d, 1.0)
        assert d.min() >= 0.05, heldout.class_chars[c]


def test_categories(table, train, heldout):
    names = set(table.category_names)
    assert {"LATIN", "GREEK", "CYRILLIC", "ARMENIAN", "ARROW", "MATHEMATICAL", "BRAILLE", "BOX_DRAWING"} <= names
    assert table.category_names == sorted(table.category_names)
    cat = {chr(int(cp)): table.category_names[k] for cp, k in zip(table.codepoints, table.class_categories)}
    assert cat["A"] == "LATIN" and cat["\u03b1"] == "GREEK" and cat["\u0436"] == "CYRILLIC"
    assert cat["\u2192"] == "ARROW" and cat["\u2211"] == "MATHEMATICAL" and cat["7"] == "NUMBER"
    for ds in (train, heldout):
        assert ds.category_names == table.category_names
        assert ds.class_categories.shape == (ds.num_classes,)
        assert 0 <= int(ds.class_categories.min()) and int(ds.class_categories.max()) < len(ds.category_names)
        assert ds.categories.shape == ds.labels.shape


@pytest.mark.parametrize(
    "char, category",
    [
        ("\u02b0", "LATIN"),  # MODIFIER LETTER SMALL H: via its decomposition
        ("\u0e3f", "CURRENCY"),  # THAI CURRENCY SYMBOL BAHT
        ("\u00bd", "NUMBER"),
        ("\u256c", "BOX_DRAWING"),
        ("\u2588", "BLOCK"),
        ("\u21cc", "ARROW"),  # RIGHTWARDS HARPOON OVER LEFTWARDS HARPOON
        ("\u25b2", "GEOMETRIC"),
        ("\u2660", "SYMBOL"),
        ("!", "PUNCTUATION"),
        ("+", "MATHEMATICAL"),
        ("\u2800", "BRAILLE"),
    ],
)
def test_glyph_category_rule(char, category):
    assert glyph_category(char) == category


# ---------------------------------------------------------------- rendering
def test_rendering_is_deterministic_and_keeps_position():
    path = font_paths()[0]
    a = [GlyphRenderer(path, 32).render(ch) for ch in "Ag,'"]
    b = [GlyphRenderer(path, 32).render(ch) for ch in "Ag,'"]
    for x, y in zip(a, b):
        assert x is not None and np.array_equal(x, y)
    comma, apostrophe = a[2], a[3]
    rows = lambda img: np.nonzero(img.max(1) > 64)[0].mean()  # noqa: E731
    assert rows(comma) > rows(apostrophe) + 8, "a comma sits low, an apostrophe high"
    assert GlyphRenderer(path, 32).render(" ") is None, "blank renderings are None"


def test_rendering_sizes_agree():
    path = font_paths()[8]  # DejaVu Serif
    for ch in "Qy\u2192":
        small = GlyphRenderer(path, 32).render(ch).astype(np.float32) / 255
        big = GlyphRenderer(path, 64).render(ch).astype(np.float32) / 255
        pooled = F.avg_pool2d(torch.from_numpy(big)[None, None], 2)[0, 0].numpy()
        assert np.abs(pooled - small).mean() < 0.03, ch


def test_other_image_size_rerenders_the_same_pairs(table):
    # a 12-class reference keeps this fast; load_glyph_table does the same for the whole table
    rows = np.nonzero(table.image_class < 12)[0]
    ref = dataclasses.replace(
        table,
        images=table.images[rows],
        image_class=table.image_class[rows],
        image_font=table.image_font[rows],
        codepoints=table.codepoints[:12],
        class_names=table.class_names[:12],
        class_categories=table.class_categories[:12],
    )
    out = G.build_glyph_table(16, ref)
    assert out.images.shape == (rows.size, 16, 16) and out.image_size == 16
    assert np.array_equal(out.image_class, ref.image_class) and np.array_equal(out.image_font, ref.image_font)
    assert out.images.reshape(rows.size, -1).max(1).min() > 0
    with pytest.raises(ValueError, match="reference"):
        G.build_glyph_table(16, None)


# -------------------------------------------------------------------- cache
def test_cache_path_env_and_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DMLKIT_CACHE", str(tmp_path / "c"))
    assert G.glyphs_cache_path() == tmp_path / "c" / "glyphs" / f"glyphs-v{G.GLYPHS_VERSION}-32px.npz"
    assert G.glyphs_cache_path(48, root=tmp_path / "mine") == tmp_path / "mine" / f"glyphs-v{G.GLYPHS_VERSION}-48px.npz"
    monkeypatch.delenv("DMLKIT_CACHE")
    assert str(G.glyphs_cache_path()).startswith(os.path.expanduser("~/.cache/dmlkit/glyphs"))


def _no_rendering(*args, **kwargs):
    raise AssertionError("the cache should have been reused")


def test_cache_is_reused(table, tmp_path, monkeypatch):
    src = G.glyphs_cache_path()
    dst = G.glyphs_cache_path(root=tmp_path)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst)
    before = dst.stat().st_mtime_ns
    monkeypatch.setattr(glyph_cache, "build_glyph_table", _no_rendering)
    again = G.load_glyph_table(root=tmp_path)
    assert np.array_equal(again.images, table.images) and again.class_names == table.class_names
    ds = GlyphsDataset("test", root=tmp_path, max_classes=3)
    assert ds.num_classes == 3
    monkeypatch.setenv("DMLKIT_CACHE", str(tmp_path / "env"))
    (tmp_path / "env" / "glyphs").mkdir(parents=True)
    shutil.copy(src, tmp_path / "env" / "glyphs" / src.name)
    assert GlyphsDataset("train", max_classes=2).num_classes == 2  # found through $DMLKIT_CACHE
    assert dst.stat().st_mtime_ns == before


@pytest.mark.parametrize("damage", ["stale", "old_rule", "corrupt"])
def test_stale_or_corrupt_cache_is_rebuilt(table, tmp_path, monkeypatch, damage):
    path = G.glyphs_cache_path(root=tmp_path)
    if damage == "stale":
        save_npz_atomic(path, {"version": np.array("0"), "fingerprint": np.array("x"), "image_size": np.array(32)})
    elif damage == "old_rule":  # this version and fonts, but chosen by another duplicate rule: not used
        with np.load(G.glyphs_cache_path(), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["rule"] = np.array(G.GLYPHS_RULE.replace("duplicate=", "duplicate=0"))
        save_npz_atomic(path, arrays)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not a zip file")
    calls = []

    def fake_build(image_size=32, reference=None):
        calls.append(image_size)
        return table

    monkeypatch.setattr(glyph_cache, "build_glyph_table", fake_build)
    with pytest.warns(UserWarning, match="unreadable") if damage == "corrupt" else _nothing():
        out = G.load_glyph_table(root=tmp_path)
    assert calls == [32] and out.num_classes == table.num_classes
    assert sorted(p.name for p in tmp_path.rglob("*")) == [f"glyphs-v{G.GLYPHS_VERSION}-32px.npz"], (
        "no temporary files left"
    )
    monkeypatch.setattr(glyph_cache, "build_glyph_table", _no_rendering)
    assert np.array_equal(G.load_glyph_table(root=tmp_path).images, table.images)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "x.npz"
    save_npz_atomic(path, {"a": np.arange(3)})

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(np, "savez_compressed", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        save_npz_atomic(path, {"a": np.arange(5)})
    assert np.load(path)["a"].tolist() == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["x.npz"]


# ------------------------------------------------------------- items, augmentation
def test_items_are_normalised_tensors(train):
    x, y = train[0]
    assert x.shape == (1, 32, 32) and x.dtype == torch.float32 and isinstance(y, int)
    raw = train.images.float() / 255
    z = (raw - GLYPHS_MEAN) / GLYPHS_STD
    assert abs(float(z.mean())) < 0.01 and abs(float(z.std()) - 1) < 0.01
    assert torch.allclose(x[0], z[0])
    assert torch.equal(train[-1][0], train[len(train) - 1][0])
    with pytest.raises(IndexError):
        train[len(train)]


def test_augmentation_is_seeded_by_seed_epoch_index(train):
    a = GlyphsDataset("train", augment=True, seed=3, max_classes=20)
    b = GlyphsDataset("train", augment=True, seed=3, max_classes=20)
    idx = [0, 5, 17, 60]
    state = torch.get_rng_state()
    xa, xb = a.get_batch(idx)[0], b.get_batch(idx)[0]
    assert torch.equal(xa, xb)
    assert torch.equal(torch.stack([a[i][0] for i in idx]), torch.stack([b[i][0] for i in idx]))
    assert torch.allclose(xa, torch.stack([a[i][0] for i in idx]), atol=1e-5), "batch == one by one"
    assert torch.equal(state, torch.get_rng_state()), "global RNG untouched"
    plain = torch.stack([train[i][0] for i in idx])
    assert not torch.allclose(xa, plain)
    a.set_epoch(1)
    xa1 = a.get_batch(idx)[0]
    assert not torch.allclose(xa1, xb), "a new epoch draws new augmentations"
    a.set_epoch(0)
    assert torch.equal(a.get_batch(idx)[0], xb)
    c = GlyphsDataset("train", augment=True, seed=4, max_classes=20)
    assert not torch.allclose(c.get_batch(idx)[0], xa)
    # each item depends on its own index only
    assert torch.equal(a.get_batch([17])[0][0], xa[2])
    # without augmentation the epoch does not matter
    p = a.with_augment(False)
    p.set_epoch(5)
    assert torch.equal(p.get_batch(idx)[0], plain)
    assert a.augment and p.images.data_ptr() == a.images.data_ptr()


def test_augment_ops_on_batches():
    aug = GlyphAugment()
    x = torch.zeros(4, 1, 32, 32)
    x[:, :, 10:22, 15:17] = 1.0  # a vertical bar
    g = torch.Generator().manual_seed(0)
    y = aug(x, g)
    assert y.shape == x.shape and float(y.min()) >= 0 and float(y.max()) <= 1
    thick = change_stroke(x, torch.tensor([1.0, 0.0, -1.0, 0.5]))
    assert float(thick[0].sum()) > float(x[0].sum()) > float(thick[2].sum())
    assert torch.equal(thick[1], x[1])
    blurred = gaussian_blur(x, torch.tensor([0.0, 1.0, 1.0, 2.0]))
    assert torch.equal(blurred[0], x[0])
    assert torch.allclose(blurred.sum((1, 2, 3)), x.sum((1, 2, 3)), rtol=1e-4)
    assert float(blurred[3].max()) < float(blurred[1].max()) < 1.0
    identity = GlyphAugment(GlyphAugmentConfig(0, (1, 1), 0, 0, (0, 0), 3, 0.0, (0, 0)))
    assert torch.allclose(identity(x, g), x, atol=1e-5)
    with pytest.raises(ValueError):
        GlyphAugmentConfig(scale=(1.2, 1.0))
    with pytest.raises(ValueError):
        GlyphAugmentConfig(stroke=(-2.0, 0.0))
    with pytest.raises(ValueError):
        aug.apply(x[0], aug.sample_params(1, g))


def test_bad_arguments():
    with pytest.raises(ValueError, match="train, test"):
        GlyphsDataset("validation")
    with pytest.raises(ValueError, match="image_size"):
        GlyphsDataset("train", image_size=4)
    with pytest.raises(ValueError, match="max_classes"):
        GlyphsDataset("train", max_classes=0)
    with pytest.raises(ValueError, match="epoch"):
        GlyphsDataset("train", max_classes=2).set_epoch(-1)
