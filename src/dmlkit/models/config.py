"""Typed config of the embedding model and the one place that builds it from names.

``ModelConfig`` is the ``model:`` section of an experiment YAML; ``build_embedder``
turns it into an ``Embedder`` (backbone by name, optional 1x1 local projection, pooling by
name with its parameters, linear head or none, normalisation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from dmlkit.seeding import derive_seed
from dmlkit.models.backbones import TIMM_PREFIX, create_backbone, list_backbones
from dmlkit.models.embedder import HEADS, NORMALIZATIONS, Embedder, local_projection_conv
from dmlkit.pooling import create_pooling, list_poolings
from dmlkit.validation import check_int

__all__ = ["ModelConfig", "build_embedder"]


@dataclass
class ModelConfig:
    """Which network embeds the images.

    Attributes:
        backbone: a name of ``list_backbones()`` or ``timm:<model_name>``.
        pooling: a name of ``list_poolings()``.
        pooling_params: keyword parameters of the pooling (e.g. ``{p: 3}`` for ``gem``).
        embedding_dim: size of the embedding (128 in the thesis' fair protocol, Sec. 3.3.2.1).
        normalize: ``l2``, ``lipschitz`` (thesis Sec. 3.2.4) or ``none``.
        pretrained: load pretrained backbone weights: ``true`` (published weights, timm backbones),
            or the path of a weights file (any backbone).
        freeze_bn: freeze every BatchNorm layer of the backbone (fixed statistics and affine parameters).
        local_dim: when set, a per-pixel 1x1 convolution maps the backbone's channels to ``local_dim``
            before pooling (the local embedding of the thesis' Sec. 5.2.4, used with GSP).
        head: ``linear`` (a linear layer after the pooling) or ``none``: the pooled vector, normalised,
            is the embedding (Sec. 5.2.4: backbone -> 1x1 conv to ``local_dim`` = ``embedding_dim`` ->
            pooling -> l2). With ``gap`` the two are the same model up to the head's bias.
    """

    backbone: str = "resnet20"
    pooling: str = "gap"
    pooling_params: dict[str, Any] = field(default_factory=dict)
    embedding_dim: int = 128
    normalize: str = "l2"
    pretrained: bool | str = False
    freeze_bn: bool = False
    local_dim: int | None = None
    head: str = "linear"


def build_embedder(cfg: ModelConfig, in_channels: int) -> Embedder:
    """Build the ``Embedder`` described by ``cfg`` for images with ``in_channels`` channels.

    Raises ``ValueError`` naming the valid values for an unknown backbone,
    pooling, pooling parameter or normalisation.
    """
    if cfg.normalize not in NORMALIZATIONS:
        raise ValueError(f"unknown model.normalize '{cfg.normalize}'; valid values are: {', '.join(NORMALIZATIONS)}")
    if cfg.pooling not in list_poolings():
        raise ValueError(f"unknown model.pooling '{cfg.pooling}'; valid values are: {', '.join(list_poolings())}")
    if not cfg.backbone.startswith(TIMM_PREFIX) and cfg.backbone not in list_backbones():
        raise ValueError(
            f"unknown model.backbone '{cfg.backbone}'; valid values are: {', '.join(list_backbones())}, "
            f"or '{TIMM_PREFIX}<model_name>' for a timm model"
        )
    if cfg.head not in HEADS:
        raise ValueError(f"unknown model.head '{cfg.head}'; valid values are: {', '.join(HEADS)}")
    check_int("model.embedding_dim", cfg.embedding_dim, 1)
    backbone = create_backbone(
        cfg.backbone, in_channels=in_channels, pretrained=cfg.pretrained, freeze_bn=cfg.freeze_bn
    )
    projection = None if cfg.local_dim is None else local_projection_conv(backbone.out_channels, cfg.local_dim)
    channels = backbone.out_channels if projection is None else cfg.local_dim
    pooling = _build_pooling(cfg, channels)
    return Embedder(
        backbone, pooling, cfg.embedding_dim, normalize=cfg.normalize, local_projection=projection, head=cfg.head
    )


_POOLING_STREAM = 0x504F4F4C  # "POOL": the pooling's own random stream, derived from the current seed


def _build_pooling(cfg: ModelConfig, channels: int) -> torch.nn.Module:
    """The pooling, with its random parameters drawn from a stream of their own.

    The stream is derived from the seed of the current (seeded) generator and the global state is restored after, so
    a pooling with random parameters (GSP's prototypes, NetVLAD's centres) does not shift what is drawn after it: the
    head and, in ``build_model``, the loss's proxies. A GAP model and a GSP model of one seed then start from the
    same head or proxies, and a paired comparison differs in the pooling only.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(torch.initial_seed(), _POOLING_STREAM))
        return create_pooling(cfg.pooling, channels, **dict(cfg.pooling_params))
