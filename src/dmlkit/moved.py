"""Names that moved out of the library into a plug-in package, still importable from their old place for a while.

A package that moves a public name lists it in a module ``__getattr__`` (``moved_name``), with the module that holds
it now; the package that holds it offers the object with ``provide_moved`` from its plug-in module. The library
thereby hands out the object without importing that package (``tests/test_architecture.py``): the first access
imports the installed plug-ins (``dmlkit.plugins``) and returns what they provided, with a ``FutureWarning`` that
names the new place. The old names go in dmlkit 0.2.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["moved_name", "provide_moved"]

_PROVIDED: dict[tuple[str, str], Any] = {}


def provide_moved(old_module: str, name: str, obj: Any) -> None:
    """Offer ``obj`` as the moved ``old_module.name`` (called by the plug-in of the package that holds it now)."""
    _PROVIDED[(old_module, name)] = obj


def moved_name(old_module: str, name: str, moved: dict[str, str]) -> Any:
    """``old_module.name`` from the package that holds it now (``moved[name]``), with a ``FutureWarning``;
    ``AttributeError`` for a name that never was there or whose new package is not installed."""
    if name not in moved:
        raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
    from dmlkit.plugins import import_entry_point_plugins

    import_entry_point_plugins()
    if (old_module, name) not in _PROVIDED:
        raise AttributeError(f"{old_module}.{name} moved to {moved[name]}.{name}, whose package is not installed")
    warnings.warn(
        f"{old_module}.{name} moved to {moved[name]}.{name}; import it from there ({old_module}.{name} goes "
        "in dmlkit 0.2)",
        FutureWarning,
        stacklevel=3,
    )
    return _PROVIDED[(old_module, name)]
