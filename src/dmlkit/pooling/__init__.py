"""Poolings: local feature map ``(B, C, h, w)`` -> global feature ``(B, C')``.

``create_pooling(name, dim, **params)`` builds one by name, ``list_poolings()``
lists the names.  Each pooling is a function plus a module (``gap`` / ``GAP``,
...).  Every module of this package is imported here, so a new pooling only has
to live in ``dmlkit/pooling/<file>.py`` and use ``@register_pooling(name)``;
export its module and function below as well.
"""

from __future__ import annotations

from dmlkit.pooling.attention import AttentionPool, attention_pool
from dmlkit.pooling.gsp import (
    GSP,
    MAX_PROTOTYPES,
    generalized_sum_pool,
    generalized_sum_pool_unrolled,
    gsp_costs,
    gsp_transport,
    gsp_transport_unrolled,
)
from dmlkit.pooling.gsp_costs import COST_NORMALIZATIONS, normalize_rows
from dmlkit.pooling.gsp_gmp import GSPGMP, gsp_gmp
from dmlkit.pooling.gsp_diagnostics import gsp_pooling_weights, weight_entropy, weight_summary
from dmlkit.pooling.gsp_prototypes import PROTOTYPE_INITS, PrototypeMemory, kcenter_prototypes
from dmlkit.pooling.netvlad import MAX_CLUSTERS, NetVLAD, netvlad
from dmlkit.pooling.registry import create_pooling, list_poolings, pooling_factory, register_pooling
from dmlkit.pooling.simple import GAP, GAPGMP, GMP, GeM, gap, gap_gmp, gem, gmp

__all__ = [
    # layers and their functions
    "GAP",
    "gap",
    "GMP",
    "gmp",
    "GAPGMP",
    "gap_gmp",
    "GeM",
    "gem",
    "GSP",
    "generalized_sum_pool",
    "GSPGMP",
    "gsp_gmp",
    "NetVLAD",
    "netvlad",
    "AttentionPool",
    "attention_pool",
    # GSP's optimal transport and autograd references
    "gsp_costs",
    "COST_NORMALIZATIONS",
    "normalize_rows",
    "gsp_transport",
    "gsp_transport_unrolled",
    "generalized_sum_pool_unrolled",
    # GSP's prototype start and diagnostics
    "PROTOTYPE_INITS",
    "PrototypeMemory",
    "kcenter_prototypes",
    "gsp_pooling_weights",
    "weight_entropy",
    "weight_summary",
    # size limits
    "MAX_CLUSTERS",
    "MAX_PROTOTYPES",
    # registry
    "create_pooling",
    "list_poolings",
    "register_pooling",
    "pooling_factory",
]


from dmlkit.registry import import_submodules  # noqa: E402

import_submodules(__name__, __path__)
