"""The projection regulariser of CCP: ``lam/2 * ||theta - theta*||_2^2`` (Eq. 3.2.10-3.2.11 of the thesis).

Each projection problem of Algorithm 1 keeps the network near the previous
solution ``theta*`` (the snapshot); its gradient is ``lam * (theta - theta*)``
(Algorithm 1 writes ``g_theta <- lam (theta* - theta) + ...`` as the descent
direction).  ``theta*`` is held in buffers, so it is checkpointed with the module;
the parameters themselves stay owned by the model (they are read through a plain,
unregistered reference, never copied into this module's parameters).

``remember()`` keeps the current parameters as the best state of the running projection
(buffers ``theta_best_<i>``); ``snapshot(from_best=True)`` then sets ``theta* <-`` that best
state, as the official code's ``_updateSolution`` does at a projection end, while the network
trains on from its current weights. ``lam`` may be changed between projections (the official
code uses 0 during the first one).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from dmlkit.validation import is_real

__all__ = ["ProjectionRegularizer"]


class ProjectionRegularizer(nn.Module):
    """``lam/2 * sum_p ||p - p*||^2`` over the trainable parameters ``p`` of ``model``.

    Args:
        model: the network whose parameters ``theta`` are regularised.
        lam: ``lambda >= 0`` (thesis: 2e-4); 0 makes the term vanish (and skips its computation).

    ``snapshot()`` sets ``theta* <- theta`` (called at the start of each projection);
    ``remember()`` / ``snapshot(from_best=True)``: see the module docstring.
    """

    def __init__(self, model: nn.Module, lam: float) -> None:
        super().__init__()
        if not is_real(lam) or not math.isfinite(lam) or lam < 0:
            raise ValueError(f"lam must be a finite number >= 0 (the thesis uses 2e-4), got {lam!r}")
        self.lam = float(lam)
        object.__setattr__(self, "_model", model)  # a reference, not a submodule: the model owns its parameters
        self._count = len(self._parameters_of_model())
        for i, p in enumerate(self._parameters_of_model()):
            self.register_buffer(f"theta_star_{i}", p.detach().clone())
            self.register_buffer(f"theta_best_{i}", p.detach().clone())

    def _parameters_of_model(self) -> list[Tensor]:
        return [p for p in self._model.parameters() if p.requires_grad]

    def _snapshots(self) -> list[Tensor]:
        return [getattr(self, f"theta_star_{i}") for i in range(self._count)]

    def _best(self) -> list[Tensor]:
        return [getattr(self, f"theta_best_{i}") for i in range(self._count)]

    @torch.no_grad()
    def remember(self) -> None:
        """``theta_best <- theta``: keep the current parameters as the running projection's best state."""
        for best, p in zip(self._best(), self._parameters_of_model()):
            best.copy_(p.detach())

    @torch.no_grad()
    def snapshot(self, from_best: bool = False) -> None:
        """``theta* <- theta`` (or ``<- theta_best``): the point the next projection stays near."""
        sources = self._best() if from_best else [p.detach() for p in self._parameters_of_model()]
        for star, source in zip(self._snapshots(), sources):
            star.copy_(source)

    def forward(self) -> Tensor:
        params = self._parameters_of_model()
        if self.lam == 0.0 or not params:
            return torch.zeros((), device=params[0].device if params else None)
        stars = self._snapshots()
        if len(stars) != len(params):
            raise ValueError(f"the model has {len(params)} trainable tensors but the snapshot holds {len(stars)}")
        diffs = torch._foreach_sub(params, stars)
        total = torch.stack([d.pow(2).sum() for d in diffs]).sum()
        return 0.5 * self.lam * total

    def extra_repr(self) -> str:
        return f"lam={self.lam}, tensors={self._count}"
