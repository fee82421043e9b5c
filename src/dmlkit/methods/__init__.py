"""Training-side methods as plug-ins: one file per method, one ``Method`` each (see ``methods.base``).

``build_methods(cfg)`` returns the methods a config turns on, in the one order in which their
hooks compose. Adding a method: write ``methods/<name>.py`` with a ``Method`` subclass whose
``from_config(cfg)`` returns an instance (or None when the config leaves it off), and add one
line to ``METHODS``.

The order, and why:

1. ``ccp``: wraps the metric loss (the pair loss against proxies) before anyone reads it, so
   SFT's generated term also scores against the proxies;
2. ``sft``: adds the ``generated`` term next to the metric term (renamed ``real``);
3. ``zero_shot``: scales every metric-loss term present (real and generated) by ``1 - lam``
   (Eq. 5.2.5); CCP's projection term is a regulariser and is not scaled;
4. ``warmup``: callbacks only;
5. ``gsp_diagnostics``: a callback that logs the entropy of GSP's pooling weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from dmlkit.methods.base import BuildContext, Method
from dmlkit.methods.ccp import CCP
from dmlkit.methods.gsp_diagnostics import GSPDiagnostics
from dmlkit.methods.sft import SFT
from dmlkit.methods.warmup import Warmup
from dmlkit.methods.zero_shot import ZeroShot

if TYPE_CHECKING:
    from dmlkit.config import ExperimentConfig

__all__ = ["BuildContext", "METHODS", "Method", "build_methods", "list_methods"]

#: name -> ``from_config(cfg) -> Method | None``, in composition order.
METHODS: dict[str, Callable[["ExperimentConfig"], Method | None]] = {
    "ccp": CCP.from_config,
    "sft": SFT.from_config,
    "zero_shot": ZeroShot.from_config,
    "warmup": Warmup.from_config,
    "gsp_diagnostics": GSPDiagnostics.from_config,
}


def list_methods() -> list[str]:
    return list(METHODS)


def build_methods(cfg: "ExperimentConfig") -> list[Method]:
    """The methods ``cfg`` turns on, in composition order (cheap: no training state is built yet)."""
    return [m for m in (make(cfg) for make in METHODS.values()) if m is not None]
