"""``train.channels_last`` and ``train.compile`` (engine/execution.py): they change how the model runs, not
what it computes, and a run with them writes the same checkpoint layout; bad combinations are errors first."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from dmlkit.assemble import build_trainer
from dmlkit.config import load_config
from dmlkit.engine.execution import check_execution, prepare_model, to_channels_last
from dmlkit.models import create_backbone

SHORT = [
    "data.max_classes=20",
    "train.max_steps=2",
    "train.val_every=2",
    "plots=false",
    "eval.clustering=false",
    "train.threads=1",
]


def test_channels_last_computes_the_same_features():
    torch.manual_seed(0)
    model = create_backbone("resnet20", in_channels=3).eval()
    nhwc = prepare_model(copy.deepcopy(model), channels_last=True, compile_model=False)
    x = torch.randn(4, 3, 32, 32)
    assert nhwc.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        torch.testing.assert_close(nhwc(to_channels_last(x)), model(x), rtol=1e-4, atol=1e-5)


def test_channels_last_without_a_convolution_is_an_error():
    with pytest.raises(ValueError, match="train.channels_last: false"):
        check_execution(nn.Sequential(nn.Flatten(), nn.Linear(12, 4)), channels_last=True, compile_model=False)
    check_execution(nn.Sequential(nn.Flatten(), nn.Linear(12, 4)), channels_last=False, compile_model=True)


def test_a_compiled_run_compiles_the_model_and_saves_plain_checkpoint_keys(tmp_path, monkeypatch):
    compiled = []
    real = torch.compile

    def eager_compile(model, **kwargs):  # the real wrapper, without inductor's minutes of code generation
        compiled.append(model)
        return real(model, backend="eager")

    monkeypatch.setattr(torch, "compile", eager_compile)
    summary = build_trainer(
        load_config("configs/quickstart.yaml", [*SHORT, "train.compile=true"]), tmp_path / "c", quiet=True
    ).fit()
    plain = build_trainer(load_config("configs/quickstart.yaml", SHORT), tmp_path / "p", quiet=True).fit()
    assert compiled and all(m is compiled[0] for m in compiled)  # ours; Fabric compiles it again after setup
    keys = set(torch.load(tmp_path / "c" / "best.pt", weights_only=False)["model"])
    assert keys == set(torch.load(tmp_path / "p" / "best.pt", weights_only=False)["model"])
    assert summary["test"] == pytest.approx(plain["test"], abs=1e-6)  # eager compile computes the same
