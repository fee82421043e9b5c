"""The training objective as a sum of named terms.

``Objective`` adds the values of its ``ObjectiveTerm`` s; each method plugs in a
term (the metric loss, a loss on augmented features, a proxy regulariser, ...)
instead of a flag in the loop. Terms are modules, so their parameters (proxies,
classifier weights) and buffers (class centres, memories) are optimised and
checkpointed with the objective.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class ObjectiveTerm(nn.Module):
    """One named summand of the objective: ``weight * value(embeddings, labels, batch)``.

    ``is_metric_loss`` marks the terms of the metric-learning loss itself (L_DML), as opposed to
    regularisers and auxiliary losses, for methods that re-weight it (GSP's Eq. 5.2.5).
    """

    is_metric_loss = False

    def __init__(self, name: str, weight: float = 1.0) -> None:
        super().__init__()
        self.name = name
        self.weight = weight

    def value(self, embeddings: torch.Tensor, labels: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        return self.weight * self.value(embeddings, labels, batch)


class MetricLossTerm(ObjectiveTerm):
    """A metric loss on the batch embeddings, with an optional miner (PML signature)."""

    is_metric_loss = True

    def __init__(
        self, loss: nn.Module, miner: nn.Module | None = None, weight: float = 1.0, name: str = "metric"
    ) -> None:
        super().__init__(name, weight)
        self.loss = loss
        self.miner = miner
        self.needs_positive_pairs = not any(True for _ in loss.parameters())

    def value(self, embeddings: torch.Tensor, labels: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        if self.needs_positive_pairs:
            check_has_positive_pair(labels)
        indices_tuple = self.miner(embeddings, labels) if self.miner is not None else None
        return self.loss(embeddings, labels, indices_tuple)


def check_has_positive_pair(labels: torch.Tensor) -> None:
    """Pair and tuple losses learn nothing from a batch in which no label occurs twice."""
    if labels.numel() == torch.unique(labels).numel():
        raise ValueError(
            "the batch has no positive pair (every label occurs once), so a pair-based loss is zero; "
            "sample several images per class (train.m_per_class >= 2)"
        )


class Objective(nn.Module):
    """Sum of named terms; returns the total and each term's detached value for logging."""

    def __init__(self, terms: list[ObjectiveTerm]) -> None:
        super().__init__()
        names = [t.name for t in terms]
        if len(set(names)) != len(names):
            raise ValueError(f"objective term names must be unique, got {names}")
        self.terms = nn.ModuleList(terms)

    def forward(
        self, embeddings: torch.Tensor, labels: torch.Tensor, batch: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        batch = batch or {}
        values = {term.name: term(embeddings, labels, batch) for term in self.terms}
        total = torch.stack(list(values.values())).sum()
        return total, {name: float(v.detach()) for name, v in values.items()}
