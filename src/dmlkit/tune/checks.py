"""What a study checks before its first trial: every key of the space is one the config accepts, at both ends
of its range (or every choice).

A key of a typed section (``train.lr``, ``methods.ccp.lam``) is checked by loading the config with the value;
a key inside a free mapping (``loss.params``, ``loss.miner_params``, ``model.pooling_params``) also by building
the component with it, which refuses a parameter the loss, miner or pooling does not take. A method's key
needs the method on in the config. All problems are reported at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from dmlkit.config import ExperimentConfig, load_config, to_dict
from dmlkit.tune.space import Parameter, SearchSpace, overrides_of

__all__ = ["check_space", "config_value"]

_MISSING = object()


def _build_components(cfg: ExperimentConfig, key: str) -> None:
    """Build what ``key`` parametrises when it sits in a free mapping (its names are checked only there)."""
    if key.startswith(("loss.params.", "loss.miner_params.")):
        from dmlkit.losses.config import build_loss

        build_loss(cfg.loss, num_classes=2, embedding_size=cfg.model.embedding_dim)
    elif key.startswith("model.pooling_params."):
        from dmlkit.pooling import create_pooling

        create_pooling(cfg.model.pooling, 16, **dict(cfg.model.pooling_params))


def _method_off(cfg: ExperimentConfig, key: str) -> str | None:
    parts = key.split(".")
    if parts[0] != "methods" or len(parts) < 3:
        return None
    if parts[1] in cfg.methods.enabled_sections():
        return None
    return f"'{key}' tunes methods.{parts[1]}, which this config leaves off; turn it on in the config or with --set"


def _refusal(path: str | Path, overrides: Sequence[str], values: dict[str, Any], key: str) -> str | None:
    try:
        cfg = load_config(path, [*overrides, *overrides_of(values)])
        _build_components(cfg, key)
    except (ValueError, TypeError) as err:
        return str(err).splitlines()[0]
    return None


def _problem(
    path: str | Path, overrides: Sequence[str], space: SearchSpace, parameter: Parameter, value: Any
) -> str | None:
    """Why ``value`` of ``parameter`` is refused, or None. A value refused only beside some values of the other
    keys (a pool that must hold the proxies, both tuned) is accepted: its trials that break the rule fail with
    the reason, and the study goes on."""
    others = [p for p in space.parameters if p is not parameter]
    contexts = [{}] + [{p.key: p.extremes()[end] for p in others} for end in (0, -1)] if others else [{}]
    first = None
    for context in contexts:
        refusal = _refusal(path, overrides, {**context, parameter.key: value}, parameter.key)
        if refusal is None:
            return None
        first = first or refusal
    return f"'{parameter.key}' = {value!r}: {first}"


def check_validation_classes(cfg: ExperimentConfig) -> None:
    """A search scores trials on validation classes: a config that validates on its test split is refused."""
    data = cfg.data
    if data.val_split is None and not data.folds and not data.val_fraction > 0:
        raise ValueError(
            "this config validates on its test classes (data.val_fraction 0, no data.val_split, no folds), and a "
            "search must never see them: set data.val_fraction (e.g. 0.2) or data.val_split, or use --protocol fair"
        )


def check_space(path: str | Path, overrides: Sequence[str], space: SearchSpace) -> ExperimentConfig:
    """The config of ``path`` with ``overrides``, after checking every key of ``space`` against it."""
    cfg = load_config(path, list(overrides))
    problems = []
    for parameter in space.parameters:
        off = _method_off(cfg, parameter.key)
        if off:
            problems.append(off)
            continue
        for value in parameter.extremes():
            problem = _problem(path, overrides, space, parameter, value)
            if problem:
                problems.append(problem)
                break
    if problems:
        raise ValueError("the search space does not fit the config:\n  " + "\n  ".join(problems))
    return cfg


def _component_default(cfg: ExperimentConfig, key: str) -> Any:
    """The value a component takes when the config leaves a key of its free mapping out (its documented default)."""
    name = key.rsplit(".", 1)[-1]
    if key.startswith("loss.params."):
        from dmlkit.losses.registry import loss_defaults

        return loss_defaults(cfg.loss.name).get(name, _MISSING)
    if key.startswith("loss.miner_params."):
        from dmlkit.losses.registry import default_miner, miner_defaults

        miner = default_miner(cfg.loss.name) if cfg.loss.miner == "default" else cfg.loss.miner
        return miner_defaults(miner).get(name, _MISSING) if miner else _MISSING
    return _MISSING


def config_value(cfg: ExperimentConfig, key: str) -> Any:
    """The value ``cfg`` trains with at dotted ``key`` (a component's default where the config leaves it out);
    ``None`` where there is none to tell (e.g. a pooling parameter left at the layer's default)."""
    node: Any = to_dict(cfg)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            value = _component_default(cfg, key)
            return None if value is _MISSING else value
        node = node[part]
    if node is None and key == "train.loss_lr":
        return cfg.train.lr  # a null loss_lr trains the loss's parameters at train.lr
    return node
