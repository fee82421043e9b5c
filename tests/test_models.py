"""Backbones (CIFAR ResNets, registry, timm adapter) and the Embedder with its config."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from torch import nn

from dmlkit.models import (
    NORMALIZATIONS,
    CifarResNet,
    Embedder,
    ModelConfig,
    build_embedder,
    create_backbone,
    lipschitz_normalize,
    list_backbones,
    normalize_embeddings,
)
from dmlkit.pooling import GAP, create_pooling


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def expected_cifar_resnet_params(depth: int, in_channels: int) -> int:
    """Parameter count of He et al. (2016) Sec. 4.2 without the classifier, option-A shortcuts.

    3x3 convolutions have no bias; each BN has a scale and a shift per channel.
    """
    n = (depth - 2) // 6
    conv = lambda cin, cout: 9 * cin * cout  # noqa: E731
    bn = lambda c: 2 * c  # noqa: E731
    total = conv(in_channels, 16) + bn(16)
    cin = 16
    for width in (16, 32, 64):
        for _ in range(n):
            total += conv(cin, width) + bn(width) + conv(width, width) + bn(width)
            cin = width
    return total


@pytest.mark.parametrize("depth", [20, 32, 44, 56])
def test_cifar_resnet_parameter_count_matches_architecture(depth):
    model = create_backbone(f"resnet{depth}")
    assert n_params(model) == expected_cifar_resnet_params(depth, 3)


def test_resnet20_is_the_papers_027m_network():
    model = create_backbone("resnet20")
    assert n_params(model) == 269_072
    # With the paper's 64 -> 10 classifier: 0.27M as in Table 6 of He et al.
    assert round((n_params(model) + 64 * 10 + 10) / 1e6, 2) == 0.27


def test_resnet20_output_is_local_map():
    model = create_backbone("resnet20").eval()
    assert model.out_channels == 64
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 64, 8, 8)


def test_grey_input_resnet():
    model = create_backbone("resnet20", in_channels=1).eval()
    assert n_params(model) == expected_cifar_resnet_params(20, 1)
    with torch.no_grad():
        assert model(torch.randn(2, 1, 28, 28)).shape == (2, 64, 7, 7)


def test_option_b_shortcut_adds_projections_only():
    a = CifarResNet(20, shortcut="A")
    b = CifarResNet(20, shortcut="B")
    # Two projection shortcuts: 1x1 conv 16->32 + BN(32), 1x1 conv 32->64 + BN(64).
    assert n_params(b) - n_params(a) == (16 * 32 + 64) + (32 * 64 + 128)
    with torch.no_grad():
        assert b.eval()(torch.randn(1, 3, 32, 32)).shape == (1, 64, 8, 8)


def test_option_a_shortcut_subsamples_and_zero_pads():
    block = CifarResNet(20).layer2[0]
    x = torch.randn(2, 16, 8, 8)
    s = block.shortcut(x)
    assert s.shape == (2, 32, 4, 4)
    assert torch.equal(s[:, :16], x[:, :, ::2, ::2])
    assert torch.count_nonzero(s[:, 16:]) == 0


@pytest.mark.parametrize("depth", [19, 4, 21])
def test_bad_depth(depth):
    with pytest.raises(ValueError, match="6n\\+2"):
        CifarResNet(depth)


def test_backbone_registry_errors():
    assert {"resnet20", "resnet32", "resnet44", "resnet56"} <= set(list_backbones())
    with pytest.raises(ValueError, match="resnet20"):
        create_backbone("resnet18x")
    with pytest.raises(ValueError, match="pretrained"):
        create_backbone("resnet20", pretrained=True)
    with pytest.raises(ValueError, match="in_channels"):
        create_backbone("resnet20", in_channels=0)


def test_timm_backbone_without_timm_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # makes `import timm` raise ImportError
    with pytest.raises(ValueError, match=r"pip install dmlkit\[timm\]"):
        create_backbone("timm:resnet50")


class _FakeTimmModel(nn.Module):
    def __init__(self, layout: str, in_chans: int) -> None:
        super().__init__()
        self.num_features = 6
        self.layout = layout
        self.num_prefix_tokens = 1
        self.conv = nn.Conv2d(in_chans, 6, kernel_size=4, stride=4)

    def forward_features(self, x):
        y = self.conv(x)  # (B, 6, 2, 2)
        if self.layout == "nhwc":
            return y.permute(0, 2, 3, 1)
        if self.layout == "tokens":
            tokens = y.flatten(2).transpose(1, 2)
            cls = torch.zeros(y.shape[0], 1, 6)
            return torch.cat([cls, tokens], dim=1)
        return y


@pytest.mark.parametrize("layout", ["nchw", "nhwc", "tokens"])
def test_timm_adapter_returns_nchw(monkeypatch, layout):
    calls = {}

    def create_model(name, pretrained, in_chans, num_classes, global_pool):
        calls.update(name=name, pretrained=pretrained, in_chans=in_chans, num_classes=num_classes, pool=global_pool)
        return _FakeTimmModel(layout, in_chans)

    monkeypatch.setitem(sys.modules, "timm", types.SimpleNamespace(create_model=create_model))
    backbone = create_backbone("timm:fake", in_channels=1)
    assert calls == dict(name="fake", pretrained=False, in_chans=1, num_classes=0, pool="")
    assert backbone.out_channels == 6
    x = torch.randn(2, 1, 8, 8)
    expected = backbone.model.conv(x)
    assert torch.allclose(backbone(x), expected)


def _embedder(normalize="l2", dim=16):
    backbone = create_backbone("resnet20", in_channels=1)
    return Embedder(backbone, GAP(backbone.out_channels), dim, normalize=normalize).eval()


def test_embedder_shapes_and_accessors():
    model = _embedder()
    x = torch.randn(3, 1, 16, 16)
    with torch.no_grad():
        out = model.encode(x)
        assert model.local_features(x).shape == (3, 64, 4, 4)
        assert model.pooled_features(x).shape == (3, 64)
        assert model(x).shape == (3, 16)
    assert torch.allclose(out.pooled, out.local.mean(dim=(2, 3)), atol=1e-6)
    assert torch.allclose(out.embedding, model(x), atol=1e-6)
    assert isinstance(model.head, nn.Linear) and model.head.in_features == 64


def test_embedder_l2_normalisation():
    with torch.no_grad():
        z = _embedder("l2")(torch.randn(4, 1, 16, 16))
    assert torch.allclose(z.norm(dim=1), torch.ones(4), atol=1e-5)


def test_embedder_none_is_head_output():
    model = _embedder("none")
    x = torch.randn(4, 1, 16, 16)
    with torch.no_grad():
        assert torch.allclose(model(x), model.head(model.pooled_features(x)))


def test_embedder_lipschitz_normalisation():
    model = _embedder("lipschitz")
    x = torch.randn(4, 1, 16, 16)
    with torch.no_grad():
        raw = model.head(model.pooled_features(x))
        z = model(x)
        norms = raw.norm(dim=1, keepdim=True)
        assert torch.allclose(z, torch.where(norms > 1, raw / norms, raw), atol=1e-6)
        assert (z.norm(dim=1) <= 1 + 1e-6).all()
        model.head.weight.mul_(1e-4)
        model.head.bias.zero_()
        small = model.head(model.pooled_features(x))
        assert (small.norm(dim=1) < 1).all()
        assert torch.allclose(model(x), small)  # inside the unit ball: unchanged


def test_lipschitz_normalize_is_1_lipschitz():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(200, 5, generator=g) * 3
    b = torch.randn(200, 5, generator=g) * 3
    lhs = (lipschitz_normalize(a) - lipschitz_normalize(b)).norm(dim=1)
    assert (lhs <= (a - b).norm(dim=1) + 1e-6).all()


def test_normalize_embeddings_unknown_mode():
    with pytest.raises(ValueError, match="lipschitz"):
        normalize_embeddings(torch.ones(1, 2), "l1")
    assert set(NORMALIZATIONS) == {"l2", "lipschitz", "none"}


def test_embedder_backward_reaches_all_parts():
    model = _embedder().train()
    model(torch.randn(4, 1, 16, 16)).sum().backward()
    assert model.head.weight.grad is not None and torch.isfinite(model.head.weight.grad).all()
    assert model.backbone.conv1.weight.grad is not None


def test_build_embedder_defaults():
    cfg = ModelConfig()
    assert (cfg.backbone, cfg.pooling, cfg.pooling_params, cfg.embedding_dim, cfg.normalize, cfg.pretrained) == (
        "resnet20",
        "gap",
        {},
        128,
        "l2",
        False,
    )
    model = build_embedder(cfg, in_channels=3).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 128)


def test_build_embedder_with_pooling_params():
    model = build_embedder(ModelConfig(pooling="gem", pooling_params={"p": 4.0}, embedding_dim=8), in_channels=1)
    assert model.pooling.p.item() == 4.0
    assert any(p is model.pooling.p for p in model.parameters())


@pytest.mark.parametrize(
    "cfg, match",
    [
        (ModelConfig(backbone="vgg"), "valid values are: resnet20"),
        (ModelConfig(pooling="avg"), "valid values are: .*gap, gap[+]gmp"),
        (ModelConfig(normalize="l1"), "valid values are: l2, lipschitz, none"),
        (ModelConfig(pooling="gem", pooling_params={"q": 2}), "valid parameters"),
        (ModelConfig(embedding_dim=0), "embedding_dim"),
    ],
)
def test_build_embedder_errors(cfg, match):
    with pytest.raises(ValueError, match=match):
        build_embedder(cfg, in_channels=3)


def test_embedder_rejects_bad_parts():
    backbone = create_backbone("resnet20")
    with pytest.raises(ValueError, match="out_channels"):
        Embedder(nn.Identity(), GAP(64), 8)
    with pytest.raises(ValueError, match="output_dim"):
        Embedder(backbone, nn.Identity(), 8)
    with pytest.raises(ValueError, match="normalize"):
        Embedder(backbone, create_pooling("gap", 64), 8, normalize="unit")


def test_local_dim_adds_a_per_pixel_projection_before_pooling():
    import torch

    from dmlkit.models import ModelConfig, build_embedder

    model = build_embedder(
        ModelConfig(
            backbone="resnet20", pooling="gsp", local_dim=12, embedding_dim=8, pooling_params={"num_prototypes": 4}
        ),
        in_channels=1,
    )
    out = model.encode(torch.randn(2, 1, 32, 32))
    assert out.local.shape[1] == 12 and model.pooling.prototypes.shape == (4, 12)
    conv = model.local_projection
    raw = model.backbone.eval()(torch.ones(1, 1, 32, 32))
    torch.testing.assert_close(conv(raw)[0, :, 0, 0], conv.weight[:, :, 0, 0] @ raw[0, :, 0, 0] + conv.bias)
    assert out.embedding.shape == (2, 8)
    with pytest.raises(ValueError, match="local_dim"):
        build_embedder(ModelConfig(local_dim=0), in_channels=1)
