"""dmlkit.search.embed_images: image files embedded as the run's dataset feeds them, resumable by chunks."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from dmlkit.cli import main
from dmlkit.data.datasets.image_folder import IMAGENET_MEAN, IMAGENET_STD, ImageFolderDataset
from dmlkit.engine.embed import embed_dataset
from dmlkit.search import ImagePreprocess, embed_images, list_images, load_embeddings, load_run_model
from search_helpers import tiny_search_run, write_glyph_folder


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return tiny_search_run(tmp_path_factory)


@pytest.fixture(scope="module")
def glyph_folder(tmp_path_factory):
    return write_glyph_folder(tmp_path_factory.mktemp("glyph-files"), max_classes=4)


def test_embeddings_equal_the_datasets_own_pipeline(run_dir, glyph_folder, tmp_path):
    folder, dataset = glyph_folder
    result = embed_images(run_dir, folder, tmp_path / "emb.npy", batch_size=16, quiet=True)
    x, meta = load_embeddings(result.embeddings)
    model = load_run_model(run_dir)
    reference, labels = embed_dataset(model.model, dataset, batch_size=64)
    assert x.shape == (len(dataset), 16) and x.dtype == np.float32
    np.testing.assert_allclose(x, reference.numpy(), atol=1e-5, rtol=0)
    assert meta["labels"] == labels.tolist()
    assert meta["class_names"] == [f"c{i:02d}" for i in range(4)]
    assert meta["run_dir"] == str(run_dir.resolve()) and len(meta["paths"]) == len(dataset)
    assert result.chunks_computed == 1 and result.chunks_skipped == 0


def test_interrupted_job_resumes_without_redoing_chunks(run_dir, glyph_folder, tmp_path, monkeypatch):
    folder, dataset = glyph_folder
    out = tmp_path / "emb.npy"

    def stop_after_two(index, total):
        if index == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        embed_images(run_dir, folder, out, batch_size=4, chunk_size=10, quiet=True, on_chunk=stop_after_two)
    parts = tmp_path / "emb.parts"
    assert sorted(p.name for p in parts.glob("chunk-*.npy")) == ["chunk-000000.npy", "chunk-000001.npy"]
    assert not out.exists()

    with pytest.raises(ValueError, match="another embedding job"):  # other chunk size: not mixed in
        embed_images(run_dir, folder, out, chunk_size=7, quiet=True)

    model = load_run_model(run_dir)
    seen = []
    original = model.embed
    monkeypatch.setattr(model, "embed", lambda x: seen.append(len(x)) or original(x))
    result = embed_images(model, folder, out, batch_size=4, chunk_size=10, quiet=True)
    total_chunks = -(-len(dataset) // 10)
    assert (result.chunks_computed, result.chunks_skipped) == (total_chunks - 2, 2)
    assert sum(seen) == len(dataset) - 20  # only the images of the missing chunks went through the model
    assert not parts.exists()

    fresh = embed_images(run_dir, folder, tmp_path / "fresh.npy", batch_size=64, quiet=True)
    np.testing.assert_allclose(np.load(out), np.load(fresh.embeddings), atol=1e-6, rtol=0)

    seen.clear()
    again = embed_images(model, folder, out, batch_size=4, chunk_size=10, quiet=True)
    assert again.chunks_computed == 0 and seen == []


def test_list_file_with_classes_and_cli(run_dir, glyph_folder, tmp_path, capsys):
    folder, _ = glyph_folder
    images = sorted(folder.rglob("*.png"))[:5]
    listing = tmp_path / "list.txt"
    lines = ["# query images", f"{images[0]}\tcat", f"{images[1]}\tdog", "", f"{images[2]}\tcat"]
    listing.write_text("\n".join(lines) + "\n")
    items = list_images(listing)
    assert [p.name for p in items.paths] == [p.name for p in images[:3]]
    assert items.class_names == ["cat", "dog"] and items.labels == [0, 1, 0]

    out = tmp_path / "cli.npy"
    assert main(["embed", str(run_dir), "--images", str(listing), "--out", str(out), "--quiet"]) == 0
    assert "3 x 16 embeddings" in capsys.readouterr().out
    meta = json.loads((tmp_path / "cli.meta.json").read_text())
    assert meta["labels"] == [0, 1, 0] and np.load(out).shape == (3, 16)


def test_bad_inputs_are_reported(run_dir, tmp_path, capsys):
    (tmp_path / "imgs" / "a").mkdir(parents=True)
    Image.new("L", (32, 32)).save(tmp_path / "imgs" / "a" / "ok.png")
    (tmp_path / "imgs" / "a" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="broken.png"):
        embed_images(run_dir, tmp_path / "imgs", tmp_path / "e.npy", quiet=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no images"):
        list_images(tmp_path / "empty")
    with pytest.raises(ValueError, match=".npy"):
        embed_images(run_dir, tmp_path / "imgs", tmp_path / "e.txt", quiet=True)
    assert main(["embed", str(run_dir), "--images", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.npy")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_preprocess_matches_image_folder_dataset(tmp_path):
    """RGB images of another size: resize and ImageNet normalisation as ImageFolderDataset does."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for cls in ("x", "y"):
            (tmp_path / split / cls).mkdir(parents=True)
            for i in range(2):
                Image.fromarray(rng.integers(0, 256, (30, 41, 3), dtype=np.uint8)).save(
                    tmp_path / split / cls / f"{i}.png"
                )
    dataset = ImageFolderDataset("test", root=tmp_path, image_size=24, channels=3)
    pre = ImagePreprocess(3, 24, IMAGENET_MEAN, IMAGENET_STD)
    for i, path in enumerate(dataset.paths):
        torch.testing.assert_close(pre.load(path), dataset[i][0], atol=1e-6, rtol=0)
    grey = ImageFolderDataset("test", root=tmp_path, image_size=24, channels=1)
    torch.testing.assert_close(
        ImagePreprocess(1, 24, (0.5,), (0.5,)).load(grey.paths[0]), grey[0][0], atol=1e-6, rtol=0
    )


@pytest.mark.faults
def test_non_finite_embeddings_are_refused_and_nothing_is_saved(run_dir, glyph_folder, tmp_path):
    import dataclasses

    folder, _ = glyph_folder
    model = load_run_model(run_dir)
    with torch.no_grad():
        next(model.model.parameters()).fill_(float("nan"))  # a diverged model that still loads
    out = tmp_path / "emb.npy"
    with pytest.raises(ValueError, match=r"NaN or Inf embeddings for \d+ of \d+ images"):
        embed_images(dataclasses.replace(model), folder, out, chunk_size=8, quiet=True)
    assert not out.exists() and not list((tmp_path / "emb.parts").glob("chunk-*"))
