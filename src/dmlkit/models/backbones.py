"""Backbone registry: a name -> a network that returns a local feature map.

Every backbone maps ``(B, in_channels, H, W)`` to a local feature map
``(B, C, h, w)`` -- no global pooling, no classifier -- and exposes
``out_channels = C``, so any pooling (GAP, GMP, GeM, GSP, ...) and any head can
follow it.

Names:

* ``resnet20``, ``resnet32``, ``resnet44``, ``resnet56``: CIFAR ResNets of
  He et al. (2016) Sec. 4.2 (``dmlkit.models.resnet_cifar``), option-A shortcuts.
  dmlkit ships no weights for them, so ``pretrained=True`` is an error.
* ``timm:<model_name>``: any timm model (e.g. ``timm:resnet50``), built with
  ``timm.create_model(model_name, pretrained=..., in_chans=..., num_classes=0,
  global_pool="")`` and run through its ``forward_features``.  timm is an
  optional extra: ``pip install dmlkit[timm]``. The papers' networks:
  ``timm:resnet50`` (ResNet-50), ``timm:inception_v3`` (timm has no
  BN-Inception; Inception-v3 is its closest BN Inception), ``timm:vit_small_patch16_224`` (ViT-S).

Options of ``create_backbone`` for every backbone:

* ``pretrained=True``: the backbone's published weights (timm: from timm's
  cache, ``$HF_HOME`` / ``$TORCH_HOME``, fetched by timm when absent);
  ``pretrained="<path>"``: weights from a local file (a state dict; timm models
  load it through timm, which drops the classifier and adapts ``in_chans``);
* ``freeze_bn=True``: every ``BatchNorm2d`` becomes a ``FrozenBatchNorm2d``
  (``dmlkit.models.frozen_bn``), fixed statistics and affine parameters.

Add a backbone with the ``register_backbone`` decorator; the factory takes
``in_channels`` and ``pretrained``.
"""

from __future__ import annotations

import importlib
import math
import os
from pathlib import Path
from typing import Callable, Union

import torch
from torch import nn

from dmlkit.models.frozen_bn import freeze_batchnorm
from dmlkit.models.resnet_cifar import CifarResNet
from dmlkit.registry import Registry

__all__ = ["TIMM_PREFIX", "TimmBackbone", "create_backbone", "list_backbones", "register_backbone"]

TIMM_PREFIX = "timm:"

_BACKBONES: Registry[nn.Module] = Registry("backbone")

Pretrained = Union[bool, str, os.PathLike]  # False, True (published weights) or a weights file


def register_backbone(name: str) -> Callable:
    """Decorator registering ``factory(in_channels: int = 3, pretrained: bool = False) -> nn.Module``.

    The module must return ``(B, C, h, w)`` and have an ``out_channels`` attribute.
    """
    if name.startswith(TIMM_PREFIX):
        raise ValueError(f"backbone names starting with '{TIMM_PREFIX}' are reserved for timm models")
    return _BACKBONES.register(name)


def _cifar_factory(depth: int) -> Callable[..., nn.Module]:
    def factory(in_channels: int = 3, pretrained: bool = False) -> nn.Module:
        if pretrained:
            raise ValueError(
                f"dmlkit ships no pretrained weights for resnet{depth}; use pretrained=False and load "
                "your own checkpoint with model.load_state_dict, or pick a 'timm:<model_name>' backbone"
            )
        return CifarResNet(depth=depth, in_channels=in_channels, shortcut="A")

    factory.__name__ = f"resnet{depth}"
    factory.__doc__ = f"CIFAR ResNet-{depth} (He et al. 2016, Sec. 4.2), option-A shortcuts, 64 output channels."
    return factory


for _depth in (20, 32, 44, 56):
    register_backbone(f"resnet{_depth}")(_cifar_factory(_depth))


class TimmBackbone(nn.Module):
    """A timm model cut before its pooling and classifier: returns ``(B, C, h, w)``.

    ``forward_features`` of most CNNs already returns NCHW.  Two other layouts are
    converted: channels-last maps ``(B, h, w, C)`` (e.g. Swin) are permuted, and
    token sequences ``(B, N, C)`` of vision transformers are stripped of their
    prefix (class/register) tokens and reshaped to a square grid.
    """

    def __init__(self, model_name: str, in_channels: int = 3, pretrained: Pretrained = False) -> None:
        super().__init__()
        timm = _import_timm()
        self.model_name = model_name
        self.model = timm.create_model(
            model_name,
            pretrained=pretrained is True,
            in_chans=in_channels,
            num_classes=0,
            global_pool="",
        )
        if not isinstance(pretrained, bool):  # a local weights file: loaded here, strictly (timm's loader is not)
            _load_timm_weights(self.model, _weights_file(pretrained), model_name, in_channels)
        self.out_channels = int(self.model.num_features)
        self.num_prefix_tokens = int(getattr(self.model, "num_prefix_tokens", 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.model.forward_features(x)
        c = self.out_channels
        if feats.ndim == 4:
            if feats.shape[1] == c:
                return feats
            if feats.shape[-1] == c:
                return feats.permute(0, 3, 1, 2).contiguous()
        elif feats.ndim == 3 and feats.shape[-1] == c:
            tokens = feats[:, self.num_prefix_tokens :]
            side = math.isqrt(tokens.shape[1])
            if side * side == tokens.shape[1]:
                return tokens.transpose(1, 2).reshape(tokens.shape[0], c, side, side)
        raise ValueError(
            f"timm model '{self.model_name}' returned features of shape {tuple(feats.shape)}, which is not a "
            f"(B, {c}, h, w) map, a channels-last map, or a square grid of tokens"
        )


def _import_timm():
    try:
        return importlib.import_module("timm")
    except ImportError as err:
        raise ValueError(
            "'timm:<model_name>' backbones need the optional timm package: pip install dmlkit[timm]"
        ) from err


def _weights_file(path: str | os.PathLike) -> Path:
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(
            f"pretrained weights file '{file}' not found; give an existing file, or pretrained: true / false"
        )
    return file


def _load_weights(module: nn.Module, path: str | os.PathLike, name: str) -> None:
    """Load a state dict (optionally under a ``state_dict`` / ``model`` key) into ``module``, strictly."""
    file = _weights_file(path)
    state = _state_dict(file)
    try:
        module.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as err:
        raise ValueError(f"weights in '{file}' do not fit backbone '{name}': {err}") from err


def _load_timm_weights(model: nn.Module, file: Path, model_name: str, in_channels: int) -> None:
    """Load a timm state dict into ``model`` (built with ``num_classes=0``): the classifier's keys are dropped,
    the first convolution is adapted to ``in_channels`` (timm's rule), and any other missing or unexpected key,
    or another shape, is a ``ValueError`` that names them."""
    state = _state_dict(file)
    cfg = getattr(model, "pretrained_cfg", {}) or {}
    classifier = cfg.get("classifier") or ()
    heads = (classifier,) if isinstance(classifier, str) else tuple(classifier)
    state = {k: v for k, v in state.items() if not any(k == h or k.startswith(h + ".") for h in heads)}
    first = f"{cfg.get('first_conv')}.weight" if cfg.get("first_conv") else None
    if first in state and in_channels != state[first].shape[1]:
        from timm.models import adapt_input_conv

        state[first] = adapt_input_conv(in_channels, state[first])
    fix = (
        f"Save the state dict of timm.create_model('{model_name}') there, or name the model the file was "
        f"saved from (model.backbone: timm:<that model>)."
    )
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as err:  # other shapes
        raise ValueError(f"weights in '{file}' do not fit timm model '{model_name}': {str(err)[:800]}. {fix}") from err
    if missing or unexpected:
        raise ValueError(
            f"weights in '{file}' do not fit timm model '{model_name}' (only the classifier "
            f"{', '.join(heads) or '(none)'} is dropped): missing keys {missing[:10]}"
            f"{' ...' if len(missing) > 10 else ''}, unexpected keys {unexpected[:10]}"
            f"{' ...' if len(unexpected) > 10 else ''}. {fix}"
        )


def _state_dict(file: Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file (a state dict, optionally under a ``state_dict`` / ``model`` key)."""
    state = torch.load(file, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and not any(isinstance(v, torch.Tensor) for v in state.values()):
        state = state.get("state_dict", state.get("model", state))
    if not isinstance(state, dict):
        raise ValueError(f"'{file}' holds a {type(state).__name__}, not a state dict of tensors")
    return state


def create_backbone(
    name: str, in_channels: int = 3, pretrained: Pretrained = False, freeze_bn: bool = False
) -> nn.Module:
    """Build backbone ``name`` for images with ``in_channels`` channels.

    Returns a module mapping ``(B, in_channels, H, W)`` to ``(B, out_channels, h, w)``.
    ``pretrained`` is ``False``, ``True`` (published weights) or the path of a
    weights file; ``freeze_bn`` freezes every ``BatchNorm2d`` (module docstring).
    Raises ``ValueError`` for an unknown name (listing the valid ones), for
    ``pretrained=True`` where no weights exist, for a missing or unfitting
    weights file, and for ``timm:`` names when timm is not installed.
    """
    if not isinstance(in_channels, int) or in_channels < 1:
        raise ValueError(f"in_channels must be a positive integer (1 for grey, 3 for RGB), got {in_channels!r}")
    if name.startswith(TIMM_PREFIX):
        model_name = name[len(TIMM_PREFIX) :]
        if not model_name:
            raise ValueError(f"write timm backbones as '{TIMM_PREFIX}<model_name>', e.g. 'timm:resnet50'")
        module: nn.Module = TimmBackbone(model_name, in_channels=in_channels, pretrained=pretrained)
    elif name not in _BACKBONES:
        raise ValueError(
            f"unknown backbone '{name}'; valid names are: {', '.join(list_backbones())}, "
            f"or '{TIMM_PREFIX}<model_name>' for a timm model"
        )
    elif isinstance(pretrained, bool):
        module = _BACKBONES.create(name, in_channels=in_channels, pretrained=pretrained)
    else:
        module = _BACKBONES.create(name, in_channels=in_channels, pretrained=False)
        _load_weights(module, pretrained, name)
    return freeze_batchnorm(module) if freeze_bn else module


def list_backbones() -> list[str]:
    """Registered backbone names (``timm:<model_name>`` names are accepted besides these)."""
    return _BACKBONES.names()
