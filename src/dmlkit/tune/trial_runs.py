"""One trial of a study: the config with the trial's values, trained into ordinary run folders, scored.

``holdout``: one run on the config's own class-disjoint validation classes; the trial's value is the best
validation score (``train.val_metric``, MAP@R by default) of the run. ``fair``: the objective of Reality Check
(Musgrave et al. 2020; thesis Sec. 3.3.2.1): one run per class-disjoint fold of the training classes, model
``k`` validated on fold ``k``; the value is the mean of the folds' best validation scores and the standard
error of that mean is stored beside it. No trial tests: ``eval.test`` is off, so the test classes stay unseen.

A trial's run folders live under ``STUDY/trials/<number>/`` (``fold<k>/`` for the fair protocol); a retried
trial (its worker died) trains in its original trial's folders, so it resumes from their ``last.pt``.
Validation scores reach the study's pruner through ``PruningCallback``; a pruned run writes ``pruned.json``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from dmlkit.engine.callbacks import Callback
from dmlkit.io import write_json_atomic
from dmlkit.tune.space import overrides_of

__all__ = ["PROTOCOLS", "PruningCallback", "TrialPlan", "TrialScore", "run_trial"]

PROTOCOLS = ("holdout", "fair")
#: What every trial run sets: no test (the search must not see the test classes), no plots.
TRIAL_OVERRIDES = ["eval.test=false", "plots=false"]
PRUNED_FILE = "pruned.json"


def trial_folder(number: int) -> Path:
    """A trial's run folder relative to its study folder (a retry's is its original trial's)."""
    return Path("trials") / f"{number:04d}"


def fold_overrides(folds: int, fold: int) -> list[str]:
    """The overrides of fold ``fold``'s run: the fair protocol's folds (``dmlkit.protocols.fair``)."""
    return [f"data.folds={folds}", f"data.fold={fold}", "data.val_split=null"]


@dataclass(frozen=True)
class TrialPlan:
    """How every trial of a study is run: the base config, its overrides and the protocol."""

    config_path: str
    overrides: tuple[str, ...]
    protocol: str = "holdout"
    folds: int = 4
    quiet: bool = True

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"tuning protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.protocol == "fair" and (
            isinstance(self.folds, bool) or not isinstance(self.folds, int) or self.folds < 2
        ):
            raise ValueError(f"the fair protocol needs folds >= 2, got {self.folds!r}")

    def run_overrides(self, values: dict[str, Any], name: str, fold: int | None) -> list[str]:
        fold_part = [] if fold is None else fold_overrides(self.folds, fold)
        return [*self.overrides, *overrides_of(values), *fold_part, *TRIAL_OVERRIDES, f"name={name}"]

    def fold_indices(self) -> list[int | None]:
        return list(range(self.folds)) if self.protocol == "fair" else [None]


@dataclass(frozen=True)
class TrialScore:
    """A trial's value (mean over folds for the fair protocol), its standard error, and how its runs trained."""

    value: float
    sem: float | None
    fold_values: tuple[float, ...]
    steps: tuple[int, ...]
    best_steps: tuple[int, ...]
    seconds: float


class PruningCallback(Callback):
    """Reports every validation score to the trial and stops the run when the study's pruner says so.

    The reported step runs on across folds (``fold * max_steps + step``), so the pruner compares trials at the
    same fold and step. The run's ``last.pt`` is written before the callback, and ``pruned.json`` records why
    the run folder has no summary.
    """

    def __init__(self, trial: Any, metric: str, offset: int = 0) -> None:
        self.trial, self.metric, self.offset = trial, metric, offset

    def on_validation_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        import optuna

        step = self.offset + trainer.state.step
        self.trial.report(float(metrics[self.metric]), step)
        if self.trial.should_prune():
            if trainer.fabric.is_global_zero:
                write_json_atomic(
                    trainer.folder.path / PRUNED_FILE,
                    {"trial": self.trial.number, "step": trainer.state.step, self.metric: metrics[self.metric]},
                )
            raise optuna.TrialPruned(f"pruned at step {trainer.state.step} ({self.metric} {metrics[self.metric]:.4f})")


def _sem(values: Sequence[float]) -> float | None:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None


def run_trial(plan: TrialPlan, values: dict[str, Any], trial_dir: Path, name: str, trial: Any = None) -> TrialScore:
    """Train (or resume, or reuse) the runs of one trial and return its score; ``trial`` (an Optuna trial)
    receives the validation scores for pruning."""
    from dmlkit.config import load_config
    from dmlkit.protocols.runs import train_or_reuse

    fold_values, steps, best_steps, seconds = [], [], [], 0.0
    for index, fold in enumerate(plan.fold_indices()):
        cfg = load_config(plan.config_path, plan.run_overrides(values, name, fold))
        run_dir = trial_dir if fold is None else trial_dir / f"fold{fold}"
        callbacks = [] if trial is None else [PruningCallback(trial, cfg.train.val_metric, index * cfg.train.max_steps)]
        summary = train_or_reuse(cfg, run_dir, quiet=plan.quiet, callbacks=callbacks)
        fold_values.append(float(summary["best_val"]["value"]))
        steps.append(int(summary["steps"]))
        best_steps.append(int(summary["best_step"]))
        seconds += float(summary["train_seconds"])
    return TrialScore(
        statistics.fmean(fold_values), _sem(fold_values), tuple(fold_values), tuple(steps), tuple(best_steps), seconds
    )
