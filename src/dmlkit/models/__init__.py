"""Embedding models: backbones returning local feature maps, and the ``Embedder`` built on them."""

from __future__ import annotations

from dmlkit.models.backbones import TimmBackbone, create_backbone, list_backbones, register_backbone
from dmlkit.models.config import ModelConfig, build_embedder
from dmlkit.models.embedder import (
    NORMALIZATIONS,
    Embedder,
    EmbedderOutput,
    lipschitz_normalize,
    normalize_embeddings,
)
from dmlkit.models.resnet_cifar import CifarResNet, resnet20, resnet32, resnet44, resnet56

__all__ = [
    "NORMALIZATIONS",
    "CifarResNet",
    "Embedder",
    "EmbedderOutput",
    "ModelConfig",
    "TimmBackbone",
    "build_embedder",
    "create_backbone",
    "lipschitz_normalize",
    "list_backbones",
    "normalize_embeddings",
    "register_backbone",
    "resnet20",
    "resnet32",
    "resnet44",
    "resnet56",
]
