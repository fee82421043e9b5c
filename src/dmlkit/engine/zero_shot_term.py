"""The objective term of GSP's zero-shot prediction loss and the mixing of Eq. 5.2.5.

``ZeroShotTerm`` reads the GSP transport plan that the trainer puts in
``batch["transport_plan"]`` and returns ``L_ZS`` (Eq. 5.2.4) of
``ZeroShotPredictionLoss``. ``zero_shot_objective_terms`` gives the two terms of
``(1 - lam) L_DML + lam L_ZS`` (Eq. 5.2.5 of the thesis). The class-disjoint
halves are drawn from a generator seeded with ``(seed, step)``, so a resumed run
draws the same halves as an uninterrupted one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dmlkit.data.seeding import make_generator
from dmlkit.engine.objective import MetricLossTerm, ObjectiveTerm
from dmlkit.losses.zero_shot_prediction_loss import ZeroShotPredictionLoss

__all__ = ["PLAN_KEY", "ZeroShotTerm", "zero_shot_objective_terms"]

PLAN_KEY = "transport_plan"
_INIT_STREAM = -1  # seeds the class embeddings; the per-step halves use (seed, step >= 0)


class ZeroShotTerm(ObjectiveTerm):
    """``weight * L_ZS(batch["transport_plan"], labels)`` (thesis Sec. 5.2.3)."""

    needs_transport_plan = True

    def __init__(self, loss: ZeroShotPredictionLoss, weight: float, seed: int = 0, name: str = "zero_shot") -> None:
        super().__init__(name, weight)
        self.loss = loss
        self.seed = int(seed)

    def value(self, embeddings: torch.Tensor, labels: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        plan = batch.get(PLAN_KEY)
        if plan is None:
            raise ValueError(
                f"the zero-shot term needs batch['{PLAN_KEY}'] (the GSP plan): embed with Embedder.encode "
                "and a pooling that has forward_with_plan (model.pooling: gsp)"
            )
        generator = make_generator(self.seed, int(batch.get("step", 0)))
        return self.loss(plan, labels, generator)


def zero_shot_objective_terms(
    metric_loss: nn.Module, miner: nn.Module | None, pooling: nn.Module, num_classes: int, weight: float,
    seed: int = 0, **params: Any,
) -> list[ObjectiveTerm]:
    """``[(1 - lam) * metric loss, lam * L_ZS]`` (Eq. 5.2.5) for a GSP ``pooling`` module.

    ``pooling`` must expose ``forward_with_plan``, ``num_prototypes`` and ``mu``;
    ``params`` go to ``ZeroShotPredictionLoss`` (``ridge``, ``embedding_dim``).
    """
    if not 0.0 < weight < 1.0:
        raise ValueError(f"loss.zero_shot_weight must lie in [0, 1) (lam of Eq. 5.2.5), got {weight}")
    if not hasattr(pooling, "forward_with_plan"):
        raise ValueError(
            f"loss.zero_shot_weight > 0 needs a pooling with a transport plan (model.pooling: gsp), "
            f"got {type(pooling).__name__}"
        )
    m = getattr(pooling, "num_prototypes", None)
    mu = getattr(pooling, "mu", None)
    if not isinstance(m, int) or mu is None:
        raise ValueError(f"pooling {type(pooling).__name__} must expose num_prototypes and mu for the zero-shot loss")
    allowed = {"ridge", "embedding_dim"}
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(f"unknown loss.zero_shot_params {unknown}; valid keys are: {', '.join(sorted(allowed))}")
    zs = ZeroShotPredictionLoss(num_classes, m, mu=float(mu), generator=make_generator(seed, _INIT_STREAM), **params)
    return [MetricLossTerm(metric_loss, miner, weight=1.0 - weight), ZeroShotTerm(zs, weight, seed=seed)]
