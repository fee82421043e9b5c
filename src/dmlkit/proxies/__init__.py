"""Proxies for deep metric learning: chance-constrained programming (CCP, thesis Ch. 3).

* ``greedy_k_center`` / ``batched_greedy_k_center`` / ``select_per_class`` (Algorithm 2);
* ``ProxyBank`` (k trainable proxies per class) and ``ProxyPairLoss`` (any pair loss against
  the proxies, Eq. 3.2.11);
* ``ProjectionRegularizer`` (``lam/2 ||theta - theta*||^2``, Eq. 3.2.10-3.2.11);
* ``CCPConfig`` (the ``methods.ccp`` config section);
* ``covering_radius`` / ``inter_class_distance`` (Sec. 3.3.1).

The alternation of Algorithm 1 (early stopping per projection, roll-forward of
``theta*`` and proxies) is the training method ``dmlkit.methods.ccp``.
"""

from dmlkit.proxies.bank import ProxyBank, ProxyPairLoss, group_by_class
from dmlkit.proxies.config import CCPConfig
from dmlkit.proxies.diagnostics import covering_radius, embedding_geometry, inter_class_distance, k_center_radii
from dmlkit.proxies.kcenter import batched_greedy_k_center, greedy_k_center, sample_class_pool, select_per_class
from dmlkit.proxies.projection import ProjectionRegularizer

__all__ = [
    "CCPConfig",
    "ProjectionRegularizer",
    "ProxyBank",
    "ProxyPairLoss",
    "batched_greedy_k_center",
    "covering_radius",
    "embedding_geometry",
    "greedy_k_center",
    "group_by_class",
    "inter_class_distance",
    "k_center_radii",
    "sample_class_pool",
    "select_per_class",
]
