"""A run trained on any dataset can be embedded, indexed, searched and exported.

For one dataset of each eval-transform family (the benchmarks' resize + centre crop with the draft decode,
the in-memory datasets' interpolation, grey and RGB image folders) a run trains 2 steps on a miniature
copy, then the command line embeds the dataset's own image files, builds an index, searches it with an
image file and exports the model to ONNX with its parity check. The embeddings of the files must equal the
run's embeddings of the dataset's own evaluation tensors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import dataset_miniatures as M
from dmlkit.assemble import build_trainer
from dmlkit.cli import main
from dmlkit.config import load_config
from dmlkit.data import create_dataset
from dmlkit.search import load_embeddings, load_exported_model, load_run_model

TWO_STEPS = [
    "train.max_steps=2",
    "train.val_every=2",
    "train.log_every=1",
    "train.batch_size=8",
    "train.m_per_class=2",
    "data.val_fraction=0",
    "data.augment=false",
    "model.embedding_dim=8",
    "eval.clustering=false",
    "plots=false",
]


def _image_files(name: str, root: Path, split: str, out: Path, **options) -> tuple[list[Path], object]:
    """The files of ``split`` (written out as PNG for an in-memory dataset) and the dataset itself."""
    dataset = create_dataset(name, split, root=root, **options)
    if hasattr(dataset, "paths"):
        return list(dataset.paths), dataset
    files = []
    for i in range(len(dataset)):
        pixels = dataset.images[i].numpy()
        path = out / f"c{int(dataset.labels[i])}" / f"{i:03d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels).save(path)
        files.append(path)
    return files, dataset


def _image_folder(root: Path) -> Path:
    for split in ("train", "test"):
        for c in range(4):
            for j in range(2):
                path = root / split / f"class{c}" / f"{j}.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(np.random.default_rng(8 * c + j).integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(
                    path
                )
    return root


CASES = {  # name -> (writer, extra overrides)
    "cub": (M.write_cub, ["data.image_size=16", "data.params.resize=20"]),
    "mnist": (M.write_mnist_like, ["data.image_size=16"]),
    "cifar10": (M.write_cifar10, ["data.image_size=16"]),
    "image_folder": (_image_folder, ["data.image_size=16", "data.params.channels=1"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_run_of_any_dataset_embeds_searches_and_exports(name, tmp_path, capsys):
    write, extra = CASES[name]
    root = write(tmp_path / "data")
    cfg = load_config("configs/quickstart.yaml", [f"data.name={name}", f"data.root={root}", *TWO_STEPS, *extra])
    run = tmp_path / "run"
    build_trainer(cfg, run, quiet=True).fit()
    files, dataset = _image_files(
        name, root, "test", tmp_path / "files", image_size=cfg.data.image_size, **cfg.data.params
    )
    listing = tmp_path / "files.txt"
    listing.write_text("".join(f"{p}\n" for p in files))
    emb = tmp_path / "e" / "embeddings.npy"
    assert main(["embed", str(run), "--images", str(listing), "--out", str(emb), "--quiet"]) == 0
    x, _ = load_embeddings(emb)
    model = load_run_model(run)
    with torch.no_grad():
        reference = model.embed(torch.stack([dataset[i][0] for i in range(len(dataset))]))
    np.testing.assert_allclose(x, np.asarray(reference), atol=1e-5, rtol=0)
    assert main(["index", "build", str(emb), "--out", str(tmp_path / "idx")]) == 0
    capsys.readouterr()
    assert main(["search", str(tmp_path / "idx"), "--image", str(files[3]), "--k", "3", "--json"]) == 0
    nearest = json.loads(capsys.readouterr().out)[0]
    assert nearest["distance"] == pytest.approx(0.0, abs=1e-5), "an indexed file finds itself first"
    onnx = tmp_path / "model.onnx"
    assert main(["export", str(run), "--format", "onnx", "--out", str(onnx)]) == 0
    assert load_exported_model(onnx).preprocess == model.preprocess
