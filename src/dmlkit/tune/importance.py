"""How each searched key bears on a study's objective: fANOVA importances and Spearman rank correlations.

- ``key_importances``: Optuna's fANOVA (a random forest of the objective over the finished trials; each key's
  share of the explained variance, summing to 1) with a fixed forest seed, so the same trials give the same
  importances on every call. Needs two or more keys: with one key the share is 1 by
  definition.
- ``rank_correlations``: Spearman's rho between each numeric key and the objective over the finished trials
  (Pearson's correlation of their ranks, ties at their mean rank). Positive: larger values scored higher.
  Defined for a single key too, and gives the direction importances leave out; ``None`` where fewer than three
  trials finished or the key or the objective is constant over them.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["FOREST_SEED", "key_importances", "rank_correlations", "spearman"]

FOREST_SEED = 0


def key_importances(study: Any) -> dict[str, float]:
    """fANOVA importance of each key over the study's finished trials (``{}`` when undefined: fewer than two
    keys or three finished trials, or an objective with one value)."""
    import optuna

    finished = _finished(study.get_trials(deepcopy=False))
    if len(finished) < 3 or len({t.value for t in finished}) < 2 or len(study.best_trial.params) < 2:
        return {}
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=FOREST_SEED)
    try:
        importances = optuna.importance.get_param_importances(study, evaluator=evaluator)
    except (RuntimeError, ValueError):  # a key sampled in too few trials to fit the forest
        return {}
    return {key: float(share) for key, share in importances.items()}


def rank_correlations(trials: list[Any], keys: list[str]) -> dict[str, float | None]:
    """Spearman's rho between each numeric key in ``keys`` and the objective over the finished ones of ``trials``
    (a study's ``get_trials()``)."""
    finished = _finished(trials)
    out: dict[str, float | None] = {}
    for key in keys:
        pairs = [(t.params[key], t.value) for t in finished if _is_number(t.params.get(key))]
        if not pairs and any(key in t.params for t in finished):
            continue  # a categorical key: its values have no order
        out[key] = spearman([float(x) for x, _ in pairs], [float(y) for _, y in pairs])
    return out


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's rank correlation of two equally long samples (``None`` below three pairs or when one is
    constant)."""
    if len(x) != len(y):
        raise ValueError(f"spearman needs two samples of one length, got {len(x)} and {len(y)}")
    if len(x) < 3:
        return None
    rx, ry = _ranks(x), _ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def _ranks(values: list[float]) -> list[float]:
    """Ranks from 1, tied values sharing the mean of the ranks they span."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def _finished(trials: list[Any]) -> list[Any]:
    from optuna.trial import TrialState

    return [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
