"""Live TensorBoard scalars of a run (``train.tensorboard: true``): a trainer callback writing ``RUN/tensorboard/``.

It writes what ``metrics.jsonl`` holds, at the same steps and with the same values: every ``train.log_every`` steps
the training loss (``train/loss``), its named terms (``train/loss/<term>``) and the learning rate (``train/lr``);
every validation metric (``val/<metric>``); the final test metrics of the best weights (``test/<metric>``, at the
last step). Only rank 0 writes, and it flushes after each step it logs.

A resumed run appends to the same folder with ``purge_step`` at the step of its ``last.pt``: TensorBoard drops
what was logged from that step on (the interrupted process went on after the checkpoint, or was killed between
the log line and its scalars), and the callback writes that step again from ``metrics.jsonl`` (which the resume
has cut after the checkpoint), so every step keeps the one value ``metrics.jsonl`` holds. A run that stopped
before its first ``last.pt`` starts again without its old events (``RunFolder.start_new``).

``tensorboard --logdir RUN/tensorboard`` shows them while the run trains (``pip install 'dmlkit[tensorboard]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmlkit.engine.callbacks import Callback, TrainerView
from dmlkit.engine.run_folder import RunFolder
from dmlkit.extras import require

__all__ = ["TensorBoardLogger", "record_scalars", "require_tensorboard", "summary_writer", "tensorboard_dir"]

#: Keys of a ``metrics.jsonl`` record that are not curves: where it stands, how long it took, whether it improved.
NOT_SCALARS = frozenset({"split", "step", "epoch", "elapsed", "best"})


def tensorboard_dir(run_dir: str | Path) -> Path:
    """The TensorBoard ``--logdir`` of a run folder."""
    return RunFolder(run_dir).tensorboard


def require_tensorboard(purpose: str) -> None:
    """The ``tensorboard`` package is installed, or :class:`~dmlkit.extras.MissingExtra` naming its extra.
    (``torch.utils.tensorboard`` reports a missing package in its own words, so the package is asked for first.)"""
    require("tensorboard", "tensorboard", purpose)


def summary_writer(log_dir: str | Path, purpose: str, **kwargs: Any) -> Any:
    """A ``torch.utils.tensorboard.SummaryWriter`` on ``log_dir`` (``kwargs`` are its options), or
    :class:`~dmlkit.extras.MissingExtra` when the ``tensorboard`` extra is missing; ``purpose`` names what needs it."""
    require_tensorboard(purpose)
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(log_dir), **kwargs)


def record_scalars(record: dict[str, Any]) -> dict[str, float]:
    """The curves of a ``metrics.jsonl`` record (or of a step's outputs, or of a validation's metrics): its numbers
    but ``NOT_SCALARS``, by name."""
    return {
        k: float(v)
        for k, v in record.items()
        if k not in NOT_SCALARS and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


class TensorBoardLogger(Callback):
    """Writes the run's training, validation and test scalars to ``RUN/tensorboard/`` (rank 0 only).

    ``log_every`` is ``train.log_every``: the training scalars are written at the steps ``metrics.jsonl`` logs.
    """

    def __init__(self, log_every: int) -> None:
        self.log_every = log_every
        self.writer: Any = None  # SummaryWriter on rank 0 while the run trains

    def on_train_start(self, trainer: TrainerView) -> None:
        if not trainer.fabric.is_global_zero:
            return
        folder, step = trainer.folder.tensorboard, trainer.state.step
        logged = [r for r in trainer.log.read() if r.get("split") in ("train", "val")]  # cut after the checkpoint
        if folder.is_dir() and any(folder.glob("events.out.tfevents.*")):
            self.writer = summary_writer(folder, "train.tensorboard", purge_step=step)
            logged = [r for r in logged if r["step"] >= step]
        else:  # a new run, or a run folder copied without its events: all it logged so far
            self.writer = summary_writer(folder, "train.tensorboard")
        for record in logged:
            self._write(record["split"], record, record["step"])

    def _write(self, prefix: str, values: dict[str, Any], step: int) -> None:
        for name, value in record_scalars(values).items():
            self.writer.add_scalar(f"{prefix}/{name}", value, step)
        self.writer.flush()

    def on_batch_end(self, trainer: TrainerView, batch: dict[str, Any], outputs: dict[str, Any]) -> None:
        step = trainer.state.step
        if self.writer is not None and step % self.log_every == 0:
            self._write("train", outputs, step)

    def on_validation_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        if self.writer is not None:
            self._write("val", metrics, trainer.state.step)

    def on_train_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        if self.writer is None:
            return
        if summary.get("test"):
            self._write("test", summary["test"], trainer.state.step)
        self.writer.close()
        self.writer = None
