"""Pooling registry: a name -> a module mapping a local feature map ``(B, C, h, w)`` to ``(B, C')``.

A pooling module is built as ``factory(dim=C, **params)``, where ``dim`` is the
channel count of the local features, and reports ``output_dim(input_dim) -> C'``
so the embedding head can be sized without running it.

To add a pooling, put it in a module of ``dmlkit.pooling`` (every module of the
package is imported when ``dmlkit.pooling`` is) and decorate its class::

    from dmlkit.pooling.registry import register_pooling

    @register_pooling("gsp")
    class GSP(nn.Module):
        def __init__(self, dim: int, num_prototypes: int = 64, ...): ...
        def output_dim(self, input_dim: int) -> int: ...
"""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

from dmlkit.registry import Registry

__all__ = ["create_pooling", "list_poolings", "pooling_factory", "register_pooling"]

_POOLINGS: Registry[nn.Module] = Registry("pooling")


def register_pooling(name: str) -> Callable:
    """Decorator registering a pooling class (or factory) taking ``dim`` and keyword parameters."""
    return _POOLINGS.register(name)


def create_pooling(name: str, dim: int, **kwargs: Any) -> nn.Module:
    """Build pooling ``name`` for local features with ``dim`` channels.

    Unknown names and unknown parameters raise ``ValueError`` listing the valid ones.
    """
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"pooling dim must be a positive integer (the local feature channels), got {dim!r}")
    return _POOLINGS.create(name, dim=dim, **kwargs)


def pooling_factory(name: str) -> Callable[..., nn.Module]:
    """The class (or factory) registered as ``name``, unbuilt: what a pooling declares (class attributes)
    can be asked of it before any model exists. Unknown names raise ``ValueError`` listing the valid ones."""
    return _POOLINGS.get(name)


def list_poolings() -> list[str]:
    """Names accepted by ``create_pooling``."""
    return _POOLINGS.names()
