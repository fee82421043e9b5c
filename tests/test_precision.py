"""Mixed precision on CPU (bf16): losses, miners and proxies stay finite and float32; a tiny run trains."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dmlkit.config import load_config
from dmlkit.assemble import build_trainer
from dmlkit.losses import create_loss, create_miner
from tests_helpers import TINY_OVERRIDES


def _batch(n: int = 32, d: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, d, generator=g), torch.arange(n // 4).repeat_interleave(4)


@pytest.mark.parametrize(
    "name", ["multi_similarity", "contrastive", "triplet", "lifted_structure", "proxy_anchor", "soft_triple"]
)
def test_losses_on_bf16_embeddings_are_finite_and_close_to_float32(name):
    x, y = _batch()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        loss = create_loss(name, num_classes=8, embedding_size=16)
    miner = create_miner("multi_similarity") if name == "multi_similarity" else None
    emb32 = F.normalize(x, dim=1)
    emb16 = emb32.bfloat16()
    ref = loss(emb32, y, miner(emb32, y) if miner else None)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = loss(emb16, y, miner(emb16, y) if miner else None)
    assert torch.isfinite(got)
    assert float(got.detach()) == pytest.approx(
        float(ref.detach()), rel=0.05, abs=0.05
    )  # bf16 keeps ~3 significant digits


def test_fabric_bf16_mixed_gives_float32_embeddings_and_keeps_proxies_float32():
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
        loss = create_loss("proxy_anchor", num_classes=8, embedding_size=16)
    opt = torch.optim.SGD(list(model.parameters()) + list(loss.parameters()), lr=0.1)
    model, opt = fabric.setup(model, opt)
    x, y = _batch()
    emb = model(x)
    assert emb.dtype == torch.float32  # Fabric converts the autocast output back to float32
    value = loss(F.normalize(emb, dim=1), y)
    fabric.backward(value)
    opt.step()
    assert torch.isfinite(value)
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in loss.parameters())


@pytest.mark.parametrize("precision", ["bf16-mixed"])
def test_tiny_run_trains_in_bf16(tmp_path, precision):
    cfg = load_config(
        "configs/quickstart.yaml",
        TINY_OVERRIDES
        + [
            f"train.precision={precision}",
            "data.image_size=16",
            "train.max_steps=2",
            "train.val_every=2",
            "train.log_every=1",
            "loss.name=proxy_anchor",
            "loss.miner=null",
            "plots=false",
            "eval.clustering=false",
        ],
    )
    trainer = build_trainer(cfg, tmp_path / "bf16", quiet=True)
    summary = trainer.fit()
    losses = [
        json.loads(line)["loss"]
        for line in (tmp_path / "bf16" / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["split"] == "train"
    ]
    assert len(losses) == 2 and all(math.isfinite(v) and v > 0 for v in losses)
    assert 0.0 <= summary["test"]["precision_at_1"] <= 1.0
    assert all(p.dtype == torch.float32 for p in trainer.objective.parameters())


@pytest.mark.parametrize(
    "precision, message",
    [
        ("16-mixed", "needs a CUDA GPU; on the CPU Lightning would silently train in bf16"),
        ("16-true", "needs a CUDA GPU"),
        ("half", "unknown train.precision 'half'; valid values are: 32-true"),
    ],
)
def test_a_precision_the_cpu_cannot_run_is_refused_before_the_run_folder(tmp_path, precision, message):
    cfg = load_config(
        "configs/quickstart.yaml", TINY_OVERRIDES + [f"train.precision={precision}", "train.accelerator=cpu"]
    )
    with pytest.raises(ValueError, match=message):
        build_trainer(cfg, tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()
