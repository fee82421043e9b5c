"""PML objects that a loss takes and a YAML file names by a mapping: ``loss.params.distance: {name: lp, ...}``,
``loss.params.embedding_regularizer: {name: lp, power: 2}`` (and ``weight_regularizer``).

PML's losses take a ``distance`` (pair losses measure with ``LpDistance(normalize_embeddings=True)`` by default,
so they compare points on the unit sphere whatever the model's own normalisation), an ``embedding_regularizer``
(added with ``embedding_reg_weight``) and, for the proxy losses, a ``weight_regularizer``. These are objects, which
a YAML file cannot hold; a config gives the object's name and keyword arguments and ``build_pml_option`` makes it.
Uses: a config that must not normalise (thesis Fig. 3.2: 2-D embeddings with the 1-Lipschitz ``v / max(1, ||v||)``
of Sec. 3.2.4 instead of l2) names ``{name: lp, normalize_embeddings: false}``; Sohn's N-pair loss (NeurIPS 2016)
scores unnormalised dot products (``{name: dot, normalize_embeddings: false}``) with an L2 penalty on the
embeddings, ``{name: lp, power: 2}`` (the squared norm of each embedding averaged over the batch:
``w * mean_i ||f_i||^2``).
"""

from __future__ import annotations

from typing import Any

from pytorch_metric_learning.distances import CosineSimilarity, DotProductSimilarity, LpDistance
from pytorch_metric_learning.regularizers import (
    CenterInvariantRegularizer,
    LpRegularizer,
    RegularFaceRegularizer,
    SparseCentersRegularizer,
    ZeroMeanRegularizer,
)

__all__ = ["DISTANCES", "PML_OPTIONS", "REGULARIZERS", "build_pml_option"]

#: config name -> PML distance class
DISTANCES: dict[str, type] = {"lp": LpDistance, "cosine": CosineSimilarity, "dot": DotProductSimilarity}
#: config name -> PML regularizer class
REGULARIZERS: dict[str, type] = {
    "lp": LpRegularizer,
    "zero_mean": ZeroMeanRegularizer,
    "center_invariant": CenterInvariantRegularizer,
    "regular_face": RegularFaceRegularizer,
    "sparse_centers": SparseCentersRegularizer,
}
#: loss option -> (the classes it may name, the keyword arguments an error suggests)
PML_OPTIONS: dict[str, tuple[dict[str, type], str]] = {
    "distance": (DISTANCES, "normalize_embeddings, p, power, ..."),
    "embedding_regularizer": (REGULARIZERS, "lp takes p and power"),
    "weight_regularizer": (REGULARIZERS, "lp takes p and power"),
}


def build_pml_option(option: str, spec: dict[str, Any]) -> Any:
    """``{name: ..., **kwargs}`` for loss option ``option`` -> the PML object (e.g. ``LpDistance(normalize_embeddings=False)``)."""
    classes, valid = PML_OPTIONS[option]
    options = dict(spec)
    name = options.pop("name", None)
    if name not in classes:
        raise ValueError(f"loss.params.{option} needs name: one of {', '.join(classes)}; got {name!r}")
    try:
        return classes[name](**options)
    except TypeError as error:
        raise ValueError(f"loss.params.{option} {spec!r}: {error}; valid keys: {valid}") from error
