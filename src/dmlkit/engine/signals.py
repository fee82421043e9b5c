"""Stopping a run cleanly on SIGTERM / SIGINT, and sizing its checkpoints before it starts.

``StopSignals`` replaces the SIGTERM and SIGINT handlers while a run trains: the
handler only records the signal; the loop checks ``received`` after each step,
writes ``last.pt`` (atomically) and raises ``TrainingInterrupted``, whose
``exit_code`` is the shell's ``128 + signal`` (143 for SIGTERM, 130 for SIGINT).
A second SIGINT while the checkpoint is being written interrupts at once
(``KeyboardInterrupt``). While ``stop_at_once`` is set (the final test, which no
checkpoint can cut short), a signal raises what ``stop_at_once(signum)`` returns
right away. Handlers can only be installed from the main thread; elsewhere the
run keeps Python's defaults.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable

import torch
from torch import nn

HANDLED = (signal.SIGTERM, signal.SIGINT)


class TrainingInterrupted(Exception):
    """The run stopped on a signal after saving ``last.pt``; resume with ``dmlkit train --resume RUN_DIR``."""

    def __init__(self, signum: int, step: int, run_dir: str, during_test: bool = False) -> None:
        self.signum, self.step, self.run_dir = signum, step, run_dir
        self.exit_code = 128 + int(signum)
        where = (
            f"during the final test (training had ended at step {step}); '{run_dir}/last.pt' holds the trained run "
            "and no summary was written. Run the test with"
            if during_test
            else f"at step {step}; the checkpoint '{run_dir}/last.pt' was written. Continue with"
        )
        super().__init__(f"stopped by {signal.Signals(signum).name} {where}: dmlkit train --resume {run_dir}")


class StopSignals:
    """Context manager recording SIGTERM / SIGINT in ``received`` (the first signal number, or None)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.stop_at_once: Callable[[int], BaseException] | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.stop_at_once is not None:
            stop, self.stop_at_once = self.stop_at_once, None
            raise stop(signum)
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        self.received = signum

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def _state_bytes(state: Any) -> int:
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(_state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(_state_bytes(v) for v in state)
    return 0


def estimate_checkpoint_bytes(model: nn.Module, objective: nn.Module, optimizer_slots: int) -> int:
    """Bytes of one ``last.pt``: the weights, the objective's state, and ``optimizer_slots`` copies of
    the trainable parameters (Adam keeps 2 moments, SGD with momentum 1), plus 1 MiB of metadata."""
    weights = _state_bytes(model.state_dict()) + _state_bytes(objective.state_dict())
    trainable = sum(p.numel() * p.element_size() for m in (model, objective) for p in m.parameters() if p.requires_grad)
    return weights + optimizer_slots * trainable + 2**20
