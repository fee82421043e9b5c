"""A search space: the config keys a study tunes, each with its range, as data.

A space is a mapping from a dotted config key (the same keys ``--set`` takes) to its range::

    loss.params.margin: {type: float, low: -0.2, high: 2.0}
    loss.params.alpha: {type: float, low: 0.01, high: 100, log: true}
    fastap.num_bins -> loss.params.num_bins: {type: int, low: 2, high: 250}
    model.pooling: {type: categorical, choices: [gap, gmp]}

``type`` is ``float``, ``int`` or ``categorical``; ``log: true`` samples on a log scale (``low > 0``);
``step`` quantises a float or int range. A trial's values reach the run as ``--set`` overrides, so a key
the config does not accept is refused by the config loader before any trial trains
(``dmlkit.tune.checks``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from dmlkit.validation import is_int, is_real

__all__ = ["Parameter", "SearchSpace", "read_space_file"]

KINDS = ("float", "int", "categorical")
_FIELDS = {"type", "low", "high", "log", "step", "choices", "why"}


@dataclass(frozen=True)
class Parameter:
    """One tuned config key and its range (``why``: where the range comes from, shown by ``--list-spaces``)."""

    key: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()
    why: str = ""

    def __post_init__(self) -> None:
        where = f"search space key '{self.key}'"
        if self.kind not in KINDS:
            raise ValueError(f"{where}: type must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "categorical":
            if not self.choices or len(set(map(repr, self.choices))) != len(self.choices):
                raise ValueError(f"{where}: a categorical range needs a non-empty list of distinct choices")
            return
        if not (is_real(self.low) and is_real(self.high)) or not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError(
                f"{where}: a {self.kind} range needs finite numbers low and high, got {self.low!r}, {self.high!r}"
            )
        if self.kind == "int" and not (is_int(self.low) and is_int(self.high)):
            raise ValueError(f"{where}: an int range needs integer low and high, got {self.low!r}, {self.high!r}")
        if self.low > self.high:
            raise ValueError(f"{where}: low ({self.low}) is above high ({self.high}); swap them")
        if self.log and self.low <= 0:
            raise ValueError(f"{where}: a log range needs low > 0, got {self.low}; drop log or raise low")
        if self.step is not None and (not is_real(self.step) or self.step <= 0 or (self.log and self.kind == "float")):
            raise ValueError(f"{where}: step must be a positive number and cannot be combined with a float log range")

    def distribution(self) -> Any:
        """The Optuna distribution of this range."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.kind == "categorical":
            return CategoricalDistribution(list(self.choices))
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return FloatDistribution(float(self.low), float(self.high), log=self.log, step=self.step)

    def contains(self, value: Any) -> bool:
        """Whether ``value`` lies in the range (a config's own value outside it still runs as trial 0)."""
        if self.kind == "categorical":
            return value in self.choices
        return is_real(value) and self.low <= value <= self.high

    def extremes(self) -> list[Any]:
        """The values a range check builds the run with: the ends, or every choice."""
        return list(self.choices) if self.kind == "categorical" else [self.low, self.high]

    def describe(self) -> str:
        if self.kind == "categorical":
            text = f"one of {', '.join(map(str, self.choices))}"
        else:
            text = (
                f"{self.kind} [{self.low:g}, {self.high:g}]"
                + (" log" if self.log else "")
                + (f" step {self.step:g}" if self.step else "")
            )
        return text + (f"  ({self.why})" if self.why else "")


def _parameter(key: str, spec: Any, source: str) -> Parameter:
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"{source}: the range of '{key}' must be a mapping like {{type: float, low: 0.01, high: 1}}, got {spec!r}"
        )
    unknown = sorted(set(spec) - _FIELDS)
    if unknown:
        raise ValueError(
            f"{source}: range of '{key}' has unknown field(s) {unknown}; valid fields: {', '.join(sorted(_FIELDS))}"
        )
    return Parameter(
        key=key,
        kind=spec.get("type", "float"),
        low=spec.get("low"),
        high=spec.get("high"),
        log=bool(spec.get("log", False)),
        step=spec.get("step"),
        choices=tuple(spec.get("choices", ())),
        why=str(spec.get("why", "")),
    )


class SearchSpace:
    """An ordered set of ``Parameter``s; several spaces merge (a baseline's loss space plus a method's)."""

    def __init__(self, parameters: list[Parameter], name: str = "space") -> None:
        keys = [p.key for p in parameters]
        if not parameters:
            raise ValueError(f"search space '{name}' is empty; give at least one key and its range")
        if len(set(keys)) != len(keys):
            raise ValueError(
                f"search space '{name}' names a key twice: {sorted(k for k in keys if keys.count(k) > 1)[0]}"
            )
        self.parameters = list(parameters)
        self.name = name

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], name: str = "space") -> "SearchSpace":
        if not isinstance(values, Mapping):
            raise ValueError(f"search space '{name}' must be a mapping of config keys to ranges")
        return cls([_parameter(str(key), spec, f"search space '{name}'") for key, spec in values.items()], name)

    def merged(self, other: "SearchSpace") -> "SearchSpace":
        return SearchSpace([*self.parameters, *other.parameters], f"{self.name}+{other.name}")

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.parameters]

    def distributions(self) -> dict[str, Any]:
        return {p.key: p.distribution() for p in self.parameters}

    def suggest(self, trial: Any) -> dict[str, Any]:
        """The trial's value of every key, drawn by the study's sampler (or fixed by an enqueued trial)."""
        values = {}
        for p in self.parameters:
            if p.kind == "categorical":
                values[p.key] = trial.suggest_categorical(p.key, list(p.choices))
            elif p.kind == "int":
                values[p.key] = trial.suggest_int(p.key, int(p.low), int(p.high), log=p.log, step=int(p.step or 1))
            else:
                values[p.key] = trial.suggest_float(p.key, float(p.low), float(p.high), log=p.log, step=p.step)
        return values

    def to_mapping(self) -> dict[str, dict[str, Any]]:
        """The space as the YAML mapping it reads (stored in the study folder to recognise the study)."""
        out: dict[str, dict[str, Any]] = {}
        for p in self.parameters:
            spec: dict[str, Any] = {"type": p.kind}
            if p.kind == "categorical":
                spec["choices"] = list(p.choices)
            else:
                spec.update(low=p.low, high=p.high)
                if p.log:
                    spec["log"] = True
                if p.step is not None:
                    spec["step"] = p.step
            out[p.key] = spec
        return out


def overrides_of(values: Mapping[str, Any]) -> list[str]:
    """``--set`` overrides of a trial's values (YAML-dumped, so strings, lists and floats load back exactly)."""
    return [
        f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"
        for key, value in values.items()
    ]


def read_space_file(path: str | Path) -> SearchSpace:
    """A user's space: a YAML file mapping config keys to ranges."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"search space file '{path}' does not exist; pass a YAML file or a name of dmlkit tune --list-spaces"
        )
    values = yaml.safe_load(path.read_text()) or {}
    return SearchSpace.from_mapping(values, name=path.stem)
