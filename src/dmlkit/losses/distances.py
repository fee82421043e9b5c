"""PML distances from a config mapping: ``loss.params.distance: {name: lp, normalize_embeddings: false}``.

PML's pair losses measure with ``LpDistance(normalize_embeddings=True)`` by default, so they
compare points on the unit sphere whatever the model's own normalisation. A config that must
not normalise (thesis Fig. 3.2: 2-D embeddings with the 1-Lipschitz ``v / max(1, ||v||)`` of
Sec. 3.2.4 instead of l2, whose 2-D image is a circle) names the distance and its keyword
arguments; ``build_distance`` makes the PML object.
"""

from __future__ import annotations

from typing import Any

from pytorch_metric_learning.distances import BaseDistance, CosineSimilarity, DotProductSimilarity, LpDistance

__all__ = ["DISTANCES", "build_distance"]

#: config name -> PML distance class
DISTANCES: dict[str, type[BaseDistance]] = {"lp": LpDistance, "cosine": CosineSimilarity, "dot": DotProductSimilarity}


def build_distance(spec: dict[str, Any]) -> BaseDistance:
    """``{name: lp | cosine | dot, **kwargs}`` -> the PML distance (e.g. ``LpDistance(normalize_embeddings=False)``)."""
    options = dict(spec)
    name = options.pop("name", None)
    if name not in DISTANCES:
        raise ValueError(f"loss.params.distance needs name: one of {', '.join(DISTANCES)}; got {name!r}")
    try:
        return DISTANCES[name](**options)
    except TypeError as error:
        raise ValueError(f"loss.params.distance {spec!r}: {error}; valid keys: normalize_embeddings, p, power, ...") from error
