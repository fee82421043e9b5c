"""PML regularizers from a config mapping: ``loss.params.embedding_regularizer: {name: lp, power: 2}``.

PML's losses take an ``embedding_regularizer`` (added to the loss with ``embedding_reg_weight``) and, for the
proxy losses, a ``weight_regularizer``; both are objects, which a YAML file cannot name. A config gives the
regularizer's name and keyword arguments and ``build_regularizer`` makes the object. Sohn's N-pair loss
(NeurIPS 2016) is the use that needs it: unnormalised embeddings with an L2 penalty, ``lp`` with ``power: 2``
(the squared norm of each embedding, averaged over the batch; Eq. of the penalty: ``w * mean_i ||f_i||^2``).
"""

from __future__ import annotations

from typing import Any

from pytorch_metric_learning.regularizers import (
    BaseRegularizer, CenterInvariantRegularizer, LpRegularizer, RegularFaceRegularizer, SparseCentersRegularizer,
    ZeroMeanRegularizer,
)

__all__ = ["REGULARIZERS", "REGULARIZER_OPTIONS", "build_regularizer"]

#: config name -> PML regularizer class
REGULARIZERS: dict[str, type[BaseRegularizer]] = {
    "lp": LpRegularizer, "zero_mean": ZeroMeanRegularizer, "center_invariant": CenterInvariantRegularizer,
    "regular_face": RegularFaceRegularizer, "sparse_centers": SparseCentersRegularizer,
}

#: the loss options that take a regularizer
REGULARIZER_OPTIONS = ("embedding_regularizer", "weight_regularizer")


def build_regularizer(option: str, spec: dict[str, Any]) -> BaseRegularizer:
    """``{name: lp | zero_mean | ..., **kwargs}`` -> the PML regularizer (e.g. ``LpRegularizer(power=2)``)."""
    options = dict(spec)
    name = options.pop("name", None)
    if name not in REGULARIZERS:
        raise ValueError(f"loss.params.{option} needs name: one of {', '.join(REGULARIZERS)}; got {name!r}")
    try:
        return REGULARIZERS[name](**options)
    except TypeError as error:
        raise ValueError(f"loss.params.{option} {spec!r}: {error}; lp takes p and power") from error
