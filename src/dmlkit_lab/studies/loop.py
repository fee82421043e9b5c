"""The one bare training loop of the studies that train small models outside the ``Trainer``.

``gsp_synthetic`` (a token table on bags of token ids) and ``sft_unbalanced`` (a closed-set classifier on a few
hundred in-memory glyphs) keep no run folder: no checkpoint, no log, no callbacks; a bare loop is the point, so
that a study's numbers depend on nothing but its seed. Both train with this module's step loop and its
optional cosine decay to 0, over ``torch.optim.Adam``.

The loop draws nothing at random. The study passes its batches in, drawn from its own seeded
``torch.Generator``, so the global random state is neither read nor advanced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
from torch import Tensor

__all__ = ["StepsDone", "cosine_to_zero", "train_steps"]


def cosine_to_zero(optimizer: torch.optim.Optimizer, steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Every group's rate times ``(1 + cos(pi s / steps)) / 2`` at step ``s``: from its rate down to 0 at ``steps``."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))


@dataclass(frozen=True)
class StepsDone:
    """What ``train_steps`` leaves: the number of the next step and the last step's loss (None: no batch)."""

    next_step: int
    last_loss: Tensor | None


def train_steps(
    step_loss: Callable[[Any, int], Tensor],
    batches: Iterable[Any],
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler | None = None,
    after_step: Callable[[], None] | None = None,
    first_step: int = 0,
    name: str = "study",
) -> StepsDone:
    """One optimiser step per batch: ``loss = step_loss(batch, step)``, backward, ``optimizer.step()``, then
    ``schedule.step()`` and ``after_step()`` (e.g. a clamp of the parameters).

    ``step`` counts from ``first_step``, so a study that trains in epochs calls this once per epoch and keeps one
    step count. A non-finite loss stops the study with a ``ValueError`` naming ``name`` and the step: nothing
    trained after it would mean anything.
    """
    step, loss = first_step, None
    for batch in batches:
        loss = step_loss(batch, step)
        if not torch.isfinite(loss):
            raise ValueError(f"{name}: non-finite loss at step {step}; lower the learning rate (--lr)")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if schedule is not None:
            schedule.step()
        if after_step is not None:
            after_step()
        step += 1
    return StepsDone(step, loss)
