"""Poolings: local feature map ``(B, C, h, w)`` -> global feature ``(B, C')``.

``create_pooling(name, dim, **params)`` builds one by name, ``list_poolings()``
lists the names.  Each pooling is a function plus a module (``gap`` / ``GAP``,
...).  Every module of this package is imported here, so a new pooling only has
to live in ``dmlkit/pooling/<file>.py`` and use ``@register_pooling(name)``.
"""

from __future__ import annotations

from dmlkit.pooling.attention import AttentionPool, attention_pool
from dmlkit.pooling.gsp import GSP, generalized_sum_pool, generalized_sum_pool_unrolled
from dmlkit.pooling.netvlad import NetVLAD, netvlad
from dmlkit.pooling.registry import create_pooling, list_poolings, register_pooling
from dmlkit.pooling.simple import GAP, GAPGMP, GMP, GeM, gap, gap_gmp, gem, gmp

__all__ = [
    "GSP",
    "AttentionPool",
    "NetVLAD",
    "attention_pool",
    "generalized_sum_pool",
    "generalized_sum_pool_unrolled",
    "netvlad",
    "GAP",
    "GAPGMP",
    "GMP",
    "GeM",
    "create_pooling",
    "gap",
    "gap_gmp",
    "gem",
    "gmp",
    "list_poolings",
    "register_pooling",
]


from dmlkit.registry import import_submodules  # noqa: E402

import_submodules(__name__, __path__)
