"""The evaluated embedding: SFT-d runs (raw model output, normalised in the loss) are evaluated normalised."""

import json

import pytest
import torch

from dmlkit.config import load_config
from dmlkit.assemble import build_trainer, embed_run, evaluate_run, evaluation_model
from dmlkit.methods import build_methods
from tests_helpers import TINY_OVERRIDES

SFT_D = [
    "methods.sft.name=sft_d",
    "methods.sft.normalize_input=true",
    "model.normalize=none",
    "plots=false",
    "eval.clustering=false",
]


def test_sft_d_run_is_evaluated_on_unit_embeddings(tmp_path):
    run_dir = tmp_path / "sftd"
    build_trainer(load_config("configs/quickstart.yaml", TINY_OVERRIDES + SFT_D), run_dir, quiet=True).fit()
    embeddings, _ = embed_run(run_dir)
    torch.testing.assert_close(embeddings.norm(dim=1), torch.ones(len(embeddings)))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert evaluate_run(run_dir)["precision_at_1"] == pytest.approx(summary["test"]["precision_at_1"])


def test_evaluation_model_sources():
    model = torch.nn.Linear(3, 2)
    assert evaluation_model(model, torch.nn.Module(), "features") is model
    x = torch.randn(4, 3)
    sft_d = build_methods(load_config("configs/quickstart.yaml", SFT_D))
    torch.testing.assert_close(
        evaluation_model(model, torch.nn.Module(), "features", sft_d)(x).norm(dim=1), torch.ones(4)
    )
    with pytest.raises(ValueError, match="eval.embedding"):
        evaluation_model(model, torch.nn.Module(), "logits")
