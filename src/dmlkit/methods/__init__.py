"""Training-side methods as plug-ins: one file per method, one ``Method`` each (see ``methods.base``).

``build_methods(cfg)`` returns the methods a config turns on, in the one order in which their
hooks compose: the order of registration. Adding a method: a ``Method`` subclass whose
``from_config(cfg)`` returns an instance (or None when the config leaves it off), decorated with
``@register_method("name", settings=NameConfig)``; ``settings`` (a dataclass with a property ``active``)
becomes the config section ``methods.<name>`` (``dmlkit.method_settings``). A plug-in's method composes
after the built-in ones, which this package imports in their order.

The built-in order, and why:

1. ``ccp``: wraps the metric loss (the pair loss against proxies) before anyone reads it, so
   SFT's generated term also scores against the proxies;
2. ``sft``: adds the ``generated`` term next to the metric term (renamed ``real``);
3. ``zero_shot``: scales every metric-loss term present (real and generated) by ``1 - lam``
   (Eq. 5.2.5); CCP's projection term is a regulariser and is not scaled;
4. ``warmup``: callbacks only;
5. ``gsp_diagnostics``: a callback that logs the entropy of GSP's pooling weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmlkit.methods.base import BuildContext, Method
from dmlkit.methods.registry import METHODS, register_method

if TYPE_CHECKING:
    from dmlkit.config import ExperimentConfig

__all__ = ["BuildContext", "METHODS", "Method", "build_methods", "list_methods", "register_method"]


def list_methods() -> list[str]:
    return METHODS.in_order()


def build_methods(cfg: "ExperimentConfig") -> list[Method]:
    """The methods ``cfg`` turns on, in composition order (cheap: no training state is built yet)."""
    return [m for m in (METHODS.get(name).from_config(cfg) for name in METHODS.in_order()) if m is not None]


# each module registers its method: this order of imports is the composition order
from dmlkit.methods import ccp, sft, zero_shot, warmup, gsp_diagnostics  # noqa: E402, F401, I001
