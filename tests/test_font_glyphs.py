"""font_glyphs: the cmap rule, the near-duplicate rule, DML-side disjoint splits, the cache key, the
missing-package error. Miniature font sets: faces copied from matplotlib's own fonts into a tmp folder."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import torch
import pytest

from dmlkit.data import create_dataset
from dmlkit_lab.datasets import font_glyph_table as T
from dmlkit_lab.datasets.font_faces import INSTALL_COMMAND, package_faces
from dmlkit_lab.datasets.font_glyphs import dml_candidates
from dmlkit.data.datasets.glyph_cache import load_glyph_table
from dmlkit.data.datasets.glyph_render import GlyphRenderer, font_coverage, font_dir
from dmlkit_lab.datasets.glyph_testbed import testbed_classes as classes_of  # (not collected as a test)

FACES = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSansMono.ttf", "STIXGeneral.ttf")


@pytest.fixture
def faces(tmp_path):
    folder = tmp_path / "fonts"
    folder.mkdir()
    for name in FACES:
        shutil.copy(font_dir() / name, folder / name)
    return [folder / name for name in FACES]


@pytest.fixture(autouse=True)
def few_images(monkeypatch):
    monkeypatch.setattr(T, "MIN_FACE_IMAGES", 2)  # 4 faces: a class keeps 2 to 4 images


def _datasets(root, faces, splits=("train", "val", "test")):
    return {s: create_dataset("font_glyphs", s, root=root, faces=[str(f) for f in faces]) for s in splits}


def test_a_face_gives_images_only_for_the_characters_its_cmap_maps(faces, tmp_path):
    cands = dml_candidates()
    table, counts = T.build_font_table(faces, cands)
    coverage = font_coverage(faces)
    cps = table.codepoints[table.image_class]
    for f, mapped in enumerate(coverage):
        assert set(cps[table.image_font == f].tolist()) <= mapped, f"{faces[f].name} drew characters it lacks"
    # the rule must bite: some kept class is mapped by some faces and not by others
    lacking = [cp for cp in table.codepoints.tolist() if any(cp not in m for m in coverage)]
    assert lacking, "the miniature faces should differ in coverage"
    assert counts.unreadable_faces == () and counts.rendered > table.images.shape[0]


def test_near_duplicates_match_a_brute_force_greedy_pass(faces):
    cands = dml_candidates()[:400]
    table, counts = T.build_font_table(faces, cands, min_images=1)
    coverage = font_coverage(faces)
    renderers = [GlyphRenderer(f, 32) for f in faces]
    for c, cp in enumerate(table.codepoints.tolist()):
        kept: list[tuple[int, np.ndarray]] = []  # brute force: every face in order, against every image kept
        for f, r in enumerate(renderers):
            img = r.render(chr(cp)) if cp in coverage[f] else None
            if img is None:
                continue
            x = img.astype(np.int64)
            if all(np.abs(x - y).sum() / (x.sum() + y.sum()) >= 0.05 for _, y in kept):
                kept.append((f, x))
        rows = np.nonzero(table.image_class == c)[0]
        assert table.image_font[rows].tolist() == [f for f, _ in kept], chr(cp)
        assert np.array_equal(table.images[rows].astype(np.int64), np.stack([y for _, y in kept]))
    assert table.duplicates > 0, "DejaVu Sans and Sans Mono draw some characters alike"


def test_splits_are_disjoint_and_dml_side_only(faces, tmp_path):
    ds = _datasets(tmp_path / "cache", faces, ("train", "val", "test", "dml"))
    glyphs = load_glyph_table()
    pretrain = set(glyphs.codepoints[classes_of(glyphs.codepoints, "pretrain")].tolist())
    chars = {s: set(d.codepoints.tolist()) for s, d in ds.items()}
    assert all(chars[s] for s in ("train", "val", "test"))
    assert not chars["train"] & chars["val"] and not chars["train"] & chars["test"] and not chars["val"] & chars["test"]
    assert chars["dml"] == chars["train"] | chars["val"] | chars["test"]
    assert not chars["dml"] & pretrain, "a class the pretrained backbone saw"
    for s in ("train", "val", "test"):  # the same split as the character has in glyphs_testbed
        assert chars[s] <= set(glyphs.codepoints[classes_of(glyphs.codepoints, s)].tolist())
        labels = ds[s].labels.numpy()
        assert np.array_equal(np.unique(labels), np.arange(ds[s].num_classes))
        assert np.bincount(labels).min() >= 2
    x, y = ds["train"][0]
    assert tuple(x.shape) == (1, 32, 32) and isinstance(y, int)


def test_another_font_set_is_rendered_again_with_a_warning_never_mixed(faces, tmp_path):
    root = tmp_path / "cache"
    three = _datasets(root, faces[:3], ("dml",))["dml"]
    assert set(three.font_names) == {f"fonts/{n}" for n in FACES[:3]}
    with pytest.warns(UserWarning, match="rendering it again"):
        four = _datasets(root, faces, ("dml",))["dml"]
    assert four.font_names == [f"fonts/{n}" for n in FACES]
    assert len(four) > len(three) and int(four.image_fonts.max()) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same faces again: the cache, silently
        again = _datasets(root, faces, ("dml",))["dml"]
    assert np.array_equal(again.images.numpy(), four.images.numpy())
    shutil.copy(font_dir() / "DejaVuSerif.ttf", faces[1])  # same file name, other contents
    with pytest.warns(UserWarning, match="rendering it again"):
        changed = _datasets(root, faces, ("dml",))["dml"]
    assert not np.array_equal(changed.images.numpy()[: len(four)], four.images.numpy()[: len(changed)])


def test_a_missing_font_package_names_the_install_command(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="fonts-dmlkit-no-such-package.*" + INSTALL_COMMAND.replace(".", r"\.")):
        package_faces(["fonts-dmlkit-no-such-package"])
    from dmlkit_lab.datasets import font_faces

    monkeypatch.setattr(font_faces, "FONT_PACKAGES", ("fonts-dmlkit-no-such-package",))
    with pytest.raises(ValueError, match="install_system_packages"):
        create_dataset("font_glyphs", "train", root=tmp_path)
    with pytest.raises(ValueError, match="faces must be a non-empty list"):
        create_dataset("font_glyphs", "train", root=tmp_path, faces=[])


def test_the_install_script_installs_the_font_packages_the_dataset_reads():
    import re
    from pathlib import Path

    from dmlkit_lab.datasets.font_faces import FONT_PACKAGES

    script = (Path(__file__).parents[1] / "scripts" / "install_system_packages.sh").read_text()
    listed = re.search(r'FONT_PACKAGES="([^"]*)"', script).group(1).split()
    assert tuple(listed) == FONT_PACKAGES


def test_min_images_is_part_of_the_cache_key_and_decides_the_classes(faces, tmp_path):
    from dmlkit_lab.datasets.font_glyph_cache import font_table_key

    cands = dml_candidates()[:400]
    assert font_table_key(faces, cands, 32) == font_table_key(faces, cands, 32, min_images=T.MIN_FACE_IMAGES)
    assert font_table_key(faces, cands, 32, min_images=3) != font_table_key(faces, cands, 32, min_images=2)
    two = create_dataset("font_glyphs", "dml", root=tmp_path / "a", faces=[str(f) for f in faces], min_images=2)
    three = create_dataset("font_glyphs", "dml", root=tmp_path / "b", faces=[str(f) for f in faces], min_images=3)
    assert int(torch.bincount(two.labels).min()) == 2 and int(torch.bincount(three.labels).min()) == 3
    assert set(three.class_names) < set(two.class_names)
    with pytest.raises(ValueError, match="min_images must be an int >= 2"):
        create_dataset("font_glyphs", "dml", root=tmp_path / "c", faces=[str(f) for f in faces], min_images=1)
