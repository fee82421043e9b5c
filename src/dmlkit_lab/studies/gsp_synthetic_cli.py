"""The command line of GSP's synthetic study: ``dmlkit study gsp-synthetic``.

Arguments to a ``SyntheticStudyConfig``, then ``dmlkit_lab.studies.gsp_synthetic.run_study``; prints the written
``table.md``.

Run: ``dmlkit study gsp-synthetic --out DIR`` or ``python -m dmlkit_lab.studies.gsp_synthetic_cli --out DIR``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from dmlkit.pooling.gsp_costs import COST_NORMALIZATIONS
from dmlkit.pooling.gsp_prototypes import PROTOTYPE_INITS
from dmlkit_lab.studies import gsp_synthetic
from dmlkit_lab.studies.gsp_synthetic_config import SyntheticStudyConfig

__all__ = ["config_from_args", "main", "parser"]


def parser() -> argparse.ArgumentParser:
    """The study's argument parser; the defaults are ``SyntheticStudyConfig``'s."""
    d = SyntheticStudyConfig
    out = argparse.ArgumentParser(prog="dmlkit study gsp-synthetic", description=gsp_synthetic.__doc__.splitlines()[0])
    out.add_argument("--out", required=True, help="folder for table.md, results.json, embedding_space.png")
    out.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds; the table pairs each with GAP")
    out.add_argument("--max-epochs", type=int, default=d.max_epochs)
    out.add_argument("--steps-per-epoch", type=int, default=d.steps_per_epoch)
    out.add_argument("--patience", type=int, default=d.patience)
    out.add_argument("--lr", type=float, default=d.lr)
    out.add_argument("--eps", type=float, default=d.eps, help="GSP inverse smoothing")
    out.add_argument("--mu", type=float, default=d.mu)
    out.add_argument("--num-prototypes", type=int, default=d.num_prototypes)
    out.add_argument("--iters", type=int, default=d.iters)
    out.add_argument("--token-dim", type=int, default=d.token_dim)
    out.add_argument("--neg-margin", type=float, default=0.2, help="contrastive loss negative margin")
    out.add_argument("--zero-shot-weight", type=float, default=d.zero_shot_weight)
    out.add_argument("--variants", nargs="+", default=list(gsp_synthetic.VARIANTS), choices=gsp_synthetic.VARIANTS)
    out.add_argument(
        "--prototype-init",
        choices=PROTOTYPE_INITS,
        default=d.prototype_init,
        help="kcenter: GAP warm-up, then greedy k-centres of GAP-pooled vectors (author's code); random",
    )
    out.add_argument(
        "--warmup-steps", type=int, default=d.warmup_steps, help="GAP steps before the k-centre memory starts filling"
    )
    out.add_argument("--memory-size", type=int, default=d.memory_size)
    out.add_argument(
        "--normalization",
        choices=COST_NORMALIZATIONS,
        default=d.normalization,
        help="GSP costs and memory rows: unit_ball (thesis, u / max(1, ||u||)) or l2 (author's code)",
    )
    return out


def config_from_args(args: argparse.Namespace) -> SyntheticStudyConfig:
    """The config of the parsed arguments; its ``seed`` is the first of ``--seeds``."""
    return SyntheticStudyConfig(
        seed=args.seeds[0],
        max_epochs=args.max_epochs,
        steps_per_epoch=args.steps_per_epoch,
        patience=args.patience,
        lr=args.lr,
        eps=args.eps,
        mu=args.mu,
        num_prototypes=args.num_prototypes,
        iters=args.iters,
        token_dim=args.token_dim,
        loss_params={"pos_margin": 0.0, "neg_margin": args.neg_margin},
        zero_shot_weight=args.zero_shot_weight,
        prototype_init=args.prototype_init,
        warmup_steps=args.warmup_steps,
        memory_size=args.memory_size,
        normalization=args.normalization,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    gsp_synthetic.run_study(config_from_args(args), args.out, args.variants, args.seeds)
    print((Path(args.out) / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
