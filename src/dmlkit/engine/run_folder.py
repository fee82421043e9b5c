"""The run folder: where a run writes its config, log, checkpoints, summary and plots."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path


MIN_FREE_BYTES = 200 * 2**20


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

    def prepare_new(self) -> None:
        """Create the folder for a fresh run; refuse to overwrite a run that is already there."""
        if self.path.exists() and any(self.path.iterdir()):
            raise ValueError(
                f"run folder '{self.path}' already holds a run; resume it with --resume {self.path}, "
                "or choose another name (--set name=...) or output_dir"
            )
        self._check_writable()

    def acquire(self) -> None:
        """Hold an exclusive lock on the folder while this process trains into it.

        A second trainer on the same folder (a resumed run while the first still
        runs, an orphaned worker of a stopped ``dmlkit protocol``) gets a
        ``ValueError`` instead of interleaving its checkpoints and log with the first.
        The lock ends with the process or ``release()``.
        """
        import fcntl

        handle = open(self.path / ".lock", "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise ValueError(
                f"run folder '{self.path}' is being written by another process (it holds the lock "
                f"'{self.path / '.lock'}'); wait for that run to end or stop it, then resume"
            ) from None
        self._lock = handle

    def release(self) -> None:
        handle = getattr(self, "_lock", None)
        if handle is not None:
            handle.close()  # closing the file drops the flock
            self._lock = None

    def prepare_resume(self) -> None:
        if not self.last_checkpoint.is_file():
            raise ValueError(
                f"cannot resume: '{self.last_checkpoint}' does not exist; "
                "pass the folder of a run that wrote at least one checkpoint"
            )
        self._check_writable()

    def _check_writable(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.path, prefix=".write-test-"):
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
