"""Float32 islands inside autocast: the computations that half precision would break.

Under ``train.precision: bf16-mixed`` or ``16-mixed`` the model runs inside ``torch.autocast``. Most
losses and poolings are fine there (tests/test_half_precision_components.py measures each against float32).
A custom autograd function whose forward mixes its inputs with float32 buffers (FastAP's soft histogram,
GSP's transport and its closed-form backward) instead computes in float32: ``in_float32(fn, *tensors)``
calls ``fn`` with autocast off and its half-precision tensor arguments cast to float32, else calls it unchanged.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["HALF_DTYPES", "in_float32"]

HALF_DTYPES = (torch.float16, torch.bfloat16)


def _is_half(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in HALF_DTYPES


def in_float32(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, in float32 with autocast disabled when autocast is on or a tensor argument is half;
    the first argument must be a tensor (its device decides which autocast is checked)."""
    device = args[0].device.type
    if not torch.is_autocast_enabled(device) and not any(_is_half(a) for a in args):
        return fn(*args)
    with torch.autocast(device, enabled=False):
        return fn(*(a.float() if _is_half(a) else a for a in args))
