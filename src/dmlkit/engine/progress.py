"""A rich progress bar for training: step, rate, loss and the last validation score."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class TrainingProgress:
    """Shows progress on a terminal; on a pipe it prints one line per validation instead."""

    def __init__(self, total: int, start: int = 0, quiet: bool = False, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.live = self.console.is_terminal and not quiet
        self._val = "-"
        self._loss = float("nan")
        self._step = start
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

    def show_validation(self, metric: str, score: float) -> None:
        self._val = f"{metric} {100 * score:.2f}%"  # percent, as every table a person reads
        self.progress.update(self.task, val=self._val)
        if not self.live and not self.quiet:
            self.console.print(f"step {self._step}: loss {self._loss:.4f}, val {self._val}")
