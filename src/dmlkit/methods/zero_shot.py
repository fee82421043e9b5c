"""GSP's zero-shot prediction loss as a training method: the mixing of Eq. 5.2.5 of the thesis.

``methods.zero_shot.weight = lam > 0`` turns it on (with ``model.pooling: gsp``; the section is
``ZeroShotConfig``, ``losses/zero_shot_config.py``). The objective
becomes ``(1 - lam) L_DML + lam L_ZS``: every metric-loss term is scaled by ``1 - lam`` and
``ZeroShotTerm`` adds ``lam * L_ZS`` (Eq. 5.2.4 of ``ZeroShotPredictionLoss``). ``methods.zero_shot.params``:
``ridge`` (eps of P3, 0.05), ``scale`` (of the logits, 9.5 as the author's code; 1 = the text as
written) and ``embedding_dim`` (of the class embeddings; default the model's embedding size, as
the author's code). Its ``encode``
embeds a training batch with ``Embedder.encode``, so the batch carries the GSP transport plan
under ``"transport_plan"`` (gathered across processes with the embeddings). The class-disjoint
halves are drawn from a generator seeded with ``(seed, step)``, so a resumed run draws the same
halves as an uninterrupted one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dmlkit.seeding import make_generator
from dmlkit.losses.zero_shot_config import ZeroShotConfig
from dmlkit.engine.objective import ObjectiveTerm
from dmlkit.losses.zero_shot_prediction_loss import ZeroShotPredictionLoss
from dmlkit.methods.base import BuildContext, Method
from dmlkit.methods.registry import register_method

if TYPE_CHECKING:
    from dmlkit.config import ExperimentConfig

__all__ = ["PLAN_KEY", "ZeroShot", "ZeroShotTerm"]

PLAN_KEY = "transport_plan"
_INIT_STREAM = -1  # seeds the class embeddings; the per-step halves use (seed, step >= 0)


class ZeroShotTerm(ObjectiveTerm):
    """``weight * L_ZS(batch["transport_plan"], labels)`` (thesis Sec. 5.2.3)."""

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


@register_method("zero_shot", settings=ZeroShotConfig)
class ZeroShot(Method):
    """``(1 - lam) L_DML + lam L_ZS`` (Eq. 5.2.5) for a run whose pooling is GSP."""

    name = "zero_shot"
    forward_methods = ("encode",)

    def __init__(self, cfg: "ExperimentConfig") -> None:
        section = cfg.methods.zero_shot  # checked when the config was read (ZeroShotConfig)
        self.weight, self.params = float(section.weight), dict(section.params)
        self.term: ZeroShotTerm | None = None

    @classmethod
    def from_config(cls, cfg: "ExperimentConfig") -> "ZeroShot | None":
        return cls(cfg) if cfg.methods.zero_shot.active else None

    def setup(self, ctx: BuildContext) -> None:
        pooling = getattr(ctx.model, "pooling", None)
        if not hasattr(pooling, "forward_with_plan"):
            raise ValueError(
                f"methods.zero_shot.weight > 0 needs a pooling with a transport plan (model.pooling: gsp), "
                f"got {type(pooling).__name__}"
            )
        m, mu = getattr(pooling, "num_prototypes", None), getattr(pooling, "mu", None)
        if not isinstance(m, int) or mu is None:
            raise ValueError(
                f"pooling {type(pooling).__name__} must expose num_prototypes and mu for the zero-shot loss"
            )
        params = {
            "embedding_dim": ctx.embedding_dim,
            **self.params,
        }  # class embeddings of the embedding's size (author's code)
        loss = ZeroShotPredictionLoss(
            ctx.num_classes, m, mu=float(mu), generator=make_generator(ctx.seed, _INIT_STREAM), **params
        )
        self.term = ZeroShotTerm(loss, self.weight, seed=ctx.seed)

    def terms(self, terms: list[ObjectiveTerm]) -> list[ObjectiveTerm]:
        for term in terms:  # L_DML: every metric-loss term (the real and, with SFT, the generated one)
            if term.is_metric_loss:
                term.weight = (1.0 - self.weight) * term.weight
        return [*terms, self.term]

    def encode(self, model: nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        encoded = model.encode(images)
        return encoded.embedding, {PLAN_KEY: encoded.plan}
