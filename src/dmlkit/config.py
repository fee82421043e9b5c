"""Typed experiment configs: YAML files plus dotted ``--set`` overrides.

Each component owns its config dataclass (``data.config.DataConfig``,
``models.config.ModelConfig``, ``losses.config.LossConfig``, ``engine.config.TrainConfig``/``EvalConfig``,
and the training methods' sections under ``methods:``, composed by ``MethodsConfig``); this module only
composes them into ``ExperimentConfig`` and converts between dataclasses and plain dicts. It imports config
modules only, never method, loop or loss code (``tests/test_architecture.py`` checks what it loads).
An unknown key or a value of the wrong type is a ``ValueError`` that names the
key path and lists the valid keys. A stored run record (``load_config(..., stored=True)``) may still give the
methods' old keys (``augment:``, ``ccp:``, ...), read as their new ones until dmlkit 0.3
(``dmlkit.config_migration``); in a user's own YAML or ``--set`` an old key is an unknown key whose error names
the new one.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from dmlkit.config_migration import migrate_values, old_key_hint
from dmlkit.data.config import DataConfig
from dmlkit.engine.config import EvalConfig, TrainConfig
from dmlkit.losses.config import LossConfig
from dmlkit.method_settings import METHOD_SETTINGS
from dmlkit.models.config import ModelConfig


class MethodsConfig:
    """The ``methods:`` section: one sub-section per registered method with settings; one that is not
    ``active`` is off.

    Its sub-sections are the settings dataclasses of ``dmlkit.method_settings.METHOD_SETTINGS`` (a plug-in's
    included, once its module is imported), each built and type-checked from ``methods.<name>`` like any
    section; a name not registered is an error listing the registered ones. Each says whether its method is
    on with one derived property, ``active``: the method's ``from_config`` builds it only then, and
    ``config_differences`` skips the options of a method both configs leave off.

    =============  ==========================================  ======================  ==============================
    section        dataclass                                   on when                 stored records' old key
    =============  ==========================================  ======================  ==============================
    ``sft``        ``augment.sft_config.SFTConfig``            ``name`` is set         ``augment:``
    ``ccp``        ``proxies.config.CCPConfig``                ``enabled``             ``ccp:``
    ``zero_shot``  ``losses.zero_shot_config.ZeroShotConfig``  ``weight > 0``          ``loss.zero_shot_weight/params``
    ``warmup``     ``engine.warmup_config.WarmupConfig``       ``steps > 0``           ``train.warmup_steps``
    =============  ==========================================  ======================  ==============================

    ``dmlkit.config_migration`` maps the keys in the last column, for stored run records only.
    """

    def __init__(self, **sections: Any) -> None:
        valid = METHOD_SETTINGS.in_order()
        unknown = sorted(set(sections) - set(valid))
        if unknown:
            raise ValueError(
                f"unknown config key(s) {unknown} in section 'methods'; valid keys are: {', '.join(valid)}"
            )
        for name, section in sections.items():
            if not isinstance(section, METHOD_SETTINGS.get(name)):
                raise ValueError(f"methods.{name} must be a {METHOD_SETTINGS.get(name).__name__}, got {section!r}")
        self.__dict__["_sections"] = {
            name: sections[name] if name in sections else METHOD_SETTINGS.get(name)() for name in valid
        }

    @classmethod
    def from_values(cls, values: Any, path: str = "methods") -> MethodsConfig:
        """Build the section from a mapping of method name -> its settings' values, checking every key and type."""
        if not isinstance(values, dict):
            raise ValueError(f"config section '{path}' must be a mapping, got {type(values).__name__}")
        valid = METHOD_SETTINGS.in_order()
        unknown = sorted(set(values) - set(valid))
        if unknown:
            raise ValueError(f"unknown config key(s) {unknown} in section '{path}'; valid keys are: {', '.join(valid)}")
        return cls(**{name: from_dict(METHOD_SETTINGS.get(name), v, _join(path, name)) for name, v in values.items()})

    def sections(self) -> dict[str, Any]:
        """Method name -> its settings, in registration order (a method registered after this was built included)."""
        for name in METHOD_SETTINGS.in_order():
            getattr(self, name)
        return dict(self.__dict__["_sections"])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        sections = self.__dict__.get("_sections", {})
        if name not in sections:
            if name not in METHOD_SETTINGS.in_order():
                raise AttributeError(
                    f"no method settings '{name}'; registered: {', '.join(METHOD_SETTINGS.in_order())}"
                )
            sections[name] = METHOD_SETTINGS.get(name)()  # registered after this section was built
        return sections[name]

    def __setattr__(self, name: str, value: Any) -> None:
        self.__init__(**{**self.sections(), name: value})

    def replace(self, **sections: Any) -> MethodsConfig:
        """A copy with the given sections replaced (``dataclasses.replace`` for this section)."""
        return MethodsConfig(**{**self.sections(), **sections})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MethodsConfig) and self.sections() == other.sections()

    def __repr__(self) -> str:
        return f"MethodsConfig({', '.join(f'{k}={v!r}' for k, v in self.sections().items())})"

    def enabled_sections(self) -> list[str]:
        """The names of the sections whose method is on, in registration order."""
        return [name for name, section in self.sections().items() if section.active]


@dataclass
class ExperimentConfig:
    """One experiment: what to train on, which model, which objective, how to train and evaluate."""

    name: str = "experiment"
    seed: int = 0
    output_dir: str = "runs"
    imports: list[str] = field(default_factory=list)  # your modules that register components (dmlkit/plugins.py)
    plots: bool = True
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    methods: MethodsConfig = field(default_factory=MethodsConfig)  # one section per registered method with settings
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # published results of the paper row this config reproduces (configs/paper/); informative only
    expected: dict[str, Any] = field(default_factory=dict)


def to_dict(cfg: Any) -> Any:
    """A plain, YAML-serialisable dict of a (nested) config dataclass."""
    if isinstance(cfg, MethodsConfig):
        return {name: to_dict(section) for name, section in cfg.sections().items()}
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, (list, tuple)):
        return type(cfg)(to_dict(v) for v in cfg)
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    return copy.deepcopy(cfg)


def from_dict(cls: type, values: dict[str, Any], path: str = "") -> Any:
    """Build dataclass ``cls`` from ``values``, checking every key and type."""
    if not isinstance(values, dict):
        raise ValueError(f"config section '{path or '<root>'}' must be a mapping, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        where = f" in section '{path}'" if path else ""
        hints = "".join(old_key_hint([*(path.split(".") if path else []), key]) for key in unknown)
        raise ValueError(f"unknown config key(s) {unknown}{where}{hints}; valid keys are: {', '.join(valid)}")
    kwargs = {name: _convert(hints[name], value, _join(path, name)) for name, value in values.items()}
    return cls(**kwargs)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _convert(tp: Any, value: Any, path: str) -> Any:
    """Check ``value`` against type ``tp`` (converting where lossless), or raise ``ValueError``."""
    origin = typing.get_origin(tp)
    if tp is MethodsConfig:
        return MethodsConfig.from_values(value, path)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, path)
            except ValueError as err:
                errors.append(str(err))
        raise ValueError(f"config key '{path}': {value!r} matches none of {_type_name(tp)}")
    if tp is Any:
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"config key '{path}' expects a list ({_type_name(tp)}), got {value!r}")
        (item_type, *_rest) = typing.get_args(tp) or (Any,)
        items = [_convert(item_type, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return list(items) if origin is list else tuple(items)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ValueError(f"config key '{path}' expects a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-4" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        return value
    raise ValueError(f"config key '{path}' expects {_type_name(tp)}, got {value!r} ({type(value).__name__})")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``"a.b.c=value"`` into its key path and its YAML-parsed value."""
    if "=" not in text:
        raise ValueError(f"override '{text}' must look like key.path=value, e.g. train.lr=0.001")
    key, raw = text.split("=", 1)
    keys = key.strip().split(".")
    if not all(keys):
        raise ValueError(f"override '{text}' has an empty key part; write it as key.path=value")
    return keys, yaml.safe_load(raw) if raw.strip() else ""


def apply_overrides(values: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``values`` with each dotted override written in."""
    result = _deep_copy(values)
    for text in overrides:
        keys, value = parse_override(text)
        node = result
        for key in keys[:-1]:
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise ValueError(f"override '{text}': '{key}' is a value, not a section")
            node = child
        node[keys[-1]] = value
    return result


def _deep_copy(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in values.items()}


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge ``update`` into a copy of ``base``; params dicts of components are replaced key by key."""
    result = _deep_copy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


def read_config_file(path: str | Path, _seen: tuple[Path, ...] = (), stored: bool = False) -> dict[str, Any]:
    """The values of a config YAML, with its ``base:`` chain merged in.

    ``base: other.yaml`` (a path relative to the file) loads that config first and
    merges this file's values over it, so a variant states only what differs.
    ``base: [a.yaml, b.yaml]`` merges the bases in order (b's values over a's), then the file's: a method's
    variant on another regime is ``base: [../testbed/testbed_sft.yaml, font_testbed.yaml]``.
    ``stored``: the file is a run record dmlkit wrote (a run folder's ``config.yaml``), whose old method keys
    are migrated (``dmlkit.config_migration``); a user's own file is not.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file '{path}' does not exist; pass a YAML file such as configs/quickstart.yaml")
    with open(path) as fh:
        values = yaml.safe_load(fh) or {}
    if not isinstance(values, dict):
        raise ValueError(f"config file '{path}' must hold a mapping of sections at its top level")
    if stored:
        values = migrate_values(values, f"in {path}")
    merged: dict[str, Any] = {}
    for base_path in _base_paths(path, values.pop("base", None), _seen):
        merged = merge(merged, read_config_file(base_path, (*_seen, path.resolve())))
    return merge(merged, values)


def _base_paths(path: Path, base: Any, seen: tuple[Path, ...]) -> list[Path]:
    """The resolved files of ``path``'s ``base:`` value (none, a path, or a list of paths), cycles refused."""
    if base is None:
        return []
    bases = base if isinstance(base, list) else [base]
    if not bases or not all(isinstance(b, str) for b in bases):
        raise ValueError(
            f"'base' in '{path}' must be a path to another config YAML or a non-empty list of such paths, got {base!r}"
        )
    resolved = [(path.parent / b).resolve() for b in bases]
    for base_path in resolved:
        if base_path in seen or base_path == path.resolve():
            raise ValueError(f"config '{path}' has a cycle of 'base' files through '{base_path}'")
    return resolved


def load_config(
    path: str | Path | None = None, overrides: list[str] = (), imports: list[str] = (), stored: bool = False
) -> ExperimentConfig:
    """Read an experiment YAML (or the defaults when ``path`` is None) and apply ``overrides``.

    ``stored``: ``path`` is a run folder's saved ``config.yaml`` (``read_config_file``), read when the run is
    resumed, evaluated or re-run.

    ``imports``: more plug-in modules (``dmlkit train --import``), added to the config's ``imports`` and imported
    with them, before any value is checked: an override may then set a plug-in method's ``methods.<name>``."""
    from dmlkit.plugins import import_entry_point_plugins, import_plugins, normalize_imports

    import_entry_point_plugins()
    values = apply_overrides(read_config_file(path, stored=stored) if path is not None else {}, list(overrides))
    if imports:
        own = values.get("imports")
        values["imports"] = (
            [*(own or []), *imports] if own is None or isinstance(own, list) else own
        )  # own: refused below
    if "imports" in values:  # before any name is resolved: the registries then know the user's components
        values["imports"] = normalize_imports(values["imports"], Path(path).parent if path is not None else None)
        import_plugins(values["imports"])
    return from_dict(ExperimentConfig, values)


def _flatten(values: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(values, dict):
        return {prefix: values}
    out: dict[str, Any] = {}
    for k, v in values.items():
        out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def config_differences(a: ExperimentConfig, b: ExperimentConfig) -> list[str]:
    """The dotted keys where ``a`` and ``b`` would train differently, sorted.

    The options of a method that both leave off (a section of ``methods:`` that is not ``active`` in
    either) are not compared: a run without SFT is the same run whatever SFT's default centre step is.
    Load a stored config with ``load_config(..., stored=True)`` first, so that a field added since takes its default.
    """
    left, right = to_dict(a), to_dict(b)
    on = set(a.methods.enabled_sections()) | set(b.methods.enabled_sections())
    for section in left["methods"].keys() - on:
        left["methods"].pop(section), right["methods"].pop(section)
    old, new = _flatten(left), _flatten(right)
    missing = object()
    return sorted(k for k in old.keys() | new.keys() if old.get(k, missing) != new.get(k, missing))


def dump_config(cfg: ExperimentConfig) -> str:
    """The resolved config as YAML text (loads back to an equal config)."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
