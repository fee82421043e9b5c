"""``tune()``: a hyperparameter study of a config, from the command line (``dmlkit tune``) or Python.

The flow: check the space against the config (before anything trains), create or continue the study in its
folder and storage, enqueue the config's own values as the first trial (so a search never ends below its
start), run the workers until the study counts its trials, and write the results (``dmlkit.tune.results``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from dmlkit.tune.catalog import default_space, space_for
from dmlkit.tune.checks import check_space, check_validation_classes, config_value
from dmlkit.tune.space import SearchSpace
from dmlkit.tune.study_setup import SearchSettings, check_folder, define_study, open_study, read_record
from dmlkit.tune.trial_runs import TrialPlan
from dmlkit.tune.workers import WorkerJob, run_worker, worker_entry

__all__ = ["StudyResult", "resolve_space", "study_status", "tune"]

SpaceSpec = SearchSpace | str | Path | Sequence[SearchSpace | str | Path] | None


@dataclass
class StudyResult:
    """What a study left in its folder: the best trial's record (None before any completed) and the study."""

    study_dir: Path
    best: dict[str, Any] | None
    study: Any


def resolve_space(spec: SpaceSpec, loss_name: str) -> SearchSpace:
    """A space object from a space, a registered name, a file, a list of these, or None (the config's loss)."""
    if spec is None:
        return default_space(loss_name)
    items = [spec] if isinstance(spec, (SearchSpace, str, Path)) else list(spec)
    if not items:
        return default_space(loss_name)
    spaces = [item if isinstance(item, SearchSpace) else space_for(item) for item in items]
    merged = spaces[0]
    for space in spaces[1:]:
        merged = merged.merged(space)
    return merged


def _check_trials(trials: Any, jobs: Any) -> None:
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"--trials must be a positive integer (the study's trial count), got {trials!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"--jobs must be a positive integer (worker processes on this machine), got {jobs!r}")


def _enqueue_start(study: Any, cfg: Any, space: SearchSpace) -> None:
    """The config's own values as the study's first trial (only into a study that has none yet)."""
    if study.get_trials(deepcopy=False):
        return
    params = {p.key: value for p in space.parameters if (value := config_value(cfg, p.key)) is not None}
    study.enqueue_trial(params, user_attrs={"start": True}, skip_if_exists=True)


def _spawn_workers(job: WorkerJob, jobs: int, quiet: bool) -> int:
    """``jobs`` worker processes sharing the study; returns the signal that stopped them (0 when none did).

    SIGTERM / SIGINT to this process is passed on to the workers as SIGTERM: each writes its run's ``last.pt`` and
    enqueues its trial again, then this process waits for them.
    """
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=worker_entry, args=(job, quiet, k), daemon=False) for k in range(jobs)]
    received = {"signal": 0}

    def forward(signum: int, frame: Any) -> None:
        received["signal"] = received["signal"] or signum
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    failed = [p.exitcode for p in processes if p.exitcode not in (0, None)]
    if failed and not received["signal"]:
        raise RuntimeError(
            f"{len(failed)} of {jobs} tune workers ended with exit codes {failed}; the study keeps what "
            "they finished: run the same command again to go on"
        )
    return received["signal"]


def _run_workers(job: WorkerJob, jobs: int, quiet: bool) -> int:
    """Run the study's workers here (one) or in processes; the signal that stopped them, or 0."""
    if jobs > 1:
        return _spawn_workers(job, jobs, quiet)
    from dmlkit.engine.signals import TrainingInterrupted

    say = None if quiet else (lambda line: print(f"dmlkit tune: {line}", file=sys.stderr, flush=True))
    try:
        run_worker(job, say)
    except TrainingInterrupted as stop:
        return stop.signum
    return 0


def _threads(jobs: int) -> int:
    from dmlkit.protocols.runs import worker_threads

    return worker_threads(jobs)


def tune(
    config: str | Path,
    space: SpaceSpec = None,
    trials: int = 20,
    out: str | Path | None = None,
    overrides: Sequence[str] = (),
    protocol: str = "holdout",
    folds: int = 4,
    settings: SearchSettings = SearchSettings(),
    jobs: int = 1,
    storage: str | None = None,
    study_name: str | None = None,
    quiet: bool = True,
    test_seeds: Sequence[int] | None = None,
) -> StudyResult:
    """Tune ``config`` over ``space`` for ``trials`` trials; see ``docs/tuning.md``.

    ``protocol``: ``holdout`` (the config's validation classes) or ``fair`` (the mean over ``folds``
    class-disjoint folds of the training classes). ``storage``: a PostgreSQL URL shared by workers on many
    machines; default the study folder's journal file. ``out`` defaults to ``runs/tune/<config name>``.
    ``test_seeds``: once the study has its trials, test the best values (``dmlkit.tune.test_step``): the fair
    protocol's fold models as they are, and ``best.yaml`` retrained on these seeds (none: the fold models only).
    """
    from dmlkit.extras import require

    optuna = require("optuna", "tune", "dmlkit tune")
    from dmlkit.config import dump_config, load_config
    from dmlkit.tune.results import write_results

    _check_trials(trials, jobs)
    plan = TrialPlan(str(config), tuple(overrides), protocol, folds, quiet)
    base = load_config(config, list(overrides))
    resolved = resolve_space(space, base.loss.name)
    cfg = check_space(config, overrides, resolved)
    if protocol == "holdout":
        check_validation_classes(cfg)
    study_dir = Path(out) if out is not None else Path(cfg.output_dir) / "tune" / cfg.name
    name = study_name or study_dir.resolve().name
    definition = define_study(plan, dump_config(cfg), resolved, cfg.train.val_metric)
    check_folder(study_dir, definition, name, storage)
    from dmlkit.pretrain import ensure_pretrained_for
    from dmlkit.tune.storage import open_storage

    ensure_pretrained_for(cfg, quiet=quiet)  # once, before parallel workers would each build it
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = open_study(open_storage(study_dir, storage, settings.heartbeat, settings.grace), name, definition)
    _enqueue_start(study, cfg, resolved)
    job = WorkerJob(
        str(study_dir), name, storage, definition, resolved, settings, trials, threads=_threads(jobs) if jobs > 1 else 0
    )
    stopped = _run_workers(job, jobs, quiet)
    record = definition.record(name, storage)
    best = write_results(study, study_dir, record, resolved.keys)
    if stopped:
        from dmlkit.interrupts import StudyInterrupted

        raise StudyInterrupted(stopped, str(study_dir))
    if best is not None and test_seeds is not None and _complete(study, trials):
        from dmlkit.tune.test_step import test_best

        test_best(study_dir, best, record, test_seeds, jobs, quiet)
    return StudyResult(study_dir, best, study)


def _complete(study: Any, trials: int) -> bool:
    """Whether the study counts its trials (another machine's workers may still run some)."""
    from dmlkit.tune.workers import counted_trials

    done = [t for t in counted_trials(study.get_trials(deepcopy=False)) if t.state.is_finished()]
    return len(done) >= trials


def study_status(study_dir: str | Path, storage: str | None = None) -> StudyResult:
    """The results of a study as it stands (trials table, best values, figures), written without running a trial;
    ``storage``: the PostgreSQL URL of a shared study (its password is not kept in the folder)."""
    import optuna

    from dmlkit.tune.results import write_results
    from dmlkit.tune.storage import open_storage

    folder = Path(study_dir)
    record = read_record(folder)
    if record.get("storage") != "journal.log" and storage is None:
        raise ValueError(f"the study in '{folder}' lives in a database; give its URL with --storage")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=record["study_name"], storage=open_storage(folder, storage))
    best = write_results(study, folder, record, list(record["space"]))
    return StudyResult(folder, best, study)
