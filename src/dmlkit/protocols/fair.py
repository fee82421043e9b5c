"""The fair protocol (Musgrave et al. 2020; thesis Sec. 3.3.2.1): 4-fold cross-validation of the train classes.

For each seed, ``folds`` models are trained, model ``k`` on all train classes
but fold ``k`` and early-stopped on fold ``k`` by MAP@R (``train.val_metric``).
Each model's test embeddings give the *separated* result (metrics averaged
over the models, "128-d" in the thesis' tables); the concatenation of the
models' L2-normalised embeddings, normalised again, gives the *concatenated*
result ("512-d" for 4 models of 128-d).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F

from dmlkit.config import load_config
from dmlkit.evaluation.evaluate_embeddings import evaluate_embeddings
from dmlkit.protocols.conventional import seed_metrics
from dmlkit.protocols.runs import Obtain
from dmlkit.protocols.table import SEED_KEY, summarise
from dmlkit.validation import is_int


class _Concatenation:
    """The models' L2-normalised embeddings of one split, concatenated along the feature axis."""

    def __init__(self) -> None:
        self.parts: list[torch.Tensor] = []
        self.labels: torch.Tensor | None = None

    def add(self, embeddings: torch.Tensor, labels: torch.Tensor) -> None:
        if self.labels is not None and not torch.equal(labels, self.labels):
            raise ValueError("the fold models embedded different test sets; the folds' configs must share eval.split")
        self.labels = labels
        self.parts.append(F.normalize(embeddings, dim=1))

    def joint(self) -> torch.Tensor:
        return F.normalize(torch.cat(self.parts, dim=1), dim=1)


def _metrics(
    queries: _Concatenation, references: _Concatenation, ks: Sequence[int], clustering: bool, seed: int
) -> dict[str, float]:
    refs = (references.joint(), references.labels) if references.parts else (None, None)
    return evaluate_embeddings(queries.joint(), queries.labels, *refs, ks=ks, clustering=clustering, seed=seed)


def run_fair(
    config_path: str | Path,
    overrides: Sequence[str],
    seeds: Sequence[int],
    out_dir: Path,
    obtain: Obtain,
    folds: int = 4,
) -> dict[str, list[dict[str, float]]]:
    """``{"separated": [per-seed metrics], "concatenated": [per-seed metrics]}`` of the fair protocol.

    A seed is reported only when all of its fold runs are available.
    """
    from dmlkit.assemble import embed_run

    if not is_int(folds) or folds < 2:
        raise ValueError(f"the fair protocol needs folds >= 2, got {folds!r}")
    separated, concatenated = [], []
    for seed in seeds:
        configs = [
            load_config(
                config_path,
                [*overrides, f"seed={seed}", f"data.folds={folds}", f"data.fold={k}", "data.val_split=null"],
            )
            for k in range(folds)
        ]
        run_dirs = [out_dir / f"{c.name}-seed{seed}-fold{k}" for k, c in enumerate(configs)]
        summaries = [obtain(c, d) for c, d in zip(configs, run_dirs)]
        if any(s is None for s in summaries):
            continue
        per_model, cfg = [], configs[0]
        queries, references = _Concatenation(), _Concatenation()
        for run_dir, summary in zip(run_dirs, summaries):
            queries.add(*embed_run(run_dir, cfg.eval.split))
            if cfg.eval.reference_split is not None:  # query -> gallery datasets (In-shop)
                references.add(*embed_run(run_dir, cfg.eval.reference_split))
            per_model.append(seed_metrics(summary))
        separated.append({SEED_KEY: seed, **{k: v[0] for k, v in summarise(per_model).items()}})
        concatenated.append({SEED_KEY: seed, **_metrics(queries, references, cfg.eval.ks, cfg.eval.clustering, seed)})
    return {"separated": separated, "concatenated": concatenated}


def test_fold_models(
    run_dirs: Sequence[Path], split: str, reference_split: str | None, ks: Sequence[int], clustering: bool, seed: int
) -> tuple[dict[str, float], dict[str, float]]:
    """``(separated, concatenated)`` test metrics of finished fold models that were not tested when they trained
    (a search's trials): each model's metrics averaged, and those of the concatenated embeddings."""
    from dmlkit.assemble import embed_run

    queries, references, per_model = _Concatenation(), _Concatenation(), []
    for run_dir in run_dirs:
        embedded = embed_run(run_dir, split)
        queries.add(*embedded)
        refs = embed_run(run_dir, reference_split) if reference_split is not None else (None, None)
        if reference_split is not None:
            references.add(*refs)
        per_model.append(evaluate_embeddings(*embedded, *refs, ks=ks, clustering=clustering, seed=seed))
    separated = {key: sum(m[key] for m in per_model) / len(per_model) for key in per_model[0]}
    return separated, _metrics(queries, references, ks, clustering, seed)
