"""The model of GSP's synthetic study: a trainable token table pooled by GAP or by the library's GSP layer.

Token ids ``(N, n)`` of bags of tokens (``dmlkit.data.datasets.synthetic``) -> embeddings ``(N, d)``; the
tokens and the GSP prototypes live in the box ``[-token_range, token_range]`` (``clamp_`` after every step).
"""

from __future__ import annotations

import torch
from torch import nn

from dmlkit.data.datasets.synthetic import TokenSpec
from dmlkit.pooling.gsp import GSP
from dmlkit_lab.studies.gsp_synthetic_config import SyntheticStudyConfig

__all__ = ["TokenBagModel"]


class TokenBagModel(nn.Module):
    """Trainable token table + pooling: token ids ``(N, n)`` -> embeddings ``(N, d)`` (and the GSP plan).

    ``pooling`` is ``"gap"`` (mean of the bag's tokens, Eq. 5.1.2) or ``"gsp"`` (the library's ``GSP`` layer,
    Eq. 5.2.1, on the bag as a ``d x n x 1`` map; with ``cfg.prototype_init = "kcenter"`` it pools with GAP until
    its memory of GAP-pooled training vectors is full, then starts from their greedy k-centres, Sec. 5.3.1 as the
    author's code runs it). Call ``eval()`` for validation so that evaluation bags never enter the memory.
    """

    def __init__(self, spec: TokenSpec, cfg: SyntheticStudyConfig, pooling: str, generator: torch.Generator) -> None:
        super().__init__()
        if pooling not in ("gap", "gsp"):
            raise ValueError(f"pooling must be 'gap' or 'gsp', got {pooling!r}")
        r = cfg.token_range
        self.pooling, self.range = pooling, r
        self.tokens = nn.Parameter((torch.rand(spec.num_tokens, cfg.token_dim, generator=generator) * 2 - 1) * r)
        protos = (torch.rand(cfg.num_prototypes, cfg.token_dim, generator=generator) * 2 - 1) * r
        self.pool: GSP | None = None
        if pooling == "gsp":
            self.pool = GSP(
                cfg.token_dim,
                cfg.num_prototypes,
                cfg.mu,
                cfg.eps,
                cfg.iters,
                init=cfg.prototype_init,
                memory_size=cfg.memory_size,
                warmup_steps=cfg.warmup_steps,
                normalization=cfg.normalization,
            )
            with torch.no_grad():
                self.pool.prototypes.copy_(protos)  # the random start: uniform in the tokens' box

    @property
    def prototypes(self) -> torch.Tensor | None:
        return None if self.pool is None else self.pool.prototypes

    @property
    def pools_with_gap(self) -> bool:
        """True for GAP, and for GSP while it is still in its k-centre warm-up."""
        return self.pool is None or self.pool.pools_with_gap

    def clamp_(self) -> None:
        """Keep every token and prototype coordinate in ``[-range, range]`` (Sec. 5.3.1; the author's code constrains
        the prototypes with the tokens' constraint)."""
        with torch.no_grad():
            self.tokens.clamp_(-self.range, self.range)
            if self.pool is not None:
                self.pool.prototypes.clamp_(-self.range, self.range)

    def forward(self, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        features = self.tokens[token_ids]  # (N, n, d)
        if self.pool is None:
            return features.mean(dim=1), None
        started = not self.pool.pools_with_gap
        pooled, plan = self.pool.forward_with_plan(features.transpose(1, 2).unsqueeze(-1))  # (N, d, n, 1)
        if not started and not self.pool.pools_with_gap:  # the k-centre start happened in this call
            self.clamp_()
        return pooled, plan
