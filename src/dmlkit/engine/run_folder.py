"""The run folder: where a run writes its config, log, checkpoints, summary and plots.

A folder whose run stopped before its first ``last.pt`` (killed before the first validation or
while the first ``last.pt`` was written, or stopped by an error found after the folder was made)
holds nothing a resume could continue from. ``start_new`` starts such a folder again, so the
command that made it (corrected, if it had a config error) simply runs again; a folder holding
``last.pt`` or a finished run is never overwritten. ``best.pt`` without ``last.pt`` is only
replaced by a run of the same config (the first validation writes it again, identically), since a
run of another config would lose it. Every start removes the temporary files of atomic writes that
a killed process left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from dmlkit.io import remove_stale_temporaries

MIN_FREE_BYTES = 200 * 2**20

#: What a run writes before its first ``last.pt`` (``best.pt`` aside): a folder holding only these can start again.
BEFORE_FIRST_CHECKPOINT = frozenset({"config.yaml", "metrics.jsonl", "environment.json", "tensorboard", ".lock"})


def saved_config_folder(config_path: str | Path) -> Path | None:
    """The run folder ``config_path`` was saved in (a ``config.yaml`` beside the run's ``environment.json`` or
    ``metrics.jsonl``), else None: re-running a saved config addresses its own run, not ``output_dir/name``."""
    path = Path(config_path)
    folder = RunFolder(path.parent)
    if path.name == folder.config.name and (folder.environment.is_file() or folder.metrics.is_file()):
        return folder.path
    return None


class RunFolder:
    """Paths of one run and the checks made before training starts."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    config = property(lambda self: self.path / "config.yaml")
    metrics = property(lambda self: self.path / "metrics.jsonl")
    last_checkpoint = property(lambda self: self.path / "last.pt")
    best_checkpoint = property(lambda self: self.path / "best.pt")
    summary = property(lambda self: self.path / "summary.json")
    plots = property(lambda self: self.path / "plots")
    environment = property(lambda self: self.path / "environment.json")
    tensorboard = property(
        lambda self: self.path / "tensorboard"
    )  # train.tensorboard's events, dmlkit tensorboard's projector

    def start_new(self, config_text: str, own_config: bool = False, records: tuple[str, ...] = ()) -> None:
        """Create and lock the folder of a fresh run and clear what an unstarted run left; refuse to overwrite a run.

        ``own_config``: ``config_text`` is the folder's own config (a resume that found no ``last.pt``).
        ``records``: further files the run writes before its first checkpoint (``RunParts.records``).
        The caller writes ``config.yaml`` after this returns; the lock is held until ``release()``.
        """
        self._check_writable()
        self.acquire()
        try:
            self.remove_temporaries()
            self._clear_unstarted(config_text, own_config, frozenset(records))
        except BaseException:
            self.release()
            raise

    def remove_temporaries(self) -> list[Path]:
        """Delete the temporary files of writes killed in this folder (see ``dmlkit.io.remove_stale_temporaries``)."""
        return remove_stale_temporaries(self.path)

    def _clear_unstarted(self, config_text: str, own_config: bool, records: frozenset[str] = frozenset()) -> None:
        entries = {p.name for p in self.path.iterdir()} - {".lock"}
        if not entries:
            return
        if self.summary.is_file():
            raise ValueError(
                f"run folder '{self.path}' already holds a run that finished (summary.json); evaluate it with dmlkit evaluate "
                f"{self.path}, or choose another name (--set name=...), output_dir or --run-dir for a new run"
            )
        if self.last_checkpoint.is_file():
            raise ValueError(
                f"run folder '{self.path}' already holds a run; resume it with --resume {self.path}, "
                "or choose another name (--set name=...), output_dir or --run-dir"
            )
        foreign = sorted(entries - BEFORE_FIRST_CHECKPOINT - records - {self.best_checkpoint.name})
        if foreign:
            raise ValueError(
                f"run folder '{self.path}' holds files that are not those of an unstarted run ({', '.join(foreign[:5])}); "
                "choose another name (--set name=...), output_dir or --run-dir, or empty the folder"
            )
        saved = self.config.read_text() if self.config.is_file() else None
        if self.best_checkpoint.is_file() and not own_config and saved != config_text:
            raise ValueError(
                f"run folder '{self.path}' holds best.pt but no last.pt: its run was stopped while writing its first "
                f"checkpoint. `dmlkit train --resume {self.path}` starts that run again from step 0 with its own "
                "config (its first validation writes best.pt again); to train another config, choose another "
                "name (--set name=...), output_dir or --run-dir"
            )
        warnings.warn(
            f"run folder '{self.path}' holds a run that stopped before its first checkpoint "
            f"({self._last_logged_step()}); starting it again from step 0"
            + (" with its config.yaml" if own_config else ""),
            RuntimeWarning,
            stacklevel=3,
        )
        for leftover in (self.metrics, self.environment, *(self.path / name for name in records)):
            leftover.unlink(missing_ok=True)
        shutil.rmtree(self.tensorboard, ignore_errors=True)  # its events are of the steps trained again

    def _last_logged_step(self) -> str:
        step = None
        if self.metrics.is_file():
            for line in self.metrics.read_text().splitlines():
                try:
                    step = json.loads(line).get("step", step)
                except (json.JSONDecodeError, AttributeError):
                    break
        return "no step logged" if step is None else f"last logged step {step}"

    def acquire(self) -> None:
        """Hold an exclusive lock on the folder while this process trains into it.

        A second trainer on the same folder (a resumed run while the first still
        runs, an orphaned worker of a stopped ``dmlkit protocol``) gets a
        ``ValueError`` instead of interleaving its checkpoints and log with the first.
        The lock ends with the process or ``release()``; ``release()`` also removes
        ``.lock``, so a folder left by a clean finish holds none (one left by a killed
        process is not held, and the next run takes it over).
        """
        import fcntl

        lock = self.path / ".lock"
        while True:
            handle = open(lock, "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                raise ValueError(
                    f"run folder '{self.path}' is being written by another process (it holds the lock "
                    f"'{lock}'); wait for that run to end or stop it, then resume"
                ) from None
            # A releasing process unlinks the file it locked; a lock taken on that unlinked file guards
            # nothing, so take the lock again on the file the path names now.
            try:
                same = os.stat(lock).st_ino == os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            handle.close()
        self._lock = handle

    def release(self) -> None:
        """Drop the lock and remove ``.lock``: unlinked while still held, so no other process can hold it then."""
        handle = getattr(self, "_lock", None)
        if handle is not None:
            try:
                (self.path / ".lock").unlink(missing_ok=True)
            except OSError:  # a read-only folder: the file stays, unlocked, as after a killed run
                pass
            handle.close()  # closing the file drops the flock
            self._lock = None

    def prepare_resume(self) -> None:
        if not self.last_checkpoint.is_file():
            raise ValueError(
                f"cannot resume: '{self.last_checkpoint}' does not exist; "
                "pass the folder of a run that wrote at least one checkpoint"
            )
        self._check_writable()

    def check_started(self) -> None:
        """Raise unless the folder holds a run's ``config.yaml`` (what ``--resume`` needs at the least)."""
        if not self.config.is_file():
            raise ValueError(
                f"cannot resume: '{self.path}' holds no config.yaml, so no run was started in it; "
                "start the run with dmlkit train CONFIG (it may use this folder)"
            )

    def _check_writable(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.path, prefix=f".write-test.{os.getpid()}-", suffix=".tmp"):
                pass
        except OSError as err:
            raise ValueError(f"run folder '{self.path}' is not writable ({err}); choose another output_dir") from err
        free = shutil.disk_usage(self.path).free
        if free < MIN_FREE_BYTES:
            raise ValueError(
                f"only {free / 2**20:.0f} MiB free under '{self.path}', at least {MIN_FREE_BYTES / 2**20:.0f} MiB "
                "are needed for checkpoints; free some space or choose another output_dir"
            )

    def check_space(self, needed_bytes: int) -> None:
        """Raise before training when the disk under the run folder has less than ``needed_bytes`` free
        (the trainer asks for three checkpoints: best.pt, last.pt and the temporary file of an atomic write)."""
        free = shutil.disk_usage(self.path).free
        if free < needed_bytes:
            raise ValueError(
                f"only {free / 2**20:.0f} MiB free under '{self.path}', but this run's checkpoints need about "
                f"{needed_bytes / 2**20:.0f} MiB (best.pt, last.pt and a temporary copy); free some space or "
                "choose another output_dir"
            )
