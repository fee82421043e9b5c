"""A pooling with random parameters does not shift the draws of what is built after it (the head, the loss's
proxies), so a GAP run and a GSP run of one seed share those and a paired comparison differs in the pooling only."""

from __future__ import annotations

import torch

from dmlkit.assemble.build import build_model
from dmlkit.config import load_config
from dmlkit.data import create_dataset
from dmlkit.models.config import ModelConfig, build_embedder


def _proxies(config: str) -> torch.Tensor:
    cfg = load_config(config)
    train = create_dataset("glyphs_testbed", "train", max_classes=6)
    loss = build_model(cfg, train, pretrained=False).objective.terms[0].loss
    return next(p for n, p in loss.named_parameters() if "proxies" in n).detach()


def test_gap_and_gsp_runs_of_one_seed_start_from_the_same_proxies():
    gap = _proxies("configs/testbed/testbed_proxy_anchor.yaml")
    gsp = _proxies("configs/testbed/testbed_proxy_anchor_gsp.yaml")
    assert torch.equal(gap, gsp)


def test_the_head_after_a_random_pooling_is_drawn_as_after_gap():
    heads = []
    for pooling, params in (("gap", {}), ("gsp", {"num_prototypes": 8})):  # both pool to the map's 64 channels
        torch.manual_seed(3)
        model = build_embedder(
            ModelConfig(backbone="resnet20", pooling=pooling, pooling_params=params, embedding_dim=16), in_channels=1
        )
        heads.append(model.head.weight.detach().clone())
    assert torch.equal(heads[0], heads[1])
