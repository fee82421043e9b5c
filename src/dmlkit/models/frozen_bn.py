"""Frozen batch normalisation: BN layers that neither learn nor update their statistics.

DML fine-tunes ImageNet backbones with small, class-structured batches (e.g.
20 classes x 3 images); BN statistics estimated from such batches differ from
the test-time ones, so the papers' code bases commonly freeze BN. A
``FrozenBatchNorm2d`` computes ``y = (x - running_mean) / sqrt(running_var + eps)
* weight + bias`` with all four tensors as buffers (no gradients, no updates,
whatever ``train()`` says), and keeps ``BatchNorm2d``'s state-dict keys, so
pretrained checkpoints load unchanged. ``freeze_batchnorm(module)`` replaces
every ``BatchNorm2d`` of a module in place.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["FrozenBatchNorm2d", "freeze_batchnorm"]


class FrozenBatchNorm2d(nn.Module):
    """``BatchNorm2d`` in evaluation mode for good: fixed affine map from stored statistics."""

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.num_features, self.eps = num_features, eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    @classmethod
    def from_batchnorm(cls, bn: nn.BatchNorm2d) -> "FrozenBatchNorm2d":
        frozen = cls(bn.num_features, bn.eps)
        with torch.no_grad():
            if bn.affine:
                frozen.weight.copy_(bn.weight)
                frozen.bias.copy_(bn.bias)
            if bn.running_mean is not None and bn.running_var is not None:
                frozen.running_mean.copy_(bn.running_mean)
                frozen.running_var.copy_(bn.running_var)
        source = bn.running_mean if bn.running_mean is not None else bn.weight
        return frozen.to(source.device) if source is not None else frozen

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):  # type: ignore[no-untyped-def]
        state_dict.pop(prefix + "num_batches_tracked", None)  # a BatchNorm2d checkpoint has it
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.weight * torch.rsqrt(self.running_var + self.eps)
        shift = self.bias - self.running_mean * scale
        return x * scale.view(1, -1, 1, 1).to(x.dtype) + shift.view(1, -1, 1, 1).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"


def freeze_batchnorm(module: nn.Module) -> nn.Module:
    """Replace every ``BatchNorm2d`` inside ``module`` (or ``module`` itself) by a ``FrozenBatchNorm2d``."""
    if isinstance(module, nn.BatchNorm2d):
        return FrozenBatchNorm2d.from_batchnorm(module)
    for name, child in module.named_children():
        frozen = freeze_batchnorm(child)
        if frozen is not child:
            setattr(module, name, frozen)
    return module
