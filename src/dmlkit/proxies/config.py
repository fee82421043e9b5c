"""The CCP section of an experiment config (``ccp:`` in YAML).

The training method that reads it (proxy loss, projection term, alternation of Algorithm 1)
is ``dmlkit.methods.ccp``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dmlkit.models.embedder import NORMALIZATIONS

__all__ = ["CCPConfig"]


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass
class CCPConfig:
    """Chance-constrained programming (thesis Ch. 3, Algorithm 1), defaults of Sec. 3.3.2.1 (CUB, Cars).

    Attributes:
        enabled: train with proxies and alternating projections.
        proxies_per_class: proxies per class (thesis: 8 for CUB/Cars, 4 for SOP/In-shop).
        pool_size: ``b``, samples per class embedded for the greedy k-centre pick (Algorithm 2;
            thesis: 12, resp. 7); ``pool_size == proxies_per_class`` is random selection.
        lam: ``lambda`` of the projection term ``lam/2 ||theta - theta*||^2`` (Eq. 3.2.11; thesis 2e-4).
        patience: validations without improvement that end one projection (thesis Sec. 3.2.4: 3).
            With CCP on, this replaces ``train.patience``: the run ends when a projection ends
            without improving the run's best validation score.
        max_projections: stop after this many projections; ``1`` is "Loss-Proxy" (a single
            proxy problem, no alternation, Fig. 3.7a); ``null`` = until a projection no longer improves.
        proxy_lr_mult: learning rate of the proxies = ``(train.loss_lr or train.lr) * proxy_lr_mult``
            (thesis: no multiplier for CCP, i.e. 1).
        proxy_normalize: normalisation of the proxies before the loss: ``none`` (PML's distances
            normalise them), ``l2`` or ``lipschitz`` (Sec. 3.2.4).
        from_current: Algorithm 2 measures distances from the converged proxies too (``rho_c``);
            false picks each class's k-centres from the pool alone.
        plot: at the end of training write ``plots/ccp_proxies.png`` (samples, converged and next
            proxies, like Fig. 3.2; meaningful for ``model.embedding_dim: 2``).
    """

    enabled: bool = False
    proxies_per_class: int = 8
    pool_size: int = 12
    lam: float = 2.0e-4
    patience: int = 3
    max_projections: int | None = None
    proxy_lr_mult: float = 1.0
    proxy_normalize: str = "none"
    from_current: bool = True
    plot: bool = False

    def __post_init__(self) -> None:
        for key in ("enabled", "from_current", "plot"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"ccp.{key} must be true or false, got {getattr(self, key)!r}")
        for key in ("proxies_per_class", "pool_size", "patience"):
            if not _positive_int(getattr(self, key)):
                raise ValueError(f"ccp.{key} must be a positive int, got {getattr(self, key)!r}")
        if self.pool_size < self.proxies_per_class:
            raise ValueError(
                f"ccp.pool_size ({self.pool_size}) must be >= ccp.proxies_per_class ({self.proxies_per_class}): "
                "the k-centre picks the proxies among pool_size samples per class; raise pool_size "
                "(pool_size == proxies_per_class is random selection)"
            )
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not math.isfinite(self.lam) or self.lam < 0:
            raise ValueError(f"ccp.lam must be a finite number >= 0 (the thesis uses 2e-4), got {self.lam!r}")
        if self.max_projections is not None and not _positive_int(self.max_projections):
            raise ValueError(f"ccp.max_projections must be a positive int or null, got {self.max_projections!r}")
        mult = self.proxy_lr_mult
        if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not math.isfinite(mult) or mult <= 0:
            raise ValueError(f"ccp.proxy_lr_mult must be a finite number > 0, got {mult!r}")
        if self.proxy_normalize not in NORMALIZATIONS:
            raise ValueError(f"ccp.proxy_normalize must be one of {NORMALIZATIONS}, got {self.proxy_normalize!r}")
