"""CCP's settings: the ``methods.ccp`` section of an experiment config.

Stored run records may name the section ``ccp:``; ``dmlkit.config_migration`` reads it as this one.

The training method that reads it (proxy loss, projection term, alternation of Algorithm 1)
is ``dmlkit.methods.ccp``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dmlkit.models.embedder import NORMALIZATIONS
from dmlkit.validation import check_int, check_real

__all__ = ["CCPConfig"]


@dataclass
class CCPConfig:
    """Chance-constrained programming (thesis Ch. 3, Algorithm 1), defaults of Sec. 3.3.2.1 (CUB, Cars).

    Attributes:
        enabled: train with proxies and alternating projections.
        proxies_per_class: proxies per class (thesis: 8 for CUB/Cars, 4 for SOP/In-shop).
        pool_size: ``b``, samples per class embedded for the greedy k-centre pick (Algorithm 2;
            thesis: 12, resp. 7); ``pool_size == proxies_per_class`` is random selection.
        lam: ``lambda`` of the projection term ``lam/2 ||theta - theta*||^2`` (Eq. 3.2.11; thesis 2e-4).
        patience: validations without improving the projection's own best that end one projection
            (thesis Sec. 3.2.4: 3; official code's ``ccp.early_stopping_patience = 3``). The run itself ends on
            ``train.patience`` validations without improving the run's best (counted across
            projections), on ``max_projections`` or on ``train.max_steps``.
        max_projections: at most this many projections; the last one is not ended by ``patience``
            but trains on until the run ends (run-level patience or step budget). ``1`` is
            "Loss-Proxy" (a single proxy problem, no alternation, Fig. 3.7a), stopped exactly like
            its baseline; ``null``: no limit.
        restore_best: at a projection end, roll the network and the proxies back to the run's best
            checkpoint before the next projection starts (a stricter reading of Algorithm 2). Default false,
            as the official code: theta* and rho* move to the projection's best state and the network
            trains on from its current weights.
        batch_loss_weight: ``w`` of the batch-pair term: the loss is ``w * L(batch, batch) +
            L(batch, proxies) + projection term``. The official code uses 0.1
            (``ccp.loss_weight``); the thesis text has the proxy term only (0).
        first_projection_lambda: ``lambda`` during the first projection, whose ``theta*`` is the
            initial network (official: 0, ``_updateLambdaCoeff``); later projections use ``lam``.
        proxy_anchor: the proxies are the anchors of the pair/tuple loss (``l(rho_i, z)`` of Eq.
            3.2.11; the official default, which matters for triplet: ``||rho - z+|| - ||rho - z-||``);
            false: the batch samples are the anchors and the proxies the references (PML's ``ref_emb``).
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
    restore_best: bool = False
    batch_loss_weight: float = 0.1
    first_projection_lambda: float = 0.0
    proxy_anchor: bool = False
    plot: bool = False

    @property
    def active(self) -> bool:
        """CCP is on (the one rule: ``dmlkit.methods.ccp`` and ``config_differences`` read it)."""
        return self.enabled

    def __post_init__(self) -> None:
        for key in ("enabled", "from_current", "plot", "restore_best", "proxy_anchor"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"methods.ccp.{key} must be true or false, got {getattr(self, key)!r}")
        for key in ("proxies_per_class", "pool_size", "patience"):
            check_int(f"methods.ccp.{key}", getattr(self, key), 1)
        if self.pool_size < self.proxies_per_class:
            raise ValueError(
                f"methods.ccp.pool_size ({self.pool_size}) must be >= methods.ccp.proxies_per_class ({self.proxies_per_class}): "
                "the k-centre picks the proxies among pool_size samples per class; raise pool_size "
                "(pool_size == proxies_per_class is random selection)"
            )
        for key, hint in (
            ("lam", "the thesis uses 2e-4"),
            ("first_projection_lambda", "the official code uses 0"),
            ("batch_loss_weight", "official 0.1, thesis text 0"),
        ):
            check_real(f"methods.ccp.{key}", getattr(self, key), 0, hint=hint)
        check_int("methods.ccp.max_projections", self.max_projections, 1, none=True)
        check_real("methods.ccp.proxy_lr_mult", self.proxy_lr_mult, 0, low_open=True)
        if self.proxy_normalize not in NORMALIZATIONS:
            raise ValueError(
                f"methods.ccp.proxy_normalize must be one of {NORMALIZATIONS}, got {self.proxy_normalize!r}"
            )
