"""One loader of a finished run: ``evaluate``, ``gallery`` and ``embed`` + ``search`` see the same vectors.

An SFT-d run (``model.normalize: none``, ``methods.sft.normalize_input: true``) is the case where the
copies used to disagree: its raw model output is not the embedding the loss compared.
"""

import numpy as np
import pytest
import torch
from PIL import Image

from dmlkit.assemble import build_trainer, embed_run, evaluate_run, load_finished_run
from dmlkit.config import load_config
from dmlkit.report import gallery
from dmlkit.search.embed_images import embed_images
from dmlkit.search.query import build_index_from_embeddings, search_index_folder
from dmlkit.viz.gallery import nearest_neighbours
from tests_helpers import TINY_OVERRIDES

SFT_D = [
    "methods.sft.name=sft_d",
    "methods.sft.normalize_input=true",
    "model.normalize=none",
    "plots=false",
    "eval.clustering=false",
    "train.max_steps=4",
    "train.val_every=4",
    "data.max_classes=12",
]


@pytest.fixture(scope="module")
def sft_d_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("one-loader") / "run"
    build_trainer(load_config("configs/quickstart.yaml", TINY_OVERRIDES + SFT_D), run_dir, quiet=True).fit()
    return run_dir


def test_evaluate_gallery_and_embed_search_use_the_same_embedding(sft_d_run, tmp_path, monkeypatch):
    evaluated, labels = embed_run(sft_d_run)
    torch.testing.assert_close(evaluated.norm(dim=1), torch.ones(len(evaluated)))  # what the loss compared
    raw = load_finished_run(sft_d_run).model
    test = load_finished_run(sft_d_run).split("test")
    assert not torch.allclose(raw(test[0][0][None]).norm(dim=1), torch.ones(1), atol=1e-3)  # the case that matters

    drawn = {}
    monkeypatch.setattr(gallery, "draw_gallery", lambda dataset, emb, lab, out, **kw: drawn.update(emb=emb) or None)
    gallery.run_gallery(sft_d_run, tmp_path / "g.png")
    torch.testing.assert_close(drawn["emb"], evaluated, rtol=0, atol=0)

    folder = tmp_path / "images"
    for i in range(len(test)):
        (folder / f"c{int(labels[i]):03d}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.asarray(test.images[i]), mode="L").save(folder / f"c{int(labels[i]):03d}" / f"{i:05d}.png")
    result = embed_images(sft_d_run, folder, tmp_path / "e" / "embeddings.npy", quiet=True)
    embedded = torch.from_numpy(np.load(result.embeddings))  # files sort by class folder, then index
    order = torch.argsort(labels * len(labels) + torch.arange(len(labels)))
    torch.testing.assert_close(embedded, evaluated[order], atol=1e-5, rtol=0)

    build_index_from_embeddings(result.embeddings, tmp_path / "idx")
    query = int(order[0])
    _, found = search_index_folder(
        tmp_path / "idx", image=folder / f"c{int(labels[query]):03d}" / f"{query:05d}.png", k=6
    )
    _, expected = nearest_neighbours(evaluated, torch.tensor([query]), k=5)
    found_distances = sorted(n.distance for n in found)[1:]  # the query image itself comes first, at distance 0
    np.testing.assert_allclose(found_distances, expected[0].numpy(), atol=1e-3)


def test_evaluate_agrees_with_the_summary(sft_d_run):
    import json

    summary = json.loads((sft_d_run / "summary.json").read_text())
    assert evaluate_run(sft_d_run)["precision_at_1"] == pytest.approx(summary["test"]["precision_at_1"])
