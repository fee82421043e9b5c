"""Which running trials still have a live worker, for a study on the local journal file.

Every worker holds an exclusive ``flock`` on its own file ``STUDY/workers/<id>.lock`` for as long as it runs, and
stamps each trial it runs with that id. The kernel drops the lock when the process ends, however it ends
(``kill -9`` included), so a running trial whose worker's lock can be taken is stale: it is failed and enqueued
again (``RetryHeartbeatStaleTrialCallback``), and the retry resumes in the trial's run folders. A trial seen running
without a worker stamp (its worker died between taking the trial and stamping it) is stale after
``UNSTAMPED_GRACE_SECONDS``.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import uuid
from pathlib import Path
from typing import Any

__all__ = ["WORKER_ATTR", "WorkerLock", "fail_stale_trials", "live_twin"]

WORKER_ATTR = "worker"
UNSTAMPED_GRACE_SECONDS = 60.0


class WorkerLock:
    """The lock a live worker holds; ``id`` goes into the user attributes of its trials. The lock file holds the
    worker's index among its command's workers, so that a worker can tell another command's worker of the same
    index (``live_twin``)."""

    def __init__(self, study_dir: Path, worker: int = 0) -> None:
        self.folder = study_dir / "workers"
        self.id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.worker = int(worker)
        self._handle: Any = None

    def __enter__(self) -> "WorkerLock":
        self.folder.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.folder / f"{self.id}.lock", "w")
        fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._handle.write(f"{self.worker}\n")
        self._handle.flush()
        return self

    def __exit__(self, *exc: Any) -> None:
        path = self.folder / f"{self.id}.lock"
        path.unlink(missing_ok=True)  # while held: no other process can find it free
        self._handle.close()


def live_twin(lock: WorkerLock) -> bool:
    """Whether another live worker of this study has ``lock``'s index: a second command started on the study
    while this one runs. Each worker takes its lock before it looks, so of two commands started at the same moment
    at least the later one sees the other."""
    for path in lock.folder.glob("*.lock"):
        other = path.stem
        if other == lock.id or not worker_alive(lock.folder.parent, other):
            continue
        try:
            index = path.read_text().strip()
        except FileNotFoundError:
            continue  # its worker ended between the two looks
        if index == str(lock.worker):
            return True
    return False


def worker_alive(study_dir: Path, worker: str) -> bool:
    """Whether the worker ``worker`` still holds its lock."""
    path = study_dir / "workers" / f"{worker}.lock"
    if not path.is_file():
        return False  # removed by its worker on a clean exit
    with open(path) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    path.unlink(missing_ok=True)
    return False


def _is_stale(study_dir: Path, trial: Any, now: datetime.datetime) -> bool:
    worker = trial.user_attrs.get(WORKER_ATTR)
    if worker is not None:
        return not worker_alive(study_dir, worker)
    started = trial.datetime_start
    return started is not None and (now - started).total_seconds() > UNSTAMPED_GRACE_SECONDS


def fail_stale_trials(study: Any, study_dir: Path) -> list[int]:
    """Fail the running trials whose worker is gone and enqueue their retries; returns their numbers."""
    from optuna.trial import TrialState

    from dmlkit.tune.storage import retry_callback

    storage, now, failed = study._storage, datetime.datetime.now(), []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not _is_stale(study_dir, trial, now):
            continue
        try:  # the reason first: a finished trial takes no attribute
            storage.set_trial_user_attr(trial._trial_id, "fail_reason", "its worker process died; retried")
            if not storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
                continue  # another worker failed it first
        except RuntimeError:  # finished meanwhile
            continue
        retry_callback()(study, storage.get_trial(trial._trial_id))
        failed.append(trial.number)
    return failed
