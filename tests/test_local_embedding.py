"""The thesis' Sec. 5.2.4 architecture: backbone -> 1x1 conv to the local embedding -> pooling -> l2, no head."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dmlkit.engine.config import TrainConfig
from dmlkit.engine.optim import parameter_groups
from dmlkit.models import ModelConfig, build_embedder


def _build(seed: int = 0, **fields) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_embedder(ModelConfig(backbone="resnet20", embedding_dim=16, **fields), in_channels=1)


def test_gap_after_a_1x1_conv_is_the_gap_model_with_a_linear_head():
    """GAP commutes with a 1x1 conv, and torch initialises Conv2d(C, d, 1) like Linear(C, d): equal models."""
    plain = _build()
    local = _build(local_dim=16, head="none")
    assert not any(isinstance(m, nn.Linear) for m in local.modules())
    conv = local.local_projection
    torch.testing.assert_close(conv.weight.flatten(1), plain.head.weight, rtol=0, atol=0)
    torch.testing.assert_close(conv.bias, plain.head.bias, rtol=0, atol=0)
    x = torch.randn(3, 1, 32, 32, generator=torch.Generator().manual_seed(1))
    plain.eval(), local.eval()
    torch.testing.assert_close(local(x), plain(x), rtol=1e-5, atol=1e-6)


def test_the_pooled_vector_is_the_embedding():
    model = _build(local_dim=16, head="none", pooling="gsp", pooling_params={"num_prototypes": 4, "iters": 30}).eval()
    x = torch.randn(2, 1, 32, 32, generator=torch.Generator().manual_seed(2))
    out = model.encode(x)
    assert out.local.shape[1] == 16 and out.pooled.shape == (2, 16)
    torch.testing.assert_close(out.embedding, F.normalize(out.pooled, dim=-1))


def test_head_none_needs_the_pooled_size_to_be_the_embedding_size():
    with pytest.raises(ValueError, match="local_dim: 16"):
        _build(head="none")  # resnet20 gives 64 channels, the embedding has 16
    with pytest.raises(ValueError, match="model.head"):
        _build(head="mlp")


def test_new_layers_learn_at_head_lr_and_the_backbone_at_lr():
    model = _build(local_dim=16, head="none", pooling="gsp", pooling_params={"num_prototypes": 4})
    groups = {g["name"]: g for g in parameter_groups(model, nn.Module(), TrainConfig(lr=1e-4, head_lr=1e-3))}
    new = {id(p) for p in groups["head"]["params"]}
    assert groups["head"]["lr"] == 1e-3 and groups["body"]["lr"] == 1e-4
    assert new == {id(model.local_projection.weight), id(model.local_projection.bias), id(model.pooling.prototypes)}
    assert {id(p) for p in groups["body"]["params"]} == {id(p) for p in model.backbone.parameters()}
