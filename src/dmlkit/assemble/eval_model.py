"""Which module a run evaluates: its methods' view of the embedder, or a classifier loss's class outputs.

Classification losses (CE', CE'' of the classification-baseline paper) train a classifier head on top of the
embedding. ``eval.embedding: classifier`` evaluates retrieval on that head's outputs in
[0, 1]^c (the space in which Lemmas 3-4 bound the distances) instead of on the features
before it (``features``, the default).

The features are what the run's methods say the embedding is (``Method.eval_model``): for
SFT-d (``methods.sft.normalize_input``) the L2-normalised embedding that the loss compared, not
the raw pre-normalisation output. Every command that embeds with a finished run goes through
``evaluation_model``, so they all search the same vectors.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from dmlkit.methods import Method

__all__ = ["EMBEDDING_SOURCES", "ClassifierOutputs", "evaluation_model", "feature_model", "find_classifier"]

EMBEDDING_SOURCES = ("features", "classifier")


class ClassifierOutputs(nn.Module):
    """``classifier.outputs(model(x))``: the class outputs of a classifier loss as the embedding."""

    def __init__(self, model: nn.Module, classifier: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.classifier = classifier

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier.outputs(self.model(images))


def find_classifier(objective: nn.Module) -> nn.Module | None:
    """The first module of the objective with an ``outputs(embeddings)`` method (a classifier loss), or None."""
    for module in objective.modules():
        if callable(getattr(module, "outputs", None)):
            return module
    return None


def feature_model(model: nn.Module, methods: Sequence[Method]) -> nn.Module:
    """The embedder as the run's methods evaluate it (each method's ``eval_model``, in composition order)."""
    for method in methods:
        model = method.eval_model(model)
    return model


def check_source(source: str) -> None:
    if source not in EMBEDDING_SOURCES:
        raise ValueError(f"eval.embedding must be one of {', '.join(EMBEDDING_SOURCES)}, got {source!r}")


def evaluation_model(
    model: nn.Module, objective: nn.Module | None, source: str, methods: Sequence[Method] = ()
) -> nn.Module:
    """The module whose outputs are evaluated for ``eval.embedding = source``."""
    check_source(source)
    if source == "features":
        return feature_model(model, methods)
    classifier = find_classifier(objective) if objective is not None else None
    if classifier is None:
        raise ValueError(
            "eval.embedding: classifier needs a classifier loss with class outputs (ce_weak or ce_metric); "
            "set eval.embedding: features for this loss"
        )
    return ClassifierOutputs(model, classifier)
