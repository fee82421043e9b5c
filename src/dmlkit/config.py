"""Typed experiment configs: YAML files plus dotted ``--set`` overrides.

Each component owns its config dataclass (``data.config.DataConfig``,
``models.config.ModelConfig``, ``losses.config.LossConfig``, ``engine.config.TrainConfig``/``EvalConfig``,
and the training methods' sections under ``methods:``, composed by ``MethodsConfig``); this module only
composes them into ``ExperimentConfig`` and converts between dataclasses and plain dicts. It imports config
modules only, never method, loop or loss code (``tests/test_architecture.py`` checks what it loads).
An unknown key or a value of the wrong type is a ``ValueError`` that names the
key path and lists the valid keys. The methods' old keys (``augment:``, ``ccp:``, ...) are read as their
new ones, with a ``FutureWarning`` (``dmlkit.config_migration``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from dmlkit.augment.sft_config import SFTConfig
from dmlkit.config_migration import migrate_overrides, migrate_values
from dmlkit.data.config import DataConfig
from dmlkit.engine.config import EvalConfig, TrainConfig
from dmlkit.engine.warmup_config import WarmupConfig
from dmlkit.losses.config import LossConfig
from dmlkit.losses.zero_shot_config import ZeroShotConfig
from dmlkit.models.config import ModelConfig
from dmlkit.proxies.config import CCPConfig


@dataclass
class MethodsConfig:
    """The ``methods:`` section: one sub-section per configurable training method; one whose section is not
    ``active`` is off.

    Each sub-section is a dataclass defined beside the component it configures, outside ``dmlkit.methods``
    (so reading a config loads no method code), and says whether its method is on with one derived property,
    ``active``: the method's ``from_config`` builds it only then, and ``config_differences`` skips the options
    of a method both configs leave off.

    =============  ==========================================  ======================  ==============================
    section        dataclass                                   on when                 also read from
    =============  ==========================================  ======================  ==============================
    ``sft``        ``augment.sft_config.SFTConfig``            ``name`` is set         ``augment:``
    ``ccp``        ``proxies.config.CCPConfig``                ``enabled``             ``ccp:``
    ``zero_shot``  ``losses.zero_shot_config.ZeroShotConfig``  ``weight > 0``          ``loss.zero_shot_weight/params``
    ``warmup``     ``engine.warmup_config.WarmupConfig``       ``steps > 0``           ``train.warmup_steps``
    =============  ==========================================  ======================  ==============================

    A method with settings adds its dataclass (with ``active``) as a field here; ``dmlkit.config_migration``
    maps the keys in the last column.
    """

    sft: SFTConfig = field(default_factory=SFTConfig)
    ccp: CCPConfig = field(default_factory=CCPConfig)
    zero_shot: ZeroShotConfig = field(default_factory=ZeroShotConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)

    def enabled_sections(self) -> list[str]:
        """The names of the sections whose method is on, in field order."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name).active]


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
    methods: MethodsConfig = field(default_factory=MethodsConfig)  # SFT, CCP, zero-shot loss, warm-up
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # published results of the paper row this config reproduces (configs/paper/); informative only
    expected: dict[str, Any] = field(default_factory=dict)


def to_dict(cfg: Any) -> dict[str, Any]:
    """A plain, YAML-serialisable dict of a (nested) config dataclass."""
    return dataclasses.asdict(cfg)


def from_dict(cls: type, values: dict[str, Any], path: str = "") -> Any:
    """Build dataclass ``cls`` from ``values``, checking every key and type."""
    if not isinstance(values, dict):
        raise ValueError(f"config section '{path or '<root>'}' must be a mapping, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        where = f" in section '{path}'" if path else ""
        raise ValueError(f"unknown config key(s) {unknown}{where}; valid keys are: {', '.join(valid)}")
    kwargs = {name: _convert(hints[name], value, _join(path, name)) for name, value in values.items()}
    return cls(**kwargs)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _convert(tp: Any, value: Any, path: str) -> Any:
    """Check ``value`` against type ``tp`` (converting where lossless), or raise ``ValueError``."""
    origin = typing.get_origin(tp)
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
    """Return a copy of ``values`` with each dotted override written in (an old method key as its new key)."""
    result = _deep_copy(values)
    parsed = [parse_override(text) for text in overrides]
    for text, keys, (_, value) in zip(overrides, migrate_overrides([k for k, _ in parsed], list(overrides)), parsed):
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


def read_config_file(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The values of a config YAML, with its ``base:`` chain merged in.

    ``base: other.yaml`` (a path relative to the file) loads that config first and
    merges this file's values over it, so a variant states only what differs.
    ``base: [a.yaml, b.yaml]`` merges the bases in order (b's values over a's), then the file's: a method's
    variant on another regime is ``base: [../testbed/testbed_sft.yaml, font_testbed.yaml]``.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file '{path}' does not exist; pass a YAML file such as configs/quickstart.yaml")
    with open(path) as fh:
        values = yaml.safe_load(fh) or {}
    if not isinstance(values, dict):
        raise ValueError(f"config file '{path}' must hold a mapping of sections at its top level")
    values = migrate_values(values, f"in {path}")  # each file of a base: chain on its own
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


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> ExperimentConfig:
    """Read an experiment YAML (or the defaults when ``path`` is None) and apply ``overrides``."""
    from dmlkit.plugins import import_entry_point_plugins, import_plugins, normalize_imports

    import_entry_point_plugins()
    values = apply_overrides(read_config_file(path) if path is not None else {}, list(overrides))
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
    Load a stored config with ``load_config`` first, so that a field added since takes its default.
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
