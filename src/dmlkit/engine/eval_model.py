"""Which network output is the embedding at evaluation: the features, or a classifier loss's class outputs.

Classification losses (CE', CE'' of seed 002) train a classifier head on top of
the embedding. ``eval.embedding: classifier`` evaluates retrieval on that
head's outputs in [0, 1]^c (the space in which Lemmas 3-4 bound the distances)
instead of on the features before it (``features``, the default).

Runs whose loss normalises the embedding itself (SFT-d: ``model.normalize: none``
with ``augment.normalize_input: true``) are evaluated on the L2-normalised
embedding, the one the loss compared, not on the raw pre-normalisation output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

EMBEDDING_SOURCES = ("features", "classifier")


class ClassifierOutputs(nn.Module):
    """``classifier.outputs(model(x))``: the class outputs of a classifier loss as the embedding."""

    def __init__(self, model: nn.Module, classifier: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.classifier = classifier

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier.outputs(self.model(images))


class L2Normalized(nn.Module):
    """``normalize(model(x))``: evaluate a model whose loss normalises its embeddings."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.model(images), dim=1)


def find_classifier(objective: nn.Module) -> nn.Module | None:
    """The first module of the objective with an ``outputs(embeddings)`` method (a classifier loss), or None."""
    for module in objective.modules():
        if callable(getattr(module, "outputs", None)):
            return module
    return None


def evaluation_model(model: nn.Module, objective: nn.Module, source: str, normalize: bool = False) -> nn.Module:
    """The module whose outputs are evaluated for ``eval.embedding = source``.

    ``normalize`` (the run's ``augment.normalize_input``) L2-normalises the features first.
    """
    if source == "features":
        return L2Normalized(model) if normalize else model
    if source != "classifier":
        raise ValueError(f"eval.embedding must be one of {', '.join(EMBEDDING_SOURCES)}, got {source!r}")
    classifier = find_classifier(objective)
    if classifier is None:
        raise ValueError(
            "eval.embedding: classifier needs a classifier loss with class outputs (ce_weak or ce_metric); "
            "set eval.embedding: features for this loss"
        )
    return ClassifierOutputs(model, classifier)
