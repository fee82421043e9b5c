"""A tiny name -> factory registry, one per kind of component.

Each component package keeps its own ``Registry`` and exposes
``create_x(name, **kwargs)`` and ``list_x()`` built on it, so a string in a
config selects a variant and an unknown name is an error listing the valid ones.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories (classes or functions) of one kind of component."""

    def __init__(self, kind: str, populate: Callable[[], None] | None = None, plugins: bool = False) -> None:
        """``populate``: run once, before the first lookup (not before a registration), to import the modules
        that register the built-in components; their package then need not import them all when it is
        imported (reading a config names a loss without loading every loss).

        ``plugins``: a name not registered, and a listing of the names, first import the modules that installed
        packages declare as ``dmlkit.plugins`` entry points (``dmlkit.plugins``, once per process), so that a name
        an installed package registers (the lab's datasets, say) resolves wherever it is looked up, not only
        after ``load_config``."""
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}
        self._populate = populate
        self._plugins = plugins

    def _import_plugins(self) -> None:
        if self._plugins:
            from dmlkit.plugins import import_entry_point_plugins

            import_entry_point_plugins()

    def _ensure_populated(self) -> None:
        populate, self._populate = self._populate, None  # cleared first: the modules it imports may look up
        if populate is not None:
            try:
                populate()
            except BaseException:
                self._populate = populate
                raise

    def register(self, name: str, factory: Callable[..., T] | None = None):
        """Register ``factory`` under ``name``; usable as a decorator."""

        def add(obj: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._factories[name] = obj
            return obj

        return add(factory) if factory is not None else add

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's or a notebook's own component); an unknown name is an error."""
        self.get(name)
        del self._factories[name]

    def names(self) -> list[str]:
        self._ensure_populated()
        self._import_plugins()
        return sorted(self._factories)

    def in_order(self) -> list[str]:
        """The names in the order they were registered: the order of a kind whose entries compose (methods)."""
        self._ensure_populated()
        return list(self._factories)

    def get(self, name: str) -> Callable[..., T]:
        self._ensure_populated()
        if name not in self._factories:
            self._import_plugins()
        if name not in self._factories:
            raise ValueError(f"unknown {self.kind} '{name}'; valid names are: {', '.join(self.names())}")
        return self._factories[name]

    def create(self, name: str, **kwargs: Any) -> T:
        """Build the component ``name``; unknown keyword arguments are reported with the valid ones."""
        factory = self.get(name)
        check_kwargs(factory, kwargs, f"{self.kind} '{name}'")
        return factory(**kwargs)

    def __contains__(self, name: str) -> bool:
        self._ensure_populated()
        if name not in self._factories:
            self._import_plugins()
        return name in self._factories


def check_kwargs(factory: Callable[..., Any], kwargs: dict[str, Any], what: str) -> None:
    """Raise ``ValueError`` naming the valid parameters if ``kwargs`` has one ``factory`` does not take."""
    params = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    valid = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise ValueError(f"{what} got unknown parameter(s) {unknown}; valid parameters are: {', '.join(valid)}")


def import_submodules(package: str, path: list[str]) -> None:
    """Import every public module of ``package`` so that their registration decorators run.

    A package's ``__init__`` calls ``import_submodules(__name__, __path__)``: a new
    component file then registers itself without editing any list.
    """
    for info in sorted(pkgutil.iter_modules(path), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
