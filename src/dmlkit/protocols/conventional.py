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


#: Prefix of the per-seed keys that carry a method's ``summary["facts"]`` (``fact.projections``: CCP's count).
FACT_PREFIX = "fact."


def seed_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """A run's test metrics plus how it trained: steps run, the step whose weights were tested
    (``best_step``), training wall time and time per step (seconds), and the numbers its methods reported in
    ``summary["facts"]`` (keyed ``fact.<name>``; e.g. CCP's projections)."""
    steps = int(summary.get("steps", 0))
    seconds = float(summary["train_seconds"])
    facts = {f"{FACT_PREFIX}{name}": float(value) for name, value in summary.get("facts", {}).items()}
    return {
        **summary["test"],
        "steps": float(steps),
        "best_step": float(summary.get("best_step") or steps),
        "train_seconds": seconds,
        "seconds_per_step": seconds / max(steps, 1),
        **facts,
    }


def run_single_model(
    protocol: str,
    config_path: str | Path,
    overrides: Sequence[str],
    seeds: Sequence[int],
    out_dir: Path,
    obtain: Obtain,
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
