"""How the model executes, beside its numbers: memory layout (``train.channels_last``) and compilation
(``train.compile``).

Both change speed, not what is computed (up to float rounding): NHWC ("channels last") lets cuDNN's tensor-core
convolutions run without layout transposes, and ``torch.compile`` fuses the model's operations into generated
kernels. Measured on a GPU by ``scripts/device_check.sh`` (docs/device.md). The checks run before any run
folder is made.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["check_execution", "prepare_model", "to_channels_last"]


def check_execution(model: nn.Module, channels_last: bool, compile_model: bool) -> None:
    """``ValueError`` for ``train.channels_last`` on a model without 2-D convolutions (nothing to lay out)
    and for ``train.compile`` where this torch cannot compile."""
    if channels_last and not any(isinstance(m, nn.Conv2d) for m in model.modules()):
        raise ValueError(
            "train.channels_last: true needs a convolutional backbone (channels-last is a layout of 2-D "
            "convolutions' maps), but this model has no nn.Conv2d; set train.channels_last: false"
        )
    if compile_model and not hasattr(torch, "compile"):
        raise ValueError(
            f"train.compile: true needs torch >= 2.0 (this is {torch.__version__}); set train.compile: false"
        )


def prepare_model(model: nn.Module, channels_last: bool, compile_model: bool) -> nn.Module:
    """The model in NHWC layout (in place) and compiled, as asked; the same module when neither."""
    if channels_last:
        model.to(memory_format=torch.channels_last)
    return torch.compile(model) if compile_model else model


def to_channels_last(images: torch.Tensor) -> torch.Tensor:
    """A 4-D image batch in NHWC layout (other tensors unchanged)."""
    return images.contiguous(memory_format=torch.channels_last) if images.ndim == 4 else images
