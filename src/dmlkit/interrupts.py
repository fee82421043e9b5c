"""The exception of a batch of parallel runs stopped by a signal (light: the CLI catches it without importing torch)."""

from __future__ import annotations

import signal

__all__ = ["RunsInterrupted"]


class RunsInterrupted(Exception):
    """A parallel batch of runs stopped on SIGTERM / SIGINT; the interrupted runs saved ``last.pt``."""

    def __init__(self, signum: int, done: int, interrupted: int, not_started: int) -> None:
        self.exit_code = 128 + int(signum)
        super().__init__(
            f"stopped by {signal.Signals(signum).name}: {done} run(s) finished, {interrupted} interrupted with "
            f"their last.pt written, {not_started} not started; run the same command again to continue"
        )


class StudyInterrupted(Exception):
    """A hyperparameter study stopped on SIGTERM / SIGINT; its running trials saved ``last.pt`` and were enqueued
    again, so the same command continues them."""

    def __init__(self, signum: int, study_dir: str) -> None:
        self.exit_code = 128 + int(signum)
        super().__init__(
            f"stopped by {signal.Signals(signum).name}: the study in '{study_dir}' keeps its finished trials, and the "
            "interrupted ones resume from their last.pt when the same command runs again"
        )
