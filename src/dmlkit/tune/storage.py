"""Where a study keeps its trials: a journal file in the study folder, or a PostgreSQL database.

The local default is Optuna's journal storage on a file (``STUDY/journal.log``): no server, safe for several
worker processes of one machine (every write is an appended record under a file lock), which Optuna's
FAQ does not promise of SQLite with parallel writers. It has no heartbeat, so a worker that dies is found
through the lock each live worker holds on its file in ``STUDY/workers/`` (``dmlkit.tune.liveness``).

Workers on several machines share one study through a PostgreSQL URL (``--storage postgresql://...``):
Optuna's relational storage with its heartbeat, so a trial whose worker stopped beating is failed by the
next worker and retried (``RetryHeartbeatStaleTrialCallback``), in its own run folder where that machine has it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["MAX_RETRIES", "JOURNAL_FILE", "is_shared", "open_storage", "retry_callback"]

JOURNAL_FILE = "journal.log"
#: How often one trial is tried again after its worker died (a trial that keeps killing workers then fails).
MAX_RETRIES = 3


def is_shared(url: str | None) -> bool:
    """Whether ``url`` names a database server (the study may have workers on other machines)."""
    return bool(url) and not str(url).startswith("sqlite")


def retry_callback() -> Any:
    import warnings

    import optuna

    with warnings.catch_warnings():  # stable since Optuna 2.8, still flagged experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES, inherit_intermediate_values=True)


def _journal(study_dir: Path) -> Any:
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    # The open-lock (O_EXCL lock file) rather than the symlink lock: it also works where symlinks do not.
    path = str(study_dir / JOURNAL_FILE)
    return optuna.storages.JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))


def _database(url: str, heartbeat: int, grace: int) -> Any:
    import warnings

    import optuna
    import sqlalchemy.exc

    if not url.startswith(("postgresql://", "postgresql+", "sqlite:///", "mysql")):
        raise ValueError(
            f"--storage must be a database URL such as postgresql://USER:PASSWORD@HOST:PORT/DB, got {url!r}; "
            "leave it out for the study folder's own journal file"
        )
    url = _with_driver(url)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                url,
                heartbeat_interval=heartbeat,
                grace_period=grace,
                heartbeat_stale_trial_callback=retry_callback(),
                engine_kwargs={"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
                if url.startswith("postgresql")
                else None,
            )
    except ModuleNotFoundError as err:
        raise ValueError(
            f"--storage {url.split(':', 1)[0]} needs its database driver ({err.name}); "
            "pip install 'dmlkit[tune]' installs psycopg2 for PostgreSQL"
        ) from err
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError) as err:
        first = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
        raise ValueError(
            f"cannot open the study storage {_hide_password(url)}: {first}; check the host, port, "
            "database name and password, and that the server accepts connections"
        ) from err


def _with_driver(url: str) -> str:
    """A bare ``postgresql://`` URL with the driver that is installed: SQLAlchemy 2.1 reads it as psycopg 3,
    while ``dmlkit[tune]`` installs psycopg2."""
    import importlib.util

    if url.startswith("postgresql://") and importlib.util.find_spec("psycopg") is None:
        return "postgresql+psycopg2://" + url.removeprefix("postgresql://")
    return url


def _hide_password(url: str) -> str:
    head, sep, tail = url.partition("@")
    if not sep or ":" not in head.split("//", 1)[-1]:
        return url
    scheme, _, credentials = head.partition("//")
    return f"{scheme}//{credentials.split(':', 1)[0]}:***@{tail}"


def open_storage(study_dir: Path, url: str | None = None, heartbeat: int = 30, grace: int = 120) -> Any:
    """The study's storage: the journal file of ``study_dir``, or the database at ``url``."""
    study_dir.mkdir(parents=True, exist_ok=True)
    return _database(url, heartbeat, grace) if url else _journal(study_dir)
