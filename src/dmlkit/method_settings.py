"""The settings of the training methods: method name -> its settings dataclass, the ``methods:`` config section.

``dmlkit.config`` builds ``methods.<name>`` from the dataclass registered under ``name``; a plug-in method
registers its settings in the line that registers the method, ``@register_method(name, settings=...)``
(``dmlkit.methods``). A settings dataclass has a property ``active`` (is the method on?) and checks its
values in ``__post_init__``.

The built-in methods' settings live beside the component they configure, outside ``dmlkit.methods``, and
are registered here, when this module is imported, in the order their sections are written in a resolved
config: reading a config then loads no method code, and the components need not know of methods. This
module imports only ``dmlkit.registry`` and those settings modules.
"""

from __future__ import annotations

from dmlkit.registry import Registry

__all__ = ["METHOD_SETTINGS", "register_method_settings"]


#: method name -> settings dataclass (with ``active``), in registration order: the built-ins first.
METHOD_SETTINGS: Registry[object] = Registry("method")


def register_method_settings(name: str):
    """Class decorator: ``cls`` is the settings of method ``name``, read from ``methods.<name>`` of a config."""

    def add(cls: type) -> type:
        if not isinstance(getattr(cls, "active", None), property):
            raise ValueError(f"the settings of method '{name}' need a property 'active' (is the method on?)")
        return METHOD_SETTINGS.register(name, cls)

    return add


def _register_builtin() -> None:
    from dmlkit.augment.sft_config import SFTConfig
    from dmlkit.engine.warmup_config import WarmupConfig
    from dmlkit.losses.zero_shot_config import ZeroShotConfig
    from dmlkit.proxies.config import CCPConfig

    for name, cls in (("sft", SFTConfig), ("ccp", CCPConfig), ("zero_shot", ZeroShotConfig), ("warmup", WarmupConfig)):
        register_method_settings(name)(cls)


_register_builtin()
