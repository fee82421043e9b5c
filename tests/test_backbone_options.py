"""Backbone options: weights from a file, frozen BatchNorm, timm plumbing (with a fake timm; no download)."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from torch import nn

from dmlkit.config import load_config
from dmlkit.models import ModelConfig, build_embedder, create_backbone
from dmlkit.models.frozen_bn import FrozenBatchNorm2d, freeze_batchnorm


def _trained_bn(c=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.weight.copy_(torch.rand(c, generator=g) + 0.5)
        bn.bias.copy_(torch.randn(c, generator=g))
        bn.running_mean.copy_(torch.randn(c, generator=g))
        bn.running_var.copy_(torch.rand(c, generator=g) + 0.1)
    return bn


def test_frozen_bn_equals_batchnorm_in_eval_mode_whatever_the_mode():
    bn = _trained_bn()
    frozen = FrozenBatchNorm2d.from_batchnorm(bn)
    x = torch.randn(4, 5, 3, 3, dtype=torch.float64)
    expected = bn.double().eval()(x)
    frozen.double().train()
    torch.testing.assert_close(frozen(x), expected)
    before = frozen.running_mean.clone()
    frozen(x * 10 + 3)
    assert torch.equal(frozen.running_mean, before) and list(frozen.parameters()) == []


def test_freeze_backbone_keeps_checkpoint_keys_and_gradients_to_the_rest():
    plain = create_backbone("resnet20")
    frozen = create_backbone("resnet20", freeze_bn=True)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in frozen.modules())
    keys = {k for k in plain.state_dict() if not k.endswith("num_batches_tracked")}
    assert set(frozen.state_dict()) == keys
    frozen.load_state_dict(plain.state_dict())  # a BatchNorm checkpoint loads into the frozen model
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(frozen.train()(x), plain.eval()(x))
    frozen(x).sum().backward()
    assert all(p.grad is not None for p in frozen.parameters())
    assert freeze_batchnorm(_trained_bn()).__class__ is FrozenBatchNorm2d


def test_weights_from_a_file(tmp_path):
    source = create_backbone("resnet20")
    torch.save(source.state_dict(), tmp_path / "w.pt")
    torch.save({"state_dict": source.state_dict()}, tmp_path / "ckpt.pt")
    for file in ("w.pt", "ckpt.pt"):
        loaded = create_backbone("resnet20", pretrained=str(tmp_path / file))
        for (k, a), b in zip(source.state_dict().items(), loaded.state_dict().values()):
            assert torch.equal(a, b), k
    with pytest.raises(ValueError, match="weights file '.*missing.pt' not found"):
        create_backbone("resnet20", pretrained=str(tmp_path / "missing.pt"))
    torch.save(create_backbone("resnet32").state_dict(), tmp_path / "other.pt")
    with pytest.raises(ValueError, match="do not fit backbone 'resnet20'"):
        create_backbone("resnet20", pretrained=tmp_path / "other.pt")


def test_model_config_passes_the_options(tmp_path):
    torch.save(create_backbone("resnet20", in_channels=1).state_dict(), tmp_path / "w.pt")
    cfg = ModelConfig(pretrained=str(tmp_path / "w.pt"), freeze_bn=True)
    model = build_embedder(cfg, in_channels=1)
    assert any(isinstance(m, FrozenBatchNorm2d) for m in model.modules())
    full = load_config(None, ["model.freeze_bn=true", f"model.pretrained={tmp_path / 'w.pt'}"])
    assert full.model.freeze_bn is True and full.model.pretrained == str(tmp_path / "w.pt")


class _FakeTimmNet(nn.Module):
    num_features = 4

    def __init__(self, in_chans):
        super().__init__()
        self.conv = nn.Conv2d(in_chans, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward_features(self, x):
        return self.bn(self.conv(x))


def _fake_timm(monkeypatch, calls):
    def create_model(name, pretrained, in_chans, num_classes, global_pool, **kwargs):
        calls.append(dict(name=name, pretrained=pretrained, in_chans=in_chans, **kwargs))
        return _FakeTimmNet(in_chans)

    monkeypatch.setitem(sys.modules, "timm", types.SimpleNamespace(create_model=create_model))


def test_a_timm_weights_file_is_loaded_strictly_into_a_randomly_built_model(tmp_path, monkeypatch):
    calls: list[dict] = []
    _fake_timm(monkeypatch, calls)
    saved = _FakeTimmNet(3).state_dict()
    torch.save(saved, tmp_path / "net.pth")
    backbone = create_backbone("timm:fake", pretrained=str(tmp_path / "net.pth"))
    create_backbone("timm:resnet50", pretrained=True)
    assert calls[0] == dict(name="fake", pretrained=False, in_chans=3)  # timm's own (non-strict) loader is not used
    assert calls[1] == dict(name="resnet50", pretrained=True, in_chans=3)
    loaded = backbone.model.state_dict()
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)
    torch.save({k: v for k, v in saved.items() if k != "conv.bias"}, tmp_path / "part.pth")
    with pytest.raises(ValueError, match=r"missing keys \['conv.bias'\]"):
        create_backbone("timm:fake", pretrained=str(tmp_path / "part.pth"))
    with pytest.raises(ValueError, match="not found"):
        create_backbone("timm:resnet50", pretrained=str(tmp_path / "nope.pth"))


def test_timm_frozen_bn_and_local_map(monkeypatch):
    _fake_timm(monkeypatch, [])
    backbone = create_backbone("timm:fake", freeze_bn=True).train()
    assert isinstance(backbone.model.bn, FrozenBatchNorm2d)
    assert backbone(torch.randn(2, 3, 5, 7)).shape == (2, 4, 5, 7)  # the local map, for any pooling (GSP)


def test_without_timm_the_message_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(ValueError, match=r"pip install dmlkit\[timm\]"):
        create_backbone("timm:vit_small_patch16_224", pretrained=True, freeze_bn=True)
