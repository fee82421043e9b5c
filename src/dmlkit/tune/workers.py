"""The worker loop of a study: take a trial, train its runs, report its value, until the study has its trials.

Every worker (one process; ``--jobs K`` starts K of them, and every machine sharing a PostgreSQL study runs its
own) runs the same loop, so the trial cap is global: a trial counts once, whether it completed, was pruned or
failed for its own reason. A trial whose worker died counts through its retry only, and a trial taken while the
cap was already reached by others is marked ``beyond_cap`` and not counted. Before each trial a worker on the
local journal fails the running trials of dead workers (``dmlkit.tune.liveness``); on PostgreSQL Optuna's
heartbeat does it.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlkit.tune.space import SearchSpace
from dmlkit.tune.study_setup import (
    SearchSettings,
    StudyDefinition,
    joining_nonce,
    make_pruner,
    make_sampler,
    worker_seed,
)
from dmlkit.tune.trial_runs import run_trial, trial_folder

__all__ = ["TrialFailed", "WorkerJob", "counted_trials", "run_worker"]

BEYOND_CAP = "beyond_cap"
INTERRUPTED = "interrupted; retried by the next run"


class TrialFailed(Exception):
    """A trial that failed for a reason of its own (a config its values make invalid, a NaN loss); the study goes on."""


@dataclass(frozen=True)
class WorkerJob:
    """Everything one worker process needs (picklable: sent to spawned workers)."""

    study_dir: str
    study_name: str
    storage_url: str | None
    definition: StudyDefinition
    space: SearchSpace
    settings: SearchSettings
    trials: int
    threads: int = 0


def _retry_history(trial: Any) -> list[int]:
    """The failed trials ``trial`` retries, the series' first to its direct predecessor (empty for no retry)."""
    import warnings

    from optuna.exceptions import ExperimentalWarning
    from optuna.storages import RetryHeartbeatStaleTrialCallback

    with warnings.catch_warnings():  # stable since Optuna 3.0; still flagged experimental
        warnings.simplefilter("ignore", ExperimentalWarning)
        return list(RetryHeartbeatStaleTrialCallback.retry_history(trial))


def _retried_numbers(trials: list[Any]) -> set[int]:
    """Every failed trial that a later trial retries: a retry that was itself interrupted is in its successor's
    history, not only the series' first (Optuna's ``retried_trial_number`` names the first alone)."""
    return {number for t in trials for number in _retry_history(t)}


def counted_trials(trials: list[Any]) -> list[Any]:
    """The trials that count towards the cap: all but failed ones that were retried or beyond the cap."""
    from optuna.trial import TrialState

    retried = _retried_numbers(trials)
    return [
        t for t in trials if not (t.state == TrialState.FAIL and (t.number in retried or t.user_attrs.get(BEYOND_CAP)))
    ]


def _waiting(trials: list[Any]) -> bool:
    from optuna.trial import TrialState

    return any(t.state == TrialState.WAITING for t in trials)


def origin_number(trial: Any) -> int:
    """The number of the trial a retry repeats (its own number when it is no retry): the run folders' name."""
    history = _retry_history(trial)
    return history[0] if history else trial.number


class _Objective:
    def __init__(self, job: WorkerJob, study: Any, worker_id: str) -> None:
        self.job, self.study, self.worker_id = job, study, worker_id

    def __call__(self, trial: Any) -> float:
        from dmlkit.tune.liveness import WORKER_ATTR

        trial.set_user_attr(WORKER_ATTR, self.worker_id)
        frozen = self.study._storage.get_trial(trial._trial_id)
        counted = counted_trials(self.study.get_trials(deepcopy=False))
        if sum(t.number < trial.number for t in counted) >= self.job.trials:
            trial.set_user_attr(BEYOND_CAP, True)
            raise TrialFailed(f"the study already has its {self.job.trials} trials")
        values = self.job.space.suggest(trial)
        number = origin_number(frozen)
        trial_dir = Path(self.job.study_dir) / trial_folder(number)
        trial.set_user_attr("run_dir", str(trial_folder(number)))
        name = f"{yaml_name(self.job.definition)}-trial{number:04d}"
        try:
            score = run_trial(self.job.definition.plan, values, trial_dir, name, trial)
        except Exception as err:
            if _passes_through(err):
                if not isinstance(err, _pruned()):
                    trial.set_user_attr("fail_reason", INTERRUPTED)
                raise
            trial.set_user_attr(
                "fail_reason", f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:400]
            )
            raise TrialFailed(str(err)) from err
        for key, value in (
            ("sem", score.sem),
            ("fold_values", list(score.fold_values)),
            ("steps", list(score.steps)),
            ("best_steps", list(score.best_steps)),
            ("train_seconds", round(score.seconds, 2)),
        ):
            trial.set_user_attr(key, value)
        return score.value


def _pruned() -> type:
    import optuna

    return optuna.TrialPruned


def _passes_through(err: BaseException) -> bool:
    """Pruning and interruptions are not a trial's failure: Optuna records the first, the loop handles the second."""
    import optuna

    from dmlkit.engine.signals import TrainingInterrupted

    return isinstance(err, (optuna.TrialPruned, TrainingInterrupted))


def yaml_name(definition: StudyDefinition) -> str:
    import yaml

    return str((yaml.safe_load(definition.config_text) or {}).get("name", "experiment"))


def _retry_interrupted(study: Any, worker_id: str) -> None:
    """Enqueue the trial this worker was running when it was interrupted, so the next run resumes it."""
    from optuna.trial import TrialState

    from dmlkit.tune.liveness import WORKER_ATTR
    from dmlkit.tune.storage import retry_callback

    trials = study.get_trials(deepcopy=False)
    retried = _retried_numbers(trials)
    for trial in trials:
        if (
            trial.state == TrialState.FAIL
            and trial.user_attrs.get(WORKER_ATTR) == worker_id
            and trial.number not in retried
            and trial.user_attrs.get("fail_reason") in (None, INTERRUPTED)
        ):
            retry_callback()(study, study._storage.get_trial(trial._trial_id))


def _quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def stream_nonce(held: list[Any], lock: Any) -> str:
    """What sets a worker's random stream apart (``worker_seed``'s nonce): its lock id where it joins a study some
    trial of which has started (``joining_nonce``), or where another live command's worker has its index (two
    commands started on a fresh study: both find no trial); "" otherwise, so that a fresh study run by one
    command proposes the same trials every time."""
    from dmlkit.tune.liveness import live_twin

    return joining_nonce(held, lock.id) or (lock.id if live_twin(lock) else "")


def run_worker(job: WorkerJob, say: Any = None, worker: int = 0) -> int:
    """Run trials until the study counts ``job.trials`` of them; returns how many this worker ran. ``worker``:
    its index among the command's workers (its sampler's stream, ``worker_seed``)."""
    import optuna
    import torch

    from dmlkit.config import load_config
    from dmlkit.engine.signals import TrainingInterrupted
    from dmlkit.tune.liveness import WorkerLock, fail_stale_trials
    from dmlkit.tune.storage import is_shared, open_storage

    _quiet_optuna()
    if job.threads > 0:
        torch.set_num_threads(job.threads)
    study_dir = Path(job.study_dir)
    cfg = load_config(job.definition.plan.config_path, list(job.definition.plan.overrides))
    budget = cfg.train.max_steps * len(job.definition.plan.fold_indices())
    storage = open_storage(study_dir, job.storage_url, job.settings.heartbeat, job.settings.grace)
    pruner = make_pruner(job.settings, cfg.train.val_every, budget)
    study = optuna.load_study(study_name=job.study_name, storage=storage, pruner=pruner)
    held = study.get_trials(deepcopy=False)
    host = socket.gethostname() if is_shared(job.storage_url) else ""
    ran = 0
    with WorkerLock(study_dir, worker) as lock:
        seed = worker_seed(job.settings.seed, len(held), worker, host, stream_nonce(held, lock))
        study.sampler = make_sampler(job.settings, seed)
        objective = _Objective(job, study, lock.id)
        while True:
            if not is_shared(job.storage_url):
                for number in fail_stale_trials(study, study_dir):
                    _say(say, f"trial {number}: its worker died; enqueued again (it resumes from its run folder)")
            trials = study.get_trials(deepcopy=False)
            if len(counted_trials(trials)) >= job.trials and not _waiting(trials):
                return ran
            try:
                study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=False)
            except (TrainingInterrupted, KeyboardInterrupt):
                _retry_interrupted(study, lock.id)
                raise
            ran += 1
            _report_last(study, lock.id, say)


def _say(say: Any, message: str) -> None:
    if say is not None:
        say(message)


def _report_last(study: Any, worker_id: str, say: Any) -> None:
    from dmlkit.tune.liveness import WORKER_ATTR

    mine = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(WORKER_ATTR) == worker_id]
    if not mine or say is None:
        return
    trial = mine[-1]
    if trial.user_attrs.get(BEYOND_CAP):
        return
    value = "" if trial.value is None else f" value {trial.value:.4f}"
    reason = f" ({trial.user_attrs['fail_reason']})" if "fail_reason" in trial.user_attrs else ""
    say(f"trial {trial.number}: {trial.state.name.lower()}{value}{reason}")


def worker_entry(job: WorkerJob, quiet: bool, worker: int = 0) -> int:
    """The target of a spawned worker process."""
    from dmlkit.engine.signals import TrainingInterrupted

    say = None if quiet else (lambda line: print(f"dmlkit tune: {line}", file=sys.stderr, flush=True))
    try:
        return run_worker(job, say, worker)
    except TrainingInterrupted as stop:  # its trial's last.pt is written and the trial enqueued again
        sys.exit(stop.exit_code)
