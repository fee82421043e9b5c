"""Optional dependencies: the extras of ``pip install 'dmlkit[...]'`` and the one error that names the missing one.

``pip install dmlkit`` installs what the components need in a user's own loop (torch, pytorch-metric-learning,
numpy, pillow, PyYAML): losses, pooling, augmentation, proxies, samplers, datasets, models and the retrieval
metrics of exact search. Everything else is an extra (``pyproject.toml``):

- ``train``: lightning, rich -- the training engine and the ``dmlkit train / evaluate / protocol`` tools;
- ``faiss``: faiss-cpu -- k-means of the clustering metrics (NMI, F1) and approximate evaluation at large N;
- ``search``: faiss-cpu, rich -- ``dmlkit embed``, ``index build``, ``search``;
- ``plots``: matplotlib -- plots, reports, galleries, and the glyph datasets (drawn from matplotlib's fonts);
- ``serve``, ``export``, ``timm``, ``tune``, ``tensorboard``; ``all``: every extra but ``timm``.

Code that needs one of these packages imports it through :func:`require` where it is used (inside the function,
or at the top of a module that is only imported where the package is needed), so that the components import
without it and a missing package ends in :class:`MissingExtra` naming the extra and the ``pip`` command.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from types import ModuleType

__all__ = ["MissingExtra", "installed", "missing_extras", "require", "require_all"]


class MissingExtra(ImportError, ValueError):
    """A package of an optional extra is not installed. An ``ImportError`` (what ``except ImportError`` expects)
    and a ``ValueError`` (what the command line reports as a one-line error with exit code 2)."""


def _pip(extras: Iterable[str]) -> str:
    return f"pip install 'dmlkit[{','.join(dict.fromkeys(extras))}]'"


def _missing_module(err: ImportError, module: str) -> bool:
    """``err`` says that ``module`` (or a package above it) is absent, not that something inside it failed."""
    name = err.name or ""
    return bool(name) and (module == name or module.startswith(name + ".") or name.startswith(module + "."))


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """``module`` imported, or :class:`MissingExtra`: "``purpose`` needs the '``extra``' extra: pip install ...".

    ``purpose`` names what the user asked for, e.g. ``"dmlkit train"`` or ``"the clustering metrics (NMI, F1)"``.
    An import error raised inside an installed package (a broken install) is passed on unchanged.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        if not _missing_module(err, module):
            raise
        raise MissingExtra(
            f"{purpose} needs the '{extra}' extra: {_pip([extra])} (missing: {err.name or module})", name=module
        ) from err


def installed(module: str) -> bool:
    """``module`` can be imported (found on the path, not imported; ``False`` when blocked or absent)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a blocked import (sys.modules[name] = None, an import hook), a bad parent
        return False


def missing_extras(needs: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The ``(module, extra, purpose)`` of ``needs`` whose module is not installed."""
    return [need for need in needs if not installed(need[0])]


def require_all(needs: Iterable[tuple[str, str, str]], purpose: str) -> None:
    """Check before a long job starts that every ``(module, extra, why)`` of ``needs`` is installed; one
    :class:`MissingExtra` lists all that are missing, with the one ``pip`` command that installs them."""
    missing = missing_extras(needs)
    if not missing:
        return
    extras = list(dict.fromkeys(extra for _, extra, _ in missing))
    what = "; ".join(f"{module} for {why}" for module, _, why in missing)
    label = f"the '{extras[0]}' extra" if len(extras) == 1 else "the extras " + ", ".join(f"'{e}'" for e in extras)
    raise MissingExtra(f"{purpose} needs {label}: {_pip(extras)} (missing: {what})", name=missing[0][0])
