"""The synthetic study of GSP (thesis Sec. 5.3.1, Fig. 5.4): GAP vs GSP vs GSP + L_ZS on bags of tokens.

Set-up (thesis values unless marked *ours*):

* 16 classes, 4 trainable tokens per class and 4 background tokens shared by
  all classes; a sample is a bag of 50 tokens with class fraction
  ``mu~ ~ N(0.5, 0.1)`` (``dmlkit.data.datasets.synthetic``);
* token vectors are clamped to ``[-0.3, 0.3]`` after every step; the pooled
  vector is the embedding, with no normalisation;
* GSP prototypes (the author's ``token_embedding.py``, not the thesis text): clamped to the tokens' range
  after every step too (the same kernel constraint), and started by greedy k-centre after a GAP warm-up
  (``prototype_init = "kcenter"``, the default): the GSP variants pool with GAP for ``warmup_steps``
  batches (4,096 in the author's code), then keep the next ``memory_size`` (1,024) GAP-pooled training
  vectors, and when that memory is full the prototypes become its greedy k-centres
  (``dmlkit.pooling.GSP(init="kcenter")``, the library's layer) and the model pools with GSP. The
  author writes l2-normalised vectors into the memory (so the prototypes start on the unit circle and
  the next step clips them to the box's edge) and l2-normalises tokens and prototypes in the costs;
  dmlkit's layer keeps ``u / max(1, ||u||)`` (the thesis' costs), which is ``u`` here (GAP vectors of
  tokens in the box have norm <= 0.43); ``normalization = "l2"`` (``--normalization l2``) is the
  author's reading of both. ``prototype_init = "random"`` starts
  them uniform in the box and pools with GSP from the first step (the study's first version). Early
  stopping and the choice of the best epoch only start once the model pools with GSP;
* Adam, learning rate 1e-4, batches of 4 samples x 16 classes, early stopping
  with 30 epochs patience on the validation MAP@R;
* *ours* (not given in the thesis): tokens are 2-D (so the embedding space is
  plotted as is, like Fig. 5.4); an epoch is ``steps_per_epoch`` = 25 batches;
  validation and test sets are 50 fresh bags per class each (the same 16
  classes: tokens belong to their classes, so unseen classes have no tokens);
  the metric loss is the contrastive loss (the example loss of Sec. 5.1) on
  unnormalised Euclidean distances with negative margin 0.2 (the tokens live
  in a box of side 0.6); GSP has 16 prototypes, ``mu = 0.3``, ``eps = 20``
  (costs here are below ~0.85, so the 5.0 of Sec. 5.2.4 would smooth the plan
  almost to GAP), 50 iterations; L_ZS with ``lam = 0.1``;
  ``max_epochs`` (1,000) caps the run for CPU time; at 1,000 every run of seeds 0-2 stops by its patience
  (at 300 the k-centre GSP runs, which pool with GSP only from step 4,112, were cut still improving).

The margin matters for GAP: GAP learns to collapse the background tokens to one
point and to put the classes on rays around it, so the class fraction only
moves a sample along its ray; with margin 0.1 that already separates the 16
classes (MAP@R ~90) and GSP gains ~7 points, with margin 0.2 the rays are too
short for the margin and GSP gains ~35 points (the thesis reports ~70 for an
unnamed loss). L_ZS (a 16-way cross-entropy, ~5.5 at the start) has about 13x
the token gradient of this contrastive loss (~0.07), so at ``lam = 0.1`` it
dominates and lowers MAP@R here; ``lam = 0.01`` keeps GSP's gain. (Those figures
are seed 0 of the first version, random prototypes; the measured tables of this
version, k-centre and random, 3 seeds, are in ``docs/methods/gsp.md``.)

All variants start from the same token initialisation and see the same
batches, validation and test bags. ``run_study`` writes ``table.md``,
``results.json`` and ``embedding_space.png`` (test embeddings, tokens and
prototypes in the 2-D token space, one panel per variant).

Run: ``dmlkit study gsp-synthetic --out DIR`` or ``python -m dmlkit.studies.gsp_synthetic --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from pytorch_metric_learning.distances import LpDistance
from torch import nn

from dmlkit.data.seeding import make_generator
from dmlkit.data.datasets.synthetic import TokenSpec, balanced_labels, sample_token_bags
from dmlkit.evaluation import retrieval_metrics
from dmlkit.losses import create_loss
from dmlkit.losses.zero_shot_prediction_loss import ZeroShotPredictionLoss
from dmlkit.pooling.gsp import GSP
from dmlkit.pooling.gsp_costs import COST_NORMALIZATIONS, check_normalization
from dmlkit.pooling.gsp_prototypes import PROTOTYPE_INITS
from dmlkit.protocols.table import markdown_grid
from dmlkit.studies.paired_runs import paired_differences
from dmlkit.validation import is_int

__all__ = ["SyntheticStudyConfig", "TokenBagModel", "VARIANTS", "main", "run_study", "train_variant"]

VARIANTS = ("gap", "gsp", "gsp+zs")
METRIC = "mean_average_precision_at_r"


@dataclass
class SyntheticStudyConfig:
    """Hyper-parameters of the synthetic study (see the module docstring for their sources)."""

    spec: TokenSpec = field(default_factory=TokenSpec)
    token_dim: int = 2
    token_range: float = 0.3
    lr: float = 1e-4
    samples_per_class: int = 4
    steps_per_epoch: int = 25
    max_epochs: int = 1000
    patience: int = 30
    eval_per_class: int = 50
    loss: str = "contrastive"
    loss_params: dict[str, Any] = field(default_factory=lambda: {"pos_margin": 0.0, "neg_margin": 0.2})
    num_prototypes: int = 16
    mu: float = 0.3
    eps: float = 20.0
    iters: int = 50
    zero_shot_weight: float = 0.1
    prototype_init: str = "kcenter"
    warmup_steps: int = 4096
    memory_size: int = 1024
    normalization: str = "unit_ball"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("token_dim", "samples_per_class", "steps_per_epoch", "max_epochs", "patience", "eval_per_class",
                     "memory_size"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not is_int(self.warmup_steps) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an int >= 0, got {self.warmup_steps!r}")
        check_normalization(self.normalization)
        if self.prototype_init not in PROTOTYPE_INITS:
            raise ValueError(f"prototype_init must be one of {', '.join(PROTOTYPE_INITS)}, got {self.prototype_init!r}")
        if not self.token_range > 0 or not self.lr > 0:
            raise ValueError("token_range and lr must be positive")
        if not 0.0 <= self.zero_shot_weight < 1.0:
            raise ValueError(f"zero_shot_weight must lie in [0, 1), got {self.zero_shot_weight}")


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
            self.pool = GSP(cfg.token_dim, cfg.num_prototypes, cfg.mu, cfg.eps, cfg.iters, init=cfg.prototype_init,
                            memory_size=cfg.memory_size, warmup_steps=cfg.warmup_steps, normalization=cfg.normalization)
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


def _eval_set(spec: TokenSpec, per_class: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    labels = balanced_labels(spec.num_classes, per_class)
    ids, _ = sample_token_bags(spec, labels, generator)
    return ids, labels


def _embed(model: TokenBagModel, ids: torch.Tensor) -> torch.Tensor:
    """Embeddings in eval mode (no memory writes), the model left in training mode."""
    model.eval()
    with torch.no_grad():
        emb, _ = model(ids)
    model.train()
    return emb


def _map_at_r(model: TokenBagModel, ids: torch.Tensor, labels: torch.Tensor) -> float:
    return float(retrieval_metrics(_embed(model, ids), labels, ks=(1,))[METRIC])


def train_variant(variant: str, cfg: SyntheticStudyConfig) -> dict[str, Any]:
    """Train one variant (``gap``, ``gsp`` or ``gsp+zs``) with early stopping; test MAP@R at the best epoch
    (Sec. 5.3.1). For GSP with a k-centre start only epochs that end pooling with GSP are candidates, and the
    patience counts from the first of them; ``kcenter_step`` is the step after which GSP took over."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(VARIANTS)}")
    spec, seed = cfg.spec, cfg.seed
    model = TokenBagModel(spec, cfg, "gap" if variant == "gap" else "gsp", make_generator(seed, 0))
    metric_loss = create_loss(cfg.loss, **cfg.loss_params, distance=LpDistance(normalize_embeddings=False))
    zs = None
    lam = cfg.zero_shot_weight if variant == "gsp+zs" else 0.0
    if lam > 0:
        zs = ZeroShotPredictionLoss(spec.num_classes, cfg.num_prototypes, mu=cfg.mu, generator=make_generator(seed, 4))
    params = list(model.parameters()) + (list(zs.parameters()) if zs is not None else [])
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    val_ids, val_labels = _eval_set(spec, cfg.eval_per_class, make_generator(seed, 2))
    test_ids, test_labels = _eval_set(spec, cfg.eval_per_class, make_generator(seed, 3))
    batches = make_generator(seed, 1)
    batch_labels = balanced_labels(spec.num_classes, cfg.samples_per_class)
    best, best_epoch, best_state, history = -1.0, -1, None, []
    started, step, kcenter_step, first_epoch = time.perf_counter(), 0, None, None
    model.train()
    for epoch in range(cfg.max_epochs):
        for _ in range(cfg.steps_per_epoch):
            ids, _ = sample_token_bags(spec, batch_labels, batches)
            warming = model.pools_with_gap
            emb, plan = model(ids)
            if warming and not model.pools_with_gap:
                kcenter_step = step + 1  # this batch filled the memory; GSP pools from the next one
            loss = metric_loss(emb, batch_labels)
            if zs is not None:
                loss = (1 - lam) * loss + lam * zs(plan, batch_labels, make_generator(seed, 5, step))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            model.clamp_()
            step += 1
        score = _map_at_r(model, val_ids, val_labels)
        history.append(score)
        if model.pool is not None and model.pools_with_gap:
            continue  # still GAP: neither a candidate nor counted by the patience
        first_epoch = epoch if first_epoch is None else first_epoch
        if score > best:
            best, best_epoch = score, epoch
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        elif epoch - max(best_epoch, first_epoch) >= cfg.patience:
            break
    if best_state is None:
        raise RuntimeError(f"{variant}: the GAP warm-up ({cfg.warmup_steps} steps + the memory) outlasted "
                           f"max_epochs={cfg.max_epochs}; raise max_epochs or lower warmup_steps")
    model.load_state_dict(best_state)
    test_emb = _embed(model, test_ids)
    test = retrieval_metrics(test_emb, test_labels, ks=(1,))
    return {
        "variant": variant,
        "val_map_at_r": best,
        "test_map_at_r": float(test[METRIC]),
        "test_precision_at_1": float(test["precision_at_1"]),
        "best_epoch": best_epoch,
        "epochs": len(history),
        "steps": step,
        "best_step": (best_epoch + 1) * cfg.steps_per_epoch,
        "kcenter_step": kcenter_step,
        "seconds": round(time.perf_counter() - started, 1),
        "val_history": history,
        "test_embeddings": test_emb,
        "test_labels": test_labels,
        "tokens": model.tokens.detach().clone(),
        "prototypes": None if model.prototypes is None else model.prototypes.detach().clone(),
    }


def _setting(cfg: SyntheticStudyConfig) -> str:
    start = (f"k-centres of {cfg.memory_size} GAP-pooled vectors after {cfg.warmup_steps} GAP steps"
             if cfg.prototype_init == "kcenter" else "uniform in the box")
    return (f"16 classes x 4 tokens + 4 background tokens, 50 tokens/sample, class fraction ~ N(0.5, 0.1); "
            f"{cfg.token_dim}-D tokens and prototypes in [-{cfg.token_range}, {cfg.token_range}], Adam {cfg.lr:g}, "
            f"loss {cfg.loss} {cfg.loss_params}; GSP m={cfg.num_prototypes}, mu={cfg.mu}, eps={cfg.eps}, "
            f"iters={cfg.iters}, costs normalised {cfg.normalization}, prototypes start {start}; "
            f"lam={cfg.zero_shot_weight}; patience {cfg.patience} "
            f"epochs of {cfg.steps_per_epoch} steps, at most {cfg.max_epochs} epochs.")


def _table(results: list[dict[str, Any]], cfg: SyntheticStudyConfig) -> str:
    from dmlkit.protocols.table import format_mean_std, mean_std

    variants = list(dict.fromkeys(r["variant"] for r in results))
    seeds = sorted({r["seed"] for r in results})
    summary = []
    for v in variants:
        runs = [r for r in results if r["variant"] == v]
        summary.append([v, str(len(runs)), *(format_mean_std(mean_std([r[k] for r in runs]), 100.0, 2)
                                             for k in ("test_map_at_r", "test_precision_at_1", "val_map_at_r"))])
    lines = [
        "# Synthetic study (thesis Sec. 5.3.1): GAP vs GSP vs GSP + L_ZS",
        "",
        _setting(cfg) + f" Seeds {', '.join(map(str, seeds))} (mean ± sample std).",
        "",
        markdown_grid(["pooling", "n", "test MAP@R", "test P@1", "best val MAP@R"], summary, align="lrrrr"),
    ]
    diffs = paired_differences(results)
    if diffs:
        rows = []
        for v in variants:
            mine = [d for d in diffs if d["variant"] == v]
            if mine:
                rows.append([v, ", ".join(f"{d['seed']}: {100 * d['test_map_at_r']:+.2f}" for d in mine),
                             format_mean_std(mean_std([d["test_map_at_r"] for d in mine]), 100.0, 2, signed=True),
                             f"{sum(d['test_map_at_r'] > 0 for d in mine)}/{len(mine)}"])
        lines += ["", "Paired by seed against GAP, test MAP@R points (thesis: GSP about +70, Sec. 6.2; Fig. 5.4 "
                  "shows the geometry only):", "",
                  markdown_grid(["pooling", "per seed", "mean", "seeds ahead"], rows, align="llrr")]
    per_run = [[r["variant"], str(r["seed"]), f"{100 * r['test_map_at_r']:.2f}", f"{100 * r['test_precision_at_1']:.2f}",
                f"{100 * r['val_map_at_r']:.2f}", str(r["kcenter_step"] if r["kcenter_step"] is not None else ""),
                str(r["best_step"]), str(r["steps"]), str(r["seconds"])] for r in results]
    lines += ["", "Per run (steps: trained; best step: end of the best epoch; k-centre step: GSP from the next step):", "",
              markdown_grid(["pooling", "seed", "test MAP@R", "test P@1", "best val MAP@R", "k-centre step", "best step",
                             "steps", "seconds"], per_run, align="lrrrrrrrr"), ""]
    return "\n".join(lines)


def plot_embedding_space(results: list[dict[str, Any]], spec: TokenSpec, path: str | Path) -> None:
    """One panel per variant: test embeddings (dots), class tokens (x), background tokens (black squares), prototypes (stars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dmlkit.viz.plots import pca_2d

    fig, axes = plt.subplots(1, len(results), figsize=(4.6 * len(results), 4.4), squeeze=False)
    cmap = plt.get_cmap("tab20")
    k = spec.class_tokens
    for ax, r in zip(axes[0], results):
        emb, labels, tokens, protos = r["test_embeddings"], r["test_labels"], r["tokens"], r["prototypes"]
        if emb.shape[1] != 2:  # project everything with the PCA of the embeddings
            stacked = torch.cat([emb, tokens] + ([protos] if protos is not None else []))
            stacked = pca_2d(stacked)
            emb, tokens = stacked[: len(emb)], stacked[len(emb) : len(emb) + len(tokens)]
            protos = stacked[len(emb) + len(r["tokens"]) :] if protos is not None else None
        for c in range(spec.num_classes):
            colour = cmap(c % 20)
            pts = emb[labels == c]
            ax.scatter(pts[:, 0], pts[:, 1], s=5, color=colour, alpha=0.5)
            tk = tokens[c * k : (c + 1) * k]
            ax.scatter(tk[:, 0], tk[:, 1], marker="x", s=30, color=colour)
        bg = tokens[spec.num_classes * k :]
        ax.scatter(bg[:, 0], bg[:, 1], marker="s", s=40, color="black", label="background tokens")
        if protos is not None:
            ax.scatter(protos[:, 0], protos[:, 1], marker="*", s=60, color="grey", edgecolor="black", label="prototypes")
        ax.set_title(f"{r['variant']}: test MAP@R {100 * r['test_map_at_r']:.1f}")
        ax.legend(loc="lower right", fontsize=7)
        ax.set_aspect("equal", adjustable="datalim")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_study(cfg: SyntheticStudyConfig, out_dir: str | Path, variants: Sequence[str] = VARIANTS,
              seeds: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Train every variant on every seed (default ``[cfg.seed]``; Sec. 5.3.1), write ``table.md`` (mean ± std,
    paired differences against GAP, per run), ``results.json`` and ``embedding_space.png`` (first seed)."""
    from dataclasses import replace

    seeds = [cfg.seed] if seeds is None else list(seeds)
    if not seeds:
        raise ValueError("the synthetic study needs at least one seed")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only wait for each other
    try:
        results = [{"seed": seed, **train_variant(v, replace(cfg, seed=seed))} for seed in seeds for v in variants]
    finally:
        torch.set_num_threads(threads)
    (out / "table.md").write_text(_table(results, cfg))
    tensors = ("test_embeddings", "test_labels", "tokens", "prototypes")
    keep = [{k: v for k, v in r.items() if k not in tensors} for r in results]
    config = {**asdict(cfg), "seeds": seeds}
    (out / "results.json").write_text(json.dumps({"config": config, "results": keep}, indent=2))
    plot_embedding_space([r for r in results if r["seed"] == seeds[0]], cfg.spec, out / "embedding_space.png")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dmlkit study gsp-synthetic", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for table.md, results.json, embedding_space.png")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds; the table pairs each with GAP")
    parser.add_argument("--max-epochs", type=int, default=SyntheticStudyConfig.max_epochs)
    parser.add_argument("--steps-per-epoch", type=int, default=SyntheticStudyConfig.steps_per_epoch)
    parser.add_argument("--patience", type=int, default=SyntheticStudyConfig.patience)
    parser.add_argument("--lr", type=float, default=SyntheticStudyConfig.lr)
    parser.add_argument("--eps", type=float, default=SyntheticStudyConfig.eps, help="GSP inverse smoothing")
    parser.add_argument("--mu", type=float, default=SyntheticStudyConfig.mu)
    parser.add_argument("--num-prototypes", type=int, default=SyntheticStudyConfig.num_prototypes)
    parser.add_argument("--iters", type=int, default=SyntheticStudyConfig.iters)
    parser.add_argument("--token-dim", type=int, default=SyntheticStudyConfig.token_dim)
    parser.add_argument("--neg-margin", type=float, default=0.2, help="contrastive loss negative margin")
    parser.add_argument("--zero-shot-weight", type=float, default=SyntheticStudyConfig.zero_shot_weight)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--prototype-init", choices=PROTOTYPE_INITS, default=SyntheticStudyConfig.prototype_init,
                        help="kcenter: GAP warm-up, then greedy k-centres of GAP-pooled vectors (author's code); random")
    parser.add_argument("--warmup-steps", type=int, default=SyntheticStudyConfig.warmup_steps,
                        help="GAP steps before the k-centre memory starts filling")
    parser.add_argument("--memory-size", type=int, default=SyntheticStudyConfig.memory_size)
    parser.add_argument("--normalization", choices=COST_NORMALIZATIONS, default=SyntheticStudyConfig.normalization,
                        help="GSP costs and memory rows: unit_ball (thesis, u / max(1, ||u||)) or l2 (author's code)")
    args = parser.parse_args(argv)
    cfg = SyntheticStudyConfig(
        seed=args.seeds[0], max_epochs=args.max_epochs, steps_per_epoch=args.steps_per_epoch, patience=args.patience,
        lr=args.lr, eps=args.eps, mu=args.mu, num_prototypes=args.num_prototypes, iters=args.iters,
        token_dim=args.token_dim, loss_params={"pos_margin": 0.0, "neg_margin": args.neg_margin},
        zero_shot_weight=args.zero_shot_weight, prototype_init=args.prototype_init, warmup_steps=args.warmup_steps,
        memory_size=args.memory_size, normalization=args.normalization,
    )
    run_study(cfg, args.out, args.variants, args.seeds)
    print((Path(args.out) / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
