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
  them uniform in the box and pools with GSP from the first step. Early
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
moves a sample along its ray; a margin of 0.1 is short enough for the rays to
separate the 16 classes under GAP, 0.2 is not, which leaves GSP's selection
something to add. L_ZS (a 16-way cross-entropy, ~5.5 at the start) has about 13x
the token gradient of this contrastive loss (~0.07), so at ``lam = 0.1`` it
dominates the tokens' updates. The measurements behind both remarks and the
study's tables are in ``docs/methods/gsp.md``.

All variants start from the same token initialisation and see the same
batches, validation and test bags. ``run_study`` writes ``table.md``,
``results.json`` and ``embedding_space.png`` (test embeddings, tokens and
prototypes in the 2-D token space, one panel per variant).

The study's parts: ``gsp_synthetic_config`` (the hyper-parameters), ``gsp_synthetic_model`` (the token table
and its pooling), ``loop`` (the bare training loop it shares with ``sft_unbalanced``), ``tables``
(``table.md``), ``gsp_synthetic_plot`` (``embedding_space.png``) and ``gsp_synthetic_cli`` (the command line).

Run: ``dmlkit study gsp-synthetic --out DIR`` or ``python -m dmlkit_lab.studies.gsp_synthetic_cli --out DIR``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from itertools import islice
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from pytorch_metric_learning.distances import LpDistance

from dmlkit.data.datasets.synthetic import TokenSpec, balanced_labels, sample_token_bags
from dmlkit.data.seeding import make_generator
from dmlkit.evaluation import retrieval_metrics
from dmlkit.losses import create_loss
from dmlkit.losses.zero_shot_prediction_loss import ZeroShotPredictionLoss
from dmlkit_lab.studies.gsp_synthetic_config import SyntheticStudyConfig
from dmlkit_lab.studies.gsp_synthetic_model import TokenBagModel
from dmlkit_lab.studies.gsp_synthetic_plot import plot_embedding_space
from dmlkit_lab.studies.loop import train_steps
from dmlkit_lab.studies.tables import gsp_synthetic_table

__all__ = ["SyntheticStudyConfig", "TokenBagModel", "VARIANTS", "run_study", "train_variant"]

VARIANTS = ("gap", "gsp", "gsp+zs")
METRIC = "mean_average_precision_at_r"

# Tags of the random streams derived from one seed: initial tokens and prototypes, training batches,
# validation bags, test bags, the zero-shot loss's initial weights, its per-step draws.
_INIT, _BATCHES, _VAL, _TEST, _ZS_INIT, _ZS_STEP = 0, 1, 2, 3, 4, 5


def _eval_set(spec: TokenSpec, per_class: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    labels = balanced_labels(spec.num_classes, per_class)
    ids, _ = sample_token_bags(spec, labels, generator)
    return ids, labels


def _training_bags(
    spec: TokenSpec, per_class: int, generator: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless training batches ``(token ids, labels)``: ``per_class`` fresh bags of every class per batch."""
    labels = balanced_labels(spec.num_classes, per_class)
    while True:
        ids, _ = sample_token_bags(spec, labels, generator)
        yield ids, labels


def _embed(model: TokenBagModel, ids: torch.Tensor) -> torch.Tensor:
    """Embeddings in eval mode (no memory writes), the model left in training mode."""
    model.eval()
    with torch.no_grad():
        emb, _ = model(ids)
    model.train()
    return emb


def _map_at_r(model: TokenBagModel, ids: torch.Tensor, labels: torch.Tensor) -> float:
    return float(retrieval_metrics(_embed(model, ids), labels, ks=(1,))[METRIC])


@dataclass
class _BestEpoch:
    """Early stopping on the validation MAP@R: the best epoch and its weights; the patience counts from the first
    candidate epoch (for GSP with a k-centre start, the first that ends pooling with GSP)."""

    patience: int
    score: float = -1.0
    epoch: int = -1
    first: int | None = None
    state: dict[str, torch.Tensor] | None = None

    def stop_after(self, epoch: int, score: float, model: TokenBagModel) -> bool:
        """Record a candidate epoch; True when the patience has run out."""
        self.first = epoch if self.first is None else self.first
        if score > self.score:
            self.score, self.epoch = score, epoch
            self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            return False
        return epoch - max(self.epoch, self.first) >= self.patience


def train_variant(variant: str, cfg: SyntheticStudyConfig) -> dict[str, Any]:
    """Train one variant (``gap``, ``gsp`` or ``gsp+zs``) with early stopping; test MAP@R at the best epoch
    (Sec. 5.3.1). For GSP with a k-centre start only epochs that end pooling with GSP are candidates, and the
    patience counts from the first of them; ``kcenter_step`` is the step after which GSP took over."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(VARIANTS)}")
    spec, seed = cfg.spec, cfg.seed
    model = TokenBagModel(spec, cfg, "gap" if variant == "gap" else "gsp", make_generator(seed, _INIT))
    metric_loss = create_loss(cfg.loss, **cfg.loss_params, distance=LpDistance(normalize_embeddings=False))
    lam = cfg.zero_shot_weight if variant == "gsp+zs" else 0.0
    zs = (
        None
        if lam <= 0
        else ZeroShotPredictionLoss(
            spec.num_classes, cfg.num_prototypes, mu=cfg.mu, generator=make_generator(seed, _ZS_INIT)
        )
    )
    params = list(model.parameters()) + (list(zs.parameters()) if zs is not None else [])
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    val_ids, val_labels = _eval_set(spec, cfg.eval_per_class, make_generator(seed, _VAL))
    test_ids, test_labels = _eval_set(spec, cfg.eval_per_class, make_generator(seed, _TEST))
    batches = _training_bags(spec, cfg.samples_per_class, make_generator(seed, _BATCHES))
    kcenter_step: int | None = None

    def step_loss(batch: tuple[torch.Tensor, torch.Tensor], step: int) -> torch.Tensor:
        nonlocal kcenter_step
        ids, labels = batch
        warming = model.pools_with_gap
        emb, plan = model(ids)
        if warming and not model.pools_with_gap:
            kcenter_step = step + 1  # this batch filled the memory; GSP pools from the next one
        loss = metric_loss(emb, labels)
        if zs is not None:
            loss = (1 - lam) * loss + lam * zs(plan, labels, make_generator(seed, _ZS_STEP, step))
        return loss

    best, history, step, started = _BestEpoch(cfg.patience), [], 0, time.perf_counter()
    model.train()
    for epoch in range(cfg.max_epochs):
        step = train_steps(
            step_loss,
            islice(batches, cfg.steps_per_epoch),
            optimizer,
            after_step=model.clamp_,
            first_step=step,
            name=variant,
        ).next_step
        history.append(_map_at_r(model, val_ids, val_labels))
        if model.pool is not None and model.pools_with_gap:
            continue  # still GAP: neither a candidate nor counted by the patience
        if best.stop_after(epoch, history[-1], model):
            break
    if best.state is None:
        raise RuntimeError(
            f"{variant}: the GAP warm-up ({cfg.warmup_steps} steps + the memory) outlasted "
            f"max_epochs={cfg.max_epochs}; raise max_epochs or lower warmup_steps"
        )
    model.load_state_dict(best.state)
    test_emb = _embed(model, test_ids)
    test = retrieval_metrics(test_emb, test_labels, ks=(1,))
    return {
        "variant": variant,
        "val_map_at_r": best.score,
        "test_map_at_r": float(test[METRIC]),
        "test_precision_at_1": float(test["precision_at_1"]),
        "best_epoch": best.epoch,
        "epochs": len(history),
        "steps": step,
        "best_step": (best.epoch + 1) * cfg.steps_per_epoch,
        "kcenter_step": kcenter_step,
        "seconds": round(time.perf_counter() - started, 1),
        "val_history": history,
        "test_embeddings": test_emb,
        "test_labels": test_labels,
        "tokens": model.tokens.detach().clone(),
        "prototypes": None if model.prototypes is None else model.prototypes.detach().clone(),
    }


def run_study(
    cfg: SyntheticStudyConfig,
    out_dir: str | Path,
    variants: Sequence[str] = VARIANTS,
    seeds: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """Train every variant on every seed (default ``[cfg.seed]``; Sec. 5.3.1), write ``table.md`` (mean ± std,
    paired differences against GAP, per run), ``results.json`` and ``embedding_space.png`` (first seed)."""
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
    (out / "table.md").write_text(gsp_synthetic_table(results, cfg))
    tensors = ("test_embeddings", "test_labels", "tokens", "prototypes")
    keep = [{k: v for k, v in r.items() if k not in tensors} for r in results]
    config = {**asdict(cfg), "seeds": seeds}
    (out / "results.json").write_text(json.dumps({"config": config, "results": keep}, indent=2))
    plot_embedding_space([r for r in results if r["seed"] == seeds[0]], cfg.spec, out / "embedding_space.png")
    return results
