"""Registries of metric losses and miners: a name -> a factory with documented defaults.

A loss is registered as a factory whose keyword defaults *are* the documented
hyper-parameters (``loss_defaults(name)`` reads them back), e.g.::

    @register_loss("proxy_anchor", builds=ProxyAnchorLoss)
    def proxy_anchor(num_classes: int, embedding_size: int, margin: float = 0.1, alpha: float = 32.0, **options):
        ...

* ``builds`` is the class the factory returns; the keyword parameters of its
  constructor (and of PML's base classes: ``distance``, ``reducer``,
  ``embedding_regularizer``, ...) are valid ``options`` besides the factory's own.
* A factory parameter ``num_classes`` / ``embedding_size`` without default makes
  the loss *need* it: ``create_loss`` passes it and raises ``ValueError`` when it
  is missing.  With a default (e.g. ``None``) it is passed when given.  Losses
  without such a parameter never receive it, so a trainer can always call
  ``create_loss(name, num_classes=..., embedding_size=..., **params)``.
* ``default_miner`` names the miner the loss is meant to be used with (or None).
* ``takes_miner=True``: the loss runs its miner itself (XBM mines each batch against its memory), so the
  config's ``loss.miner`` / ``loss.miner_params`` reach the factory as ``miner`` / ``miner_params`` and no
  miner is applied outside it.

A loss class may also be registered directly (``register_loss(name)(MyLoss)``).
Registered losses follow PML's signature ``loss(embeddings, labels,
indices_tuple=None, ref_emb=None, ref_labels=None)``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

from torch import nn

from dmlkit.registry import Registry, import_submodules
from dmlkit.validation import is_int

__all__ = [
    "ComponentEntry",
    "create_loss",
    "create_miner",
    "default_miner",
    "get_loss_entry",
    "get_miner_entry",
    "list_losses",
    "list_miners",
    "loss_defaults",
    "miner_defaults",
    "register_loss",
    "register_miner",
]

# Size arguments that create_loss supplies itself, and internal arguments of PML base classes.
_SIZE_ARGS = ("num_classes", "embedding_size")
_HIDDEN = {"self", "mat_based_loss", *_SIZE_ARGS}
_NAMED_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _named_params(fn: Callable[..., Any]) -> tuple[dict[str, inspect.Parameter], bool]:
    """Named parameters of ``fn`` and whether it also takes ``**kwargs``."""
    params = inspect.signature(fn).parameters
    named = {n: p for n, p in params.items() if p.kind in _NAMED_KINDS}
    return named, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _constructor_params(cls: type) -> list[str]:
    """Keyword parameters accepted by ``cls(...)``, following ``**kwargs`` up its base classes."""
    names: list[str] = []
    for klass in cls.__mro__:
        if klass in (nn.Module, object):
            break
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        named, has_var_kw = _named_params(init)
        names += [n for n in named if n not in _HIDDEN and n not in names]
        if not has_var_kw:
            break
    return names


@dataclass(frozen=True)
class ComponentEntry:
    """A registered loss or miner: its factory, the class it builds and its default miner."""

    name: str
    kind: str
    factory: Callable[..., nn.Module]
    builds: type | None = None
    default_miner: str | None = None
    takes_miner: bool = False

    def __call__(self, **kwargs: Any) -> nn.Module:
        return self.factory(**kwargs)

    @property
    def summary(self) -> str:
        """First line of the factory's docstring."""
        return (inspect.getdoc(self.factory) or "").split("\n", 1)[0]

    def _factory_params(self) -> dict[str, inspect.Parameter]:
        fn = self.factory.__init__ if inspect.isclass(self.factory) else self.factory
        return _named_params(fn)[0]

    def defaults(self) -> dict[str, Any]:
        """The documented default hyper-parameters (the factory's keyword defaults)."""
        return {
            n: p.default
            for n, p in self._factory_params().items()
            if n not in _HIDDEN and p.default is not inspect.Parameter.empty
        }

    def size_requirement(self, arg: str) -> str | None:
        """``"required"``, ``"optional"`` or None: whether the factory takes ``num_classes`` / ``embedding_size``."""
        param = self._factory_params().get(arg)
        if param is None:
            return None
        return "required" if param.default is inspect.Parameter.empty else "optional"

    def valid_params(self) -> list[str]:
        """Parameter names accepted besides ``num_classes`` and ``embedding_size``."""
        names = [n for n in self._factory_params() if n not in _HIDDEN]
        if self.builds is not None:
            names += [n for n in _constructor_params(self.builds) if n not in names]
        return names

    def check_params(self, params: dict[str, Any]) -> None:
        unknown = sorted(set(params) - set(self.valid_params()))
        if unknown:
            raise ValueError(
                f"{self.kind} '{self.name}' got unknown parameter(s) {unknown}; "
                f"valid parameters are: {', '.join(self.valid_params())}"
            )


def _import_builtin_components() -> None:
    """Import every module of ``dmlkit.losses``, so that their ``register_loss`` / ``register_miner`` run."""
    import dmlkit.losses

    import_submodules(dmlkit.losses.__name__, dmlkit.losses.__path__)


# Filled on the first lookup, not on ``import dmlkit.losses``: a config names a loss without loading them all.
_LOSSES: Registry[ComponentEntry] = Registry("loss", populate=_import_builtin_components)
_MINERS: Registry[ComponentEntry] = Registry("miner", populate=_import_builtin_components)


def _register(
    registry: Registry, kind: str, name: str, builds: type | None, default_miner: str | None, takes_miner: bool = False
) -> Callable:
    def add(factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        target = builds if builds is not None else (factory if inspect.isclass(factory) else None)
        registry.register(name, ComponentEntry(name, kind, factory, target, default_miner, takes_miner))
        return factory

    return add


def register_loss(
    name: str, *, builds: type | None = None, default_miner: str | None = None, takes_miner: bool = False
) -> Callable:
    """Decorator registering a loss factory (or class) under ``name``; see the module docstring."""
    return _register(_LOSSES, "loss", name, builds, default_miner, takes_miner)


def register_miner(name: str, *, builds: type | None = None) -> Callable:
    """Decorator registering a miner factory (or class) under ``name``."""
    return _register(_MINERS, "miner", name, builds, None)


def get_loss_entry(name: str) -> ComponentEntry:
    """The registry entry of loss ``name`` (``ValueError`` listing the valid names if unknown)."""
    return _LOSSES.get(name)


def get_miner_entry(name: str) -> ComponentEntry:
    """The registry entry of miner ``name`` (``ValueError`` listing the valid names if unknown)."""
    return _MINERS.get(name)


def _check_size(arg: str, value: Any) -> None:
    if value is not None and (not is_int(value) or value < 1):
        raise ValueError(f"{arg} must be a positive integer, got {value!r}")


def create_loss(
    name: str, num_classes: int | None = None, embedding_size: int | None = None, **params: Any
) -> nn.Module:
    """Build loss ``name`` with its documented defaults, overridden by ``params``.

    ``num_classes`` and ``embedding_size`` are passed only to losses that take
    them (proxy and classifier losses, XBM's memory); a loss that needs one
    raises ``ValueError`` when it is missing.  Unknown names and parameters
    raise ``ValueError`` listing the valid ones.
    """
    entry = get_loss_entry(name)
    entry.check_params(params)
    kwargs = dict(params)
    for arg, value in (("num_classes", num_classes), ("embedding_size", embedding_size)):
        _check_size(arg, value)
        need = entry.size_requirement(arg)
        if need == "required" and value is None:
            raise ValueError(f"loss '{name}' needs {arg}; pass create_loss('{name}', {arg}=...)")
        if need is not None and value is not None:
            kwargs[arg] = value
    return entry(**kwargs)


def create_miner(name: str, **params: Any) -> nn.Module:
    """Build miner ``name`` with its documented defaults, overridden by ``params``."""
    entry = get_miner_entry(name)
    entry.check_params(params)
    return entry(**params)


def list_losses() -> list[str]:
    """Names accepted by ``create_loss``."""
    return _LOSSES.names()


def list_miners() -> list[str]:
    """Names accepted by ``create_miner``."""
    return _MINERS.names()


def loss_defaults(name: str) -> dict[str, Any]:
    """Documented default hyper-parameters of loss ``name``."""
    return get_loss_entry(name).defaults()


def miner_defaults(name: str) -> dict[str, Any]:
    """Documented default hyper-parameters of miner ``name``."""
    return get_miner_entry(name).defaults()


def default_miner(loss_name: str) -> str | None:
    """The miner loss ``loss_name`` is meant to be used with, or None."""
    return get_loss_entry(loss_name).default_miner
