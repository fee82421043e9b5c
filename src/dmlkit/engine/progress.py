"""A rich progress bar for training: step, rate, loss and the last validation score.

On a terminal the bar is redrawn in place. On a pipe or a log file (``nohup``, CI, ``dmlkit pretrain`` under a
script) a line is printed at each validation and, between validations, at most every ``HEARTBEAT_SECONDS``, so
a long run never stays silent for minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dmlkit.extras import require

if TYPE_CHECKING:
    from rich.console import Console


#: Longest silence between two progress lines on a pipe, in seconds.
HEARTBEAT_SECONDS = 30.0


class TrainingProgress:
    """Shows progress on a terminal; on a pipe it prints a line per validation and a heartbeat line between."""

    def __init__(
        self,
        total: int,
        start: int = 0,
        quiet: bool = False,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        require("rich", "train", "the training progress bar")
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.live = self.console.is_terminal and not quiet
        self._val = "-"
        self._loss = float("nan")
        self._step = start
        self._total = total
        self._clock = clock
        self._last_line = clock()
        self._last_line_step = start
        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("loss {task.fields[loss]:.4f}"),
            TextColumn("val {task.fields[val]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.live,
        )
        self.task = self.progress.add_task("train", total=total, completed=start, loss=float("nan"), val="-", rate="")

    def __enter__(self) -> "TrainingProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def advance(self, loss: float) -> None:
        self._loss, self._step = loss, self._step + 1
        task = self.progress.tasks[0]
        rate = f"{task.speed:.1f} step/s" if task.speed else ""
        self.progress.update(self.task, advance=1, loss=loss, rate=rate)
        if not self.live and not self.quiet and self._clock() - self._last_line >= HEARTBEAT_SECONDS:
            self._print_line(f"step {self._step}/{self._total}: loss {self._loss:.4f}, {self._rate()}val {self._val}")

    def _rate(self) -> str:
        """Steps per second since the last printed line (the bar's own rate needs a terminal)."""
        seconds = self._clock() - self._last_line
        return f"{(self._step - self._last_line_step) / seconds:.2f} step/s, " if seconds > 0 else ""

    def _print_line(self, text: str) -> None:
        self.console.print(text)
        self._last_line, self._last_line_step = self._clock(), self._step

    def show_validation(self, metric: str, score: float) -> None:
        self._val = f"{metric} {100 * score:.2f}%"  # percent, as every table a person reads
        self.progress.update(self.task, val=self._val)
        if not self.live and not self.quiet:
            self._print_line(f"step {self._step}: loss {self._loss:.4f}, val {self._val}")
