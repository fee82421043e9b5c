"""The registry of training methods: name -> ``Method`` subclass, in composition order, and its settings.

``@register_method(name, settings=...)`` registers a method; ``dmlkit.methods`` imports the built-in ones in
their composition order when it is imported, so a plug-in's method (whose module imports this one) composes
after them. Its ``settings`` go to ``dmlkit.method_settings``, which ``dmlkit.config`` reads.
"""

from __future__ import annotations

from dmlkit.method_settings import METHOD_SETTINGS, register_method_settings
from dmlkit.methods.base import Method
from dmlkit.registry import Registry

__all__ = ["METHODS", "register_method"]

#: name -> ``Method`` subclass, in composition order (``METHODS.in_order()``).
METHODS: Registry[Method] = Registry("method")


def register_method(name: str, settings: type | None = None):
    """Class decorator: register a ``Method`` subclass under ``name`` (after every method registered before it).

    ``settings``: its settings dataclass (with a property ``active``), read from ``methods.<name>`` of a config;
    the built-in methods' settings are registered beside their components (``dmlkit.method_settings``)."""

    def add(cls: type[Method]) -> type[Method]:
        if settings is not None and (name not in METHOD_SETTINGS or METHOD_SETTINGS.get(name) is not settings):
            register_method_settings(name)(settings)
        return METHODS.register(name, cls)

    return add
