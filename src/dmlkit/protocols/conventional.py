"""The conventional and hold-out protocols: one model per seed, metrics on the test split.

``conventional``: validation (early stopping, model selection) on the *test*
split, as the SFT and FastAP papers do (``data.val_fraction=0``).
``holdout``: the config's own class-disjoint hold-out of the train classes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from dmlkit.config import load_config
from dmlkit.protocols.runs import Obtain
from dmlkit.protocols.table import SEED_KEY

PROTOCOL_OVERRIDES = {"conventional": ["data.val_fraction=0", "data.folds=0", "data.val_split=null"], "holdout": []}


def seed_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """A run's test metrics plus its training time per step (seconds)."""
    steps = max(int(summary.get("steps", 0)), 1)
    return {**summary["test"], "seconds_per_step": float(summary["train_seconds"]) / steps}


def run_single_model(
    protocol: str, config_path: str | Path, overrides: Sequence[str], seeds: Sequence[int], out_dir: Path, obtain: Obtain
) -> list[dict[str, float]]:
    """One run per seed under ``protocol``; the metrics of each seed whose run is available."""
    if protocol not in PROTOCOL_OVERRIDES:
        raise ValueError(f"unknown single-model protocol '{protocol}'; valid: {', '.join(PROTOCOL_OVERRIDES)}")
    results = []
    for seed in seeds:
        cfg = load_config(config_path, [*overrides, *PROTOCOL_OVERRIDES[protocol], f"seed={seed}"])
        summary = obtain(cfg, out_dir / f"{cfg.name}-seed{seed}")
        if summary is not None:
            results.append({SEED_KEY: seed, **seed_metrics(summary)})
    return results
